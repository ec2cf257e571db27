"""edgefd.claims: the verdict rule on paired seeds (the interval, the noise floor, the four outcomes),
and the refusals that keep a verdict honest."""

import math

import pytest
from scipy import stats

from edgefd.claims import Claim, judge, mean_interval, noise_floor, outcome_of

SPLITS = {f"c{k}": 1000 for k in range(10)}
"""Ten clients of 1,000 test images: a floor of about 0.1 points near 90% accuracy."""


def run(best, final=None, accuracies=(), test_samples=None):
    summary = {
        "best_accuracy": best,
        "final_accuracy": best if final is None else final,
        "test_samples": SPLITS if test_samples is None else test_samples,
        "test_samples_full": 10_000,
    }
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


def paired(differences, reference=0.80, test_samples=None):
    """Runs whose paired differences (method minus baseline) are ``differences``, seed by seed."""
    return {
        "FedCache": {s: run(reference + d, test_samples=test_samples) for s, d in enumerate(differences)},
        "Local": {s: run(reference, test_samples=test_samples) for s in range(len(differences))},
    }


def test_the_floor_is_the_binomial_standard_error_and_never_under_one_image():
    # one test set of 400 images at 90%: sqrt(0.09 / 400) = 1.5 points
    assert math.isclose(noise_floor(0.9, [400]), 0.015)
    # 20 clients of 16 to 19 images at 97% (DFL on digits): about 0.9 points, three images' worth
    sizes = [16, 17, 18, 19] * 5
    expected = math.sqrt(0.97 * 0.03 * sum(1 / n for n in sizes)) / 20
    assert math.isclose(noise_floor(0.97, sizes), expected) and 0.008 < expected < 0.010
    # a perfect score has no binomial error: the floor is one image of the smallest split
    assert math.isclose(noise_floor(1.0, sizes), 1 / (20 * 16))
    with pytest.raises(ValueError, match="at least one image"):
        noise_floor(0.9, [0, 10])


def test_the_interval_is_students_t_over_the_seeds():
    differences = [0.02, 0.01, 0.03, 0.015, 0.025]
    mean, low, high = mean_interval(differences)
    half = stats.t.ppf(0.975, 4) * stats.sem(differences)
    assert math.isclose(mean, 0.02) and math.isclose(low, 0.02 - half) and math.isclose(high, 0.02 + half)
    assert mean_interval([0.0, 0.0, 0.0]) == (0.0, 0.0, 0.0)  # every seed the same: no spread
    mean, low, high = mean_interval([0.01])
    assert mean == 0.01 and math.isnan(low) and math.isnan(high)


@pytest.mark.parametrize(
    ("mean", "low", "high", "direction", "outcome"),
    [
        (0.02, 0.01, 0.03, "above", "reproduced"),
        (-0.02, -0.03, -0.01, "below", "reproduced"),
        (-0.02, -0.03, -0.01, "above", "opposite"),
        (0.02, 0.01, 0.03, "below", "opposite"),
        (0.001, -0.004, 0.004, "above", "no difference"),  # inside a 0.5-point floor: a tie is a tie
        (0.0, 0.0, 0.0, "above", "no difference"),
        (0.02, -0.01, 0.05, "above", "inconclusive"),  # the interval holds 0
        (0.004, 0.001, 0.007, "above", "inconclusive"),  # significant, but the mean is inside the floor
        (0.02, math.nan, math.nan, "above", "inconclusive"),  # one seed
    ],
)
def test_the_four_outcomes(mean, low, high, direction, outcome):
    assert outcome_of(mean, low, high, 0.005, direction) == outcome


def test_three_seeds_of_one_sign_are_not_enough_for_a_small_gain():
    # the old rule (the sign of every seed) called this reproduced; the interval holds 0
    verdict = judge(claim(), paired([0.002, 0.012, 0.004]))
    assert verdict.outcome == "inconclusive" and verdict.low < 0 < verdict.high


