"""The round loop: sampling, deadlines, evaluation and accounting, for any method and any channel.

Round 0: every client's one-time upload (its hello), the server's start, the accuracy before
training. Then one round r:
  1. the run's RNG selects a fraction of the clients, then draws which of them straggle
     (``straggler_rate``: a simulated straggler trains and sends, but its uplink misses the deadline);
  2. the server prepares every selected client's downlink (from its state at the round's start);
  3. the channel carries the downlinks, the clients train, and the uplinks that arrive in time come
     back (in a simulation all of them; over MQTT, those before the round's deadline);
  4. every uplink that arrived in time is checked against what the method accepts from that client
     (``ServerRole.uplink_schemas``; a misfit is dropped and its reason recorded), and the server
     aggregates the rest, minus the simulated stragglers';
  5. a method whose server answers the aggregated uplinks (``ServerRole.reply``: FedD2S's S2C
     knowledge) has the answers carried to those clients, which learn from them in the same round;
  6. every client is evaluated (every `eval_every` rounds and the last).

A method that exchanges during training (``ServerRole.step_exchange``) replaces 2-3: the selected
clients train one after another, and every request a client makes is carried to the server and
answered at once, so each client sees what the clients before it wrote.

The same loop runs `edgefd simulate` (`InProcessChannel`) and `edgefd server` (the MQTT channel of
`edgefd.deploy`): selection, straggler draws, averaging and records exist once.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from edgefd.algorithms.base import ServerRole
from edgefd.algorithms.schema import UplinkRejected
from edgefd.protocol import Payload
from edgefd.runtime import envelope
from edgefd.runtime.channel import Channel, Scores
from edgefd.runtime.records import HELLO_ROUND, RoundRecord

__all__ = ["HELLO_ROUND", "Federation", "LoopConfig", "RoundRecord"]

log = logging.getLogger(__name__)


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


def _mean_std(accuracies: dict[str, float]) -> tuple[float, float]:
    values = np.array([v for v in accuracies.values() if not math.isnan(v)])
    return (float(values.mean()), float(values.std())) if len(values) else (float("nan"), float("nan"))


class Federation:
    """Runs one method's server role against its clients, over a channel."""

    def __init__(self, server: ServerRole, channel: Channel, config: LoopConfig, rng: np.random.Generator) -> None:
        config.validate()
        if server.step_exchange and config.straggler_rate > 0:
            raise ValueError(
                "straggler_rate: this method answers every training step, so a round has no "
                "deadline to miss; use straggler_rate 0 (or the method's round-batched exchange)"
            )
        self.server = server
        self.channel = channel
        self.config = config
        self.rng = rng
        self.client_ids = list(channel.client_ids)

    def start(self) -> RoundRecord:
        """Round 0: the one-time uploads, the server's start (FedCache: hashing and relations) and the
        accuracy before training."""
        started = time.perf_counter()
        self.channel.begin(HELLO_ROUND)
        rejected = self.hello()
        bytes_up, bytes_down = self.channel.round_bytes(HELLO_ROUND)
        record = RoundRecord(HELLO_ROUND, None, None, bytes_up, bytes_down, 0.0, [], [], rejected=rejected)
        self.evaluate(record)
        record.seconds = time.perf_counter() - started
        return self.channel.finish(record)

    def hello(self) -> dict[str, str]:
        """The one-time uploads and the server's start; returns the clients whose hello was
        refused, and why (the server starts without them)."""
        hellos, rejected = {}, {}
        for cid, payload in self.channel.hello().items():
            problem = self._refusal(HELLO_ROUND, "hello", cid, self.server.check_hello, cid, payload)
            if problem is None:
                hellos[cid] = payload
            else:
                rejected[cid] = problem
        self.server.start(hellos)
        return rejected

    @staticmethod
    def _refusal(round: int, what: str, cid: str, check: Callable[..., None], *args: object) -> str | None:
        """None if ``check(*args)`` passes, else the reason it gave (logged, naming the client)."""
        try:
            check(*args)
        except UplinkRejected as problem:
            log.warning("round %d: %s's %s rejected: %s", round, cid, what, problem)
            return problem.reason
        return None

    def select(self) -> list[str]:
        k = max(self.config.min_clients, math.ceil(self.config.participation * len(self.client_ids)))
        k = min(k, len(self.client_ids))
        if k == len(self.client_ids):
            return list(self.client_ids)
        return sorted(self.rng.choice(self.client_ids, size=k, replace=False).tolist())

    def run_round(self, round: int) -> RoundRecord:
        start = time.perf_counter()
        self.channel.begin(round)
        selected = self.select()
        late_draw = self.rng.random(len(selected))
        stragglers = [cid for cid, u in zip(selected, late_draw) if u < self.config.straggler_rate]

        if self.server.step_exchange:
            answered = {}
            for cid in selected:  # one after another: each client sees what the ones before it wrote
                answered.update(self.exchange_steps(round, cid))
        else:
            answered = self.channel.train(round, {cid: self.downlink(round, cid) for cid in selected})
        late = [cid for cid in selected if cid in stragglers or cid not in answered]
        uplinks, rejected = {}, {}
        for cid, payload in answered.items():
            if payload is None or cid in stragglers:
                continue
            problem = self._refusal(round, "uplink", cid, self.server.check_uplink, round, cid, payload)
            if problem is None:
                uplinks[cid] = payload
            else:
                rejected[cid] = problem
        server_metrics = self.server.aggregate(round, uplinks)
        self.reply(round, sorted(uplinks))

        bytes_up, bytes_down = self.channel.round_bytes(round)
        record = RoundRecord(
            round, None, None, bytes_up, bytes_down, 0.0, selected, late, server=server_metrics, rejected=rejected
        )
        if round % self.config.eval_every == 0 or round == self.config.rounds:
            self.evaluate(record)
        record.seconds = time.perf_counter() - start
        return self.channel.finish(record)

    def downlink(self, round: int, cid: str) -> Payload | None:
        """The server's message to ``cid`` at the start of ``round``, in the run's envelope."""
        return envelope.from_server(self.server, self.server.downlink(round, cid), round)

    def reply(self, round: int, client_ids: list[str]) -> None:
        """The server's answers to the uplinks it aggregated, carried to their clients before the
        round is evaluated (none for most methods: no message, no wait)."""
        replies = {}
        for cid in client_ids:
            sealed = envelope.from_server(self.server, self.server.reply(round, cid), round)
            if sealed is not None:
                replies[cid] = sealed
        if not replies:
            return
        missing = sorted(set(replies) - set(self.channel.reply(round, replies)))
        if missing:
            log.warning(
                "round %d: %d client(s) had not taken in the server's reply by the deadline: %s",
                round,
                len(missing),
                ", ".join(missing[:5]),
            )

    def exchange_steps(self, round: int, cid: str) -> dict[str, Payload | None]:
        """One client's training with the server answering each of its steps: {cid: its final uplink}
        (empty when it did not finish in time)."""

        def answer(request: Payload) -> Payload:
            self.server.check_request(round, cid, request)  # UplinkRejected: a ValueError the channel refuses
            sealed = envelope.from_server(self.server, self.server.answer(round, cid, request), round)
            assert sealed is not None  # an answer is a payload
            return sealed

        return self.channel.train_steps(round, cid, answer)

    def evaluate(self, record: RoundRecord) -> None:
        """Every client's accuracy of its deliverable model; the record's mean over those that answered."""
        scores: dict[str, Scores] = self.channel.evaluate(
            record.round, {cid: self.server.evaluation_state(cid) for cid in self.client_ids}
        )
        answered = [cid for cid in self.client_ids if cid in scores]  # client order, not arrival order
        record.client_accuracy = {cid: scores[cid]["accuracy"] for cid in answered}
        record.accuracy, record.accuracy_std = _mean_std(record.client_accuracy)
        full = {cid: scores[cid]["accuracy_full"] for cid in answered if "accuracy_full" in scores[cid]}
        if full:
            record.client_accuracy_full = full
            record.accuracy_full = _mean_std(full)[0]
        record.server_model_accuracy = self.channel.score_server_models(self.server.server_models)

    def run(
        self, on_round: Callable[[RoundRecord], None] | None = None, resume_at: int | None = None
    ) -> list[RoundRecord]:
        """Round 0, then every round up to the last; ``resume_at``: start at that round instead (a
        resumed deployment: the server's state is the checkpoint's). ``on_round`` sees each record
        as it is made (the results writer, a checkpoint)."""
        records: list[RoundRecord] = []

        def keep(record: RoundRecord) -> None:
            records.append(record)
            if on_round is not None:
                on_round(record)

        if resume_at is None:
            keep(self.start())
        for round in range(resume_at or 1, self.config.rounds + 1):
            keep(self.run_round(round))
        return records
