"""`edgefd bench kernels`: the C++ kernels against their torch references.

For every kernel and shape it reports the median time of each backend, the speed-up, and how
close the C++ kernel comes to the machine's memory bandwidth: ``gbps`` is the bytes a
single-pass kernel must touch (inputs read once, outputs written once) divided by the C++ time,
and ``bandwidth_fraction`` divides that by the copy bandwidth this same run measures (bytes read
plus bytes written by a large ``Tensor.copy_``, on the same threads).

``moved_fraction`` is the same ratio for the bytes a kernel cannot avoid moving between memory and
the core. It differs from ``bandwidth_fraction`` only for ``gather_mean``: each of its n x R
lookups reads a whole cached row at a random place (n R C floats: R = 16 times a cache of n rows),
and with random neighbours no order of the lookups reuses a row while it is still in a core's
cache, so counting the cache once undercounts its traffic R-fold.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

# torch (and the kernels, which import it) is imported where a benchmark runs: `--help` needs neither.

FLOAT = 4
INDEX = 8


@dataclass
class BenchConfig:
    """What `edgefd bench kernels` measures."""

    threads: int = 2
    """Threads for both backends (the target devices have 2-4 cores)."""
    repeats: int = 15
    """Timed calls per backend and shape; the median is reported."""
    quick: bool = False
    """Small shapes and few repeats: a smoke run for CI, not a measurement."""
    copy_mib: int = 512
    """Size of the buffer whose copy sets the bandwidth reference."""


@dataclass
class Record:
    kernel: str
    shape: str
    cpp_ms: float
    torch_ms: float
    speedup: float
    gbps: float
    bandwidth_fraction: float
    moved_gbps: float
    moved_fraction: float


@dataclass
class Case:
    kernel: str
    shape: str
    bytes_touched: int
    make: Callable[[], Callable[[], None]]
    """Builds the inputs and returns the call to time (it runs under whichever backend is set)."""
    bytes_moved: int | None = None
    """Bytes the kernel must move when that exceeds bytes_touched (see the module docstring)."""


def _median_ms(call: Callable[[], object], repeats: int) -> float:
    call()  # warm-up: first touch of buffers, lazy initialisation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def copy_bandwidth_gbps(mib: int, repeats: int) -> float:
    """Bytes read plus bytes written per second by a large contiguous copy."""
    import torch

    n = mib * 2**20 // FLOAT
    src = torch.ones(n)
    dst = torch.zeros(n)
    ms = _median_ms(lambda: dst.copy_(src), repeats)
    return 2 * n * FLOAT / (ms * 1e-3) / 1e9


def _weighted_kl_case(batch: int, classes: int) -> Case:
    import torch

    from edgefd import kernels

    def make():
        g = torch.Generator().manual_seed(0)
        student = (torch.randn(batch, classes, generator=g) * 3).requires_grad_(True)
        teacher = torch.randn(batch, classes, generator=g) * 3

        def call():
            student.grad = None
            kernels.weighted_kl(student, teacher, temperature=3.0).backward()

        return call

    return Case("weighted_kl fwd+bwd", f"B={batch} C={classes}", 3 * batch * classes * FLOAT, make)


def _sl_loss_case(teachers: int, batch: int, classes: int) -> Case:
    import torch

    from edgefd import kernels

    def make():
        g = torch.Generator().manual_seed(0)
        student = torch.randn(batch, classes, generator=g).requires_grad_(True)
        teacher = torch.randn(teachers, batch, classes, generator=g)

        def call():
            student.grad = None
            kernels.sl_loss(student, teacher).backward()

        return call

    return Case(
        "sl_loss fwd+bwd", f"K={teachers} B={batch} C={classes}", (teachers + 2) * batch * classes * FLOAT, make
    )


def _labelwise_mean_case(rows: int, classes: int) -> Case:
    import torch

    from edgefd import kernels

    def make():
        g = torch.Generator().manual_seed(0)
        logits = torch.randn(rows, classes, generator=g)
        labels = torch.randint(0, classes, (rows,), generator=g)
        return lambda: kernels.labelwise_mean(logits, labels, classes)

    return Case("labelwise_mean", f"N={rows} C={classes}", rows * (classes * FLOAT + INDEX), make)


def _gather_mean_case(samples: int, neighbours: int, classes: int) -> Case:
    import torch

    from edgefd import kernels

    def make():
        g = torch.Generator().manual_seed(0)
        cache = torch.randn(samples, classes, generator=g)
        ids = torch.randint(0, samples, (samples, neighbours), generator=g)
        return lambda: kernels.gather_mean(cache, ids)

    touched = samples * neighbours * INDEX + 2 * samples * classes * FLOAT  # ids + cache + output
    moved = samples * neighbours * (INDEX + classes * FLOAT) + samples * classes * FLOAT  # ids + rows + output
    return Case("gather_mean", f"n={samples} R={neighbours} C={classes}", touched, make, moved)


def cases(quick: bool) -> list[Case]:
    if quick:
        return [
            _weighted_kl_case(256, 10),
            _sl_loss_case(5, 256, 10),
            _labelwise_mean_case(10_000, 10),
            _gather_mean_case(1_000, 16, 10),
        ]
    out = [_weighted_kl_case(b, c) for b in (256, 4096, 65536) for c in (10, 100)]
    out += [_sl_loss_case(k, b, c) for k in (5, 10) for b in (256, 4096, 65536) for c in (10, 100)]
    out += [_labelwise_mean_case(1_000_000, c) for c in (10, 100)]
    out += [_gather_mean_case(60_000, 16, c) for c in (10, 100)]
    return out


def measure(config: BenchConfig, progress: Callable[[str], None] = print) -> tuple[float, list[Record]]:
    """Measure the copy bandwidth, then every case under both backends."""
    from edgefd import kernels

    if not kernels.cpp_available():
        raise RuntimeError("the C++ extension is not built; `pip install .` builds it")
    kernels.set_num_threads(config.threads)
    repeats = 3 if config.quick else config.repeats
    bandwidth = copy_bandwidth_gbps(16 if config.quick else config.copy_mib, repeats)
    progress(f"copy bandwidth: {bandwidth:.1f} GB/s ({config.threads} threads)")
    records = []
    for case in cases(config.quick):
        call = case.make()
        timings = {}
        for backend in kernels.BACKENDS:
            with kernels.use_backend(backend):
                timings[backend] = _median_ms(call, repeats)
        gbps = case.bytes_touched / (timings["cpp"] * 1e-3) / 1e9
        moved_gbps = (case.bytes_moved or case.bytes_touched) / (timings["cpp"] * 1e-3) / 1e9
        record = Record(
            case.kernel,
            case.shape,
            round(timings["cpp"], 4),
            round(timings["torch"], 4),
            round(timings["torch"] / timings["cpp"], 2),
            round(gbps, 2),
            round(gbps / bandwidth, 3),
            round(moved_gbps, 2),
            round(moved_gbps / bandwidth, 3),
        )
        records.append(record)
        progress(format_row(record))
    return bandwidth, records


HEADER = (
    f"{'kernel':<20} {'shape':<24} {'cpp ms':>9} {'torch ms':>9} {'speedup':>8} {'GB/s':>7} {'of copy':>8}"
    f" {'moved/copy':>11}"
)


def format_row(r: Record) -> str:
    # The moved-bytes fraction is shown only where it differs from the single-pass one.
    moved = f"{r.moved_fraction:>10.0%}" if r.moved_gbps != r.gbps else ""
    return (
        f"{r.kernel:<20} {r.shape:<24} {r.cpp_ms:>9.3f} {r.torch_ms:>9.3f} {r.speedup:>7.1f}x "
        f"{r.gbps:>7.1f} {r.bandwidth_fraction:>7.0%} {moved}"
    ).rstrip()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = BenchConfig()
    parser.add_argument(
        "--threads",
        type=int,
        metavar="N",
        default=defaults.threads,
        help="threads for both backends, C++ (OpenMP) and torch (default: %(default)s)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        metavar="N",
        default=defaults.repeats,
        help="timed calls per kernel, shape and backend; the median is reported (ignored with --quick, "
        "which makes 3) (default: %(default)s)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny shapes, 3 calls and a small copy buffer: a smoke test that runs in seconds, not a measurement",
    )
    parser.add_argument(
        "--json",
        metavar="FILE",
        help="also write the copy bandwidth and one record per kernel and shape to FILE, "
        "e.g. docs/bench-kernels.json (default: print only)",
    )


def run(args: argparse.Namespace) -> int:
    import torch

    config = BenchConfig(threads=args.threads, repeats=args.repeats, quick=args.quick)
    print(HEADER)
    bandwidth, records = measure(config)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(
                {
                    "copy_gbps": round(bandwidth, 2),
                    "threads": config.threads,
                    "torch": torch.__version__,
                    "records": [asdict(r) for r in records],
                },
                handle,
                indent=2,
            )
        print(f"wrote {args.json}")
    return 0
