"""edgefd.claims: the verdict rule on paired seeds, and the refusals that keep a verdict honest."""

import math

import pytest

from edgefd.claims import Claim, judge, label_of


def run(best, final=None, accuracies=()):
    summary = {"best_accuracy": best, "final_accuracy": best if final is None else final}
    lines = [{"round": 0, "accuracy": 0.1}] + [{"round": r, "accuracy": a} for r, a in enumerate(accuracies, 1)]
    return summary, lines


def claim(**changes):
    return Claim(
        **{
            "method": "FedCache",
            "direction": "above",
            "baseline": "Local",
            "metric": "best",
            "source": "FedCache, Table 3",
            **changes,
        }
    )


@pytest.mark.parametrize(
    ("differences", "direction", "label"),
    [
        ((0.02, 0.01, 0.03), "above", "reproduced"),
        ((-0.02, -0.01, -0.03), "above", "not reproduced"),
        ((0.0, -0.01, 0.0), "above", "not reproduced"),
        ((0.0285, 0.0285, -0.005), "above", "inconclusive"),
        ((0.02, 0.0, 0.03), "above", "inconclusive"),
        ((-0.02, -0.01), "below", "reproduced"),
        ((0.02, 0.01), "below", "not reproduced"),
    ],
)
def test_the_rule(differences, direction, label):
    assert label_of(differences, direction) == label


def test_a_verdict_pairs_seeds_and_keeps_their_differences():
    runs = {"FedCache": {0: run(0.80), 2: run(0.70), 1: run(0.75)}, "Local": {1: run(0.76), 0: run(0.78), 2: run(0.69)}}
    verdict = judge(claim(), runs)
    assert verdict.seeds == (0, 1, 2)
    assert [round(d, 6) for d in verdict.differences] == [0.02, -0.01, 0.01]
    assert verdict.label == "inconclusive"
    assert verdict.line() == (
        "**FedCache above Local** (best accuracy (MAUA); FedCache, Table 3): **inconclusive**, "
        "per seed 0, 1, 2: +2.00 / -1.00 / +1.00 points"
    )


def test_the_metric_is_the_claims():
    runs = {"FedCache": {0: run(0.9, final=0.5)}, "Local": {0: run(0.8, final=0.6)}}
    assert judge(claim(metric="best"), runs).label == "reproduced"
    assert judge(claim(metric="final"), runs).label == "not reproduced"


def test_the_mean_of_the_last_rounds_skips_round_zero():
    runs = {
        "FedCache": {0: run(0.9, accuracies=[0.1, 0.5, 0.5, 0.5, 0.5, 0.5])},
        "Local": {0: run(0.9, accuracies=[0.9, 0.4, 0.4, 0.4, 0.4, 0.4])},
    }
    verdict = judge(claim(metric="last-5-rounds"), runs)
    assert math.isclose(verdict.differences[0], 0.1) and verdict.label == "reproduced"
    with pytest.raises(ValueError, match="needs 5 evaluated rounds, got 2"):
        judge(
            claim(metric="last-5-rounds"),
            {"FedCache": {0: run(0.9, accuracies=[0.1, 0.2])}, "Local": {0: run(0.9, accuracies=[0.1, 0.2])}},
        )


@pytest.mark.parametrize(
    ("runs", "message"),
    [
        ({"FedCache": {0: run(0.9)}}, "no arm 'Local'"),
        ({"FedCache": {0: run(0.9), 1: run(0.9)}, "Local": {0: run(0.8)}}, "different seeds"),
        ({"FedCache": {0: run(math.nan)}, "Local": {0: run(0.8)}}, "no finite best"),
        ({"FedCache": {}, "Local": {}}, "at least one seed"),
    ],
)
def test_a_verdict_that_cannot_be_paired_is_refused(runs, message):
    with pytest.raises(ValueError, match=message):
        judge(claim(), runs)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"direction": "higher"}, "direction"),
        ({"metric": "auc"}, "unknown metric"),
        ({"baseline": "FedCache"}, "itself"),
    ],
)
def test_a_malformed_claim_is_refused_by_name(changes, message):
    with pytest.raises(ValueError, match=message):
        claim(**changes)
