"""The round loop: sampling, deadlines, evaluation and accounting, for any method and any channel.

Round 0: every client's one-time upload (its hello), the server's start, the accuracy before
training. Then one round r:
  1. the run's RNG selects a fraction of the clients, then draws which of them straggle
     (``straggler_rate``: a simulated straggler trains and sends, but its uplink misses the deadline);
  2. a method's own verbs of the phase before training go to the selected clients
     (``Phase.BEFORE_TRAINING``: none for the built-in methods), then the server prepares every
     selected client's downlink (from its state at the round's start);
  3. the channel carries the downlinks, the clients train, and the uplinks that arrive in time come
     back (in a simulation all of them; over MQTT, those before the round's deadline);
  4. every uplink that arrived in time is checked against what the method accepts from that client
     (``ServerRole.uplink_schemas``; a misfit is dropped and its reason recorded), and the server
     aggregates the rest, minus the simulated stragglers';
  5. the verbs of the phase after aggregation go to the aggregated clients, which learn from them
     in the same round (``reply``: a server that answers the aggregated uplinks, FedD2S's S2C
     knowledge; and any verb of a method's own in ``Phase.AFTER_AGGREGATION``);
  6. every client is evaluated (every `eval_every` rounds and the last).

A method that exchanges during training (``ServerRole.step_exchange``) replaces 2-3: the selected
clients train one after another, and every request a client makes comes back through the channel
as a message and is answered at once by the next one, so each client sees what the clients before
it wrote.

Each phase is one verb of `edgefd.runtime.verbs` (hello, a method's own verbs before training,
train or steps, reply and a method's own verbs after aggregation, evaluate, stop), sent through
the channel's one `send_and_receive`; the answers are taken in client-id order, never in order of
arrival, so that a deployment computes what a simulation computes. The same loop runs `edgefd
simulate` (`InProcessChannel`) and `edgefd server` (the MQTT channel of `edgefd.deploy`):
selection, straggler draws, averaging and records exist once.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np
from torch import nn

from edgefd.algorithms.base import ServerRole
from edgefd.algorithms.schema import UplinkRejected
from edgefd.protocol import Payload
from edgefd.protocol.message import SERVER, Message
from edgefd.runtime.channel import Channel, Delivery
from edgefd.runtime.limits import record_refusals
from edgefd.runtime.records import HELLO_ROUND, LOST_EVALUATION, LOST_UPLINKS, RoundRecord
from edgefd.runtime.scores import ScoreWatch, median_of
from edgefd.runtime.transport import DOWN, UP, ByteLedger
from edgefd.runtime.verbs import Deadline, Phase, Verb, scores_of, server_at_precision, verb, verbs_in

__all__ = ["HELLO_ROUND", "LOST_EVALUATION", "LOST_UPLINKS", "Federation", "LoopConfig", "RoundRecord"]

log = logging.getLogger(__name__)

ScoreServerModels = Callable[[dict[str, nn.Module]], dict[str, float]]
"""Scores the server's own models on data the server holds: the whole test set (a simulation), or
a deployment's held-out set (`edgefd server --holdout-dir`)."""


@dataclass
class LoopConfig:
    """How rounds are run (the method's own settings live in its params): the run's settings of these
    names, declared once with their defaults and help in `SimulationConfig`, which makes this
    (`SimulationConfig.loop_config`). Checked when made, so that one built otherwise with a bad value
    is refused by name too."""

    rounds: int
    participation: float
    straggler_rate: float
    eval_every: int

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"rounds: must be >= 1, got {self.rounds}")
        if not 0 < self.participation <= 1:
            raise ValueError(f"participation: must be in (0, 1], got {self.participation}")
        if not 0 <= self.straggler_rate < 1:
            raise ValueError(f"straggler_rate: must be in [0, 1), got {self.straggler_rate}")
        if self.eval_every < 1:
            raise ValueError(f"eval_every: must be >= 1, got {self.eval_every}")


def _add_reasons(into: dict[str, str], more: Mapping[str, str]) -> None:
    """Each client's reason in ``more`` added to its reasons in ``into`` ("; " between them)."""
    for cid, why in more.items():
        into[cid] = f"{into[cid]}; {why}" if cid in into else why


def _mean_std(accuracies: dict[str, float]) -> tuple[float, float]:
    values = np.array([v for v in accuracies.values() if not math.isnan(v)])
    return (float(values.mean()), float(values.std())) if len(values) else (float("nan"), float("nan"))


