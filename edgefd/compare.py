"""`edgefd compare ALGO ALGO ...`: methods side by side that differ only in the method.

Each method's default path trains as its paper does: FedCache trains ResNets with a new optimiser
every round and one fixed batch order, Local and FD a small CNN with a kept optimiser and
reshuffled batches. Two default runs therefore differ in more than the method, and a table of them
misleads. Here every arm gets the first method's models and local training (epochs, optimiser
lifecycle, batch order), or the ones the flags give, and the same data, split and seeds; the table
gives each arm's accuracy over the seeds and the first method's paired difference to each other arm.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from edgefd.claims import MIN_SEEDS, Claim, judge
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.flags import add_config_arguments, config_from_args

COMPARED_TRAINING = ("epochs", "optimizer_lifecycle", "batch_order")
"""The local training every arm shares: the first method's, or what the flags give."""
SAYINGS = {
    "reproduced": "{first} higher",
    "opposite": "{first} lower",
    "no difference": "no difference the test splits can resolve",
    "inconclusive": "inconclusive",
}


@dataclass
class Comparison:
    """What every arm shares, resolved once from the first method and the flags."""

    algos: list[str]
    base: SimulationConfig
    """The run's settings with the shared models and local training made concrete."""
    seeds: list[int]
    out: Path
    model_names: list[str]
    """The clients' models, one entry per distinct model."""

    def arm_config(self, algo: str, seed: int) -> SimulationConfig:
        return replace(self.base, algo=algo, seed=seed, params={}, out=str(self.out / f"{algo}-s{seed}"))


def comparison_of(config: SimulationConfig, algos: list[str], seeds: list[int], out: Path) -> Comparison:
    """``config`` with `--models auto` and the method-chosen local training made the first method's,
    so that every arm runs them."""
    from edgefd.algorithms.base import get_method
    from edgefd.data import load_dataset
    from edgefd.models import assign_models
    from edgefd.runtime.build import local_training_of, resolve_models

    for algo in algos:
        get_method(algo)  # an unknown name fails here, before anything runs
    first = replace(config, algo=algos[0])
    shape = tuple(load_dataset(config.dataset, root=config.data_root).input_shape)
    models = resolve_models(config.models, get_method(algos[0]), shape)
    names = list(dict.fromkeys(assign_models(models, config.clients, input_shape=shape)))
    return Comparison(algos, replace(first, models=models, **local_training_of(first)), seeds, out, names)


def shared_text(comparison: Comparison) -> str:
    base = comparison.base
    return (
        f"All arms: {base.dataset}, {base.clients} clients, {base.partition}, {base.rounds} rounds, "
        f"models {', '.join(comparison.model_names)}, {base.epochs} local epoch(s) a round, "
        f"optimiser {base.optimizer_lifecycle}, batch order {base.batch_order}, "
        f"{base.optimizer} lr {base.lr}, batch {base.batch_size}, {base.threads} thread(s); seeds "
        f"{', '.join(map(str, comparison.seeds))}; each method's own default params."
    )


