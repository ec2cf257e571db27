"""Flower's simulation engine against its own plain loop, beside edgefd's Ray backend against in-process,
on the same FD round: the overhead case of `edgefd bench ray` (FD on digits, 100 clients, cnn2).

    python3 benchmarks/ray_vs_flower.py --flower-python ~/flwr-venv/bin/python [--json FILE]

``--flower-python`` is an interpreter with ``flwr[simulation]`` and torch (Flower pins its own Ray, so
it lives in a virtual environment of its own: docs/RAY.md, "Benchmark"). The overhead case runs
in-process and with 1 Ray worker, as `edgefd bench ray` runs it (`edgefd.bench.ray_backend`); then its
clients' data (the same split) and the round's settings are written to a folder, and the other
interpreter runs benchmarks/flower_fd.py on them: the same round through Flower's simulation engine
with 1 worker and as a plain loop in one process. The table puts Flower's overhead over its floor
beside edgefd's Ray overhead over in-process.

A script of the checkout, not of the package: it runs code under an interpreter without edgefd.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from edgefd.bench.ray_backend import ArmResult, case_config, machine, spawn_arm

FLOWER_FD = Path(__file__).resolve().with_name("flower_fd.py")
"""The program the other interpreter runs (it imports numpy, torch and Flower, never edgefd)."""


@dataclass
class FlowerResult:
    """Flower's row. Its round 1 starts Ray and the client actors (Flower starts them lazily) and the
    plain loop's round 1 warms up, so with 2 rounds or more the medians are over rounds 2..R (edgefd's
    round 0 does that warm-up); ``start_up`` is the time until the `ServerApp` sees every SuperNode,
    plus what round 1 took over the median round."""

    version: str
    plain_seconds_per_round: float
    flower_seconds_per_round: float
    start_up: float

    @property
    def ratio(self) -> float:
        return self.flower_seconds_per_round / self.plain_seconds_per_round


def why_flower_cannot_run(python: str) -> str | None:
    """Why ``python`` cannot run Flower's arm (it does not start, or lacks flwr.simulation, ray or torch);
    None when it can."""
    try:
        check = subprocess.run(
            [python, "-I", "-c", "import flwr.simulation, ray, torch"], capture_output=True, text=True, check=False
        )
    except OSError as error:
        return f"{python} does not run ({error.strerror})"
    if check.returncode != 0:
        last = (check.stderr.strip().splitlines() or ["it did not start"])[-1]
        return f"{python} cannot import flwr.simulation, ray and torch ({last})"
    return None


def write_fd_clients(settings: dict[str, Any], folder: Path) -> None:
    """The overhead case's clients (their training and test samples, as edgefd splits them) and the
    round's settings, for benchmarks/flower_fd.py."""
    import numpy as np

    from edgefd.runtime.build import build

    config = case_config("overhead", settings)
    sim = build(config)
    roles = [sim.clients[cid] for cid in sorted(sim.clients)]
    for index, role in enumerate(roles):
        data = role.data
        np.savez(
            folder / f"client-{index}.npz",
            x=data.train_x.float().numpy(),
            y=data.train_y.numpy(),
            test_x=data.test_x.float().numpy(),
            test_y=data.test_y.numpy(),
        )
    params = sim.params
    meta = {
        "clients": config.clients,
        "shape": list(sim.dataset.input_shape),
        "classes": sim.dataset.num_classes,
        "workload": {
            "batch_size": config.batch_size,
            "lr": config.lr,
            "momentum": config.momentum,
            "weight_decay": config.weight_decay,
            "beta": params.beta,
            "temperature": params.temperature,
            "threads": config.threads,
        },
    }
    (folder / "meta.json").write_text(json.dumps(meta))


def run_flower(python: str, settings: dict[str, Any]) -> FlowerResult:
    """Flower's row: its simulation engine against its plain loop."""
    with tempfile.TemporaryDirectory(prefix="edgefd-bench-flower-") as folder:
        write_fd_clients(settings, Path(folder))
        command = [python, "-I", str(FLOWER_FD), "--data", folder, "--rounds", str(settings["overhead_rounds"])]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"benchmarks/ray_vs_flower.py: Flower's run failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    plain, flower = out["plain"][1:] or out["plain"], out["flower"][1:] or out["flower"]
    return FlowerResult(
        version=out["flwr"],
        plain_seconds_per_round=round(statistics.median(plain), 3),
        flower_seconds_per_round=round(statistics.median(flower), 3),
        start_up=round(out["start_up"] + out["flower"][0] - statistics.median(flower), 3),
    )


def flower_lines(flower: FlowerResult, results: list[ArmResult]) -> list[str]:
    """Flower's overhead over its plain loop beside edgefd's Ray overhead over in-process (overhead case)."""
    by = {(r.case, r.arm): r for r in results}
    lines = [
        "| FD round, 1 worker | reference s / round | s / round | ratio | start-up s |",
        "|---|---:|---:|---:|---:|",
    ]
    if ("overhead", "ray, 1 worker") in by and ("overhead", "in-process") in by:
        ray, base = by["overhead", "ray, 1 worker"], by["overhead", "in-process"]
        lines.append(
            f"| edgefd, Ray vs in-process | {base.seconds_per_round:.3f} | {ray.seconds_per_round:.3f} "
            f"| {ray.seconds_per_round / base.seconds_per_round:.2f}x | {ray.start_up:.1f} |"
        )
    lines.append(
        f"| Flower {flower.version} simulation vs its plain loop | {flower.plain_seconds_per_round:.3f} "
        f"| {flower.flower_seconds_per_round:.3f} | {flower.ratio:.2f}x | {flower.start_up:.1f} |"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 benchmarks/ray_vs_flower.py", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--flower-python",
        required=True,
        metavar="PYTHON",
        help="an interpreter with flwr[simulation] and torch (e.g. a virtual environment's bin/python)",
    )
    parser.add_argument(
        "--overhead-clients", type=int, default=100, metavar="N", help="clients of the FD round (default: 100)"
    )
    parser.add_argument(
        "--overhead-rounds", type=int, default=5, metavar="R", help="timed rounds of each arm (default: 5)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)
    why_not = why_flower_cannot_run(args.flower_python)
    if why_not is not None:
        print(f"benchmarks/ray_vs_flower.py: {why_not}", file=sys.stderr)
        return 2
    settings = {
        "overhead_clients": args.overhead_clients,
        "overhead_rounds": args.overhead_rounds,
        "compute_rounds": 1,
        "compute_samples": None,
    }
    where = machine()
    print(where, flush=True)
    results = []
    for arm in ("in-process", "ray-1"):
        results.append(spawn_arm("overhead", arm, settings))
        print(f"overhead / {arm}: {results[-1].seconds_per_round:.3f} s/round", flush=True)
    flower = run_flower(args.flower_python, settings)
    print()
    print("\n".join(flower_lines(flower, results)))
    if args.json:
        record = {
            "machine": where,
            "arms": [asdict(r) for r in results],
            "flower": asdict(flower),
            "settings": settings,
        }
        Path(args.json).write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
