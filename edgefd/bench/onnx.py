"""`edgefd bench onnx`: what a device gains from running an exported model instead of torch.

For each model it exports the fp32 ONNX file and its static-int8 copy (calibrated on real
training images, as `edgefd export --int8` does), then times one forward pass at batch 1 and at
batch 32 with torch (eager, no_grad), onnxruntime fp32 and onnxruntime int8, on the same real
inputs, in the same thread count. Each figure is the median of `--repeats` calls after warm-up
calls; the three runtimes alternate call by call so that machine noise hits them alike. File sizes
are the `.onnx` files' (weights inside). The models are freshly initialised: latency and size do
not depend on what the weights are.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

# torch (and what exports, which imports it) is imported where a benchmark runs: `--help` needs neither.

BATCHES = (1, 32)


@dataclass
class OnnxBenchRow:
    model: str
    batch: int
    torch_ms: float
    onnx_fp32_ms: float
    onnx_int8_ms: float
    fp32_bytes: int
    int8_bytes: int
    exporter: str


def _median_ms(calls: list[float]) -> float:
    return round(1e3 * statistics.median(calls), 4)


def measure_model(name: str, dataset, repeats: int, warmup: int, folder: Path) -> list[OnnxBenchRow]:
    import torch

    from edgefd.export.onnx_export import export_onnx, onnx_session, sample_shape
    from edgefd.export.quantize import quantize_static_int8
    from edgefd.models import build_model, in_channels_of

    torch.manual_seed(0)
    shape = tuple(dataset.input_shape)
    model = build_model(
        name, in_channels=in_channels_of(shape), num_classes=dataset.num_classes, input_shape=shape
    ).eval()
    fp32_path, int8_path = folder / f"{name}.onnx", folder / f"{name}.int8.onnx"
    exporter = export_onnx(model, sample_shape(model, name, shape), fp32_path)
    quantize_static_int8(fp32_path, int8_path, dataset.train_x[:256].numpy())
    sessions = {
        "fp32": onnx_session(fp32_path, threads=torch.get_num_threads()),
        "int8": onnx_session(int8_path, threads=torch.get_num_threads()),
    }
    rows = []
    for batch in BATCHES:
        x = dataset.test_x[:batch].contiguous()
        feed = {"input": x.numpy()}
        runners = {
            "torch": lambda x=x: model(x),
            "fp32": lambda feed=feed: sessions["fp32"].run(None, feed),
            "int8": lambda feed=feed: sessions["int8"].run(None, feed),
        }
        times: dict[str, list[float]] = {key: [] for key in runners}
        with torch.no_grad():
            for call in range(warmup + repeats):
                for key, runner in runners.items():
                    started = time.perf_counter()
                    runner()
                    if call >= warmup:
                        times[key].append(time.perf_counter() - started)
        rows.append(
            OnnxBenchRow(
                name,
                batch,
                _median_ms(times["torch"]),
                _median_ms(times["fp32"]),
                _median_ms(times["int8"]),
                fp32_path.stat().st_size,
                int8_path.stat().st_size,
                exporter,
            )
        )
    return rows


def measure(models: list[str], dataset_name: str, repeats: int, warmup: int, threads: int) -> list[OnnxBenchRow]:
    import torch

    from edgefd.data import load_dataset

    torch.set_num_threads(threads)
    dataset = load_dataset(dataset_name)
    with tempfile.TemporaryDirectory() as tmp:
        return [row for name in models for row in measure_model(name, dataset, repeats, warmup, Path(tmp))]


def format_table(rows: list[OnnxBenchRow]) -> str:
    lines = [
        "| model | batch | torch ms | ORT fp32 ms | ORT int8 ms | fp32 / int8 speed-up over torch "
        "| fp32 file | int8 file |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.model} | {r.batch} | {r.torch_ms:.3f} | {r.onnx_fp32_ms:.3f} | {r.onnx_int8_ms:.3f} | "
            f"{r.torch_ms / r.onnx_fp32_ms:.1f}x / {r.torch_ms / r.onnx_int8_ms:.1f}x | "
            f"{r.fp32_bytes / 1e3:.0f} kB | {r.int8_bytes / 1e3:.0f} kB |"
        )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--models",
        metavar="NAME,NAME,...",
        default="cnn2,resnet8,resnet20,mobilenetv2_x0_6",
        help="comma-separated model zoo names, e.g. cnn2,resnet20 (edgefd.models.list_models() has them all) "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--dataset",
        metavar="NAME",
        default="fmnist",
        help="dataset that gives the input shape, the timed inputs and the int8 calibration data, by registry "
        "name, e.g. digits (default: %(default)s)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        metavar="N",
        default=30,
        help="timed calls per model, batch and runtime, N >= 1; the median is reported (default: %(default)s)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        metavar="N",
        default=5,
        help="untimed calls of each runtime before the timed ones, N >= 0 (default: %(default)s)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        metavar="N",
        default=1,
        help="torch and onnxruntime intra-op threads, N >= 1 (default: %(default)s)",
    )
    parser.add_argument(
        "--json",
        metavar="FILE",
        help="also write one record per model and batch to FILE, e.g. docs/bench-onnx.json (default: print only)",
    )


def run(args: argparse.Namespace) -> int:
    if args.repeats < 1 or args.warmup < 0 or args.threads < 1:
        raise SystemExit("edgefd bench onnx: --repeats and --threads must be >= 1, --warmup >= 0")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    rows = measure(models, args.dataset, args.repeats, args.warmup, args.threads)
    print(f"{args.dataset} inputs, {args.threads} thread(s), median of {args.repeats} calls")
    print(format_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    return 0
