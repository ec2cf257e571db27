"""The deployment's own messages, beside the method's payloads: run config, requests, status.

The server drives a deployed run by *requests*: on `down/<client>/<verb>` it sends the method's
payload for that client (hello: nothing; train: the downlink; eval: the evaluation state), or an
"empty" payload when the method has none, always stamped with the round. The client answers on
`up/<client>/<verb>` with the method's payload or "empty", and "metrics" for eval. Requests may be
repeated (after a reconnection or a restart): both sides handle repeats idempotently.

A method that exchanges during training (FedCache's ``exchange=batch``) gets a ``steps`` request
instead of ``train``: the client trains, and for each of its training steps sends the method's
request on `up/<client>/step`, numbered by a ``STEP`` scalar (1, 2, ...), and waits for the
server's answer to that number on `down/<client>/step`; its final uplink answers ``steps``.

A method whose server answers the round's uplinks after aggregating them (``ServerRole.reply``:
FedD2S) sends that answer on `down/<client>/reply`, stamped with the round; the client learns from
it and answers "empty" on `up/<client>/reply` (an acknowledgement, before the round's evaluation).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any

from edgefd.protocol import Payload
from edgefd.runtime import envelope

SERVER = envelope.SERVER
EMPTY = "empty"
CONFIG = "config"
STATUS = "status"
METRICS = "metrics"
STOP = "stop"
ONLINE = "online"
OFFLINE = "offline"
STEP = "_step"
"""The scalar that numbers a client's step requests and the server's answers within a round."""
AGAIN = "again"
"""The kind of a request to send an answer again from the client's cache (nothing is recomputed)."""


def empty(sender: str, round: int) -> Payload:
    """Stands for a method's None: the other side gets None."""
    return Payload(EMPTY, sender, round)


def or_empty(payload: Payload | None, sender: str, round: int) -> Payload:
    return empty(sender, round) if payload is None else payload


def stamped(payload: Payload | None, sender: str, round: int) -> Payload:
    """A request or answer for `round` carrying the method's payload (or "empty"). The round is the
    runtime's address of the message: a method payload stamped with another round (FedAvg's
    evaluation state says 0) travels with the message's round instead (same size; the arrays are
    not copied)."""
    if payload is None:
        return empty(sender, round)
    if payload.round == round:
        return payload
    return Payload(payload.kind, payload.sender, round, payload.arrays, payload.scalars, payload.precision)


def request(payload: Payload | None, round: int) -> Payload:
    return stamped(payload, SERVER, round)


def again(round: int) -> Payload:
    """The server's "send your answer to this request again": a few bytes where the request itself
    may carry a whole model. A client answers it only from its cache."""
    return Payload(AGAIN, SERVER, round)


def numbered(payload: Payload, sender: str, round: int, step: int) -> Payload:
    """A step request or answer: the method's payload, stamped, with its step number."""
    stamp = stamped(payload, sender, round)
    return Payload(stamp.kind, stamp.sender, round, stamp.arrays, {**stamp.scalars, STEP: step}, stamp.precision)


def step_of(payload: Payload) -> tuple[int, Payload]:
    """The step number of a step message, and the method's payload without it (ValueError if unnumbered)."""
    step = payload.scalars.get(STEP)
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"a step message needs an integer {STEP} >= 1, got {step!r}")
    scalars = {k: v for k, v in payload.scalars.items() if k != STEP}
    return step, Payload(payload.kind, payload.sender, payload.round, payload.arrays, scalars, payload.precision)


def unwrap(payload: Payload) -> Payload | None:
    return None if payload.kind == EMPTY else payload


def config_payload(config: Any, round: int = -1) -> Payload:
    """The run's resolved config (a SimulationConfig), as JSON: every client builds from it."""
    return Payload(CONFIG, SERVER, round, scalars={"json": json.dumps(asdict(config), sort_keys=True)})


def config_from_payload(payload: Payload) -> dict[str, Any]:
    text = payload.scalars.get("json")
    if payload.kind != CONFIG or not isinstance(text, str):
        raise ValueError(f"expected a config payload, got kind {payload.kind!r}")
    values = json.loads(text)
    if not isinstance(values, dict):
        raise ValueError("config payload: the JSON is not an object")
    return values


def status_payload(client_id: str, state: str, last_round: int = -1) -> Payload:
    return Payload(STATUS, client_id, -1, scalars={"state": state, "last_round": last_round})


def metrics_payload(client_id: str, round: int, metrics: dict[str, float]) -> Payload:
    return Payload(METRICS, client_id, round, scalars={k: float(v) for k, v in metrics.items()})


def accuracy_of(payload: Payload) -> float:
    """The accuracy an eval answer reports: a float in [0, 1], or NaN (a client with no test data).
    ValueError for anything else (text, Inf, 1.7): it would crash or skew the round's mean."""
    value = payload.scalars.get("accuracy")
    if payload.kind != METRICS or isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"an eval answer needs a numeric accuracy, got kind {payload.kind!r}, {value!r}")
    if not (math.isnan(value) or 0.0 <= value <= 1.0):
        raise ValueError(f"accuracy {value!r} is outside [0, 1]")
    return float(value)
