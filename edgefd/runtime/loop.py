"""The round loop: sampling, deadlines, evaluation and accounting, for any method.

One round r:
  1. the run's RNG selects a fraction of the clients;
  2. the server prepares every selected client's downlink (from its state at the round's start);
  3. each selected client trains and returns its uplink; a simulated straggler misses the
     deadline and its uplink is discarded by the server (it was still sent: its bytes count);
  4. the server aggregates what arrived in time;
  5. every client is evaluated on its local test split (every `eval_every` rounds and the last).

A method that exchanges during training (``ServerRole.step_exchange``) replaces 2-3: the selected
clients train one after another, and every request a client makes is carried to the server and
answered at once, so each client sees what the clients before it wrote.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from edgefd.algorithms.base import ClientRole, ServerRole
from edgefd.protocol import Payload
from edgefd.runtime.transport import DOWN, UP, InProcessTransport

HELLO_ROUND = 0


@dataclass
class LoopConfig:
    """How rounds are run (the method's own settings live in its params)."""

    rounds: int = 10
    participation: float = 1.0
    """Fraction of the clients selected each round (at least `min_clients`)."""
    min_clients: int = 1
    straggler_rate: float = 0.0
    """Probability that a selected client misses the round's deadline (simulated)."""
    eval_every: int = 1
    """Evaluate every this many rounds (and always after the last)."""

    def validate(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"rounds: must be >= 1, got {self.rounds}")
        if not 0 < self.participation <= 1:
            raise ValueError(f"participation: must be in (0, 1], got {self.participation}")
        if not 0 <= self.straggler_rate < 1:
            raise ValueError(f"straggler_rate: must be in [0, 1), got {self.straggler_rate}")
        if self.eval_every < 1:
            raise ValueError(f"eval_every: must be >= 1, got {self.eval_every}")
        if self.min_clients < 1:
            raise ValueError(f"min_clients: must be >= 1, got {self.min_clients}")


@dataclass
class RoundRecord:
    """What one round did; `accuracy` is None on rounds without evaluation."""

    round: int
    accuracy: float | None
    accuracy_std: float | None
    bytes_up: int
    bytes_down: int
    seconds: float
    selected: list[str]
    late: list[str]
    client_accuracy: dict[str, float] = field(default_factory=dict)
    server: dict[str, float] = field(default_factory=dict)
    accuracy_full: float | None = None
    """The clients' mean accuracy on the whole test set (None unless the run asks for it)."""
    client_accuracy_full: dict[str, float] = field(default_factory=dict)


def _mean_std(accuracies: dict[str, float]) -> tuple[float, float]:
    values = np.array([v for v in accuracies.values() if not math.isnan(v)])
    return (float(values.mean()), float(values.std())) if len(values) else (float("nan"), float("nan"))


class Federation:
    """Runs one method's roles over a transport."""

    def __init__(
        self,
        server: ServerRole,
        clients: dict[str, ClientRole],
        transport: InProcessTransport,
        config: LoopConfig,
        rng: np.random.Generator,
        full_test: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        """``full_test`` (x, y): also score every client on it (the whole test set), besides its own split."""
        config.validate()
        if server.step_exchange and config.straggler_rate > 0:
            raise ValueError(
                "straggler_rate: this method answers every training step, so a round has no "
                "deadline to miss; use straggler_rate 0 (or the method's round-batched exchange)"
            )
        self.server = server
        self.clients = clients
        self.transport = transport
        self.config = config
        self.rng = rng
        self.client_ids = sorted(clients)
        self.full_test = full_test

    def hello(self) -> None:
        """The one-time uploads, counted as round 0."""
        hellos = {}
        for cid in self.client_ids:
            payload = self.transport.upload(self.clients[cid].hello(), HELLO_ROUND, cid)
            if payload is not None:
                hellos[cid] = payload
        self.server.start(hellos)

    def select(self) -> list[str]:
        k = max(self.config.min_clients, math.ceil(self.config.participation * len(self.client_ids)))
        k = min(k, len(self.client_ids))
        if k == len(self.client_ids):
            return list(self.client_ids)
        return sorted(self.rng.choice(self.client_ids, size=k, replace=False).tolist())

    def run_round(self, round: int) -> RoundRecord:
        start = time.perf_counter()
        ledger = self.transport.ledger
        selected = self.select()
        late_draw = self.rng.random(len(selected))
        late = [cid for cid, u in zip(selected, late_draw) if u < self.config.straggler_rate]

        if self.server.step_exchange:
            uplinks = {cid: sent for cid in selected if (sent := self.exchange_steps(round, cid)) is not None}
        else:
            downlinks = {cid: self.server.downlink(round, cid) for cid in selected}
            uplinks = {}
            for cid in selected:
                received = self.transport.download(downlinks[cid], round, cid)
                sent = self.transport.upload(self.clients[cid].train_round(round, received), round, cid)
                if sent is not None and cid not in late:
                    uplinks[cid] = sent
        server_metrics = self.server.aggregate(round, uplinks)

        record = RoundRecord(
            round,
            None,
            None,
            ledger.total(UP, round),
            ledger.total(DOWN, round),
            0.0,
            selected,
            late,
            server=server_metrics,
        )
        if round % self.config.eval_every == 0 or round == self.config.rounds:
            self.evaluate(record)
        record.seconds = time.perf_counter() - start
        return record

    def exchange_steps(self, round: int, cid: str) -> Payload | None:
        """One client's training with a request/answer pair per step; returns its final uplink."""
        steps = self.clients[cid].train_steps(round)
        reply: Payload | None = None
        while True:
            try:
                # next() is send(None), the only value a generator can be started with.
                request = next(steps) if reply is None else steps.send(reply)
            except StopIteration as finished:
                return self.transport.upload(finished.value, round, cid)
            received = self.transport.upload(request, round, cid)
            reply = self.transport.download(self.server.answer(round, cid, received), round, cid)

    def evaluate(self, record: RoundRecord) -> None:
        for cid in self.client_ids:
            state = self.server.evaluation_state(cid)
            record.client_accuracy[cid] = float(self.clients[cid].evaluate(state)["accuracy"])
            if self.full_test is not None:
                record.client_accuracy_full[cid] = float(self.clients[cid].evaluate(state, self.full_test)["accuracy"])
        record.accuracy, record.accuracy_std = _mean_std(record.client_accuracy)
        if self.full_test is not None:
            record.accuracy_full = _mean_std(record.client_accuracy_full)[0]

    def run(self, on_round: Callable[[RoundRecord], None] | None = None) -> list[RoundRecord]:
        self.hello()
        records = []
        for round in range(1, self.config.rounds + 1):
            record = self.run_round(round)
            records.append(record)
            if on_round is not None:
                on_round(record)
        return records
