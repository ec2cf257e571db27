"""A client role's messages as the runtime sends them (through its `ClientApp`, at the run's
precision), for tests that look at one message without running a round."""

from __future__ import annotations

from edgefd.algorithms.base import ClientRole
from edgefd.protocol import Payload
from edgefd.protocol.message import SERVER, Message
from edgefd.runtime.verbs import ClientApp


def hello(role: ClientRole) -> Payload | None:
    return ClientApp(role).handle(Message("hello", SERVER, role.client_id, 0)).content


def train_round(role: ClientRole, round: int, downlink: Payload | None) -> Payload | None:
    return ClientApp(role).handle(Message("train", SERVER, role.client_id, round, downlink)).content


def sealed(role: ClientRole, content: Payload) -> Payload:
    """``content`` at the run's precision on the role's knowledge, as the runtime sends it."""
    out = ClientApp(role).at_precision(content)
    assert out is not None
    return out


def first_step_request(role: ClientRole, round: int) -> Payload:
    """The first request of the role's step exchange in ``round``, as sent (the exchange is then closed)."""
    steps = role.train_steps(round)
    request = next(steps)
    steps.close()
    return sealed(role, request)
