"""One poisoning client among honest ones: what each attack costs a method, with the mean its paper
uses and with its robust options (the median or trimmed mean; FedICT's clipping), beside a clean run.
Each method also runs as its paper has it (the mean, none of edgefd's bounds on weights and updates,
no clipping), beside its defaults; `--defences` picks the columns.

    python3 benchmarks/poisoning.py --methods fd fedavg fedcache dfl fedict --seeds 0 1 2
    python3 benchmarks/poisoning.py --methods fd --seeds 0 1 2 --deployed
    python3 benchmarks/poisoning.py --recipe fedcache --methods fedcache fd fedavg --attacks  # clean only
    python3 benchmarks/poisoning.py --config server/run.toml --methods fd --defences paper defaults

With `--recipe NAME` every arm runs a reproduction recipe's setting (`edgefd reproduce NAME`: its
dataset, clients, models and training, and the method's params in that recipe) instead of the small
setting the flags describe; `--rounds` and `--clients`, if given, still override it. With `--attacks`
and no attack, only the clean arms run: what each defence costs a method where nobody attacks.

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
from dataclasses import asdict, replace
from pathlib import Path

import tomllib

from edgefd.algorithms.base import get_method
from edgefd.recipes import RECIPES
from edgefd.runtime.attack import ATTACKS, attackers
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run

DEFENCES: dict[str, tuple[str, dict[str, object]]] = {
    "paper": ("the paper's", {"aggregator": "mean", "weight_cap": 0, "update_cap": 0, "clip": 0.0}),
    "defaults": ("defaults", {}),
    "median": ("median", {"aggregator": "median"}),
    "trimmed": ("trimmed mean (20%)", {"aggregator": "trimmed"}),
    "clip": ("clip 3x the median norm", {"clip": 3.0}),
    "median-clip": ("median, rows clipped (3x)", {"aggregator": "median", "clip": 3.0}),
}
"""Column key: (header, the params that set it). "the paper's" sets those of its params the method
has (the mean, no bound on weights or updates, no clipping); any other column runs only for a
method that has all of its params, and only where they are not its defaults."""


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


def honest_accuracy(config: SimulationConfig, deployed: bool, left_out: int) -> tuple[float, dict[str, int]]:
    """The mean final accuracy of the clients but the first ``left_out`` (the attackers, in every arm
    alike: a clean arm is scored on the same clients as the attacked ones), and the messages the
    server refused (by reason)."""
    if deployed:
        deploy(config)
    else:
        run(config, progress=False)
    lines = [json.loads(line) for line in (Path(str(config.out)) / "metrics.jsonl").read_text().splitlines()]
    bad = set(attackers([f"client-{i}" for i in range(config.clients)], "scaled", left_out)) if left_out else set()
    scores = [accuracy for cid, accuracy in lines[-1]["client_accuracy"].items() if cid not in bad]
    refused: dict[str, int] = {}
    for line in lines:
        for reason in line["rejected"].values():  # {client: reason}
            refused[reason] = refused.get(reason, 0) + 1
    return statistics.mean(scores), refused


def defence_params(method: str, defence: str, base: dict[str, object] | None = None) -> dict[str, object] | None:
    """The params of ``defence`` for ``method``, or None where the method lacks it or it is what the
    run does without it (the defaults column has it): the method's defaults, under the ``base``
    params a recipe's or a config's arm sets."""
    defaults = get_method(method).params()
    wanted = DEFENCES[defence][1]
    if defence == "paper":
        wanted = {name: value for name, value in wanted.items() if hasattr(defaults, name)}
    elif not all(hasattr(defaults, name) for name in wanted):
        return None
    plain = {**{name: getattr(defaults, name) for name in wanted}, **(base or {})}
    if defence != "defaults" and all(plain[name] == value for name, value in wanted.items()):
        return None
    return wanted


def arms(
    method: str, attacks: list[str], chosen: list[str], base: dict[str, object] | None = None
) -> list[tuple[str, str]]:
    """(attack, defence) pairs: clean and attacked under each of the ``chosen`` defences the method has."""
    defaults = get_method(method).params()
    defences: list[str] = []
    for key in chosen:
        if defence_params(method, key, base) is None:
            if key != "paper" and not all(hasattr(defaults, name) for name in DEFENCES[key][1]):
                continue  # the method does not have it
            key = "defaults"  # it is what the method does by default: its defaults column
        if key not in defences:
            defences.append(key)
    return [("none", defence) for defence in defences] + [(a, d) for a in attacks for d in defences]


def setting(args: argparse.Namespace, method: str) -> tuple[SimulationConfig, dict[str, object]]:
    """The arms' shared config and the method's own params: the flags' small setting, a run config
    file's setting and params (`--config`), or the recipe's base and the params of its first arm of
    ``method``."""
    if args.config is not None:
        values = tomllib.loads(Path(args.config).read_text())
        params = values.pop("params", {})
        overrides = {name: value for name, value in (("rounds", args.rounds), ("clients", args.clients)) if value}
        return replace(SimulationConfig(**values), **overrides), params
    if args.recipe is None:
        base = SimulationConfig(
            dataset=args.dataset,
            clients=args.clients or 5,
            rounds=args.rounds or 10,
            partition=args.partition,
            threads=1,
        )
        return base, {}
    recipe = RECIPES[args.recipe]
    arm = next((arm for arm in recipe.arms if arm.algo == method), None)
    if arm is None:
        methods = sorted({a.algo for a in recipe.arms})
        raise SystemExit(f"recipe {args.recipe} has no {method} arm; its methods: {', '.join(methods)}")
    base = replace(recipe.base, **arm.config)
    overrides = {name: value for name, value in (("rounds", args.rounds), ("clients", args.clients)) if value}
    return replace(base, **overrides), dict(arm.params)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", nargs="+", default=["fd", "fedavg", "fedcache"])
    parser.add_argument("--attacks", nargs="*", choices=ATTACKS[1:], default=list(ATTACKS[1:]))
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--recipe", choices=sorted(RECIPES), help="run every arm at this recipe's setting")
    where.add_argument("--config", help="run every arm at this run config's setting and params (server/run.toml)")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--clients", type=int, help="default 5 (or the recipe's)")
    parser.add_argument("--rounds", type=int, help="default 10 (or the recipe's)")
    parser.add_argument("--partition", default="dirichlet:1.0")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--defences", nargs="+", choices=list(DEFENCES), default=list(DEFENCES))
    parser.add_argument(
        "--deployed", action="store_true", help="run each arm with `edgefd deploy-local` (needs Mosquitto)"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        for method in args.methods:
            results: dict[tuple[str, str], list[float]] = {}
            refusals: dict[tuple[str, str], dict[str, int]] = {}
            base, method_params = setting(args, method)
            for seed in args.seeds:
                for attack, aggregator in arms(method, args.attacks, args.defences, method_params):
                    config = replace(
                        base,
                        algo=method,
                        seed=seed,
                        attack=attack,
                        params={**method_params, **(defence_params(method, aggregator, method_params) or {})},
                        out=str(Path(folder) / f"{method}-{attack}-{aggregator}-{seed}"),
                    )
                    # the attacker (client-0) is left out of every arm's score, or nobody's when none attacks
                    accuracy, refused = honest_accuracy(config, args.deployed, left_out=1 if args.attacks else 0)
                    results.setdefault((attack, aggregator), []).append(accuracy)
                    for reason, count in refused.items():
                        refusals.setdefault((attack, aggregator), {}).setdefault(reason, 0)
                        refusals[(attack, aggregator)][reason] += count
                    print(f"{method} seed {seed} {attack} / {aggregator}: {100 * accuracy:.2f}%", flush=True)
            where = "deployed (edgefd deploy-local)" if args.deployed else "in-process (edgefd simulate)"
            recipe = "default models and training"
            if args.recipe or args.config:
                recipe = f"{args.recipe or args.config}'s setting and {method} params {method_params}"
            print(
                f"\n{method}, {where}: {base.dataset}, {base.clients} clients"
                f"{' (client-0 attacks)' if args.attacks else ''}, {base.partition}, "
                f"{base.rounds} rounds, {recipe}, seeds {' '.join(map(str, args.seeds))}; "
                f"the {'honest ' if args.attacks else ''}clients' mean final accuracy, mean ± std over seeds.\n"
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
