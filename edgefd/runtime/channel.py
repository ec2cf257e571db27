"""How the round loop reaches the clients: the generic `Channel`, and the in-process channel of a
simulation.

The loop (:class:`edgefd.runtime.loop.Federation`) selects, draws, aggregates, evaluates, counts
the bytes and records; a channel only carries messages to the clients and brings back the
answers that came in time, saying which it refused and why. It knows no phase of a round: a
message's verb says what the client is asked, and :class:`edgefd.runtime.verbs.ClientApp` answers
it wherever the client runs. A simulation's channel calls the clients in this process (`InProcessChannel`); a
deployment's sends the same messages over MQTT (`edgefd.deploy.mqtt_channel.MqttChannel`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from edgefd.protocol.errors import OversizedError, ProtocolError
from edgefd.protocol.message import Message
from edgefd.runtime.conversation import Conversation, Event
from edgefd.runtime.limits import MessageLimits, client_limit
from edgefd.runtime.transport import InProcessTransport
from edgefd.runtime.verbs import ClientApp, Deadline, exchange_done, verb

# Types only: `edgefd server --help` reaches this module through the MQTT channel, and torch is slow to import.
if TYPE_CHECKING:
    import torch

    from edgefd.algorithms.base import ClientRole
    from edgefd.runtime.attack import Poisoning

log = logging.getLogger(__name__)


@dataclass
class Delivery:
    """What one `Channel.send_and_receive` brought back."""

    answers: dict[str, Message]
    """What each client sent next, in time, and was taken, by client id in sorted order: its
    answer, or a request it makes during its work (``Message.is_answer`` False)."""
    refused: dict[str, str] = field(default_factory=dict)
    """The clients whose messages the channel refused (larger than a deployment of the run takes,
    malformed on the wire), and why: the round's ``rejected``."""
    held: dict[str, str] = field(default_factory=dict)
    """The clients a deployment cut off at their phase's hard deadline, and how: the round's ``held``."""


class Channel(Protocol):
    """The clients of a run, as the loop sees them: it moves messages and nothing else."""

    client_ids: list[str]
    """Every client of the run, sorted."""
    run: str
    """The run's name, which every message carries ("" in a simulation, which has one run)."""

    def send_and_receive(self, messages: Sequence[Message], deadline: Deadline) -> Delivery:
        """Send every message (at most one per client) and bring back what each client sent next
        in time, by client id in sorted order, never in order of arrival: its answer, or, on a
        verb that ``asks``, a request (a message that is no answer), which the loop answers with
        the next send_and_receive; ``deadline``: how long a deployment waits."""
        ...

    def send(self, messages: Sequence[Message]) -> None:
        """Send messages that get no answer (the stop)."""
        ...

    def close(self) -> None:
        """Free what the channel holds outside this process (a Ray backend's actors)."""
        ...


