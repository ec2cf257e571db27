"""One device that reports accuracy 1.0 in every evaluation: how far it moves the accuracy a run
reports, as the mean over the devices and as their median, from a clean run.

The liar trains and uploads honestly (a spoofed score moves no model), so its run's models, and every
honest device's score, are those of the clean run: each seed runs once, and the liar's figures are
the clean run's last round with client-0's score replaced by 1.0. The score a server gives its own
global model on a held-out set (`edgefd server --holdout-dir`) does not move at all: no device's
claim reaches it.

    python3 benchmarks/spoofed_score.py --config server/run.toml --clients 3
    python3 benchmarks/spoofed_score.py --algo fedavg --clients 5 --rounds 20 --partition dirichlet:0.5
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import tomllib

from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run

LIE = 1.0
"""What the liar reports."""


def final_scores(config: SimulationConfig) -> list[float]:
    """Every client's accuracy in the run's last round, in client-id order."""
    run(config, progress=False)
    lines = (Path(str(config.out)) / "metrics.jsonl").read_text().splitlines()
    last = json.loads(lines[-1])["client_accuracy"]
    return [last[cid] for cid in sorted(last)]


def reported(scores: list[float]) -> tuple[float, float, float, float]:
    """(mean, median) of ``scores``, then the same with the first client's score a lie."""
    lied = [LIE, *scores[1:]]
    return statistics.mean(scores), statistics.median(scores), statistics.mean(lied), statistics.median(lied)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="the run config's setting and params (server/run.toml)")
    parser.add_argument("--algo", default="fedavg")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--partition", default="dirichlet:0.5")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    if args.clients < 3:
        raise SystemExit("--clients: at least 3 (the median of two devices is their mean)")
    if args.config:
        values = tomllib.loads(Path(args.config).read_text())
        base = SimulationConfig(**{**values, "clients": args.clients})
        label = f"{args.config} ({base.algo})"
    else:
        base = SimulationConfig(
            algo=args.algo,
            dataset=args.dataset,
            clients=args.clients,
            rounds=args.rounds,
            partition=args.partition,
            threads=1,
        )
        label = base.algo
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for seed in args.seeds:
            config = SimulationConfig(**{**vars(base), "seed": seed, "out": str(Path(folder) / str(seed))})
            rows.append(reported(final_scores(config)))
            print(f"seed {seed}: " + ", ".join(f"{100 * v:.2f}" for v in rows[-1]), flush=True)
    print(
        f"\n{label}: {base.dataset}, {base.clients} clients (client-0 reports {LIE}), {base.partition}, "
        f"{base.rounds} rounds, seeds {' '.join(map(str, args.seeds))}; the run's accuracy in its last round, "
        "mean over seeds (and the largest move in one seed).\n"
    )
    print("| figure | clean | one liar | moved (largest in a seed) |")
    print("|---|---:|---:|---:|")
    for name, clean, lied in (("mean over the devices", 0, 2), ("median over the devices", 1, 3)):
        moves = [100 * (row[lied] - row[clean]) for row in rows]
        largest = max(moves, key=abs)
        print(
            f"| {name} | {100 * statistics.mean(r[clean] for r in rows):.2f} | "
            f"{100 * statistics.mean(r[lied] for r in rows):.2f} | {statistics.mean(moves):+.2f} ({largest:+.2f}) |"
        )


if __name__ == "__main__":
    main()