class Federation:
    """Runs one method's server role against its clients, over a channel."""

    def __init__(
        self,
        server: ServerRole,
        channel: Channel,
        config: LoopConfig,
        rng: np.random.Generator,
        score_server_models: ScoreServerModels | None = None,
    ) -> None:
        """``score_server_models``: where the server holds data (a simulation's whole test set, a
        deployment's held-out set), scores its own models (``ServerRole.server_models``) after every
        evaluation."""
        if server.step_exchange and config.straggler_rate > 0:
            raise ValueError(
                "straggler_rate: this method answers every training step, so a round has no "
                "deadline to miss; use straggler_rate 0 (or the method's round-batched exchange)"
            )
        self.server = server
        self.channel = channel
        self.config = config
        self.rng = rng
        self.score_server_models = score_server_models
        self.client_ids = list(channel.client_ids)
        self.ledger = ByteLedger()
        """Every message the server sent and took, counted once (its content's encoding, and apart
        its metadata): a round's ``bytes_up`` and ``bytes_down``."""
        self.score_watch = ScoreWatch()
        """The clients' recent scores against the others' (`edgefd.runtime.scores`)."""
        self._refused: dict[str, str] = {}
        self._held: dict[str, str] = {}
        """What the channel refused, and whom it cut off, in the round under way (its record's
        ``rejected`` and ``held``)."""

    # ------------------------------------------------------------------ messages
    def _messages(self, name: str, round: int, contents: Mapping[str, Payload | None]) -> list[Message]:
        """One message of verb ``name`` to each client of ``contents``, in client-id order."""
        run = self.channel.run
        return [Message(name, SERVER, cid, round, contents[cid], run=run) for cid in sorted(contents)]

    def exchange(
        self, name: str, round: int, contents: Mapping[str, Payload | None], deadline: Deadline | None = None
    ) -> dict[str, Message]:
        """Send verb ``name`` with ``contents`` and take what comes back in client-id order
        (``deadline``: the verb's own unless given)."""
        return self.carry(self._messages(name, round, contents), deadline or verb(name).deadline)

    def carry(self, messages: list[Message], deadline: Deadline) -> dict[str, Message]:
        """Send ``messages`` through the channel, and take what comes back in client-id order;
        every message both ways is counted once, and what the channel refused or held is kept for
        the round's record."""
        for message in messages:
            self.ledger.count(message)
        delivery: Delivery = self.channel.send_and_receive(messages, deadline)
        answers = delivery.answers
        for cid in sorted(answers):
            self.ledger.count(answers[cid])
        _add_reasons(self._refused, delivery.refused)
        _add_reasons(self._held, delivery.held)
        return {cid: answers[cid] for cid in sorted(answers)}

    def _close_round(self, record: RoundRecord) -> RoundRecord:
        """The round's record with its bytes, and what the channel refused and held in it."""
        record.bytes_up = self.ledger.total(UP, record.round)
        record.bytes_down = self.ledger.total(DOWN, record.round)
        held = dict(record.held)
        _add_reasons(held, self._held)
        record.held = dict(sorted(held.items()))
        record_refusals(record, self._refused)
        self._refused, self._held = {}, {}
        return record

    def _sealed(self, content: Payload | None) -> Payload | None:
        return server_at_precision(self.server, content)

    # ------------------------------------------------------------------ the run
    def start(self) -> RoundRecord:
        """Round 0: the one-time uploads, the server's start (FedCache: hashing and relations) and the
        accuracy before training."""
        started = time.perf_counter()
        rejected, taken = self.hello()
        record = RoundRecord(HELLO_ROUND, None, None, 0, 0, 0.0, [], [], rejected=rejected)
        if self.client_ids and not taken:
            record.lost.append(LOST_UPLINKS)
        self.evaluate(record)
        record.seconds = time.perf_counter() - started
        return self._close_round(record)

    def hello(self) -> tuple[dict[str, str], int]:
        """The one-time uploads and the server's start; returns the clients whose hello was
        refused, and why (the server starts without them), and how many hellos were taken."""
        answers = self.exchange("hello", HELLO_ROUND, {cid: None for cid in self.client_ids})
        hellos, rejected = {}, {}
        for cid, answer in answers.items():
            if answer.content is None:
                continue
            problem = self._refusal(HELLO_ROUND, "hello", cid, self.server.check_hello, cid, answer.content)
            if problem is None:
                hellos[cid] = answer.content
            else:
                rejected[cid] = problem
        self.server.start(hellos)
        taken = len(answers) - len(rejected)
        if self.client_ids and not taken:
            log.error("round 0: no client's hello was taken (none arrived in time, or each was refused)")
        return rejected, taken

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
        k = max(1, math.ceil(self.config.participation * len(self.client_ids)))
        k = min(k, len(self.client_ids))
        if k == len(self.client_ids):
            return list(self.client_ids)
        return sorted(self.rng.choice(self.client_ids, size=k, replace=False).tolist())

    def run_round(self, round: int) -> RoundRecord:
        start = time.perf_counter()
        selected = self.select()
        late_draw = self.rng.random(len(selected))
        stragglers = [cid for cid, u in zip(selected, late_draw) if u < self.config.straggler_rate]

        for spec in verbs_in(Phase.BEFORE_TRAINING):
            self.send_phase_verb(spec, round, selected)
        if self.server.step_exchange:
            answered: dict[str, Message] = {}
            for cid in selected:  # one after another: each client sees what the ones before it wrote
                answered.update(self.train_with_steps(round, cid))
        else:
            answered = self.exchange("train", round, {cid: self.downlink(round, cid) for cid in selected})
        late = [cid for cid in selected if cid in stragglers or cid not in answered]
        uplinks, rejected = {}, {}
        for cid, answer in answered.items():
            if answer.content is None or cid in stragglers:
                continue
            problem = self._refusal(round, "uplink", cid, self.server.check_uplink, round, cid, answer.content)
            if problem is None:
                uplinks[cid] = answer.content
            else:
                rejected[cid] = problem
        server_metrics = self.server.aggregate(round, uplinks)
        for spec in verbs_in(Phase.AFTER_AGGREGATION):
            self.send_phase_verb(spec, round, sorted(uplinks))

        record = RoundRecord(
            round,
            None,
            None,
            0,
            0,
            0.0,
            selected,
            late,
            server=server_metrics,
            rejected=rejected,
        )
        if selected and not any(cid not in stragglers and cid not in rejected for cid in answered):
            record.lost.append(LOST_UPLINKS)
            log.error(
                "round %d: no uplink taken from the %d selected client(s) (none arrived in time, or each was "
                "refused): the round learnt nothing",
                round,
                len(selected),
            )
        if round % self.config.eval_every == 0 or round == self.config.rounds:
            self.evaluate(record)
        record.seconds = time.perf_counter() - start
        return self._close_round(record)

    def downlink(self, round: int, cid: str) -> Payload | None:
        """The server's content for ``cid`` at the start of ``round``, at the run's precision."""
        return self._sealed(self.server.downlink(round, cid))

    def send_phase_verb(self, spec: Verb, round: int, client_ids: list[str]) -> None:
        """A verb of a phase of the round (`Phase`) to ``client_ids``: each client for which the
        server has content for it gets it (``reply``: FedD2S's S2C knowledge to the aggregated
        clients; none for most methods: no message, no wait)."""
        assert spec.server_content is not None  # only a phase's verbs are sent here
        contents = {}
        for cid in client_ids:
            content = self._sealed(spec.server_content(self.server, round, cid))
            if content is not None:
                contents[cid] = content
        if not contents:
            return
        missing = sorted(set(contents) - set(self.exchange(spec.name, round, contents)))
        if missing:
            log.warning(
                "round %d: %d client(s) had not taken in the server's %s by the deadline: %s",
                round,
                len(missing),
                spec.name,
                ", ".join(missing[:5]),
            )

    def train_with_steps(self, round: int, cid: str) -> dict[str, Message]:
        """One client's training that asks the server (``ServerRole.step_exchange``): each of its
        requests comes back from the channel as a message and is answered at once (`StepAnswers`),
        until its uplink comes, or nothing more in time. Its answer, if it came; a client that asks
        past the steps its declared data makes is named in the round's ``held``."""
        cap = self.server.max_steps(cid)
        deadline = replace(verb("steps").deadline, steps=cap)
        answer_to = StepAnswers(self.server, round, cid, cap, self._sealed)
        came = self.exchange("steps", round, {cid: None}, deadline)
        while cid in came and not came[cid].is_answer:
            came = self.carry([answer_to(came[cid])], deadline)
        if answer_to.refused:
            _add_reasons(self._refused, {cid: "; ".join(answer_to.refused)})
        if answer_to.over_cap:
            over = f"{answer_to.over_cap} step request(s) refused past the {cap} its declared data makes"
            _add_reasons(self._held, {cid: over})
        return came

    def evaluate(self, record: RoundRecord) -> None:
        """Every client's accuracy of its deliverable model; the record's mean and median over those
        that answered, and the scores that do not fit (`edgefd.runtime.scores`)."""
        states = {cid: self.server.evaluation_state(cid) for cid in self.client_ids}
        scores = {}
        for cid, answer in self.exchange("evaluate", record.round, states).items():
            try:
                scores[cid] = scores_of(answer.content)
            except ValueError as problem:
                log.warning("round %d: %s's scores refused: %s", record.round, cid, problem)
        record.client_accuracy = {cid: scores[cid]["accuracy"] for cid in scores}
        record.accuracy, record.accuracy_std = _mean_std(record.client_accuracy)
        record.accuracy_median = median_of(record.client_accuracy)
        record.suspect_scores = self.score_watch.suspects(record.client_accuracy)
        for cid, why in record.suspect_scores.items():
            score = record.client_accuracy[cid]
            log.warning("round %d: %s's score %.3f looks wrong: %s", record.round, cid, score, why)
        if self.client_ids and math.isnan(record.accuracy):
            record.lost.append(LOST_EVALUATION)
            log.error("round %d: no client's accuracy came back: the round has no accuracy", record.round)
        full = {cid: scores[cid]["accuracy_full"] for cid in scores if "accuracy_full" in scores[cid]}
        if full:
            record.client_accuracy_full = full
            record.accuracy_full = _mean_std(full)[0]
        record.server_model_accuracy = (
            {} if self.score_server_models is None else self.score_server_models(self.server.server_models())
        )

    def stop(self) -> None:
        """The run is over: every client is told so (a device process exits)."""
        messages = self._messages("stop", self.config.rounds, {cid: None for cid in self.client_ids})
        for message in messages:
            self.ledger.count(message)
        self.channel.send(messages)

    def run(
        self, on_round: Callable[[RoundRecord], None] | None = None, resume_at: int | None = None
    ) -> list[RoundRecord]:
        """Round 0, then every round up to the last, then the stop; ``resume_at``: start at that
        round instead (a resumed deployment: the server's state is the checkpoint's). ``on_round``
        sees each record as it is made (the results writer, a checkpoint)."""
        records: list[RoundRecord] = []

        def keep(record: RoundRecord) -> None:
            records.append(record)
            if on_round is not None:
                on_round(record)

        if resume_at is None:
            keep(self.start())
        for round in range(resume_at or 1, self.config.rounds + 1):
            keep(self.run_round(round))
        self.stop()
        return records


