"""`edgefd bench step`: one local training step of the clients' models, in each memory layout.

At FedCache's batch of 8 images a ResNet step is a string of small convolutions whose cost is
oneDNN's, not Python's: the layout of the activations (PyTorch's NCHW, or channels-last NHWC) is
what the runtime can change (`TrainConfig.channels_last`). Both layouts train copies of the same
model on the same batches, steps alternating between them so that machine noise hits both alike;
the table gives the median milliseconds per step and the ratio to NCHW. ``--recompute`` adds a
third arm: channels-last with the residual blocks' activations recomputed in the backward pass (a
device's `edgefd client --recompute-activations`), and its ratio to channels-last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass

# torch (and the models, which import it) is imported where a benchmark runs: `--help` needs neither.

LAYOUTS = {"nchw": "contiguous_format", "channels_last": "channels_last"}
"""Each layout's torch memory format, by its name in torch (torch is imported where it runs)."""
RECOMPUTED = "recomputed"
"""The ``--recompute`` arm: channels-last, the residual blocks' activations recomputed."""


@dataclass
class StepResult:
    model: str
    batch_size: int
    threads: int
    milliseconds: dict[str, float]
    """Median milliseconds per training step (forward, backward, SGD step) by layout (and
    ``recomputed``, with ``--recompute``)."""


def measure_model(
    name: str, batch_size: int, steps: int, input_shape: tuple[int, int, int], recompute: bool = False
) -> dict[str, float]:
    """Median ms per SGD step (momentum 0.9, weight decay 5e-4) of ``name`` in each layout, and
    channels-last with recomputed activations when ``recompute``."""
    import torch
    from torch import nn

    from edgefd.models import RESIDUAL_BLOCKS, build_model
    from edgefd.training import recomputing

    arms = {**LAYOUTS, **({RECOMPUTED: LAYOUTS["channels_last"]} if recompute else {})}

    x = torch.randn(1024, *input_shape, generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, 10, (1024,), generator=torch.Generator().manual_seed(1))
    order = torch.Generator().manual_seed(2)
    runs = {}
    for layout, memory_format in arms.items():
        torch.manual_seed(0)
        model = build_model(name, in_channels=input_shape[0], num_classes=10, input_shape=input_shape)
        model = model.to(memory_format=getattr(torch, memory_format)).train()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
        runs[layout] = (model, optimizer)
    times: dict[str, list[float]] = {layout: [] for layout in arms}
    warm_up = max(steps // 10, 5)
    for step in range(warm_up + steps):
        idx = torch.randint(0, len(x), (batch_size,), generator=order)
        for layout, (model, optimizer) in runs.items():
            start = time.perf_counter()
            with recomputing(model, RESIDUAL_BLOCKS) if layout == RECOMPUTED else nullcontext():
                optimizer.zero_grad(set_to_none=True)
                nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
                optimizer.step()
            if step >= warm_up:
                times[layout].append(time.perf_counter() - start)
    return {layout: round(1000 * statistics.median(t), 3) for layout, t in times.items()}


def measure(
    models: list[str],
    batch_size: int = 8,
    steps: int = 300,
    threads: int = 2,
    input_shape=(1, 28, 28),
    recompute: bool = False,
) -> list[StepResult]:
    import torch

    torch.set_num_threads(threads)
    return [
        StepResult(name, batch_size, threads, measure_model(name, batch_size, steps, tuple(input_shape), recompute))
        for name in models
    ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--models",
        metavar="NAMES",
        default="resnet8,resnet16,resnet20",
        help="comma-separated registered models (`edgefd models`) (default: %(default)s, FedCache's zoo)",
    )
    parser.add_argument("--batch-size", type=int, metavar="N", default=8, help="images per step (default: %(default)s)")
    parser.add_argument(
        "--steps", type=int, metavar="N", default=300, help="timed steps per layout (default: %(default)s)"
    )
    parser.add_argument("--threads", type=int, metavar="N", default=2, help="torch threads (default: %(default)s)")
    parser.add_argument(
        "--input-shape",
        metavar="C,H,W",
        default="1,28,28",
        help="one image's shape (default: %(default)s, Fashion-MNIST)",
    )
    parser.add_argument(
        "--recompute",
        action="store_true",
        help="also time channels-last with the residual blocks' activations recomputed in the backward pass "
        "(`edgefd client --recompute-activations`)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE (default: print only)")


def run(args: argparse.Namespace) -> int:
    try:
        shape = tuple(int(v) for v in args.input_shape.split(","))
    except ValueError:
        shape = ()
    if len(shape) != 3 or min(shape) < 1:
        raise SystemExit(f"edgefd bench step: --input-shape must be C,H,W (positive sizes), got {args.input_shape!r}")
    if args.batch_size < 1 or args.steps < 1 or args.threads < 1:
        raise SystemExit("edgefd bench step: --batch-size, --steps and --threads must be >= 1")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    results = measure(models, args.batch_size, args.steps, args.threads, shape, args.recompute)
    print(f"one SGD step at batch {args.batch_size}, {args.threads} threads, input {args.input_shape}, median ms:")
    extra = f" {'recomputed':>11} {'vs last':>8}" if args.recompute else ""
    print(f"{'model':<12} {'NCHW':>8} {'channels-last':>14} {'ratio':>7}{extra}")
    for r in results:
        nchw, last = r.milliseconds["nchw"], r.milliseconds["channels_last"]
        row = f"{r.model:<12} {nchw:>8.2f} {last:>14.2f} {last / nchw:>6.3f}x"
        if args.recompute:
            again = r.milliseconds[RECOMPUTED]
            row += f" {again:>11.2f} {again / last:>7.3f}x"
        print(row)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump([asdict(r) for r in results], handle, indent=2)
    return 0
