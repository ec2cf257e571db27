"""Static int8 quantisation of an exported model with onnxruntime, calibrated on real inputs.

Static (not dynamic) quantisation fixes the activation ranges from calibration data, so that
convolutions run as int8 on the device. edgefd calibrates each client's model on that client's
own training samples: the ranges are the ones its data produces. The model is first run through
onnxruntime's pre-processing (shape inference and graph optimisation), which the quantiser
recommends.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class QuantizeConfig:
    """Choices of onnxruntime's quantize_static (its defaults, except per-channel weights)."""

    per_channel: bool = True
    """One weight scale per output channel: keeps small-model accuracy (onnxruntime's default is per tensor)."""
    batch_size: int = 32
    """Calibration batch size."""
    calibrate_method: str = "MinMax"
    """MinMax | Entropy | Percentile (onnxruntime.quantization.CalibrationMethod)."""


class _Batches:
    """onnxruntime's CalibrationDataReader over an in-memory array, fed to the model's input ``name``."""

    def __init__(self, x: np.ndarray, batch_size: int, name: str) -> None:
        self._batches = iter([x[i : i + batch_size] for i in range(0, len(x), batch_size)])
        self._name = name

    def get_next(self):
        batch = next(self._batches, None)
        return None if batch is None else {self._name: np.ascontiguousarray(batch, dtype=np.float32)}


def _input_name(model_path: str | Path) -> str:
    """The model's (first) graph input: what its calibration batches are fed to."""
    import onnx

    return onnx.load(str(model_path), load_external_data=False).graph.input[0].name


def quantize_static_int8(
    model_path: str | Path, out_path: str | Path, calibration: np.ndarray, config: QuantizeConfig | None = None
) -> Path:
    """Writes the int8 (QDQ) version of ``model_path`` to ``out_path``."""
    config = config or QuantizeConfig()
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    if len(calibration) == 0:
        raise ValueError("int8 calibration: no samples")
    try:
        method = CalibrationMethod[config.calibrate_method]
    except KeyError:
        raise ValueError(
            f"calibrate_method: expected MinMax, Entropy or Percentile, got {config.calibrate_method!r}"
        ) from None
    out_path = Path(out_path)
    with tempfile.TemporaryDirectory() as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        quant_pre_process(str(model_path), str(prepared), skip_symbolic_shape=True)
        quantize_static(
            str(prepared),
            str(out_path),
            _Batches(calibration, config.batch_size, _input_name(prepared)),
            quant_format=QuantFormat.QDQ,
            per_channel=config.per_channel,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=method,
        )
    return out_path
