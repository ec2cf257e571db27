"""How the round loop reaches the clients: the generic `Channel`, and the in-process channel of a
simulation.

The loop (:class:`edgefd.runtime.loop.Federation`) selects, draws, aggregates, evaluates and
records; a channel only carries messages to the clients and brings back the answers that came in
time, and counts the bytes it carried. It knows no phase of a round: a message's verb says what
the client is asked, and :class:`edgefd.runtime.verbs.ClientApp` answers it wherever the client
runs. A simulation's channel calls the clients in this process (`InProcessChannel`); a
deployment's sends the same messages over MQTT (`edgefd.deploy.mqtt_channel.MqttChannel`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from edgefd.protocol.errors import ProtocolError
from edgefd.protocol.message import Message
from edgefd.runtime.records import RoundRecord
from edgefd.runtime.transport import DOWN, UP, ByteLedger, InProcessTransport
from edgefd.runtime.verbs import ClientApp, Deadline

# Types only: `edgefd server --help` reaches this module through the MQTT channel, and torch is slow to import.
if TYPE_CHECKING:
    import torch

    from edgefd.algorithms.base import ClientRole
    from edgefd.runtime.attack import Poisoning

log = logging.getLogger(__name__)

Serve = Callable[[Message], Message]
"""The server's answer to a request a client makes during its work (a ``step``)."""


class Channel(Protocol):
    """The clients of a run, as the loop sees them."""

    client_ids: list[str]
    """Every client of the run, sorted."""
    run: str
    """The run's name, which every message carries ("" in a simulation, which has one run)."""

    def begin(self, round: int) -> None:
        """A round (0: the hellos) begins; its clients are not selected yet (a deployment waits
        here for enough of them online)."""
        ...

    def send_and_receive(
        self, messages: Sequence[Message], deadline: Deadline, serve: Serve | None = None, steps: int | None = None
    ) -> dict[str, Message]:
        """Send every message (at most one per client) and return the answers that came in time,
        by client id in sorted order, never in order of arrival. ``serve`` answers the requests a
        client makes before it answers (a method that exchanges during training); ``steps``: the
        most of them a client makes (``ServerRole.max_steps``; a deployment's hard deadline for
        the phase grows with it, None: the steps get no time of their own)."""
        ...

    def send(self, messages: Sequence[Message]) -> None:
        """Send messages that get no answer (the stop)."""
        ...

    def round_bytes(self, round: int) -> tuple[int, int]:
        """Counted content bytes (the codec's count) carried up and down in ``round``."""
        ...

    def finish(self, record: RoundRecord) -> RoundRecord:
        """The round's record, with whatever the channel adds to it (a deployment: the MQTT bytes)."""
        ...


class InProcessChannel:
    """The clients of a simulation, called in this process one after another, in client-id order.

    Every message goes through :class:`InProcessTransport` (encoded, counted, decoded), so the
    bytes are the wire's and no Python object is shared between a client and the server."""

    def __init__(
        self,
        clients: dict[str, ClientRole],
        transport: InProcessTransport | None = None,
        full_test: tuple[torch.Tensor, torch.Tensor] | None = None,
        poisonings: dict[str, Poisoning] | None = None,
    ) -> None:
        """``full_test`` (x, y): also score every client on it (the whole test set), besides its own split.
        ``poisonings``: the attacking clients' (edgefd.runtime.attack), by client id."""
        poisonings = poisonings or {}
        self.apps = {cid: ClientApp(role, full_test, poisonings.get(cid)) for cid, role in clients.items()}
        self.client_ids = sorted(clients)
        self.run = ""
        self.transport = transport if transport is not None else InProcessTransport()

    @property
    def ledger(self) -> ByteLedger:
        return self.transport.ledger

    def begin(self, round: int) -> None:
        """Every client is always there."""

    def finish(self, record: RoundRecord) -> RoundRecord:
        return record

    def send_and_receive(
        self, messages: Sequence[Message], deadline: Deadline, serve: Serve | None = None, steps: int | None = None
    ) -> dict[str, Message]:
        carry = self.transport.carry
        ask = None if serve is None else (lambda request: carry(serve(carry(request))))
        answers = {}
        for message in sorted(messages, key=lambda m: m.receiver):
            received = carry(message)  # the server's message: an error in it is the server's, and ends the run
            try:
                answers[message.receiver] = carry(self.apps[message.receiver].handle(received, ask))
            except ProtocolError as error:  # its answer or request does not encode (a diverged model's NaN)
                log.warning(
                    "round %d: %s's %s cannot be sent (%s): it misses the round, as a device's would",
                    message.round,
                    message.receiver,
                    message.verb,
                    error,
                )
        return answers

    def send(self, messages: Sequence[Message]) -> None:
        for message in sorted(messages, key=lambda m: m.receiver):
            self.apps[message.receiver].handle(self.transport.carry(message))

    def round_bytes(self, round: int) -> tuple[int, int]:
        return self.ledger.total(UP, round), self.ledger.total(DOWN, round)
