"""A paper's claims and the rule that judges them on a reproduction's seeds.

A claim is one comparison its paper makes ("FedCache reaches a higher MAUA than FedAvg", Table 3):
two arms of a recipe, the paper's metric and the paper's direction. The verdict comes from the
per-seed paired differences (same seed: same split, same initial models), never typed by hand.
The rule (Bouthillier et al., "Accounting for Variance in Machine Learning Benchmarks", MLSys 2021:
judge the mean paired difference over seeds against the noise, never a sign):

- the **mean paired difference** with its **95% interval** (Student's t over the seeds,
  `scipy.stats.ttest_1samp`);
- the **noise floor**: the binomial standard error of the metric at the two arms' accuracy on the
  test images it is scored on (each client's test split for the clients' mean, the whole test set
  for a whole-test-set metric), and never less than one test image of the metric. A difference
  inside it is one the test set cannot tell from chance, however many seeds agree;
- **reproduced**: the interval lies wholly in the paper's direction and the mean is beyond the floor;
- **opposite**: the interval lies wholly against it and the mean is beyond the floor;
- **no difference**: the interval lies inside the floor (a tie is a tie);
- **inconclusive**: anything else, and always with fewer than two seeds (no interval).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from scipy import stats

Direction = Literal["above", "below"]
Outcome = Literal["reproduced", "opposite", "no difference", "inconclusive"]


def last_rounds_mean(rounds: int, key: str = "accuracy") -> Any:
    """A metric: the mean client accuracy (``key``: on their own splits, or ``accuracy_full`` on the
    whole test set) averaged over the run's last ``rounds`` rounds (DFL's); round 0, the evaluation
    before training, never counts."""

    def metric(summary: Mapping[str, Any], lines: Sequence[Mapping[str, Any]]) -> float:
        accuracies = [line[key] for line in lines if line["round"] >= 1 and line.get(key) is not None]
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
    "last-5-rounds-whole-test-set": last_rounds_mean(5, "accuracy_full"),
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
    "last-5-rounds-whole-test-set": "mean accuracy of the last 5 rounds on the whole test set",
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


CONFIDENCE = 0.95
"""The interval's level."""

MIN_SEEDS = 5
"""The seeds a recipe runs at least: with fewer, the t interval is so wide that a real gain of a
point or two is rarely called (and with one, there is none)."""

WHOLE_TEST_SET_METRICS = ("best-whole-test-set", "final-whole-test-set", "last-5-rounds-whole-test-set")
"""The metrics scored on the whole test set; the others on each client's own test split."""


def noise_floor(accuracy: float, test_sizes: Sequence[int]) -> float:
    """The smallest difference a mean of accuracies near ``accuracy`` on test sets of ``test_sizes``
    images can resolve: its binomial standard error, sqrt(p (1 - p) * sum(1 / n_i)) / k over the k
    sets, and never less than one image of the smallest set, 1 / (k * min(n_i))."""
    if not test_sizes or min(test_sizes) < 1:
        raise ValueError(f"a noise floor needs test sets of at least one image, got sizes {list(test_sizes)}")
    k = len(test_sizes)
    p = min(max(accuracy, 0.0), 1.0)
    standard_error = math.sqrt(p * (1 - p) * sum(1 / n for n in test_sizes)) / k
    return max(standard_error, 1 / (k * min(test_sizes)))


def scored_test_sizes(metric: str, summary: Mapping[str, Any]) -> list[int]:
    """The test sets ``metric`` is scored on in a run: each client's split, or the whole test set."""
    key = "test_samples_full" if metric in WHOLE_TEST_SET_METRICS else "test_samples"
    if key not in summary:
        raise ValueError(f"the run records no {key} (made before edgefd recorded its test sets): run it again")
    sizes = summary[key]
    return [int(sizes)] if isinstance(sizes, int) else [int(n) for n in sizes.values()]


def mean_interval(differences: Sequence[float]) -> tuple[float, float, float]:
    """The mean of the paired differences and its `CONFIDENCE` interval (Student's t); the interval
    is NaN with one seed and the mean itself when every seed gave the same difference."""
    mean = statistics.fmean(differences)
    if len(differences) < 2:
        return mean, math.nan, math.nan
    if max(differences) == min(differences):
        return mean, mean, mean
    interval = stats.ttest_1samp(differences, 0.0).confidence_interval(CONFIDENCE)
    return mean, float(interval.low), float(interval.high)


def outcome_of(mean: float, low: float, high: float, floor: float, direction: Direction) -> Outcome:
    """The rule (this module's docstring) on a mean paired difference, its interval and the floor."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "inconclusive"
    if -floor <= low and high <= floor:
        return "no difference"
    sign = 1.0 if direction == "above" else -1.0
    lowest, highest = sorted((sign * low, sign * high))
    if lowest > 0 and sign * mean > floor:
        return "reproduced"
    if highest < 0 and sign * mean < -floor:
        return "opposite"
    return "inconclusive"


def points(value: float) -> str:
    return f"{100 * value:+.2f}"


@dataclass(frozen=True)
class Verdict:
    claim: Claim
    seeds: tuple[int, ...]
    differences: tuple[float, ...]
    """Per seed (in `seeds`' order): the method's metric minus the baseline's."""
    mean: float
    low: float
    high: float
    """The mean paired difference and its interval (NaN with one seed)."""
    floor: float
    """The noise floor, averaged over the seeds' test sets."""
    outcome: Outcome

    def difference_text(self) -> str:
        """The mean difference in points and its interval: "+1.20 (-0.31 to +2.71)"."""
        if not math.isfinite(self.low):
            return f"{points(self.mean)} (one seed: no interval)"
        return f"{points(self.mean)} ({points(self.low)} to {points(self.high)})"

    def per_seed_text(self) -> str:
        return " / ".join(points(d) for d in self.differences)


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
    if not method:
        raise ValueError(f"claim {claim.text}: a verdict needs at least one seed")
    metric = METRICS[claim.metric]
    seeds = tuple(sorted(method))
    differences, floors = [], []
    for seed in seeds:
        value, reference = metric(*method[seed]), metric(*baseline[seed])
        if not (math.isfinite(value) and math.isfinite(reference)):
            raise ValueError(f"claim {claim.text}: seed {seed} has no finite {claim.metric} ({value}, {reference})")
        differences.append(value - reference)
        floors.append(noise_floor((value + reference) / 2, scored_test_sizes(claim.metric, method[seed][0])))
    mean, low, high = mean_interval(differences)
    floor = statistics.fmean(floors)
    outcome = outcome_of(mean, low, high, floor, claim.direction)
    return Verdict(claim, seeds, tuple(differences), mean, low, high, floor, outcome)