def table(comparison: Comparison, summaries: dict[str, dict[int, dict[str, Any]]]) -> str:
    """The arms' accuracies over the seeds, then the first arm's paired differences to the others."""

    def mean_std(values: list[float]) -> str:
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        return f"{100 * statistics.fmean(values):.2f} ± {100 * spread:.2f}"

    seeds = comparison.seeds
    rows = [
        shared_text(comparison),
        "",
        "| method | best acc. % (mean ± std) | final acc. % | MB up + down per run | s per run |",
        "|---|---:|---:|---:|---:|",
    ]
    for algo in comparison.algos:
        runs = [summaries[algo][seed] for seed in seeds]
        traffic = statistics.fmean(s["bytes_up_total"] + s["bytes_down_total"] for s in runs)
        best, final = mean_std([s["best_accuracy"] for s in runs]), mean_std([s["final_accuracy"] for s in runs])
        seconds = statistics.fmean(s["wall_seconds"] for s in runs)
        rows.append(f"| {algo} | {best} | {final} | {traffic / 1e6:.3f} | {seconds:.1f} |")
    first = comparison.algos[0]
    rows += [
        "",
        f"Paired differences, {first} minus each other arm (accuracy points): the mean over the seeds, its 95% "
        "interval, the noise floor of the clients' test splits and the verdict by the rule of docs/RESULTS.md:",
        "",
    ]
    runs_of: dict[str, dict[int, tuple[dict[str, Any], list[dict[str, Any]]]]] = {
        algo: {seed: (summaries[algo][seed], []) for seed in seeds} for algo in comparison.algos
    }
    for other in comparison.algos[1:]:
        for metric in ("best", "final"):
            verdict = judge(Claim(first, "above", other, metric, "edgefd compare"), runs_of)
            saying = SAYINGS[verdict.outcome].format(first=first)
            rows.append(
                f"- {first} - {other}, {metric} accuracy: {verdict.difference_text()}, floor "
                f"{100 * verdict.floor:.2f}, per seed {verdict.per_seed_text()} ({saying})"
            )
    return "\n".join(rows) + "\n"


def compare(comparison: Comparison, progress: bool = True) -> str:
    """Runs every (method, seed), writes DIR/compare.md and returns the table."""
    from edgefd.simulate import run as run_simulation

    summaries: dict[str, dict[int, dict[str, Any]]] = {}
    said: set[str] = set()  # each note once for the whole comparison
    for seed in comparison.seeds:
        for algo in comparison.algos:
            config = comparison.arm_config(algo, seed)
            try:
                summary = run_simulation(config, progress=progress, said=said)
            except ValueError as error:
                raise ValueError(f"{algo} (seed {seed}) cannot run the shared settings: {error}") from error
            summaries.setdefault(algo, {})[seed] = summary
            print(
                f"{algo} seed {seed}: best {100 * summary['best_accuracy']:.2f}%, "
                f"final {100 * summary['final_accuracy']:.2f}% -> {config.out}",
                flush=True,
            )
    text = table(comparison, summaries)
    comparison.out.mkdir(parents=True, exist_ok=True)
    (comparison.out / "compare.md").write_text(text)
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "algos", nargs="+", metavar="ALGO", help="the methods, the reference first (see `edgefd methods`)"
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=list(range(MIN_SEEDS)),
        metavar="SEED",
        help="seeds, paired across arms; the verdicts need at least 2 and are rarely decided with fewer than "
        f"{MIN_SEEDS} (default: {' '.join(map(str, range(MIN_SEEDS)))})",
    )
    add_config_arguments(parser, hidden=("algo", "seed", "param"))  # the ALGO arguments and --seeds say these


def run(args: argparse.Namespace) -> int:
    given = vars(args)
    refused = [flag for flag, name in (("--algo", "algo"), ("--param", "param"), ("--seed", "seed")) if given.get(name)]
    if refused:
        print(
            f"edgefd compare: {' and '.join(refused)}: not for compare; the methods are the ALGO arguments, each runs "
            "its own default params (run one with `edgefd simulate --param`), and --seeds gives the seeds",
            file=sys.stderr,
        )
        return 2
    if len(set(args.algos)) != len(args.algos) or len(args.algos) < 2:
        print(f"edgefd compare: give two or more different methods, got {' '.join(args.algos)}", file=sys.stderr)
        return 2
    from edgefd.data import DatasetNotFoundError

    try:
        config = config_from_args(args)
        out = Path(config.out) if config.out else Path("runs") / ("compare-" + "-".join(args.algos))
        comparison = comparison_of(config, args.algos, sorted(set(args.seeds)), out)
        print(shared_text(comparison), flush=True)
        text = compare(comparison, progress=not args.quiet)
    except (DatasetNotFoundError, ValueError) as error:
        print(f"edgefd compare: {error}", file=sys.stderr)
        return 2
    print()
    print(text, end="")
    print(f"(also in {comparison.out / 'compare.md'})")
    return 0
