"""The runs of `edgefd reproduce`: every (arm, seed) of a recipe as an ordinary `edgefd simulate` run
under OUT/NAME/METHOD-sSEED, in this process, in a process of its own (an isolated recipe), or as Ray
tasks (`edgefd.reproduce_ray`); a finished run of the same config is kept."""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from edgefd.metrics.results import SUMMARY_FILE
from edgefd.recipes import Recipe
from edgefd.reproduce.code_record import Record, changed_files, code_record
from edgefd.reproduce.table import results_table
from edgefd.reproduce_ray import Cluster, run_on_ray
from edgefd.runtime.config import SimulationConfig, config_to_toml
from edgefd.runtime.process import edgefd_command


def run_isolated(config: SimulationConfig) -> dict[str, Any]:
    """``edgefd simulate`` on ``config`` in a new process; its summary."""
    folder = config.out_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.toml").write_text(config_to_toml(config))
    command = edgefd_command("simulate", "--config", str(folder / "run.toml"))
    subprocess.run(command, check=True)
    return json.loads((folder / "summary.json").read_text())


def changed_params(summary: dict[str, Any], config: SimulationConfig) -> list[str]:
    """The method params that this code would set differently from the finished run's ``summary``:
    a default that changed since the run (the run.toml names only the params a recipe pins). A
    param the code leaves None is resolved when the run starts (from a preset, the run's length),
    so it is not compared."""
    from edgefd.algorithms.base import get_method  # torch: not for --help
    from edgefd.algorithms.params import make_params

    current = asdict(make_params(get_method(config.algo).params, config.params))
    recorded = summary.get("params", {})
    return [
        name
        for name, value in current.items()
        if value is not None and json.loads(json.dumps(value)) != recorded.get(name)
    ]


CODE_FILE = "code.json"
"""In a recipe's run folder: the fingerprints of the code the run depends on (`code_record`)."""


def code_moved(folder: Path, code: Record) -> str | None:
    """Why the code a finished run in ``folder`` depends on is not ``code``, this code's record for
    its method (None: it is)."""
    recorded = folder / CODE_FILE
    if not recorded.is_file():
        return f"no {CODE_FILE} (a run made before runs recorded their code)"
    changed = changed_files(json.loads(recorded.read_text()), code)
    if changed:
        return f"the code it depends on changed since ({len(changed)} file(s), e.g. {changed[0]})"
    return None


def finished_run(folder: Path, config: SimulationConfig, code: Record) -> dict[str, Any] | None:
    """The summary of a finished run in ``folder`` made from exactly ``config`` (its run.toml), from
    the code this run depends on as it is now (its code.json), and with the method params and local
    training (epochs, optimiser lifecycle, batch order) this code would use, else None."""
    toml, summary_file = folder / "run.toml", folder / SUMMARY_FILE
    if not (toml.is_file() and summary_file.is_file() and toml.read_text() == config_to_toml(config)):
        return None
    moved = code_moved(folder, code)
    if moved is not None:
        print(f"{folder}: {moved}: running it again", flush=True)
        return None
    summary = json.loads(summary_file.read_text())
    changed = changed_params(summary, config)
    if changed:
        print(f"{folder}: params changed since this run ({', '.join(changed)}): running it again", flush=True)
        return None
    from edgefd.runtime.build import local_training_of  # torch: not for --help

    # a summary written before epochs were recorded has none: its run.toml, which then always named
    # them, already matched
    recorded = summary.get("local_training", {})
    training = [name for name, value in local_training_of(config).items() if recorded.get(name, value) != value]
    if training:
        print(f"{folder}: local training changed since this run ({', '.join(training)}): running it again", flush=True)
        return None
    return summary


def recipe_runs(
    recipe: Recipe, out: Path, seeds: tuple[int, ...], rounds: int | None, threads: int | None
) -> list[tuple[str, int, SimulationConfig]]:
    """Every run of a table, as (arm label, seed, config), in the table's order: arm by arm, seed by seed."""
    return [
        (
            arm.label,
            seed,
            replace(
                recipe.base,
                **arm.config,
                algo=arm.algo,
                params=dict(arm.params),
                seed=seed,
                out=str(out / recipe.name / f"{arm.folder or arm.algo}-s{seed}"),
                rounds=rounds or recipe.base.rounds,
                threads=threads or recipe.base.threads,
            ),
        )
        for arm in recipe.arms
        for seed in seeds
    ]


def _print_best(label: str, seed: int, summary: dict[str, Any]) -> None:
    print(f"{label} seed {seed}: best {100 * summary['best_accuracy']:.2f}%", flush=True)


def _print_ray_run(label: str, seed: int, summary: dict[str, Any], where: str) -> None:
    _print_best(label, seed, summary)
    print(f"{label} seed {seed}: ran on {where}", flush=True)


def _write_code(folder: Path, algo: str, records: dict[str, Record]) -> None:
    """Writes the run's code.json (a kept run's too: its code is this code, `code_moved`)."""
    (folder / CODE_FILE).write_text(json.dumps(records[algo], indent=1, sort_keys=True) + "\n")


def run_recipe(
    recipe: Recipe,
    out: Path,
    seeds: tuple[int, ...],
    rounds: int | None = None,
    rerun: bool = False,
    threads: int | None = None,
    cluster: Cluster | None = None,
) -> str:
    """Runs every arm and seed (keeping a finished run of the same config unless ``rerun``), then
    writes and returns the table. ``threads`` overrides the recipe's CPU threads (not part of the
    setting: 1 lets two recipes share two cores). With ``cluster`` the runs left to do are Ray tasks
    (`edgefd.reproduce_ray`), and the table is the one they would give one after another."""
    from edgefd.simulate import run as run_simulation  # torch: not for --help

    planned = recipe_runs(recipe, out, seeds, rounds, threads)
    records = {arm.algo: code_record([arm.algo]) for arm in recipe.arms}  # the code as the recipe starts
    summaries: dict[Path, dict[str, Any]] = {}
    left: list[SimulationConfig] = []
    for label, seed, config in planned:
        folder = config.out_dir()
        summary = None if rerun else finished_run(folder, config, records[config.algo])
        if summary is not None:
            print(f"{label} seed {seed}: kept the finished run in {folder} (same config)", flush=True)
        elif cluster is not None:
            left.append(config)
            continue
        elif recipe.isolated:
            summary = run_isolated(config)
        else:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "run.toml").write_text(config_to_toml(config))
            summary = run_simulation(config, progress=True)
        summaries[folder] = summary
        _write_code(folder, config.algo, records)
        _print_best(label, seed, summary)
    if cluster is not None and left:
        names = {config.out_dir(): (label, seed) for label, seed, config in planned}

        def done_on_ray(done: SimulationConfig, summary: dict[str, Any], where: str) -> None:
            _write_code(done.out_dir(), done.algo, records)
            _print_ray_run(*names[done.out_dir()], summary, where)

        summaries |= run_on_ray(left, cluster, done_on_ray)
    runs = []
    for label, seed, config in planned:
        metrics = (config.out_dir() / "metrics.jsonl").read_text().splitlines()
        runs.append((label, seed, (summaries[config.out_dir()], [json.loads(text) for text in metrics])))
    table = results_table(recipe, runs, seeds, rounds, threads)
    (out / recipe.name).mkdir(parents=True, exist_ok=True)
    (out / recipe.name / "results.md").write_text(table)
    return table
