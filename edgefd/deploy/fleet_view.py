"""A deployed run as its page shows it (`edgefd.dashboard.state`): the server's view of its fleet.

Made on the dashboard's thread while the run goes on: it only reads, and copies what another
thread may change (the transport's counters under their lock, dicts whole) before it iterates.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from edgefd.dashboard.state import RunLines, device_row, strangers_of
from edgefd.deploy.server_runtime import ServerRuntime


def fleet_state(runtime: ServerRuntime, history: RunLines | None = None) -> dict[str, Any]:
    """The page's state of ``runtime``'s run, now. ``history``: what the last poll read of the
    run's lines (a live page passes the same one every time: `fleet_page`)."""
    channel, config = runtime.channel, runtime.config
    lines = list(runtime.writer.lines) if runtime.writer is not None else []
    history = (history or RunLines()).update(lines)
    peers = channel.endpoint.peers()
    pending: dict[str, Counter] = {}
    for (cid, _verb, reason), n in peers.refused_pending.items():
        pending.setdefault(cid, Counter())[reason] += n
    now = time.monotonic()
    last_seen = dict(channel.last_seen)
    scores = history.scores
    devices = []
    for cid, stats in list(channel.stats.items()):
        latency = list(stats.latency_seconds)
        seen = last_seen.get(cid)
        devices.append(
            device_row(
                cid,
                online=stats.online,
                last_seen_s=None if seen is None else round(now - seen, 1),
                selected=stats.selected,
                on_time=stats.on_time,
                late=stats.late,
                missed=stats.missed,
                latency_s=round(sum(latency) / len(latency), 3) if latency else None,
                bytes_up=peers.bytes_from.get(cid, 0),
                bytes_down=peers.bytes_to.get(cid, 0),
                refused=_refused(channel.refusals.get(cid), pending.get(cid)),
                score=scores.get(cid),
            )
        )
    phase = channel.phase
    round_: int | None
    answered: int | None
    expected: int | None
    if phase is not None:
        start = phase.active_at if phase.asks and phase.active_at else phase.sent_at
        left: float | None = max(0.0, min(start + phase.timeout, phase.ends_at) - now)
        round_, verb, answered, expected = phase.round, phase.verb, len(phase.got), len(phase.expected)
    else:
        left, answered, expected = None, None, None
        round_ = lines[-1]["round"] if lines else None
        verb = "finished" if runtime.finished else ("between rounds" if lines else "starting")
    return {
        "run": {
            "name": runtime.settings.run,
            "mode": "server",
            "method": config.algo,
            "dataset": config.dataset,
            "rounds": config.rounds,
            "clients": config.clients,
            "round": round_,
            "phase": verb,
            "answered": answered,
            "expected": expected,
            "seconds_left": None if left is None else round(left, 1),
            "finished": runtime.finished,
        },
        "devices": devices,
        "strangers": strangers_of(peers.unexpected_senders),
        "curve": list(history.curve),
    }


def fleet_page(runtime: ServerRuntime) -> Callable[[], dict[str, Any]]:
    """The live page's snapshot of ``runtime``'s run (`edgefd.dashboard.DashboardServer` calls it
    one poll at a time): each poll reads only the rounds written since the last."""
    history = RunLines()
    return lambda: fleet_state(runtime, history)


def _refused(counted: dict[str, int] | None, pending: Counter | None) -> dict[str, int]:
    """A device's refusals by reason: those the channel counted and those still pending in the
    transport (most devices have none: no Counter is built for them)."""
    if not pending:
        return dict(counted) if counted else {}
    return dict(Counter(counted or {}) + pending)
