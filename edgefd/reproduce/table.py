"""The table of `edgefd reproduce`: from a recipe's runs (summaries and metrics lines), the mean ±
std over seeds of each arm's accuracy and bytes, the bytes and rounds to a common target, each
seed's values (what `--verify` compares), the settings the arms share, and the claims' verdicts."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import asdict, fields, replace
from typing import Any

from edgefd.claims import METRIC_NAMES, METRICS, Claim, Verdict, judge
from edgefd.recipes import Recipe
from edgefd.recipes.recipe import NOT_SHARED
from edgefd.runtime.config import SimulationConfig


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def bytes_to_reach(lines: list[dict[str, Any]], target: float) -> int | None:
    """Cumulative bytes (up + down, one-time uploads included) at the first round >= target."""
    for line in lines:
        if line.get("accuracy") is not None and line["accuracy"] >= target:
            return line["bytes_up_cumulative"] + line["bytes_down_cumulative"]
    return None


def rounds_to_reach(lines: list[dict[str, Any]], target: float) -> int | None:
    """The first round whose mean client accuracy is >= target (the papers' rounds-to-target)."""
    for line in lines:
        if line["round"] >= 1 and line.get("accuracy") is not None and line["accuracy"] >= target:
            return int(line["round"])
    return None


def _reached_text(values: list[int | None], scale: float, digits: int) -> str:
    """The mean over the seeds that reached the target, and how many did when not all."""
    reached = [value / scale for value in values if value is not None]
    text = f"{statistics.mean(reached):.{digits}f}" if reached else "not reached"
    return text + (f" ({len(reached)}/{len(values)} seeds)" if len(reached) != len(values) else "")


PER_SEED_TITLE = "Per seed ({seeds}), accuracy %:"
"""The line above a table's per-seed values; `verify` finds a seed's column by it."""


def per_seed_metrics(recipe: Recipe) -> list[str]:
    """The metrics a table gives per seed: best and final accuracy, and every metric a claim names."""
    return list(dict.fromkeys(["best", "final", *(claim.metric for claim in recipe.claims)]))


def per_seed_table(
    recipe: Recipe, by_seed: dict[str, dict[int, tuple[dict, list[dict]]]], seeds: tuple[int, ...]
) -> list[str]:
    """Every arm's metrics seed by seed ("a / b / c" in the order of ``seeds``): the paired values a
    claim's verdict is computed from, and what `edgefd reproduce --verify` compares."""
    metrics = per_seed_metrics(recipe)
    rows = [
        PER_SEED_TITLE.format(seeds=" / ".join(map(str, seeds))),
        "",
        "| method | " + " | ".join(METRIC_NAMES[name] for name in metrics) + " |",
        "|---|" + "---:|" * len(metrics),
    ]
    for label, runs in by_seed.items():
        cells = [" / ".join(_metric_text(name, runs[seed]) for seed in seeds) for name in metrics]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return rows


def _metric_text(name: str, run: tuple[dict, list[dict]]) -> str:
    try:
        return f"{100 * METRICS[name](*run):.2f}"
    except ValueError:  # a run shorter than the metric's window (--rounds for a quick look)
        return "-"


def read_per_seed(text: str) -> dict[tuple[str, str, int], str]:
    """(arm label, metric header, seed) -> the value as printed, from a table's per-seed part."""
    lines = text.splitlines()
    prefix, suffix = PER_SEED_TITLE.split("{seeds}")
    starts = [i for i, line in enumerate(lines) if line.startswith(prefix) and line.endswith(suffix)]
    if not starts:
        raise ValueError("the table has no per-seed values (a table made before they were printed)")
    start = starts[0]
    seeds = [int(seed) for seed in lines[start][len(prefix) : -len(suffix)].split(" / ")]
    header = [cell.strip() for cell in lines[start + 2].strip("|").split("|")]
    values = {}
    for line in lines[start + 4 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        for name, cell in zip(header[1:], cells[1:]):
            for seed, value in zip(seeds, cell.split(" / ")):
                values[(cells[0], name, seed)] = value
    return values


def arm_settings(summary: dict[str, Any]) -> dict[str, str]:
    """What a run trained with, besides its method: every config field that shapes the result, the
    models it got and its local epochs, optimiser lifecycle and batch order as resolved (never "method")."""
    config = summary["config"]
    in_field_order = [
        f.name for f in fields(SimulationConfig) if f.name in config
    ]  # a summary.json read back is sorted
    settings = {name: str(config[name]) for name in in_field_order if name not in NOT_SHARED}
    if config.get("attack", "none") == "none":
        settings.pop("attackers", None)  # how many attack, in a run where none does
    if config.get("max_message_bytes") is None:
        settings.pop("max_message_bytes", None)  # no cap: each message's own bound, which refuses nothing
    if config.get("optimizer") != "sgd":
        settings.pop("momentum", None)  # SGD's alone: Adam never reads it
    settings["models"] = ", ".join(dict.fromkeys(summary["models"].values()))
    settings.update({name: str(value) for name, value in summary["local_training"].items()})
    return settings


def settings_text(per_arm: dict[str, dict[str, str]]) -> list[str]:
    """The settings every arm shares, then each arm's differences (beyond its method and params):
    a comparison is fair when the second list is empty."""
    arms = list(per_arm.values())
    names = list(dict.fromkeys(name for settings in arms for name in settings))
    common = [name for name in names if all(settings.get(name) == arms[0].get(name) for settings in arms)]
    lines = ["Common to all arms: " + ", ".join(f"{name} {arms[0][name]}" for name in common) + "."]
    differing = [name for name in names if name not in common]
    if differing:
        lines.append(
            "Differences between arms: "
            + "; ".join(
                f"{label}: " + ", ".join(f"{name} {settings.get(name, '-')}" for name in differing)
                for label, settings in per_arm.items()
            )
            + "."
        )
    else:
        lines.append("The arms differ only in the method and its params.")
    return lines


def timing_columns(runs: list[tuple[dict, list[dict]]]) -> tuple[float, float]:
    """Mean start-up seconds (the one-time uploads and the server's start) and median seconds a round."""
    startup = statistics.mean(s.get("startup_seconds", 0.0) for s, _ in runs)
    per_round = statistics.median(line["seconds"] for _, lines in runs for line in lines if line["round"] > 0)
    return startup, per_round


def per_round_table(results: dict[str, list[tuple[dict, list[dict]]]]) -> list[str]:
    """Mean client accuracy (%) of every evaluated round, arms side by side, mean over seeds."""
    labels = list(results)
    rounds = sorted({line["round"] for runs in results.values() for _, lines in runs for line in lines})
    rows = ["| round | " + " | ".join(labels) + " |", "|---:|" + "---:|" * len(labels)]
    for number in rounds:
        cells = []
        for label in labels:
            values = [
                line["accuracy"]
                for _, lines in results[label]
                for line in lines
                if line["round"] == number and line.get("accuracy") is not None
            ]
            cells.append(f"{100 * statistics.mean(values):.2f}" if values else "")
        rows.append(f"| {number} | " + " | ".join(cells) + " |")
    return rows


def command_text(recipe: Recipe, seeds: tuple[int, ...], rounds: int | None, threads: int | None) -> str:
    """The `edgefd reproduce` command that makes this table: the recipe's name and every option that
    moved it off the recipe's own seeds, rounds or threads."""
    options = []
    if seeds != recipe.seeds:
        options.append("--seeds " + " ".join(map(str, seeds)))
    if rounds is not None and rounds != recipe.base.rounds:
        options.append(f"--rounds {rounds}")
    if threads is not None and threads != recipe.base.threads:
        options.append(f"--threads {threads}")
    return " ".join(["edgefd reproduce", recipe.name, *options])


def results_table(
    recipe: Recipe,
    done: list[tuple[str, int, tuple[dict, list[dict]]]],
    seeds: tuple[int, ...],
    rounds: int | None,
    threads: int | None,
) -> str:
    """The recipe's table from its runs ``done``, as (arm label, seed, (summary, metrics lines)) in the
    table's order (`edgefd.reproduce.runs.recipe_runs`): the setting, the mean ± std over seeds of
    every arm's figures, each seed's values, and the claims' verdicts."""
    results: dict[str, list[tuple[dict, list[dict]]]] = {}
    by_seed: dict[str, dict[int, tuple[dict, list[dict]]]] = {}
    for label, seed, run in done:
        results.setdefault(label, []).append(run)
        by_seed.setdefault(label, {})[seed] = run
    best = {label: _mean_std([s["best_accuracy"] for s, _ in runs]) for label, runs in results.items()}
    target = min(best[label][0] for label in recipe.target_from) - 0.01
    rounds_run = rounds or recipe.base.rounds
    full = all("best_accuracy_full" in s for runs in results.values() for s, _ in runs)
    rows = [
        f"Recipe `{recipe.name}`: {recipe.source}; ran {rounds_run} rounds, seeds {', '.join(map(str, seeds))}.",
        f'Command: `{command_text(recipe, seeds, rounds, threads)}`. Target accuracy for "bytes to target": '
        f"{100 * target:.2f}% (lowest mean best accuracy of {', '.join(recipe.target_from)}, minus 1 point).",
        *settings_text({label: arm_settings(runs[0][0]) for label, runs in results.items()}),
        "",
        "| method | best acc. % (MAUA) | final acc. % |"
        + (" best % whole test set | final % whole test set |" if full else "")
        + " MB up + down per run | one-time upload MB | MB to target | rounds to target | start-up s | s / round |"
        + (" peak memory MiB |" if recipe.isolated else ""),
        "|---|---:|---:|"
        + ("---:|---:|" if full else "")
        + "---:|---:|---:|---:|---:|---:|"
        + ("---:|" if recipe.isolated else ""),
    ]
    for label, runs in results.items():
        final = _mean_std([s["final_accuracy"] for s, _ in runs])
        total = statistics.mean((s["bytes_up_total"] + s["bytes_down_total"]) / 1e6 for s, _ in runs)
        hello = statistics.mean(s["bytes_hello"] / 1e6 for s, _ in runs)
        reach_text = _reached_text([bytes_to_reach(lines, target) for _, lines in runs], 1e6, 3)
        rounds_text = _reached_text([rounds_to_reach(lines, target) for _, lines in runs], 1, 1)
        whole = ""
        if full:
            best_full = _mean_std([s["best_accuracy_full"] for s, _ in runs])
            final_full = _mean_std([s["final_accuracy_full"] for s, _ in runs])
            whole = (
                f" {100 * best_full[0]:.2f} ± {100 * best_full[1]:.2f} |"
                f" {100 * final_full[0]:.2f} ± {100 * final_full[1]:.2f} |"
            )
        startup, per_round = timing_columns(runs)
        memory = f" {max(s['peak_rss_mb'] for s, _ in runs):.0f} |" if recipe.isolated else ""
        rows.append(
            f"| {label} | {100 * best[label][0]:.2f} ± {100 * best[label][1]:.2f} | "
            f"{100 * final[0]:.2f} ± {100 * final[1]:.2f} |{whole} {total:.3f} | {hello:.3f} | {reach_text} | "
            f"{rounds_text} | "
            f"{startup:.1f} | {per_round:.1f} |{memory}"
        )
    rows += ["", *per_seed_table(recipe, by_seed, seeds)]
    if recipe.isolated:
        rows += ["", "Mean client accuracy (%) after every round, mean over seeds:", "", *per_round_table(results)]
    if recipe.claims:
        rows += ["", *claims_table(recipe, by_seed)]
    table = "\n".join(rows) + "\n"
    return table


CONTROLS = ("Local", "FD")
"""The simple baselines a claim is held against: Local (no sharing at all) is every claim's control,
and a claim's baseline below either of them is a weak one."""


def claims_table(recipe: Recipe, by_seed: dict[str, dict[int, tuple[dict, list[dict]]]]) -> list[str]:
    """The papers' claims about the recipe's arms, each judged by the rule (`edgefd.claims`), with its
    control: the same test passed by Local in the claim's method's place, where the recipe has a Local arm
    at the claim's setting and the claim says its method is above its baseline (a "below" claim is an
    ablation or a handicap, which Local says nothing about)."""
    rows = [
        "The papers' claims, judged by the rule at the top of this page (mean paired difference over the "
        "seeds in points, its 95% interval, the noise floor); the control is Local in the claim's method's place:",
        "",
        "| claim | source | metric | difference (95% interval) | floor | verdict | per seed | "
        "control: Local - baseline (95% interval) | control's verdict |",
        "|---|---|---|---:|---:|---|---:|---:|---|",
    ]
    notes = []
    for claim in recipe.claims:
        try:
            verdict = judge(claim, by_seed)
        except ValueError as error:  # a run too short for the claim's metric (--rounds for a quick look)
            named = f"| {claim.text} | {claim.source} | {METRIC_NAMES[claim.metric]}"
            rows.append(f"{named} | not judged: {error} |" + " |" * 5)
            continue
        control, control_cells = _control(claim, by_seed)
        rows.append(
            f"| {claim.text} | {claim.source} | {METRIC_NAMES[claim.metric]} | {verdict.difference_text()} | "
            f"{100 * verdict.floor:.2f} | **{verdict.outcome}** | {verdict.per_seed_text()} | {control_cells} |"
        )
        local_passes = control is not None and verdict.outcome == "reproduced" and control.outcome == "reproduced"
        if local_passes:
            notes.append(f"{claim.text}: Local alone passes the same test.")
        stronger = _stronger_simple_baselines(claim, by_seed)
        if local_passes and control is not None:
            stronger = [name for name in stronger if name != control.claim.method]  # said by the control
        if stronger:
            notes.append(f"{claim.text}: the baseline {claim.baseline} is below {' and '.join(stronger)} here.")
    notes += shared_evidence(recipe)
    if notes:
        rows += ["", *[f"- {note}" for note in notes]]
    if recipe.choices:
        rows += ["", "Choices these verdicts rest on:", "", *[f"- {choice}" for choice in recipe.choices]]
    return rows


def run_identity(recipe: Recipe, label: str) -> SimulationConfig:
    """What an arm runs, whatever recipe it belongs to (seeds and folders aside): its config with the
    method's params resolved, so that a param set to its default is the default."""
    from edgefd.algorithms.base import get_method  # torch: not for --help
    from edgefd.algorithms.params import make_params

    arm = next(arm for arm in recipe.arms if arm.label == label)
    params = asdict(make_params(get_method(arm.algo).params, dict(arm.params)))
    return replace(recipe.base, **arm.config, algo=arm.algo, params=params, out="")


def shared_evidence(recipe: Recipe) -> list[str]:
    """The claims whose two arms are the very runs of another recipe's claim: one comparison judged
    in several tables is one piece of evidence, not several."""
    from edgefd.recipes import RECIPES

    notes = []
    for claim in recipe.claims:
        pair = (run_identity(recipe, claim.method), run_identity(recipe, claim.baseline))
        same = [
            f"{other.name}'s {their.text}"
            for other in RECIPES.values()
            if other.name != recipe.name and other.seeds == recipe.seeds
            for their in other.claims
            if their.metric == claim.metric
            and (run_identity(other, their.method), run_identity(other, their.baseline)) == pair
        ]
        if same:
            notes.append(
                f"{claim.text} judges the same runs as {', '.join(same)}: one comparison, not independent evidence."
            )
    return notes


def simple_arm(name: str, claim: Claim, labels: Iterable[str]) -> str | None:
    """The simple baseline ``name`` (Local, FD) at the claim's setting: "Local", or in a sweep "Local
    (alpha 1.0)" beside "FD (alpha 1.0)"; None where the recipe has none, or the claim names it."""
    if any(label == name or label.startswith(f"{name} (") for label in (claim.method, claim.baseline)):
        return None
    labels = set(labels)
    _, opening, suffix = claim.baseline.partition(" (")
    at_point = f"{name} ({suffix}" if opening else None
    if at_point is not None and at_point in labels:
        return at_point
    return name if name in labels else None


def control_label(claim: Claim, labels: Iterable[str]) -> str | None:
    """The claim's control arm: Local at its setting (`simple_arm`), for a claim that its method is above."""
    return simple_arm("Local", claim, labels) if claim.direction == "above" else None


def _control(claim: Claim, by_seed: dict[str, dict[int, tuple[dict, list[dict]]]]) -> tuple[Verdict | None, str]:
    """The claim with its control (`control_label`) in its method's place, and the table's two cells."""
    label = control_label(claim, by_seed)
    if label is None:
        return None, ("no control (a below claim) | -" if claim.direction == "below" else "no Local arm | -")
    try:
        control = judge(replace(claim, method=label), by_seed)
    except ValueError as error:
        return None, f"not judged: {error} | -"
    return control, f"{control.difference_text()} | {control.outcome}"


def _stronger_simple_baselines(claim: Claim, by_seed: dict[str, dict[int, tuple[dict, list[dict]]]]) -> list[str]:
    """The simple baselines (Local, FD) at the claim's setting that the rule finds above the claim's
    baseline on the claim's metric: a claim won against a baseline weaker than them says little."""
    if claim.direction != "above":
        return []
    stronger = []
    for name in CONTROLS:
        label = simple_arm(name, claim, by_seed)
        if label is None or label == claim.method:
            continue
        try:
            outcome = judge(replace(claim, method=label), by_seed).outcome
        except ValueError:
            continue
        if outcome == "reproduced":
            stronger.append(label)
    return stronger
