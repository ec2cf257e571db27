"""One simulation at each thread count, alone and beside busy processes: why the test suite (and
anyone running several simulations on a small machine) runs one thread per process.

A run with two threads waits at every parallel region's barrier for its second thread; when another
process holds that core, the wait spins, so the run's CPU time and wall time grow far past its
fair share. Each measurement is `edgefd simulate` in a process of its own (start-up included),
with LOAD busy-loop processes running beside it; printed per (threads, load): the median wall
seconds and CPU seconds of the simulation's process. Nothing is asserted.

    python benchmarks/threads_under_load.py [--algo fedd2s --rounds 10 --clients 5]
        [--threads 1,2] [--load 0,2] [--repeats 1] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from startup import edgefd_launcher  # benchmarks/: the installed `edgefd`, as a user runs it


def spin() -> None:
    """A process that wants a core all the time, as another user's job does."""
    while True:
        pass


@dataclass
class Row:
    threads: int
    load: int
    """Busy processes beside the simulation."""
    median_wall_seconds: float
    median_cpu_seconds: float
    """User and system CPU of the simulation's process."""
    final_accuracy: float


def simulate_once(args: argparse.Namespace, threads: int, folder: Path) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, final accuracy) of one `edgefd simulate`."""
    out = folder / f"run-{threads}-{time.monotonic_ns()}"
    command = [*edgefd_launcher(), "simulate", "--algo", args.algo, "--rounds", str(args.rounds)]
    command += ["--clients", str(args.clients), "--threads", str(threads), "--quiet", "--out", str(out)]
    log = out.with_suffix(".log")
    started = time.perf_counter()
    with log.open("wb") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{log.read_text()[-2000:]}")
    accuracy = json.loads((out / "summary.json").read_text())["final_accuracy"]
    return wall, usage.ru_utime + usage.ru_stime, accuracy


def measure(args: argparse.Namespace, threads: int, load: int, folder: Path) -> Row:
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(load)]
    for spinner in spinners:
        spinner.start()
    try:
        runs = [simulate_once(args, threads, folder) for _ in range(args.repeats)]
    finally:
        for spinner in spinners:
            spinner.terminate()
            spinner.join()
    return Row(
        threads,
        load,
        round(statistics.median(wall for wall, _, _ in runs), 2),
        round(statistics.median(cpu for _, cpu, _ in runs), 2),
        runs[0][2],
    )


def counts(text: str) -> list[int]:
    values = [int(item) for item in text.split(",")]
    if any(value < 0 for value in values):
        raise argparse.ArgumentTypeError(f"expected counts >= 0, got {text!r}")
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", default="fedd2s", help="the method (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=10, metavar="N", help="rounds (default: %(default)s)")
    parser.add_argument("--clients", type=int, default=5, metavar="N", help="clients (default: %(default)s)")
    parser.add_argument("--threads", type=counts, default=[1, 2], metavar="N,N", help="thread counts (default: 1,2)")
    parser.add_argument("--load", type=counts, default=[0, 2], metavar="N,N", help="busy processes (default: 0,2)")
    parser.add_argument("--repeats", type=int, default=1, metavar="N", help="runs per cell (default: %(default)s)")
    parser.add_argument("--json", metavar="FILE", help="also write the rows to FILE (default: print only)")
    args = parser.parse_args()
    if args.repeats < 1 or 0 in args.threads:
        parser.error("--repeats and every --threads count must be >= 1")
    print(f"edgefd simulate --algo {args.algo} --rounds {args.rounds} --clients {args.clients}, {os.cpu_count()} CPUs")
    print(f"{'threads':>7} {'load':>5} {'wall s':>8} {'CPU s':>8} {'accuracy':>9}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgefd-threads-") as folder:
        for load in args.load:
            for threads in args.threads:
                row = measure(args, threads, load, Path(folder))
                rows.append(row)
                print(
                    f"{row.threads:>7} {row.load:>5} {row.median_wall_seconds:>8.2f} {row.median_cpu_seconds:>8.2f} "
                    f"{row.final_accuracy:>9.4f}",
                    flush=True,
                )
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(row) for row in rows], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
