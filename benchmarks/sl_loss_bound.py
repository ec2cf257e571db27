"""Is sl_loss bound by memory or by arithmetic? Three timings of the K = 10, C = 100 case, per
65,536 rows, on the installed C++ build:

- streaming: one call over B = 65,536 rows (the benchmark's largest shape: 314 MB touched);
- in cache: the same number of rows as repeated calls over B = 256 (1.1 MB at K = 10: each of
  two threads works in its own L2), so the time is the arithmetic alone;
- memory only: ``torch.sum(teachers, 0)`` plus one copy of the student, which read and write the
  same bytes as the kernel and do one add per element.

If "in cache" is close to "streaming", faster memory cannot help and the kernel is bound by its
K + 1 exponentials per element; the 60%-of-copy target then asks for arithmetic, not bandwidth.

    python3 benchmarks/sl_loss_bound.py [--threads 2] [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from edgefd import _kernels

ROWS = 65_536
SMALL_BATCH = 256


def median_ms(call: Callable[[], None], repeats: int) -> float:
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def sl_loss_rows_ms(teachers: int, batch: int, classes: int, repeats: int) -> float:
    """Raw C++ forward + student gradient, timed over ROWS rows in calls of `batch` rows."""
    generator = torch.Generator().manual_seed(0)
    student = (torch.randn(batch, classes, generator=generator) * 3).numpy()
    teacher = (torch.randn(teachers, batch, classes, generator=generator) * 3).numpy()
    grad = np.empty_like(student)
    calls = ROWS // batch

    def run() -> None:
        for _ in range(calls):
            _kernels.sl_loss(student, teacher, grad, None)

    return median_ms(run, repeats)


def memory_only_ms(teachers: int, classes: int, repeats: int) -> float:
    teacher = torch.randn(teachers, ROWS, classes)
    student = torch.randn(ROWS, classes)
    total = torch.empty(ROWS, classes)
    copy = torch.empty(ROWS, classes)

    def run() -> None:
        torch.sum(teacher, 0, out=total)
        copy.copy_(student)

    return median_ms(run, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--teachers", type=int, default=10, help="K")
    parser.add_argument("--classes", type=int, default=100, help="C")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"sl_loss K={args.teachers} C={args.classes}, {ROWS} rows, {args.threads} threads, "
        f"SIMD path {_kernels.simd_path()}; medians of {args.repeats}"
    )
    streaming = sl_loss_rows_ms(args.teachers, ROWS, args.classes, args.repeats)
    in_cache = sl_loss_rows_ms(args.teachers, SMALL_BATCH, args.classes, args.repeats)
    memory = memory_only_ms(args.teachers, args.classes, args.repeats)
    print(f"  streaming (B={ROWS}):            {streaming:8.2f} ms")
    print(f"  in cache (B={SMALL_BATCH}, repeated):    {in_cache:8.2f} ms  ({in_cache / streaming:.0%} of streaming)")
    print(f"  memory only (sum over K + copy): {memory:8.2f} ms  ({memory / streaming:.0%} of streaming)")


if __name__ == "__main__":
    main()
