"""Run an ONNX model with onnxruntime on saved inputs and save its outputs (runs on the device).

    python run_onnx.py MODEL.onnx INPUTS.npz OUTPUTS.npz

INPUTS.npz maps each graph input name to an array; OUTPUTS.npz gets each graph output by name,
plus ``_machine`` and ``_onnxruntime`` (where and with what they were computed), so that a host
can compare a device's outputs with its own.
"""

from __future__ import annotations

import platform
import sys

import numpy as np
import onnxruntime as ort


def main(model_path: str, inputs_path: str, outputs_path: str) -> None:
    session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    with np.load(inputs_path) as saved:
        feeds = {item.name: saved[item.name] for item in session.get_inputs()}
    names = [item.name for item in session.get_outputs()]
    outputs = dict(zip(names, session.run(names, feeds)))
    np.savez(outputs_path, **outputs, _machine=np.array(platform.machine()), _onnxruntime=np.array(ort.__version__))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
