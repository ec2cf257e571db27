"""How the round loop reaches the clients: the `Channel` protocol, and the in-process channel of a
simulation.

The loop (:class:`edgefd.runtime.loop.Federation`) selects, draws, aggregates, evaluates and
records; a channel only carries a phase's messages to the clients and brings back what they
answered in time, and counts the payload bytes it carried. A simulation's channel calls the
client roles in this process (`InProcessChannel`); a deployment's sends the same payloads over
MQTT (`edgefd.deploy.mqtt_channel.MqttChannel`). The loop is the same, so a deployed run and a
simulated one select, draw and average the same way, round for round.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import nn

from edgefd.algorithms.base import ClientRole
from edgefd.algorithms.toolkit import release_shared
from edgefd.protocol import Payload
from edgefd.runtime import envelope
from edgefd.runtime.records import HELLO_ROUND, RoundRecord
from edgefd.runtime.transport import DOWN, UP, ByteLedger, InProcessTransport
from edgefd.training import evaluate_model

Scores = dict[str, float]
"""One client's evaluation: "accuracy" (on its local test split), and "accuracy_full" (on the
whole test set) when the run asks for it."""


class Channel(Protocol):
    """The clients of a run, as the loop sees them."""

    client_ids: list[str]
    """Every client of the run, sorted."""

    def hello(self) -> dict[str, Payload]:
        """Round 0: every client's one-time upload (clients with nothing to say are left out)."""
        ...

    def begin(self, round: int) -> None:
        """A round (0: the hellos) begins; a training round's clients are not selected yet (a
        deployment waits here for enough of them online)."""
        ...

    def finish(self, record: RoundRecord) -> RoundRecord:
        """The round's record, with whatever the channel adds to it (a deployment: the MQTT bytes)."""
        ...

    def train(self, round: int, downlinks: dict[str, Payload | None]) -> dict[str, Payload | None]:
        """Send each selected client its downlink and return what came back in time: client -> uplink
        (None: the client trained and had nothing to send). A client missing from the result did not
        answer by the round's deadline."""
        ...

    def train_steps(
        self, round: int, client_id: str, answer: Callable[[Payload], Payload]
    ) -> dict[str, Payload | None]:
        """One client's training with a request and an answer per step (``ServerRole.step_exchange``):
        ``answer`` is the server's. Returns {client: its final uplink} as `train` does (empty: it did
        not finish by the deadline)."""
        ...

    def reply(self, round: int, replies: dict[str, Payload]) -> list[str]:
        """Send each client the server's reply to its uplink of ``round`` (``ServerRole.reply``) and
        return the clients that took it in by the round's deadline (a late one still takes it in
        when it arrives, before its next training)."""
        ...

    def evaluate(self, round: int, states: dict[str, Payload | None]) -> dict[str, Scores]:
        """Every client's scores of its deliverable model (``states``: what the server holds for it);
        a client that does not answer is left out."""
        ...

    def score_server_models(self, models: Callable[[], dict[str, nn.Module]]) -> dict[str, float]:
        """Each of the server's own models' accuracy on the whole test set where the channel holds
        it (a simulation); {} where it does not (a deployment: the server holds no data). ``models``
        is called only where they are scored: building them may cost (FedZKT's ensemble)."""
        ...

    def round_bytes(self, round: int) -> tuple[int, int]:
        """Payload bytes (as encoded, the codec's count) carried up and down in ``round``."""
        ...


class InProcessChannel:
    """The clients of a simulation, called in this process one after another.

    Every payload goes through :class:`InProcessTransport` (encoded, counted, decoded), so the
    bytes are the wire's and no Python object is shared between a client and the server."""

    def __init__(
        self,
        clients: dict[str, ClientRole],
        transport: InProcessTransport | None = None,
        full_test: tuple[torch.Tensor, torch.Tensor] | None = None,
        server_test: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        """``full_test`` (x, y): also score every client on it (the whole test set), besides its own
        split. ``server_test`` (x, y): the whole test set to score the server's own models on (None:
        score none)."""
        self.clients = clients
        self.client_ids = sorted(clients)
        self.transport = transport if transport is not None else InProcessTransport()
        self.full_test = full_test
        self.server_test = server_test

    @property
    def ledger(self) -> ByteLedger:
        return self.transport.ledger

    def hello(self) -> dict[str, Payload]:
        hellos = {}
        for cid in self.client_ids:
            payload = self.transport.upload(envelope.hello(self.clients[cid]), HELLO_ROUND, cid)
            if payload is not None:
                hellos[cid] = payload
        release_shared()  # what the clients shared for their hellos (FedCache's hash encoder) is done with
        return hellos

    def begin(self, round: int) -> None:
        """Every client is always there."""

    def finish(self, record: RoundRecord) -> RoundRecord:
        return record

    def train(self, round: int, downlinks: dict[str, Payload | None]) -> dict[str, Payload | None]:
        uplinks = {}
        for cid, downlink in downlinks.items():
            received = self.transport.download(downlink, round, cid)
            uplinks[cid] = self.transport.upload(envelope.train_round(self.clients[cid], round, received), round, cid)
        return uplinks

    def train_steps(
        self, round: int, client_id: str, answer: Callable[[Payload], Payload]
    ) -> dict[str, Payload | None]:
        steps = envelope.train_steps(self.clients[client_id], round)
        reply: Payload | None = None
        while True:
            try:
                # next() is send(None), the only value a generator can be started with.
                request = next(steps) if reply is None else steps.send(reply)
            except StopIteration as finished:
                return {client_id: self.transport.upload(finished.value, round, client_id)}
            received = self.transport.upload(request, round, client_id)
            reply = self.transport.download(answer(received), round, client_id)

    def reply(self, round: int, replies: dict[str, Payload]) -> list[str]:
        for cid, payload in replies.items():
            received = self.transport.download(payload, round, cid)
            assert received is not None  # a reply is a payload
            envelope.receive_reply(self.clients[cid], round, received)
        return list(replies)

    def evaluate(self, round: int, states: dict[str, Payload | None]) -> dict[str, Scores]:
        scores = {}
        for cid in self.client_ids:
            client, state = self.clients[cid], states.get(cid)
            scores[cid] = {"accuracy": float(client.evaluate(state)["accuracy"])}
            if self.full_test is not None:
                scores[cid]["accuracy_full"] = float(client.evaluate(state, self.full_test)["accuracy"])
        return scores

    def score_server_models(self, models: Callable[[], dict[str, nn.Module]]) -> dict[str, float]:
        if self.server_test is None:
            return {}
        x, y = self.server_test
        scores = {}
        for name, model in models().items():
            was_training = model.training
            scores[name] = float(evaluate_model(model, x, y)["accuracy"])
            model.train(was_training)  # a measurement: the server's model goes on as it was
        return scores

    def round_bytes(self, round: int) -> tuple[int, int]:
        return self.ledger.total(UP, round), self.ledger.total(DOWN, round)
