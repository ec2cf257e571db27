"""A paper's claims and the rule that judges them on a reproduction's seeds.

A claim is one comparison its paper makes ("FedCache reaches a higher MAUA than FedAvg", Table 3):
two arms of a recipe, the paper's metric and the paper's direction. The verdict comes from the
per-seed paired differences (same seed: same split, same initial models), never typed by hand:

- **reproduced**: the difference lies in the paper's direction on every seed;
- **not reproduced**: it lies against it, or is zero, on every seed;
- **inconclusive**: the seeds disagree.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Direction = Literal["above", "below"]
Label = Literal["reproduced", "not reproduced", "inconclusive"]


def last_rounds_mean(rounds: int) -> Any:
    """A metric: the mean client accuracy averaged over the run's last ``rounds`` rounds (DFL's);
    round 0, the evaluation before training, never counts."""

    def metric(summary: Mapping[str, Any], lines: Sequence[Mapping[str, Any]]) -> float:
        accuracies = [line["accuracy"] for line in lines if line["round"] >= 1 and line.get("accuracy") is not None]
        if len(accuracies) < rounds:
            raise ValueError(
                f"the mean of the last {rounds} rounds needs {rounds} evaluated rounds, got {len(accuracies)}"
            )
        return statistics.fmean(accuracies[-rounds:])

    return metric


METRICS: dict[str, Any] = {
    "best": lambda summary, lines: summary["best_accuracy"],
    "final": lambda summary, lines: summary["final_accuracy"],
    "best-whole-test-set": lambda summary, lines: summary["best_accuracy_full"],
    "final-whole-test-set": lambda summary, lines: summary["final_accuracy_full"],
    "last-5-rounds": last_rounds_mean(5),
    "last-10-rounds": last_rounds_mean(10),
}
"""The metrics a claim may name: "best" is the maximum over rounds of the mean client accuracy (the
papers' MAUA); "final" the last round's; "whole test set" the same on the whole test set."""

METRIC_NAMES = {
    "best": "best accuracy (MAUA)",
    "final": "final accuracy",
    "best-whole-test-set": "best accuracy on the whole test set",
    "final-whole-test-set": "final accuracy on the whole test set",
    "last-5-rounds": "mean accuracy of the last 5 rounds",
    "last-10-rounds": "mean accuracy of the last 10 rounds",
}


@dataclass(frozen=True)
class Claim:
    """One comparison a paper makes, in its own terms."""

    method: str
    """The arm the paper says is better (or worse): a recipe arm's label."""
    direction: Direction
    baseline: str
    """The arm it is compared with."""
    metric: str
    """A key of `METRICS`: the paper's metric, or the one closest to it that a run records."""
    source: str
    """Where the paper makes it: "FedCache, Table 3", "DFL, Fig. 4"."""

    def __post_init__(self) -> None:
        if self.direction not in ("above", "below"):
            raise ValueError(f"claim {self.text}: direction must be 'above' or 'below', got {self.direction!r}")
        if self.metric not in METRICS:
            raise ValueError(f"claim {self.text}: unknown metric {self.metric!r}; known: {', '.join(METRICS)}")
        if self.method == self.baseline:
            raise ValueError(f"claim {self.text}: compares an arm with itself")

    @property
    def text(self) -> str:
        return f"{self.method} {self.direction} {self.baseline}"


@dataclass(frozen=True)
class Verdict:
    claim: Claim
    seeds: tuple[int, ...]
    differences: tuple[float, ...]
    """Per seed (in `seeds`' order): the method's metric minus the baseline's."""
    label: Label

    def line(self) -> str:
        """One line for a results table: the claim, its source, the paired differences in points."""
        points = " / ".join(f"{100 * d:+.2f}" for d in self.differences)
        return (
            f"**{self.claim.text}** ({METRIC_NAMES[self.claim.metric]}; {self.claim.source}): "
            f"**{self.label}**, per seed {', '.join(map(str, self.seeds))}: {points} points"
        )


def label_of(differences: Sequence[float], direction: Direction) -> Label:
    """The rule: the paper's direction on every seed, against it on every seed, or neither."""
    if not differences:
        raise ValueError("a verdict needs at least one seed")
    sign = 1.0 if direction == "above" else -1.0
    if all(sign * d > 0 for d in differences):
        return "reproduced"
    if all(sign * d <= 0 for d in differences):
        return "not reproduced"
    return "inconclusive"


def judge(
    claim: Claim, runs: Mapping[str, Mapping[int, tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]]]]
) -> Verdict:
    """The verdict on ``claim`` from ``runs``: arm label -> seed -> (summary, metrics lines). Seeds
    are paired, so both arms must have run the same ones."""
    for label in (claim.method, claim.baseline):
        if label not in runs:
            raise ValueError(f"claim {claim.text}: no arm {label!r} in the runs (arms: {', '.join(runs)})")
    method, baseline = runs[claim.method], runs[claim.baseline]
    if set(method) != set(baseline):
        raise ValueError(
            f"claim {claim.text}: the arms ran different seeds ({sorted(method)} against {sorted(baseline)}); "
            "a paired difference needs both on each seed"
        )
    metric = METRICS[claim.metric]
    seeds = tuple(sorted(method))
    differences = []
    for seed in seeds:
        value, reference = metric(*method[seed]), metric(*baseline[seed])
        if not (math.isfinite(value) and math.isfinite(reference)):
            raise ValueError(f"claim {claim.text}: seed {seed} has no finite {claim.metric} ({value}, {reference})")
        differences.append(value - reference)
    return Verdict(claim, seeds, tuple(differences), label_of(differences, claim.direction))
