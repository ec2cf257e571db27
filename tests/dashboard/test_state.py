"""The page's data: the curve, the devices' rows, the strangers, a finished run's state."""

from __future__ import annotations

import pytest

from edgefd.dashboard.state import (
    MAX_ID_CHARS,
    MAX_STRANGERS,
    RunLines,
    curve_of,
    device_row,
    finished_state,
    strangers_of,
)


def _line(round: int, accuracy: float | None, scores: dict[str, float], up: int = 100, down: int = 50) -> dict:
    return {"round": round, "accuracy": accuracy, "client_accuracy": scores, "bytes_up": up, "bytes_down": down}


def test_the_curve_has_a_point_per_evaluated_round_with_the_bytes_moved_by_then():
    lines = [
        _line(0, None, {}, up=10, down=0),  # the hellos: bytes, no evaluation
        _line(1, 0.5, {"a": 0.2, "b": 0.5, "c": 0.8}),
        _line(2, None, {}),  # a round without evaluation still moves bytes
        _line(3, 0.7, {"a": 0.6, "b": 0.9, "c": 0.6}),
    ]
    points = curve_of(lines)
    assert [p["round"] for p in points] == [1, 3]
    assert points[0] == {"round": 1, "accuracy": 0.5, "median": 0.5, "low": 0.2, "high": 0.8, "bytes": 160}
    assert points[1]["bytes"] == 10 + 3 * 150
    assert (points[1]["low"], points[1]["median"], points[1]["high"]) == (0.6, 0.6, 0.9)


def test_a_round_without_client_scores_is_its_own_spread():
    (point,) = curve_of([_line(1, 0.4, {})])
    assert point["low"] == point["median"] == point["high"] == 0.4


def test_strangers_are_the_most_refused_first_bounded_and_cut():
    counts = {f"x{i:04d}": i for i in range(MAX_STRANGERS + 50)}
    counts["y" * 5000] = 10_000
    listed = strangers_of(counts)
    assert len(listed) == MAX_STRANGERS
    assert listed[0] == {"id": "y" * MAX_ID_CHARS, "refused": 10_000}
    assert listed[1]["id"] == f"x{MAX_STRANGERS + 49:04d}"


def test_a_device_row_has_every_column_and_refuses_a_made_up_one():
    row = device_row("client-0", online=True)
    assert row["online"] is True and row["selected"] == 0 and row["score"] is None and row["refused"] == {}
    with pytest.raises(ValueError, match="no column colour"):
        device_row("client-0", colour="red")


def test_a_finished_deployment_shows_its_devices_records_and_last_scores():
    summary = {
        "algo": "fd",
        "dataset": "digits",
        "rounds": 2,
        "clients": 2,
        "models": {"client-0": "m", "client-1": "m"},
        "deployment": {
            "clients": {
                "client-0": {"selected": 2, "on_time": 2, "late": 0, "missed": 0, "mean_latency_seconds": 0.5},
                "client-1": {"selected": 2, "on_time": 1, "late": 1, "missed": 1, "mean_latency_seconds": 2.0},
            }
        },
    }
    lines = [_line(0, None, {}), _line(1, 0.5, {"client-0": 0.4, "client-1": 0.6}), _line(2, 0.7, {"client-0": 0.9})]
    state = finished_state(summary, lines, "demo")
    assert state["run"]["mode"] == "server" and state["run"]["finished"] and state["run"]["round"] == 2
    rows = {row["id"]: row for row in state["devices"]}
    assert rows["client-0"]["score"] == 0.9 and rows["client-1"]["score"] == 0.6  # each one's latest
    assert rows["client-1"]["late"] == 1 and rows["client-1"]["latency_s"] == 2.0
    assert len(state["curve"]) == 2


def test_a_finished_simulation_lists_its_clients_from_its_models():
    models = {"c0": "m", "c1": "m", "c2": "m"}
    summary = {"algo": "fd", "dataset": "digits", "rounds": 1, "clients": 3, "models": models}
    state = finished_state(summary, [_line(1, 0.5, {"c0": 0.5})], "sim")
    assert state["run"]["mode"] == "simulate"
    assert [row["id"] for row in state["devices"]] == ["c0", "c1", "c2"]


def test_the_lines_are_read_once_each_and_again_from_the_start_for_another_history():
    """A live page's poll reads only the lines written since the last; lines fewer than those read
    are another history (a server resumed from its checkpoint) and are read from the start."""
    lines = [_line(1, 0.4, {"client-0": 0.3, "client-1": 0.5}), _line(2, 0.6, {"client-0": 0.7})]
    history = RunLines().update(lines[:1])
    assert [p["round"] for p in history.curve] == [1] and history.scores == {"client-0": 0.3, "client-1": 0.5}
    read = []
    counting = [_Counted(line, read) for line in lines]
    history.update(counting)
    assert read == [2]  # line 1 was not read again
    assert history.curve == curve_of(lines) and history.scores == {"client-0": 0.7, "client-1": 0.5}
    history.update(lines[:1])
    assert history.curve == curve_of(lines[:1]) and history.count == 1


class _Counted(dict):
    """A metrics line that notes its round in ``read`` when its scores are read."""

    def __init__(self, line, read):
        super().__init__(line)
        self.read = read

    def get(self, key, default=None):
        if key == "client_accuracy":
            self.read.append(self["round"])
        return super().get(key, default)
