"""`edgefd export`: each client's personalised model as one self-contained ``.onnx`` file.

    edgefd export runs/fd --client all --out exported/
    edgefd export runs/fd --client client-3 --out exported/ --int8

For every client the output folder gets ``<client>.onnx`` (weights inside, input ``input`` with a
dynamic batch dimension, output ``logits``) and ``<client>.json``, a sidecar with what a device
needs to use it: architecture, classes, input shape, normalisation, and the accuracy measured
with onnxruntime on the client's own test split at export time. ``--int8`` adds
``<client>.int8.onnx`` (+ its sidecar): onnxruntime static quantisation calibrated on the
client's own training data, with the accuracy change and the size change written in both
sidecars.

Exporter. torch 2.14 has two ONNX exporters. ``exporter="auto"`` (the default) uses the
TorchScript one (``dynamo=False``): it exports every model of the zoo but ``vgg16`` in ~0.1-2 s
each, with a dynamic batch axis through ``dynamic_axes``. The dynamo exporter (``dynamo=True``)
exports all of them, but takes 1.5-35 s per model (measured here: 367 s for the 45 models),
fixes the batch size unless ``dynamic_shapes`` is given and writes the weights to a side
``.onnx.data`` file unless ``external_data=False``; ``auto`` falls back to it, with both of those
set, when the TorchScript exporter fails (``vgg16`` at 32x32: its adaptive pool to 7x7 from 1x1
is not expressible there). ``exporter="torchscript"`` or ``"dynamo"`` forces one.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgefd import progress

# The functions that need torch import it: `edgefd export --help` must not wait seconds for it.
if TYPE_CHECKING:
    import torch
    from torch import nn

    from edgefd.export.checkpoint import ClientCheckpoint

EXPORTERS = ("auto", "torchscript", "dynamo")
INPUT_NAME = "input"
OUTPUT_NAME = "logits"
OPSET = 18
SIDECAR_FORMAT = "edgefd-onnx/1"


class ExportError(RuntimeError):
    """A model could not be exported (or its export does not reproduce torch)."""


def sample_shape(model: nn.Module, model_name: str, input_shape: Sequence[int]) -> tuple[int, ...]:
    """One input sample's shape for a zoo model: the data shape, or what a feature / noise model eats."""
    from edgefd.models import model_entry

    kind = model_entry(model_name).kind
    zoo_model: Any = model  # torch types unknown Module attributes as Tensor | Module; nz is an int
    if kind == "noise":
        return (int(zoo_model.nz),)
    if kind == "features" and hasattr(model, "input_feature_shape"):
        return tuple(int(s) for s in zoo_model.input_feature_shape)
    return tuple(int(s) for s in input_shape)


def export_onnx(
    model: nn.Module, shape: Sequence[int], path: str | Path, exporter: str = "auto", opset: int = OPSET
) -> str:
    """Writes ``model`` (in eval mode) to one ``.onnx`` file with a dynamic batch axis.

    Returns the exporter that produced it ("torchscript" or "dynamo")."""
    import torch

    if exporter not in EXPORTERS:
        raise ValueError(f"exporter: expected one of {EXPORTERS}, got {exporter!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = model.eval()
    example = torch.randn(2, *shape)
    if exporter in ("auto", "torchscript"):
        try:
            _export_torchscript(model, example, path, opset)
            return "torchscript"
        except Exception as error:  # the TorchScript exporter has no common error type
            if exporter == "torchscript":
                raise ExportError(f"TorchScript ONNX export failed: {error}") from error
    try:
        _export_dynamo(model, example, path, opset)
    except Exception as error:
        raise ExportError(f"dynamo ONNX export failed: {error}") from error
    return "dynamo"


def _export_torchscript(model: nn.Module, example: torch.Tensor, path: Path, opset: int) -> None:
    import torch

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # deprecation and tracer warnings, for every model
        torch.onnx.export(
            model,
            (example,),
            str(path),
            dynamo=False,
            opset_version=opset,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
        )


def _export_dynamo(model: nn.Module, example: torch.Tensor, path: Path, opset: int) -> None:
    import torch

    batch = torch.export.Dim("batch", min=1, max=1 << 20)
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model,
                (example,),
                str(path),
                dynamo=True,
                external_data=False,
                opset_version=opset,
                dynamic_shapes=({0: batch},),
                input_names=[INPUT_NAME],
                output_names=[OUTPUT_NAME],
                verbose=False,
                report=False,
            )
    finally:
        quiet.setLevel(level)


def onnx_session(path: str | Path, threads: int = 1):
    """An onnxruntime CPU session (one intra-op thread unless asked)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run_onnx(session, x: np.ndarray, batch_size: int = 256) -> np.ndarray:
    """Logits of ``x`` (float32, leading batch axis) in batches."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    parts = [session.run([OUTPUT_NAME], {INPUT_NAME: x[i : i + batch_size]})[0] for i in range(0, len(x), batch_size)]
    return np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)


