"""One poisoning client among honest ones: what it costs FD and FedAvg, with the mean the papers use
and with the robust aggregators (coordinate-wise median, trimmed mean), beside a clean run.

    python3 benchmarks/poisoning.py --method fd --seeds 0 1 2
    python3 benchmarks/poisoning.py --method fedavg --attack flip --seeds 0 1 2

The attacker is one client whose uplinks are replaced after it trained honestly: ``scale``
multiplies its knowledge (FD: the per-label logits; FedAvg: the weights) by ``--factor``,
``flip`` negates it. Both stay inside what the schemas admit (logits within 10^4, weights within
10^6), so the server cannot refuse them and has to withstand them. Every arm shares the dataset,
split, models, seeds and training settings; only the aggregator and the attack differ. The score
is the honest clients' mean final accuracy (the attacker's own is left out). Prints a Markdown
table; docs/RESULTS.md holds the figures.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from edgefd.protocol import Payload
from edgefd.runtime.build import build
from edgefd.runtime.config import SimulationConfig

ATTACKER = "client-3"
KNOWLEDGE = {"fd": ("logits",), "fedavg": None}  # None: every float array (the weights)


def poisoned(payload: Payload | None, method: str, attack: str, factor: float) -> Payload | None:
    if payload is None:
        return None
    names = KNOWLEDGE[method] or [n for n, a in payload.arrays.items() if a.dtype.kind == "f"]
    arrays = dict(payload.arrays)
    for name in names:
        arrays[name] = (arrays[name] * (factor if attack == "scale" else -1.0)).astype(arrays[name].dtype)
    return Payload(payload.kind, payload.sender, payload.round, arrays, payload.scalars, payload.precision)


def honest_accuracy(config: SimulationConfig, attack: str | None, factor: float) -> float:
    sim = build(config)
    if attack is not None:
        role = sim.clients[ATTACKER]
        honest_train = role.train_round
        role.train_round = lambda r, d: poisoned(honest_train(r, d), config.algo, attack, factor)  # type: ignore[method-assign]
    records = sim.federation.run()
    scores = {cid: a for cid, a in records[-1].client_accuracy.items() if cid != ATTACKER}
    rejected = [r.rejected for r in records if r.rejected]
    if rejected:
        print(f"  (the server refused: {rejected[:3]})")
    return float(np.mean(list(scores.values())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", choices=sorted(KNOWLEDGE), default="fd")
    parser.add_argument("--attack", choices=("scale", "flip"), default="scale")
    parser.add_argument("--factor", type=float, default=100.0, help="the scale attack's factor")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--partition", default="dirichlet:1.0")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()

    arms: list[tuple[str, str | None, str]] = [
        ("clean, mean", None, "mean"),
        (f"{args.attack}, mean", args.attack, "mean"),
        (f"{args.attack}, median", args.attack, "median"),
        (f"{args.attack}, trimmed mean", args.attack, "trimmed"),
        ("clean, median", None, "median"),
        ("clean, trimmed mean", None, "trimmed"),
    ]
    results: dict[str, list[float]] = {label: [] for label, _, _ in arms}
    with tempfile.TemporaryDirectory() as folder:
        for seed in args.seeds:
            for label, attack, aggregator in arms:
                config = SimulationConfig(
                    algo=args.method,
                    dataset=args.dataset,
                    clients=args.clients,
                    rounds=args.rounds,
                    partition=args.partition,
                    seed=seed,
                    threads=1,
                    params={"aggregator": aggregator},
                    out=str(Path(folder) / f"{label}-{seed}"),
                )
                results[label].append(honest_accuracy(config, attack, args.factor))
                print(f"seed {seed} {label}: {100 * results[label][-1]:.2f}%", flush=True)

    common: dict[str, Any] = dict(
        method=args.method, dataset=args.dataset, clients=args.clients, rounds=args.rounds, partition=args.partition
    )
    attack = f"{args.attack} x{args.factor:g}" if args.attack == "scale" else args.attack
    print(f"\nShared by every arm: {common}, seeds {args.seeds}, attacker {ATTACKER} ({attack}).\n")
    print("| arm | honest clients' final accuracy (mean ± std over seeds) |")
    print("|---|---:|")
    for label, values in results.items():
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        print(f"| {label} | {100 * statistics.mean(values):.2f} ± {100 * spread:.2f} % |")


if __name__ == "__main__":
    main()