class Refused(Exception):
    """A message larger than its receiver takes (`MessageLimits`); ``reason`` says so as a round's
    ``rejected`` does."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class InProcessChannel:
    """The clients of a simulation, called in this process one after another, in client-id order.

    Every message goes through :class:`InProcessTransport` (encoded, counted, decoded), so the
    bytes are the wire's and no Python object is shared between a client and the server. With
    ``limits`` a message larger than a deployment of the same run takes is refused as there: a
    client's answer or request (the client misses the round, and the round's ``rejected`` names it
    and why, with a warning), or the server's message (the client refuses it, and misses the round
    as a device would, which the server sees as a late client)."""

    def __init__(
        self,
        clients: dict[str, ClientRole],
        transport: InProcessTransport | None = None,
        full_test: tuple[torch.Tensor, torch.Tensor] | None = None,
        poisonings: dict[str, Poisoning] | None = None,
        limits: MessageLimits | None = None,
    ) -> None:
        """``full_test`` (x, y): also score every client on it (the whole test set), besides its own split.
        ``poisonings``: the attacking clients' (edgefd.runtime.attack), by client id. ``limits``: the
        largest message taken from each client, and the run's cap (None: messages of any size)."""
        poisonings = poisonings or {}
        self.apps = {cid: ClientApp(role, full_test, poisonings.get(cid)) for cid, role in clients.items()}
        self.client_ids = sorted(clients)
        self.run = ""
        self.transport = transport if transport is not None else InProcessTransport()
        self.limits = limits
        self._client_limits: dict[str, int] = {}
        self._limits_round: int | None = None
        """The round of the messages the limits were last asked for (they follow what the method
        knows at each round's first message)."""
        self._conversations: dict[str, Conversation] = {}
        """The clients whose work waits for the server's answer to a request."""

    def send_and_receive(self, messages: Sequence[Message], deadline: Deadline) -> Delivery:
        if self.limits is not None and messages and messages[0].round != self._limits_round:
            self.limits.update(self.client_ids)
            self._limits_round = messages[0].round
        delivery = Delivery({})
        for message in sorted(messages, key=lambda m: m.receiver):
            cid = message.receiver
            try:
                received = self._deliver(message)  # another error in it is the server's, and ends the run
            except OversizedError as error:
                log.warning(
                    "round %d: %s refuses the server's %s (%s): it misses the round, as a device would",
                    message.round,
                    cid,
                    message.verb,
                    error,
                )
                if cid in self._conversations:
                    self._conversations.pop(cid).abandon()
                continue
            if cid in self._conversations:  # the server's answer to the client's request
                event = self._conversations[cid].resume(received)
            elif verb(message.verb).asks:
                self._conversations[cid] = Conversation(self.apps[cid], received, _same_threads())
                event = self._conversations[cid].start()
            else:
                event = self._answer_now(received)
            self._take_event(delivery, message, event)
        exchange_done(self.apps[message.receiver] for message in messages)
        return delivery

    def _answer_now(self, message: Message) -> Event:
        """The client's answer to a message it works on without asking the server."""
        return Event("done", self.apps[message.receiver].handle(message))

    def _take_event(self, delivery: Delivery, message: Message, event: Event) -> None:
        """Put what the client's work came to into ``delivery``: its answer or request, as the
        server takes it, or why it has none."""
        cid = message.receiver
        if event.kind == "failed":
            assert event.error is not None
            raise event.error
        if event.kind == "missed" or event.message is None:
            self._conversations.pop(cid, None)
            _missed(message, event.error)
            return
        try:
            delivery.answers[cid] = self._take(event.message)
        except (Refused, ProtocolError) as problem:  # ProtocolError: it does not encode (a diverged model's NaN)
            conversation = self._conversations.pop(cid, None)
            if conversation is not None and conversation.open:  # the client waits for an answer: refused
                conversation.abandon()
            if isinstance(problem, Refused):
                delivery.refused[cid] = problem.reason
            else:
                _missed(message, problem)
            return
        if event.kind == "done":
            self._conversations.pop(cid, None)

    def _deliver(self, message: Message) -> Message:
        """The server's message as its client takes it: OversizedError when it is larger than the
        client takes (`client_limit`)."""
        if self.limits is None:
            return self.transport.carry(message)
        cid = message.receiver
        if cid not in self._client_limits:
            self._client_limits[cid] = client_limit(self.apps[cid].role.model, self.limits.cap)
        return self.transport.carry(message, self._client_limits[cid])

    def _take(self, message: Message) -> Message:
        """A client's message as the server takes it: Refused when it is larger than a deployment
        of the run takes from that client on that verb (it is then not counted, as it is not there)."""
        if self.limits is None:
            return self.transport.carry(message)
        largest = self.limits.largest(message.sender, message.verb)
        try:
            return self.transport.carry(message, largest)
        except OversizedError:
            size = message.metadata_bytes + message.content_bytes
            raise Refused(self.limits.refusal(message.sender, message.verb, size) or f"{size} bytes") from None

    def send(self, messages: Sequence[Message]) -> None:
        for message in sorted(messages, key=lambda m: m.receiver):
            self.apps[message.receiver].handle(self.transport.carry(message))

    def close(self) -> None:
        """Nothing to free: the clients live in this process."""


def _same_threads() -> Callable[[], None]:
    """Sets a conversation's thread to this thread's number of threads (the run's): OpenMP's
    setting, which the kernels use, is a thread's own."""
    import torch

    from edgefd import kernels

    threads = torch.get_num_threads()
    return lambda: kernels.set_num_threads(threads)


def _missed(message: Message, why: BaseException | None) -> None:
    """Log that the client of ``message`` misses the round: its answer or request does not
    encode (a diverged model's NaN), or the server refused one of its requests."""
    what = "cannot be sent" if isinstance(why, ProtocolError) else "ends unanswered"
    log.warning(
        "round %d: %s's %s %s (%s): it misses the round, as a device's would",
        message.round,
        message.receiver,
        message.verb,
        what,
        why,
    )
