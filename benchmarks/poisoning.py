"""One poisoning client among honest ones: what each attack costs a method, with the mean its paper
uses and with its robust options (the median or trimmed mean; FedICT's clipping), beside a clean run.

    python3 benchmarks/poisoning.py --methods fd fedavg fedcache dfl fedict --seeds 0 1 2
    python3 benchmarks/poisoning.py --methods fd --seeds 0 1 2 --deployed

The attacker is the run's first client (`--attack`, `--attackers 1` of `edgefd simulate`): it trains
honestly, then sends scaled, flipped or max-in-bounds values in every uplink and step request, all
within what the schemas admit (docs/ROBUSTNESS.md). Every arm of a method shares the dataset, split,
models, seeds and training settings; only the attack and the defence (`--param aggregator` or `clip`)
differ. The score is
the honest clients' mean final accuracy (the attacker's own is left out). A method without an
robust param runs its mean arms only. Prints one Markdown table per method.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from edgefd.algorithms.base import get_method
from edgefd.runtime.attack import ATTACKS, attackers
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run

DEFENCES: dict[str, tuple[str, dict[str, object]]] = {
    "mean": ("mean (the paper's)", {}),
    "median": ("median", {"aggregator": "median"}),
    "trimmed": ("trimmed mean (20%)", {"aggregator": "trimmed"}),
    "clip": ("clip 3x the median norm", {"clip": 3.0}),
}
"""Column key: (header, the params that set it)."""


def deploy(config: SimulationConfig) -> None:
    """The same run deployed: `edgefd deploy-local` (a server and a process per device over a local
    Mosquitto), the attacking devices poisoning as the simulated ones do."""
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in asdict(config).items() if name != "params"]
    flags = [flag for flag in flags if not flag.endswith("=None")]
    params = [item for name, value in config.params.items() for item in ("--param", f"{name}={value}")]
    subprocess.run(
        [sys.executable, "-m", "edgefd.cli", "deploy-local", *flags, *params, "--quiet"],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def honest_accuracy(config: SimulationConfig, deployed: bool = False) -> tuple[float, dict[str, int]]:
    """The honest clients' mean final accuracy, and the messages the server refused (by reason)."""
    if deployed:
        deploy(config)
    else:
        run(config, progress=False)
    lines = [json.loads(line) for line in (Path(str(config.out)) / "metrics.jsonl").read_text().splitlines()]
    bad = set(attackers([f"client-{i}" for i in range(config.clients)], config.attack, config.attackers))
    scores = [accuracy for cid, accuracy in lines[-1]["client_accuracy"].items() if cid not in bad]
    refused: dict[str, int] = {}
    for line in lines:
        for reason in line["rejected"].values():  # {client: reason}
            refused[reason] = refused.get(reason, 0) + 1
    return statistics.mean(scores), refused


def arms(method: str, attacks: list[str]) -> list[tuple[str, str]]:
    """(attack, defence) pairs: clean and attacked under each defence the method's params have."""
    fields = get_method(method).params.__dataclass_fields__
    defences = [key for key, (_, params) in DEFENCES.items() if all(name in fields for name in params)]
    return [("none", defence) for defence in defences] + [(a, d) for a in attacks for d in defences]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", nargs="+", default=["fd", "fedavg", "fedcache"])
    parser.add_argument("--attacks", nargs="+", choices=ATTACKS[1:], default=list(ATTACKS[1:]))
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--partition", default="dirichlet:1.0")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--deployed", action="store_true", help="run each arm with `edgefd deploy-local` (needs Mosquitto)"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        for method in args.methods:
            results: dict[tuple[str, str], list[float]] = {}
            refusals: dict[tuple[str, str], dict[str, int]] = {}
            for seed in args.seeds:
                for attack, aggregator in arms(method, args.attacks):
                    params = DEFENCES[aggregator][1]
                    config = SimulationConfig(
                        algo=method,
                        dataset=args.dataset,
                        clients=args.clients,
                        rounds=args.rounds,
                        partition=args.partition,
                        seed=seed,
                        threads=1,
                        attack=attack,
                        params=params,
                        out=str(Path(folder) / f"{method}-{attack}-{aggregator}-{seed}"),
                    )
                    accuracy, refused = honest_accuracy(config, args.deployed)
                    results.setdefault((attack, aggregator), []).append(accuracy)
                    for reason, count in refused.items():
                        refusals.setdefault((attack, aggregator), {}).setdefault(reason, 0)
                        refusals[(attack, aggregator)][reason] += count
                    print(f"{method} seed {seed} {attack} / {aggregator}: {100 * accuracy:.2f}%", flush=True)
            where = "deployed (edgefd deploy-local)" if args.deployed else "in-process (edgefd simulate)"
            print(
                f"\n{method}, {where}: {args.dataset}, {args.clients} clients (client-0 attacks), {args.partition}, "
                f"{args.rounds} rounds, default models and training, seeds {' '.join(map(str, args.seeds))}; "
                "the honest clients' mean final accuracy, mean ± std over seeds.\n"
            )
            aggregators = sorted({g for _, g in results}, key=list(DEFENCES).index)
            print("| attack | " + " | ".join(DEFENCES[g][0] for g in aggregators) + " |")
            print("|---|" + "---:|" * len(aggregators))
            for attack in ["none", *args.attacks]:
                cells = []
                for aggregator in aggregators:
                    values = results[(attack, aggregator)]
                    spread = statistics.stdev(values) if len(values) > 1 else 0.0
                    refused = refusals.get((attack, aggregator))
                    note = f" (refused: {refused})" if refused else ""
                    cells.append(f"{100 * statistics.mean(values):.2f} ± {100 * spread:.2f}{note}")
                print(f"| {'clean' if attack == 'none' else attack} | " + " | ".join(cells) + " |")
            print(flush=True)


if __name__ == "__main__":
    main()