class StepAnswers:
    """The server's answers to one client's step requests in one round: each request is checked
    against the method's ``request_schemas`` and answered; one it does not take, or past ``cap``
    requests (``ServerRole.max_steps``), is refused with an answer without content (the client's
    work of the round then ends unanswered), and counted."""

    def __init__(
        self,
        server: ServerRole,
        round: int,
        cid: str,
        cap: int | None,
        seal: Callable[[Payload | None], Payload | None],
    ) -> None:
        """``seal``: the server's content at the run's wire precision."""
        self.server, self.round, self.cid, self.cap, self.seal = server, round, cid, cap, seal
        self.taken = 0
        self.over_cap = 0
        """Requests refused past ``cap``."""
        self.refused: list[str] = []
        """Why each request the method does not take was refused."""

    def __call__(self, request: Message) -> Message:
        """The answer to ``request``: the method's, or a refusal (content None)."""
        round, cid = self.round, self.cid
        if self.cap is not None and self.taken >= self.cap:
            self.over_cap += 1
            if self.over_cap == 1:
                log.warning(
                    "round %d: %s asks past the %d step(s) its declared data makes; the rest are refused",
                    round,
                    cid,
                    self.cap,
                )
            return request.answer(None)
        try:
            if request.content is None:
                raise UplinkRejected("empty", "a step request without content")
            self.server.check_request(round, cid, request.content)
        except UplinkRejected as problem:
            log.warning("round %d: %s's step request %d refused: %s", round, cid, request.step, problem)
            self.refused.append(f"step {request.step}: {problem.reason}")
            return request.answer(None)
        self.taken += 1
        return request.answer(self.seal(self.server.answer(round, cid, request.content)))
