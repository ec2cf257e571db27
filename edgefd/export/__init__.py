"""Running trained client models outside torch: ONNX export, int8 quantisation, prediction.

``checkpoint``   each client's final model, saved by ``edgefd simulate`` into ``RUN_DIR/models``;
``onnx_export``  ``edgefd export``: client models to self-contained ``.onnx`` files + JSON sidecars;
``quantize``     onnxruntime static int8 quantisation calibrated on the client's own data;
``encoder``      ``edgefd export-encoder``: FedCache's MobileNetV3 hash encoder to ONNX;
``predict``      ``edgefd predict``: run an exported model with onnxruntime alone (no torch).

This package's ``__init__`` imports nothing, so that ``predict`` runs on a device without torch.
"""