def onnx_accuracy(session, x: np.ndarray, y: np.ndarray) -> float | None:
    if len(x) == 0:
        return None
    return float((run_onnx(session, x).argmax(1) == y).mean())


# ----------------------------------------------------------------------------------------------
# One client


@dataclass
class ExportConfig:
    """How ``edgefd export`` writes each client."""

    int8: bool = False
    """Also write an onnxruntime static-int8 copy calibrated on the client's training data."""
    exporter: str = "auto"
    """auto | torchscript | dynamo (see the module docstring)."""
    calibration_samples: int = 256
    """Training samples of the client fed to the int8 calibration (all if it has fewer)."""
    opset: int = OPSET


def _client_data(checkpoint: ClientCheckpoint) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(train_x, test_x, test_y) of the client, or None when the dataset is not on this machine."""
    import torch

    from edgefd.data import DatasetNotFoundError, load_dataset

    try:
        dataset = load_dataset(checkpoint.dataset, root=checkpoint.data_root)
    except DatasetNotFoundError:
        return None
    train = torch.as_tensor(checkpoint.train_indices, dtype=torch.int64)
    test = torch.as_tensor(checkpoint.test_indices, dtype=torch.int64)
    return dataset.train_x[train].numpy(), dataset.test_x[test].numpy(), dataset.test_y[test].numpy()


def sidecar(checkpoint: ClientCheckpoint, shape: Sequence[int], exporter: str, opset: int) -> dict[str, Any]:
    """The JSON a device reads next to the model."""
    import torch

    classes = checkpoint.class_names or [str(c) for c in range(checkpoint.num_classes)]
    return {
        "format": SIDECAR_FORMAT,
        "client_id": checkpoint.client_id,
        "architecture": checkpoint.model_name,
        "algo": checkpoint.algo,
        "dataset": checkpoint.dataset,
        "classes": classes,
        "input": {
            "name": INPUT_NAME,
            "shape": ["batch", *[int(s) for s in shape]],
            "dtype": "float32",
            "normalisation": {
                "formula": "x = (raw / input_scale - mean) / std, per channel",
                "input_scale": checkpoint.input_scale,
                "mean": checkpoint.mean,
                "std": checkpoint.std,
            },
        },
        "output": {"name": OUTPUT_NAME, "shape": ["batch", checkpoint.num_classes], "meaning": "logits"},
        "accuracy": {"reported_by_run": checkpoint.accuracy},
        "exporter": exporter,
        "opset": opset,
        "torch_version": torch.__version__,
    }


def export_client(
    checkpoint: ClientCheckpoint, out_dir: str | Path, config: ExportConfig | None = None
) -> dict[str, Path]:
    """Writes one client's model (and its int8 copy when asked); returns the files written."""
    import torch

    config = config or ExportConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = checkpoint.build_model()
    shape = sample_shape(model, checkpoint.model_name, checkpoint.input_shape)
    fp32_path = out / f"{checkpoint.client_id}.onnx"
    exporter = export_onnx(model, shape, fp32_path, config.exporter, config.opset)
    meta = sidecar(checkpoint, shape, exporter, config.opset)
    meta["file_bytes"] = fp32_path.stat().st_size

    session = onnx_session(fp32_path)
    data = _client_data(checkpoint)
    if data is not None:
        train_x, test_x, test_y = data
        if len(train_x):
            # `edgefd predict` warns about inputs outside it (raw pixels passed without --normalise)
            meta["input"]["range"] = {
                "min": float(train_x.min()),
                "max": float(train_x.max()),
                "of": "the client's training inputs, normalised (the model's input space)",
            }
        with torch.no_grad():
            reference = model(torch.from_numpy(test_x)).numpy() if len(test_x) else np.zeros((0, 0))
        logits = run_onnx(session, test_x)
        meta["accuracy"]["onnx_fp32"] = onnx_accuracy(session, test_x, test_y)
        meta["accuracy"]["test_samples"] = int(len(test_y))
        meta["max_abs_diff_vs_torch"] = float(np.abs(logits - reference).max()) if len(test_x) else None
    elif config.int8:
        raise ValueError(
            f"--int8 needs the client's data for calibration, but dataset {checkpoint.dataset!r} is not on this machine"
        )
    written = {"onnx": fp32_path}

    if config.int8:
        from edgefd.export.quantize import QuantizeConfig, quantize_static_int8

        int8_path = out / f"{checkpoint.client_id}.int8.onnx"
        calibration = train_x[: config.calibration_samples]
        quantize_static_int8(fp32_path, int8_path, calibration, QuantizeConfig())
        int8_session = onnx_session(int8_path)
        int8_accuracy = onnx_accuracy(int8_session, test_x, test_y)
        fp32_accuracy = meta["accuracy"]["onnx_fp32"]
        int8_bytes = int8_path.stat().st_size
        comparison = {
            "file": int8_path.name,
            "method": "onnxruntime quantize_static, QDQ, int8 weights per channel, uint8 activations, MinMax",
            "calibration_samples": int(len(calibration)),
            "accuracy_fp32": fp32_accuracy,
            "accuracy_int8": int8_accuracy,
            "accuracy_change": None
            if int8_accuracy is None or fp32_accuracy is None
            else int8_accuracy - fp32_accuracy,
            "bytes_fp32": meta["file_bytes"],
            "bytes_int8": int8_bytes,
            "size_ratio": int8_bytes / meta["file_bytes"],
        }
        meta["int8"] = comparison
        int8_meta = {**meta, "file_bytes": int8_bytes, "quantised": True}
        int8_meta["accuracy"] = {**meta["accuracy"], "onnx_int8": int8_accuracy}
        _write_json(out / f"{checkpoint.client_id}.int8.json", int8_meta)
        written["int8"] = int8_path
    meta["quantised"] = False
    _write_json(out / f"{checkpoint.client_id}.json", meta)
    written["sidecar"] = out / f"{checkpoint.client_id}.json"
    return written


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def export_run(
    run_dir: str | Path, client: str, out_dir: str | Path, config: ExportConfig | None = None
) -> dict[str, dict[str, Path]]:
    """Exports one client (``client-3``) or every client (``all``) of a run folder."""
    from edgefd.export.checkpoint import list_checkpoints, load_checkpoint

    config = config or ExportConfig()
    available = list_checkpoints(run_dir)
    if client == "all":
        chosen = list(available)
    elif client in available:
        chosen = [client]
    else:
        raise ValueError(f"--client {client!r}: not in {run_dir} (clients: {', '.join(available)}, or 'all')")
    clients = progress.track(chosen, "exporting client models", unit="model")
    return {cid: export_client(load_checkpoint(available[cid]), out_dir, config) for cid in clients}


