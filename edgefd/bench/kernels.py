"""`edgefd bench kernels`: edgefd's kernels against their torch references, on the CPU or a GPU.

For every kernel and shape it reports the median time of each implementation, the speed-up, and how
close edgefd's kernel comes to the machine's memory bandwidth: ``gbps`` is the bytes a
single-pass kernel must touch (inputs read once, outputs written once) divided by its time,
and ``bandwidth_fraction`` divides that by the copy bandwidth this same run measures (bytes read
plus bytes written by a large ``Tensor.copy_`` on the same device, on the same threads).

The implementations: edgefd's (the C++ kernels on CPU tensors, the CUDA kernels on CUDA tensors;
``cpp_ms``), the torch reference run eagerly (``torch_ms``) and, with ``--compiled``, the same
reference under ``torch.compile`` (``compiled_ms``; compiling is done in the warm-up call and not
timed), which is what a user would write instead of a hand-made kernel.

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
from typing import TYPE_CHECKING, Any

# torch (and the kernels, which import it) is imported where a benchmark runs: `--help` needs neither.
if TYPE_CHECKING:
    import torch

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
    device: str = "cpu"
    """Where the tensors live: cpu, cuda or cuda:N (on a GPU edgefd's side is the CUDA kernels, and the
    shapes go up to sizes that do not fit in the GPU's L2 cache)."""
    compiled: bool = False
    """Also time each torch reference under torch.compile."""


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
    compiled_ms: float | None = None
    compiled_speedup: float | None = None
    """torch.compile's time over edgefd's."""


Call = Callable[[], None]
WithOps = Callable[[Any], Call]
"""Given the four kernel functions (edgefd.kernels, or torch.compile'd references), the call to time."""


@dataclass
class Case:
    kernel: str
    shape: str
    bytes_touched: int
    make: Callable[[torch.device], WithOps]
    """Builds the inputs on a device once; returns how to call them with one implementation."""
    bytes_moved: int | None = None
    """Bytes the kernel must move when that exceeds bytes_touched (see the module docstring)."""


class CompiledReferences:
    """The torch references under torch.compile, with the keyword arguments of edgefd.kernels."""

    def __init__(self) -> None:
        import torch

        from edgefd.kernels import reference

        self.weighted_kl = torch.compile(reference.weighted_kl)
        self.sl_loss = torch.compile(reference.sl_loss)
        self.labelwise_mean = torch.compile(reference.labelwise_mean)
        self.gather_mean = torch.compile(reference.gather_mean)


def _synchronize(device: torch.device) -> Callable[[], None]:
    """What makes a timer's stop wait for the device's work (a GPU runs asynchronously)."""
    if device.type == "cuda":
        import torch

        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _median_ms(call: Callable[[], object], repeats: int, device: torch.device | None = None) -> float:
    sync = _synchronize(device) if device is not None else lambda: None
    call()  # warm-up: first touch of buffers, lazy initialisation, torch.compile's compilation
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def copy_bandwidth_gbps(mib: int, repeats: int, device: torch.device | None = None) -> float:
    """Bytes read plus bytes written per second by a large contiguous copy on ``device`` (the CPU by default)."""
    import torch

    n = mib * 2**20 // FLOAT
    src = torch.ones(n, device=device)
    dst = torch.zeros(n, device=device)
    ms = _median_ms(lambda: dst.copy_(src), repeats, device)
    return 2 * n * FLOAT / (ms * 1e-3) / 1e9


def _weighted_kl_case(batch: int, classes: int) -> Case:
    def make(device: torch.device) -> WithOps:
        import torch

        g = torch.Generator().manual_seed(0)
        student = (torch.randn(batch, classes, generator=g) * 3).to(device).requires_grad_(True)
        teacher = (torch.randn(batch, classes, generator=g) * 3).to(device)

        def with_ops(ops: Any) -> Call:
            def call() -> None:
                student.grad = None
                ops.weighted_kl(student, teacher, temperature=3.0).backward()

            return call

        return with_ops

    return Case("weighted_kl fwd+bwd", f"B={batch} C={classes}", 3 * batch * classes * FLOAT, make)


def _sl_loss_case(teachers: int, batch: int, classes: int) -> Case:
    def make(device: torch.device) -> WithOps:
        import torch

        g = torch.Generator().manual_seed(0)
        student = torch.randn(batch, classes, generator=g).to(device).requires_grad_(True)
        teacher = torch.randn(teachers, batch, classes, generator=g).to(device)

        def with_ops(ops: Any) -> Call:
            def call() -> None:
                student.grad = None
                ops.sl_loss(student, teacher).backward()

            return call

        return with_ops

    return Case(
        "sl_loss fwd+bwd", f"K={teachers} B={batch} C={classes}", (teachers + 2) * batch * classes * FLOAT, make
    )


def _labelwise_mean_case(rows: int, classes: int) -> Case:
    def make(device: torch.device) -> WithOps:
        import torch

        g = torch.Generator().manual_seed(0)
        logits = torch.randn(rows, classes, generator=g).to(device)
        labels = torch.randint(0, classes, (rows,), generator=g).to(device)
        return lambda ops: lambda: ops.labelwise_mean(logits, labels, classes)

    return Case("labelwise_mean", f"N={rows} C={classes}", rows * (classes * FLOAT + INDEX), make)


def _gather_mean_case(samples: int, neighbours: int, classes: int) -> Case:
    def make(device: torch.device) -> WithOps:
        import torch

        g = torch.Generator().manual_seed(0)
        cache = torch.randn(samples, classes, generator=g).to(device)
        ids = torch.randint(0, samples, (samples, neighbours), generator=g).to(device)
        return lambda ops: lambda: ops.gather_mean(cache, ids)

    touched = samples * neighbours * INDEX + 2 * samples * classes * FLOAT  # ids + cache + output
    moved = samples * neighbours * (INDEX + classes * FLOAT) + samples * classes * FLOAT  # ids + rows + output
    return Case("gather_mean", f"n={samples} R={neighbours} C={classes}", touched, make, moved)


def cases(quick: bool, device: str = "cpu") -> list[Case]:
    on_gpu = device.startswith("cuda")
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
    if on_gpu:
        # Past a GPU's L2 cache (50-60 MB on an H100): every input several hundred MB.
        out += [_weighted_kl_case(1 << 20, c) for c in (10, 100)]
        out += [_sl_loss_case(10, 1 << 18, c) for c in (10, 100)]
        out += [_labelwise_mean_case(16_000_000, 10)]
        out += [_gather_mean_case(1_000_000, 16, c) for c in (10, 100)]
    return out


def measure(config: BenchConfig, progress: Callable[[str], None] = print) -> tuple[float, list[Record]]:
    """Measure the copy bandwidth, then every case under each implementation."""
    import torch

    from edgefd import kernels

    device = torch.device(config.device)
    if device.type == "cuda":
        if not kernels.cuda.available():
            raise RuntimeError(
                "edgefd's CUDA kernels are not usable here: build them with `EDGEFD_CUDA=ON pip install .` on a "
                f"machine with a GPU ({kernels.cuda.IMPORT_ERROR or 'torch sees no GPU'})"
            )
    elif not kernels.cpp_available():
        raise RuntimeError("the C++ extension is not built; `pip install .` builds it")
    kernels.set_num_threads(config.threads)
    repeats = 3 if config.quick else config.repeats
    bandwidth = copy_bandwidth_gbps(16 if config.quick else config.copy_mib, repeats, device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{config.threads} threads"
    progress(f"copy bandwidth: {bandwidth:.1f} GB/s ({where})")
    # Compiled once for the whole run, as a user's code would be: shapes after the first of a kernel
    # get torch.compile's dynamic-shape recompilation, in the warm-up call of their case.
    compiled = CompiledReferences() if config.compiled else None
    records = []
    for case in cases(config.quick, config.device):
        with_ops = case.make(device)
        timings = {}
        for backend in kernels.BACKENDS:
            with kernels.use_backend(backend):
                timings[backend] = _median_ms(with_ops(kernels), repeats, device)
        if compiled is not None:
            timings["compiled"] = _median_ms(with_ops(compiled), repeats, device)
        del with_ops  # the inputs: a GPU case holds up to a few GB
        records.append(_record(case, timings, bandwidth))
        progress(format_row(records[-1]))
    return bandwidth, records


def _record(case: Case, timings: dict[str, float], bandwidth: float) -> Record:
    gbps = case.bytes_touched / (timings["cpp"] * 1e-3) / 1e9
    moved_gbps = (case.bytes_moved or case.bytes_touched) / (timings["cpp"] * 1e-3) / 1e9
    compiled = timings.get("compiled")
    return Record(
        case.kernel,
        case.shape,
        round(timings["cpp"], 4),
        round(timings["torch"], 4),
        round(timings["torch"] / timings["cpp"], 2),
        round(gbps, 2),
        round(gbps / bandwidth, 3),
        round(moved_gbps, 2),
        round(moved_gbps / bandwidth, 3),
        None if compiled is None else round(compiled, 4),
        None if compiled is None else round(compiled / timings["cpp"], 2),
    )


HEADER = (
    f"{'kernel':<20} {'shape':<24} {'edgefd ms':>9} {'torch ms':>9} {'speedup':>8} {'GB/s':>7} {'of copy':>8}"
    f" {'moved/copy':>11}"
)
COMPILED_HEADER = f" {'compiled ms':>11} {'vs compiled':>11}"
"""The columns of `--compiled` (torch.compile's times), shown only when it measures them."""


def header(compiled: bool) -> str:
    return HEADER + (COMPILED_HEADER if compiled else "")


def format_row(r: Record) -> str:
    # The moved-bytes fraction is shown only where it differs from the single-pass one.
    moved = f"{r.moved_fraction:>11.0%}" if r.moved_gbps != r.gbps else " " * 11
    compiled = "" if r.compiled_ms is None else f" {r.compiled_ms:>11.3f} {r.compiled_speedup:>10.1f}x"
    return (
        f"{r.kernel:<20} {r.shape:<24} {r.cpp_ms:>9.3f} {r.torch_ms:>9.3f} {r.speedup:>7.1f}x "
        f"{r.gbps:>7.1f} {r.bandwidth_fraction:>7.0%} {moved}{compiled}"
    ).rstrip()


def report(config: BenchConfig, bandwidth: float, records: list[Record]) -> dict[str, Any]:
    """What `--json` writes: the setting, the copy bandwidth and one record per kernel and shape."""
    import torch

    device = torch.device(config.device)
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "copy_gbps": round(bandwidth, 2),
        "threads": config.threads,
        "torch": torch.__version__,
        "records": [asdict(r) for r in records],
    }


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
        "--device",
        default=defaults.device,
        metavar="DEVICE",
        help="where the tensors live: cpu, cuda or cuda:N; on a GPU edgefd's side is its CUDA kernels "
        "(built with EDGEFD_CUDA=ON) and larger shapes are added (default: %(default)s)",
    )
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="also time each torch reference under torch.compile (compiling is not timed; on a CPU it needs "
        "a C++ compiler and takes seconds per shape)",
    )
    parser.add_argument(
        "--json",
        metavar="FILE",
        help="also write the copy bandwidth and one record per kernel and shape to FILE, "
        "e.g. docs/bench-kernels.json (default: print only)",
    )


def run(args: argparse.Namespace) -> int:
    config = BenchConfig(
        threads=args.threads, repeats=args.repeats, quick=args.quick, device=args.device, compiled=args.compiled
    )
    print(header(config.compiled))
    bandwidth, records = measure(config)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report(config, bandwidth, records), handle, indent=2)
        print(f"wrote {args.json}")
    return 0
