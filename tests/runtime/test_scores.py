"""The robust reading of the clients' scores: the median and the rule that flags a score."""

import math

import pytest

from edgefd.runtime.scores import SUSPECT_EVALUATIONS, SUSPECT_FLOOR, ScoreWatch, away_from_others, median_of


def test_the_median_skips_clients_without_a_score_and_is_nan_without_any():
    assert median_of({"a": 0.2, "b": float("nan"), "c": 0.4, "d": 1.0}) == pytest.approx(0.4)
    assert math.isnan(median_of({"a": float("nan")}))
    assert math.isnan(median_of({}))


def flagged(evaluations):
    watch = ScoreWatch()
    return [sorted(watch.suspects(scores)) for scores in evaluations]


def test_a_score_far_from_the_others_on_one_side_is_flagged_once_it_stayed_there():
    far = {"a": 0.4, "b": 0.4, "c": 0.4 + SUSPECT_FLOOR + 0.01}
    assert flagged([far] * (SUSPECT_EVALUATIONS + 1))[SUSPECT_EVALUATIONS - 2 :] == [[], ["c"], ["c"]]
    low = {"a": 0.8, "b": 0.85, "c": 0.0}  # a lie low is flagged as a lie high is
    assert flagged([low] * SUSPECT_EVALUATIONS)[-1] == ["c"]


def test_honest_spread_under_the_floor_is_not_flagged_even_when_the_others_agree_exactly():
    near = {"a": 0.4, "b": 0.4, "c": 0.4 + SUSPECT_FLOOR - 0.01}
    assert away_from_others("c", near) == (pytest.approx(SUSPECT_FLOOR - 0.01), SUSPECT_FLOOR)
    assert flagged([near] * 5) == [[]] * 5


def test_far_away_on_alternate_sides_is_not_flagged():
    above, below = {"a": 0.5, "b": 0.5, "c": 1.0}, {"a": 0.5, "b": 0.5, "c": 0.0}
    assert flagged([above, below, above, above, below]) == [[]] * 5


def test_the_others_spread_widens_what_counts():
    spread = {"a": 0.2, "b": 0.4, "c": 0.6, "d": 0.8, "e": 1.0}
    distance, counts = away_from_others("e", spread)
    assert distance == pytest.approx(0.5) and counts > distance  # 3 x 1.4826 x MAD 0.2 of a..d
    assert flagged([spread] * 4) == [[]] * 4


def test_with_fewer_than_three_scores_nothing_is_compared():
    assert away_from_others("a", {"a": 1.0, "b": 0.1}) is None
    assert flagged([{"a": 1.0, "b": 0.1}] * 4) == [[]] * 4