# ----------------------------------------------------------------------------------------------
# Command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = ExportConfig()
    parser.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        help="a folder with the clients' final models in RUN_DIR/models/<client>.pt: a run of `edgefd simulate` "
        "or `deploy-local`, a device's `edgefd client --state-dir`, or an `edgefd server` run once the devices' "
        "models are copied into its models/",
    )
    parser.add_argument(
        "--client",
        metavar="all|CLIENT_ID",
        default="all",
        help="which client to export: all, or one id as in RUN_DIR/models/, e.g. --client client-3 "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="folder for <client>.onnx and its sidecar <client>.json (created if missing; files there are "
        "overwritten; default: RUN_DIR/onnx, beside the models it comes from)",
    )
    parser.add_argument(
        "--int8",
        action="store_true",
        help="also write <client>.int8.onnx, an onnxruntime static-int8 copy calibrated on the client's own "
        "training data (needs the run's dataset on this machine); the sidecars get its accuracy and size change",
    )
    parser.add_argument(
        "--exporter",
        choices=EXPORTERS,
        default=defaults.exporter,
        help="torch's ONNX exporter: torchscript (fast), dynamo (slow, exports every model), or auto: "
        "torchscript, falling back to dynamo when it fails (default: %(default)s)",
    )
    parser.add_argument(
        "--calibration-samples",
        type=int,
        metavar="N",
        default=defaults.calibration_samples,
        help="with --int8: the client's first N training samples calibrate the quantisation (all of them if "
        "it has fewer; N >= 1) (default: %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    if args.calibration_samples < 1:
        print("edgefd export: --calibration-samples must be >= 1", file=sys.stderr)
        return 2
    config = ExportConfig(int8=args.int8, exporter=args.exporter, calibration_samples=args.calibration_samples)
    try:
        written = export_run(args.run_dir, args.client, args.out or str(Path(args.run_dir) / "onnx"), config)
    except (ValueError, FileNotFoundError, ExportError) as error:
        print(f"edgefd export: {error}", file=sys.stderr)
        return 2
    for cid, files in written.items():
        meta = json.loads(files["sidecar"].read_text())
        line = f"{cid}: {files['onnx']} ({meta['architecture']}, {meta['file_bytes'] / 1e6:.2f} MB"
        accuracy = meta["accuracy"].get("onnx_fp32")
        if accuracy is not None:
            line += f", accuracy {100 * accuracy:.2f}%"
        if "int8" in meta:
            q = meta["int8"]
            change = q["accuracy_change"]
            line += f"; int8 {q['bytes_int8'] / 1e6:.2f} MB" + (
                "" if change is None else f", accuracy {100 * q['accuracy_int8']:.2f}% ({100 * change:+.2f} pt)"
            )
        print(line + ")")
    return 0
