"""`edgefd export-encoder`: FedCache's MobileNetV3 hash encoder as one ONNX file for devices.

    edgefd export-encoder --weights mobilenet_v3_small.pt --dataset fmnist --out encoder.onnx
    edgefd simulate --algo fedcache --param encoder=onnx:encoder.onnx ...

The file holds the whole hash function of ``encoder=mobilenet[:WEIGHTS]``
(:class:`edgefd.algorithms.fedcache.encoders.MobileNetHash`): the channel expansion, the resize to 224, the
per-image scaling, the ImageNet normalisation and the trunk. Its input is a batch of the
dataset's normalised samples (the input shape is fixed by ``--dataset`` or ``--input-shape``, the
batch is dynamic), its output the 576-d embeddings, so ``encoder=onnx:FILE`` gives a device the
same hashes as the torch encoder without torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from edgefd.export.onnx_export import OPSET, ExportError, export_onnx


def export_encoder(
    out: str | Path, input_shape: Sequence[int], weights: str | None = None, exporter: str = "auto", opset: int = OPSET
) -> Path:
    """Writes the mobilenet hash encoder for inputs of ``input_shape`` (C, H, W); returns the path."""
    from edgefd.algorithms.fedcache.encoders import MobileNetHash

    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 3 or shape[0] not in (1, 3) or min(shape) < 1:
        raise ValueError(f"input shape: the mobilenet encoder takes images (C, H, W) with C = 1 or 3, got {shape}")
    out = Path(out)
    used = export_onnx(MobileNetHash(weights), shape, out, exporter, opset)
    meta = {
        "format": "edgefd-encoder/1",
        "encoder": "mobilenet" if weights is None else f"mobilenet:{weights}",
        "input": {"name": "input", "shape": ["batch", *shape]},
        "output": {"name": "logits", "shape": ["batch", 576]},
        "exporter": used,
        "opset": opset,
        "note": "without --weights the trunk is random (seed 0): only good for tests",
    }
    out.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n")
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        required=True,
        metavar="FILE.onnx",
        help="the ONNX file to write, e.g. encoder.onnx; its sidecar goes beside it (encoder.json)",
    )
    parser.add_argument(
        "--weights",
        metavar="FILE.pt",
        help="torchvision MobileNetV3-Small state_dict with ImageNet weights, e.g. mobilenet_v3_small.pt "
        "(default: none, a random trunk with seed 0: only good for tests)",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--dataset",
        metavar="NAME",
        help="take the input shape from this dataset, e.g. fmnist (1,28,28) or cifar10 (3,32,32); "
        "this or --input-shape is required",
    )
    source.add_argument(
        "--input-shape",
        metavar="C,H,W",
        help="the input shape of one sample, C = 1 or 3 channels, e.g. 1,28,28; this or --dataset is required",
    )
    parser.add_argument(
        "--data-root",
        metavar="DIR",
        help="with --dataset: folder holding on-disk datasets (default: $EDGEFD_DATA_ROOT or ~/.cache/edgefd/data)",
    )
    parser.add_argument(
        "--exporter",
        choices=("auto", "torchscript", "dynamo"),
        default="auto",
        help="torch's ONNX exporter: torchscript (fast), dynamo (slow), or auto: torchscript, falling back "
        "to dynamo when it fails (default: %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        if args.dataset:
            from edgefd.data import load_dataset

            shape = tuple(load_dataset(args.dataset, root=args.data_root).input_shape)
        else:
            try:
                shape = tuple(int(s) for s in args.input_shape.split(","))
            except ValueError:
                raise ValueError(f"--input-shape {args.input_shape!r}: expected C,H,W") from None
        path = export_encoder(args.out, shape, args.weights, args.exporter)
    except (ValueError, FileNotFoundError, ExportError) as error:
        print(f"edgefd export-encoder: {error}", file=sys.stderr)
        return 2
    print(f"{path}: mobilenet hash encoder for inputs {shape}, {path.stat().st_size / 1e6:.2f} MB")
    return 0
