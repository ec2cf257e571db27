"""The envelope of a method's messages, put on by the runtime, never by the method: who sent a
payload, in which round, and at which wire precision its knowledge travels.

A method builds its payloads and names, on each role, the arrays that are knowledge
(``ClientRole.knowledge``, ``ServerRole.knowledge``); everything else (weights, ids, labels,
counts) travels losslessly. Simulation and deployment both send what these functions return, so
``--precision`` and the stamps mean the same in both, and a method cannot get either wrong."""

from __future__ import annotations

from collections.abc import Generator, Iterable

from edgefd.algorithms.base import ClientRole, ServerRole
from edgefd.protocol import Payload, at_precision
from edgefd.runtime.records import HELLO_ROUND

SERVER = "server"
"""The sender of every server message."""


def seal(payload: Payload | None, sender: str, round: int, precision: str, knowledge: Iterable[str]) -> Payload | None:
    """``payload`` from ``sender`` in ``round``, its ``knowledge`` arrays at ``precision`` (fp32,
    fp16 or int8; names absent from the payload are skipped). The arrays are not copied."""
    if payload is None:
        return None
    payload = at_precision(payload, precision, knowledge)
    if payload.sender == sender and payload.round == round:
        return payload
    return Payload(payload.kind, sender, round, payload.arrays, payload.scalars, payload.precision)


def from_client(role: ClientRole, payload: Payload | None, round: int) -> Payload | None:
    """A client's message of ``round``, in the run's envelope."""
    return seal(payload, role.client_id, round, role.context.precision, role.knowledge)


def from_server(role: ServerRole, payload: Payload | None, round: int) -> Payload | None:
    """The server's message of ``round``, in the run's envelope."""
    return seal(payload, SERVER, round, role.context.precision, role.knowledge)


def hello(role: ClientRole) -> Payload | None:
    """The client's one-time upload (round 0)."""
    return from_client(role, role.hello(), HELLO_ROUND)


def train_round(role: ClientRole, round: int, downlink: Payload | None) -> Payload | None:
    """The client's round of local training, and its uplink in the envelope."""
    return from_client(role, role.train_round(round, downlink), round)


def receive_reply(role: ClientRole, round: int, reply: Payload) -> None:
    """The client learns from the server's post-aggregation reply of ``round`` (nothing goes back
    but the runtime's acknowledgement)."""
    role.receive_reply(round, reply)


def train_steps(role: ClientRole, round: int) -> Generator[Payload, Payload, Payload | None]:
    """The client's step exchange (``ClientRole.train_steps``) with every request and the final
    uplink in the envelope; the server's answers go in unchanged."""
    steps = role.train_steps(round)
    reply: Payload | None = None
    while True:
        try:
            # next() is send(None), the only value a generator can be started with.
            request = next(steps) if reply is None else steps.send(reply)
        except StopIteration as finished:
            return from_client(role, finished.value, round)
        sealed = from_client(role, request, round)
        assert sealed is not None  # a request is a payload
        reply = yield sealed