def test_a_gain_inside_the_floor_is_no_difference_however_consistent():
    small = {f"c{k}": 18 for k in range(20)}  # DFL on digits: about 0.9 points near 97%
    verdict = judge(claim(), paired([0.0001, 0.0012, 0.0005, 0.0008, 0.0003], 0.97, small))
    assert 0.008 < verdict.floor < 0.010
    assert verdict.outcome == "no difference"


def test_a_tie_is_a_tie():
    assert judge(claim(), paired([0.0, 0.0, 0.0, 0.0, 0.0])).outcome == "no difference"


def test_a_verdict_pairs_seeds_and_keeps_their_differences():
    runs = {"FedCache": {0: run(0.80), 2: run(0.70), 1: run(0.75)}, "Local": {1: run(0.76), 0: run(0.78), 2: run(0.69)}}
    verdict = judge(claim(), runs)
    assert verdict.seeds == (0, 1, 2)
    assert [round(d, 6) for d in verdict.differences] == [0.02, -0.01, 0.01]
    assert verdict.outcome == "inconclusive"
    assert verdict.per_seed_text() == "+2.00 / -1.00 / +1.00"
    assert verdict.difference_text() == f"+0.67 ({100 * verdict.low:+.2f} to {100 * verdict.high:+.2f})"


def test_the_metric_is_the_claims_and_so_is_its_test_set():
    def scored(best, final, spread):
        summary, lines = run(best, final=final)
        return {**summary, "final_accuracy_full": final + spread}, lines

    both = {
        "FedCache": {s: scored(0.9, 0.5, 0.0) for s in range(5)},
        "Local": {s: scored(0.8 + s / 1000, 0.6, 0.0) for s in range(5)},
    }
    assert judge(claim(metric="best"), both).outcome == "reproduced"
    assert judge(claim(metric="final"), both).outcome == "opposite"
    # the clients' mean over 10 splits of 1,000 images and one set of 10,000 have the same error
    clients = judge(claim(metric="final"), both).floor
    assert judge(claim(metric="final-whole-test-set"), both).floor == pytest.approx(clients)
    for arm in both.values():
        for summary, _ in arm.values():
            summary["test_samples_full"] = 400
    assert judge(claim(metric="final-whole-test-set"), both).floor == pytest.approx(noise_floor(0.55, [400]))


def test_the_last_rounds_on_the_whole_test_set_are_judged_on_it():
    def scored(full):
        summary, lines = run(0.9, accuracies=[0.9] * len(full))
        return summary, [{**line, "accuracy_full": value} for line, value in zip(lines, [0.1, *full])]

    runs = {
        "FedCache": {s: scored([0.5] * 4 + [0.6 + s / 1000] * 5) for s in range(5)},
        "Local": {s: scored([0.9] * 4 + [0.5] * 5) for s in range(5)},
    }
    verdict = judge(claim(metric="last-5-rounds-whole-test-set"), runs)
    assert verdict.mean == pytest.approx(0.102) and verdict.outcome == "reproduced"
    assert verdict.floor == pytest.approx(noise_floor(0.551, [10_000]), rel=1e-3)


def test_a_run_without_its_test_sets_is_not_judged():
    runs = paired([0.01, 0.02])
    for arm in runs.values():
        for summary, _ in arm.values():
            del summary["test_samples"]
    with pytest.raises(ValueError, match="records no test_samples"):
        judge(claim(), runs)


def test_the_mean_of_the_last_rounds_skips_round_zero():
    runs = {
        "FedCache": {0: run(0.9, accuracies=[0.1, 0.5, 0.5, 0.5, 0.5, 0.5])},
        "Local": {0: run(0.9, accuracies=[0.9, 0.4, 0.4, 0.4, 0.4, 0.4])},
    }
    verdict = judge(claim(metric="last-5-rounds"), runs)
    assert math.isclose(verdict.differences[0], 0.1) and verdict.outcome == "inconclusive"  # one seed
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
