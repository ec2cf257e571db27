"""The robust reading of the clients' scores: the median and the rule that flags a score."""

import math

import pytest

from edgefd.runtime.scores import (
    SUSPECT_FLOOR,
    SUSPECT_JUMP,
    away_from_others,
    jump_beyond_others,
    median_of,
    suspect_scores,
)


def test_the_median_skips_clients_without_a_score_and_is_nan_without_any():
    assert median_of({"a": 0.2, "b": float("nan"), "c": 0.4, "d": 1.0}) == pytest.approx(0.4)
    assert math.isnan(median_of({"a": float("nan")}))
    assert math.isnan(median_of({}))


def test_honest_spread_under_the_floor_is_not_flagged_even_when_the_others_agree_exactly():
    scores = {"a": 0.6, "b": 0.6, "c": 0.6 + SUSPECT_FLOOR - 0.01}
    assert away_from_others("c", scores) == (pytest.approx(SUSPECT_FLOOR - 0.01), SUSPECT_FLOOR)
    assert suspect_scores(scores, {}) == {}
    assert list(suspect_scores({**scores, "c": 0.6 + SUSPECT_FLOOR + 0.01}, {})) == ["c"]


def test_a_lie_low_is_flagged_as_a_lie_high_is():
    assert list(suspect_scores({"a": 0.8, "b": 0.85, "c": 0.0}, {})) == ["c"]


def test_with_fewer_than_three_scores_nothing_is_compared_with_the_others():
    assert away_from_others("a", {"a": 1.0, "b": 0.1}) is None
    assert suspect_scores({"a": 1.0, "b": 0.1}, {}) == {}


def test_the_jump_is_measured_against_the_others_median_move():
    previous = {"a": 0.1, "b": 0.1, "c": 0.1}
    assert jump_beyond_others("c", {"a": 0.5, "b": 0.5, "c": 0.6}, previous) == pytest.approx(0.1)
    assert jump_beyond_others("c", {"a": 0.5, "c": 0.6}, {"c": 0.1}) is None  # no other has a history
    leap = {"a": 0.1, "b": 0.12, "c": 0.1 + SUSPECT_JUMP + 0.05}
    assert "beyond the others' median move" in suspect_scores(leap, previous)["c"]
