"""Every method's default run, `edgefd simulate --algo NAME` with nothing else given, as the table
docs/METHODS.md shows ("Every method's default run") and the README's first command cites.

    python3 scripts/default_runs.py                              # print the table
    python3 scripts/default_runs.py --write docs/METHODS.md      # and put it in the page

Each run is its own process, timed whole (wall: importing torch and loading the data included);
"run" is the run's own `wall_seconds`. Nothing else should run on the machine meanwhile: on two
cores a second job doubles the seconds. About 6 minutes on a 2-core x86-64 VM.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from edgefd.algorithms.base import list_methods
from edgefd.runtime.process import edgefd_command

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- default-runs: start -->", "<!-- default-runs: end -->"


def models_of(summary: dict[str, Any]) -> str:
    """The clients' models, in client order: one name, a few, or the first and last of many."""
    names = list(dict.fromkeys(summary["models"].values()))
    return ", ".join(names) if len(names) <= 3 else f"{names[0]} .. {names[-1]}"


def run_one(algo: str, folder: Path) -> dict[str, Any]:
    started = time.perf_counter()
    done = subprocess.run(
        edgefd_command("simulate", "--algo", algo, "--quiet", "--out", str(folder / algo)),
        capture_output=True,
        text=True,
        # the default the table describes: 2 threads, which $OMP_NUM_THREADS would change
        env={name: value for name, value in os.environ.items() if name != "OMP_NUM_THREADS"},
    )
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"edgefd simulate --algo {algo} exited {done.returncode}:\n{done.stderr[-2000:]}")
    summary = json.loads((folder / algo / "summary.json").read_text())
    return dict(algo=algo, wall=wall, summary=summary)


def row(result: dict[str, Any]) -> str:
    s = result["summary"]
    final, best = 100 * s["final_accuracy"], 100 * s["best_accuracy"]
    accuracy = f"{final:.2f}%" + (f" (best {best:.2f}%)" if round(best, 2) != round(final, 2) else "")
    return (
        f"| {result['algo']} | {models_of(s)} | {s['local_training']['epochs']} | {accuracy} "
        f"| {s['bytes_up_total'] / 1e6:.2f} / {s['bytes_down_total'] / 1e6:.2f} "
        f"| {s['wall_seconds']:.1f} | {result['wall']:.1f} |"
    )


def table(results: list[dict[str, Any]]) -> str:
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    lines = [
        f"Measured on {machine}, one run each, seed 0, by `python3 scripts/default_runs.py --write docs/METHODS.md`.",
        "",
        "| method | models (`--models auto`) | local epochs | final accuracy | up / down MB | run s | wall s |",
        "|---|---|---:|---:|---:|---:|---:|",
        *(row(result) for result in results),
    ]
    return "\n".join(lines)


def write_into(page: Path, text: str) -> None:
    content = page.read_text()
    if START not in content or END not in content:
        raise SystemExit(f"{page}: no {START} ... {END} markers to put the table between")
    before, rest = content.split(START, 1)
    after = rest.split(END, 1)[1]
    page.write_text(f"{before}{START}\n{text}\n{END}{after}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", metavar="PAGE", help="replace the table between the page's markers")
    parser.add_argument("--methods", nargs="+", metavar="NAME", help="only these methods (default: every one)")
    args = parser.parse_args(argv)
    names = args.methods or [spec.name for spec in list_methods()]
    results = []
    with tempfile.TemporaryDirectory(prefix="edgefd-default-runs-") as folder:
        for name in names:
            print(f"edgefd simulate --algo {name} ...", file=sys.stderr, flush=True)
            results.append(run_one(name, Path(folder)))
            print(row(results[-1]), file=sys.stderr, flush=True)
    text = table(results)
    print(text)
    if args.write:
        write_into(Path(args.write), text)
        print(f"wrote the table into {args.write}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
