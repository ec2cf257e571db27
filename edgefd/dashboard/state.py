"""What the page shows, as plain JSON: the run, its devices, its curve.

A state is a dict (the page reads it as JSON, live from ``state.json`` or embedded in a static
page):

    {"run": {"name", "mode", "method", "dataset", "rounds", "clients", "round", "phase",
             "answered", "expected", "seconds_left", "finished"},
     "devices": [{"id", "online", "last_seen_s", "selected", "on_time", "late", "missed",
                  "latency_s", "bytes_up", "bytes_down", "refused": {reason: n}, "score"}],
     "strangers": [{"id", "refused"}],
     "curve": [{"round", "accuracy", "median", "low", "high", "bytes"}]}

``online`` is None where the run has no network (a simulation), ``score`` the device's own
accuracy at its last evaluation (self-reported in a deployment), ``strangers`` the ids that sent
this run messages without being one of its clients (refused). A curve point is a round with an
evaluation: the clients' mean accuracy, their median, lowest and highest (the spread), and the
bytes the run had moved by then, up and down. Built by the commands, which know their run; this
module holds the parts every command shares.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MAX_STRANGERS = 100
"""Strangers the page lists: the ones that sent the most (a flood of made-up ids does not grow it)."""

MAX_ID_CHARS = 200
"""A stranger's id is cut to this many characters: the id is the sender's to choose."""


class RunLines:
    """What the page takes from a run's metrics lines (metrics.jsonl, or the lines so far), kept
    as the lines come: :meth:`update` reads only the lines it has not read, so a live page's poll
    costs the rounds since the last poll, not the whole run again (at 1,000 devices each round's
    line holds 1,000 scores)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.count = 0
        """Lines read."""
        self.curve: list[dict[str, Any]] = []
        """A point per round with an evaluation: the clients' mean accuracy, their median, lowest
        and highest, and the bytes the run had moved by then, up and down."""
        self.scores: dict[str, float] = {}
        """Each client's accuracy at its latest evaluation."""
        self.selected: Counter = Counter()
        """Rounds each client was selected for."""
        self.late: Counter = Counter()
        """Rounds each client's uplink came late."""
        self._moved = 0

    def update(self, lines: Sequence[Mapping[str, Any]]) -> RunLines:
        """Read the lines after the ones already read; ``lines`` shorter than that are another
        history (a server resumed from its checkpoint), read from the start."""
        if len(lines) < self.count:
            self._reset()
        for line in lines[self.count :]:
            self._read(line)
        self.count = len(lines)
        return self

    def _read(self, line: Mapping[str, Any]) -> None:
        self._moved += int(line.get("bytes_up", 0)) + int(line.get("bytes_down", 0))
        self.selected.update(line.get("selected") or ())
        self.late.update(line.get("late") or ())
        claimed = line.get("client_accuracy") or {}
        self.scores.update({cid: float(v) for cid, v in claimed.items()})
        if line.get("accuracy") is None:
            return
        accuracy = float(line["accuracy"])
        scores = [float(v) for v in claimed.values()]
        self.curve.append(
            {
                "round": int(line["round"]),
                "accuracy": accuracy,
                "median": statistics.median(scores) if scores else accuracy,
                "low": min(scores) if scores else accuracy,
                "high": max(scores) if scores else accuracy,
                "bytes": self._moved,
            }
        )


def curve_of(lines: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The curve's points from a run's metrics lines (`RunLines.curve`)."""
    return RunLines().update(list(lines)).curve


def scores_of(lines: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Each client's accuracy at its latest evaluation (`RunLines.scores`)."""
    return RunLines().update(list(lines)).scores


def strangers_of(counts: Mapping[str, int]) -> list[dict[str, Any]]:
    """The strangers the page lists, most refused first, their ids cut to MAX_ID_CHARS."""
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:MAX_STRANGERS]
    return [{"id": cid[:MAX_ID_CHARS], "refused": n} for cid, n in ranked]


def device_row(cid: str, **values: Any) -> dict[str, Any]:
    """One row of the devices table; a value not given is unknown (None), counts are 0."""
    row: dict[str, Any] = {
        "id": cid,
        "online": None,
        "last_seen_s": None,
        "selected": 0,
        "on_time": 0,
        "late": 0,
        "missed": 0,
        "latency_s": None,
        "bytes_up": None,
        "bytes_down": None,
        "refused": {},
        "score": None,
    }
    unknown = set(values) - set(row)
    if unknown:
        raise ValueError(f"device_row: no column {', '.join(sorted(unknown))}")
    row.update(values)
    return row


def finished_state(summary: Mapping[str, Any], lines: Sequence[Mapping[str, Any]], name: str) -> dict[str, Any]:
    """The state of a finished run, from its summary.json and metrics.jsonl (`edgefd report --html`)."""
    scores = scores_of(lines)
    deployment = summary.get("deployment") or {}
    clients: Mapping[str, Mapping[str, Any]] = deployment.get("clients") or {}
    ids = sorted(set(clients) | set(scores) | set(summary.get("models") or {}))
    devices = []
    for cid in ids:
        stats = clients.get(cid, {})
        devices.append(
            device_row(
                cid,
                selected=stats.get("selected", 0),
                on_time=stats.get("on_time", 0),
                late=stats.get("late", 0),
                missed=stats.get("missed", 0),
                latency_s=stats.get("mean_latency_seconds"),
                score=scores.get(cid),
            )
        )
    last = lines[-1] if lines else {}
    return {
        "run": {
            "name": name,
            "mode": "server" if deployment else "simulate",
            "method": summary.get("algo"),
            "dataset": summary.get("dataset"),
            "rounds": summary.get("rounds"),
            "clients": summary.get("clients", len(ids)),
            "round": last.get("round"),
            "phase": "finished",
            "answered": None,
            "expected": None,
            "seconds_left": None,
            "finished": True,
        },
        "devices": devices,
        "strangers": [],
        "curve": curve_of(lines),
    }
