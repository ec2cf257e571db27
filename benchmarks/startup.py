"""How long `edgefd --help` and every `edgefd COMMAND --help` take to start, and how much memory.

A newcomer's first commands only ask what exists, so they should answer at once: the target is
under 0.5 s and 100 MB each. Each command runs REPEATS times as its own process (the installed
`edgefd` console script beside this Python, else `python -m edgefd.cli`); printed per command: the
median wall seconds and the peak resident memory (the largest of the runs, from the rusage the
kernel reports for that child). Nothing is asserted.

    python benchmarks/startup.py [--repeats 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from edgefd import cli

TARGET_SECONDS = 0.5
TARGET_MB = 100


def edgefd_launcher() -> list[str]:
    """The console script installed beside this interpreter, as a user runs it."""
    script = Path(sys.executable).parent / "edgefd"
    if script.is_file():
        return [str(script)]
    found = shutil.which("edgefd")
    return [found] if found else [sys.executable, "-m", "edgefd.cli"]


def command_paths() -> list[list[str]]:
    return [[], ["bench"]] + [[item.name] for item in cli.SUBCOMMANDS] + [["bench", name] for name in cli.BENCHMARKS]


def measure_once(command: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one run of ``command``."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {process.returncode}")
    return seconds, usage.ru_maxrss / 1024  # ru_maxrss is in KiB on Linux


@dataclass
class Row:
    command: str
    median_seconds: float
    peak_rss_mb: float
    """The largest peak RSS of the runs."""

    def within_target(self) -> bool:
        return self.median_seconds < TARGET_SECONDS and self.peak_rss_mb < TARGET_MB


def measure(repeats: int) -> list[Row]:
    launcher = edgefd_launcher()
    rows = []
    for path in command_paths():
        runs = [measure_once([*launcher, *path, "--help"]) for _ in range(repeats)]
        rows.append(
            Row(
                " ".join(["edgefd", *path, "--help"]),
                round(statistics.median(s for s, _ in runs), 3),
                round(max(mb for _, mb in runs), 1),
            )
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, metavar="N", help="runs per command (default: %(default)s)")
    parser.add_argument("--json", metavar="FILE", help="also write the rows to FILE (default: print only)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats: must be >= 1, got {args.repeats}")
    rows = measure(args.repeats)
    print(f"{'command':<36} {'median s':>9} {'peak MB':>8}  within {TARGET_SECONDS} s and {TARGET_MB} MB")
    for row in rows:
        within = "yes" if row.within_target() else "NO"
        print(f"{row.command:<36} {row.median_seconds:>9.3f} {row.peak_rss_mb:>8.1f}  {within}")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(row) for row in rows], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
