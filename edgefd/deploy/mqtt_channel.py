"""The clients of a deployed run, behind an MQTT broker: the loop's channel for `edgefd server`.

`send_and_receive` publishes each message on `down/<id>/<verb>` and collects the answers
(`up/<id>/<verb>`) until every one arrived or the verb's deadline passed (the loop's verbs and
their deadlines: `edgefd.runtime.verbs`):

- training rounds wait first until at least `min_clients` clients are online (their status says
  so), and the hellos until at least `min_clients` came; where they do not within `max_wait`, the
  run stops (`TooFewClients`); an answer that comes after its round closed is counted as late and
  discarded;
- only live messages count: an uplink or a status the broker hands over with the retain flag was
  stored before the server subscribed (a device that is gone, even revoked, may have left a hello
  and an "online" years ago), so it is ignored, counted (`WireStats.stale_retained`) and cleared on
  the broker. A client is online only once it said so to this server's connection: an honest
  client says "online" when it gets its config, which the server publishes at its start (and again
  after its own reconnection, and every few seconds to the clients it does not see online), and a
  device the broker no longer lets in cannot say it at all, so it never counts toward
  `min_clients`;
- a client that comes online (after "offline", or first) while its request is outstanding gets
  it again, once per phase: an "online" repeated while online, or a device toggling its status,
  buys no more copies (a request may be a whole model); a reconnection of the server itself (a
  broker restart) sends the outstanding requests again, and each client's next "online" may then
  have its copy once more;
- an online client without an answer after `ask_again` seconds is asked, in a few bytes, to send
  its answer again (a broker under load may have dropped it), at most `MAX_ASKS_AGAIN` times a
  phase; the client sends its stored answer;
- a client's own requests during its work (`step`, numbered) are taken in order, each once, and
  returned to the loop as messages; the loop's answer goes out with its next call, and a repeat of
  an answered request gets the same answer again, at most `MAX_STEP_RESENDS` times a step; the
  phase waits `round_timeout` after each request the server took (an answer without content
  refuses one, and buys no time), and ends at the latest at its hard
  deadline, `round_timeout` + `step_seconds` x the steps its declared data makes (`Deadline.steps`),
  at most `round_timeout` + `step_grace`, after it began (no message extends it: a client still
  sending then is cut off and named in the round's ``held``; no hello buys more than the grace);
- the hello waits past `hello_timeout` (up to `max_wait`) until `min_clients` hellos came: the
  deployment's quorum, which the loop knows nothing of;
- while the server waits, it publishes again, every few seconds, the configs of the clients it does
  not see online (a broker may not hand a retained config to every client: RabbitMQ's MQTT plugin);
- an evaluation does not wait for clients that are offline;
- anything else that arrives (a stranger's client id, a message whose sender differs from its
  topic, an answer nobody asked for, a future round) is rejected and counted, never raised.

The answers are returned in client-id order, whatever order they arrived in: what the loop does
with them (selection, stragglers, aggregation, the accuracy average, the records) is
`edgefd.runtime.loop.Federation`'s, as in a simulation.

One module, though long: every rule above works on the one phase under way (`_Phase`: the
requests out, the answers, steps, resends and statuses in), and they read best beside it.
"""

from __future__ import annotations

import logging
import queue
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from edgefd.deploy import control as deploy_messages
from edgefd.deploy.mqtt_transport import (
    BrokerSettings,
    Incoming,
    MqttEndpoint,
    Topics,
)
from edgefd.protocol.message import SERVER, Message
from edgefd.runtime.channel import Delivery
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.limits import OPEN_MESSAGE_BYTES, Bounds, MessageLimits
from edgefd.runtime.process import peak_rss_mb
from edgefd.runtime.records import GLOBAL_MODEL, LOST_EVALUATION, RoundRecord
from edgefd.runtime.verbs import STEP, VERBS, Deadline, Wait
from edgefd.settings import setting

log = logging.getLogger(__name__)

STOP_FLUSH_SECONDS = 30.0
"""How long the server waits at the end for the broker to take the clients' stops (it may be
restarting)."""


CONFIG_RESEND_SECONDS = 3.0
"""While the server waits, how often it publishes again the configs of the clients it does not see
online: a retained config does not reach every client on every broker (see `_resend_configs`)."""
CONFIG_RESEND_RATE = 100.0
"""Configs a second, on average, at most: with more clients not online the interval grows (1,000 of
them: every 10 s)."""
QUIET_BEFORE_ASKING_AGAIN = 1.0
"""Seconds with nothing received before the server asks anyone to answer again: while messages
still arrive, the missing answers may be queued behind them (a large fleet), and asking would only
add duplicates to the queue."""
MAX_ASKS_AGAIN = 5
"""How often a phase asks one client to answer again: enough for an honest answer lost a few
times, and a bound on what a client that never answers costs the broker."""
MAX_STEP_RESENDS = 3
"""How often one step's answer goes out again to repeats of its request (a client asks again
after STEP_RESEND_SECONDS without an answer): a device repeating a request gets no more copies."""
STATUS_MAX_BYTES = 4 * 1024
"""Largest status message the server takes (an online/offline payload is ~100 bytes)."""
VERB_NOT_EXPECTED = "verb-not-expected"
"""The reason a message on such a verb is counted under in a round's ``rejected``."""


class TooFewClients(RuntimeError):
    """Fewer than `--min-clients` clients came online, or sent their hello, within the wait for them:
    the run stops rather than go on with fewer than the operator asked for (`edgefd server` exits
    with `TOO_FEW_CLIENTS_EXIT`; ``--resume`` continues it once the devices are back)."""


@dataclass
class DeploymentSettings:
    """How a deployed run talks and waits (what it learns is the SimulationConfig)."""

    run: str
    """Run name: the topics are edgefd/<run>/..."""
    broker: BrokerSettings
    round_timeout: float = setting(
        60.0,
        "seconds a training round waits for the selected clients' uplinks after sending the downlinks; a later "
        "uplink is counted as late and discarded, like a simulated straggler",
    )
    eval_timeout: float = setting(
        30.0,
        "seconds an evaluation waits for the clients' accuracies; clients that do not answer (offline clients "
        "are not waited for) are left out of that round's mean",
    )
    hello_timeout: float = setting(
        600.0,
        "seconds the start waits for every client's hello, then goes on with those it has (at least --min-clients)",
    )
    min_clients: int = setting(
        1,
        "a round starts only when at least N clients are online, and the start waits for at least N hellos (N >= 1)",
    )
    max_wait: float = setting(
        3600.0,
        "seconds to wait for --min-clients clients (online before a round, or with a hello past --hello-timeout); "
        "if fewer came, the run stops (exit status 5; --resume continues it)",
    )
    step_seconds: float = setting(
        2.0,
        "a method that exchanges during training (FedCache's exchange=batch): a client's steps phase waits "
        "--round-timeout after each step the server took, and ends at the latest --round-timeout + SECONDS x "
        "the steps its declared data makes (its samples' mini-batches x epochs), never past --step-grace, after "
        "it began, whatever it sends; a step past that count is refused, and the round's 'held' names the client",
    )
    step_grace: float = setting(
        60.0,
        "the most a client's steps phase may add to --round-timeout, whatever its hello declares: its hard "
        "deadline is --round-timeout + the smaller of this and --step-seconds x its steps (raise it for devices "
        "whose whole training of a round takes longer)",
    )
    ask_again: float = setting(
        10.0,
        "seconds without an answer from an online client before the server asks it, a few bytes, to send its "
        "stored answer again (a broker under load may drop an uplink), then again as often, at most "
        f"{MAX_ASKS_AGAIN} times a phase (capped at a third of the phase's timeout, so that every phase asks "
        "at least twice)",
    )
    holdout_dir: str | None = setting(
        None,
        "a folder holding data.npz in the format of a device's --data-dir, on whose test_x, test_y the server "
        "scores its own global model every evaluated round (FedAvg, DFL, FedZKT): the run's first figure, which "
        "no device can spoof (train_x, train_y may be empty; default: none, the devices' self-reported scores only)",
    )
    connect_timeout: float = 60.0

    def validate(self) -> None:
        timeouts = ("round_timeout", "eval_timeout", "hello_timeout", "max_wait", "connect_timeout", "ask_again")
        for name in (*timeouts, "step_seconds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        if self.step_grace < 0:
            raise ValueError(f"step_grace: must be >= 0, got {self.step_grace}")
        if self.min_clients < 1:
            raise ValueError(f"min_clients: must be >= 1, got {self.min_clients}")


@dataclass
class ClientStats:
    """One client's connection and lateness record over the run."""

    online: bool = False
    connects: int = 0
    """Times the client came online: its first connection and every reconnection (an "online" after
    an "offline"; a client says "online" again while online when it is sent its config again)."""
    disconnects: int = 0
    """"offline" statuses seen (clean stops and last wills)."""
    selected: int = 0
    on_time: int = 0
    late: int = 0
    """Uplinks that arrived after their round had closed (discarded)."""
    missed: int = 0
    """Rounds the client was selected for and sent nothing in time."""
    latency_seconds: list[float] = field(default_factory=list)
    """Request-to-uplink seconds of its on-time uplinks."""

    def summary(self) -> dict[str, Any]:
        values = {k: v for k, v in asdict(self).items() if k not in ("latency_seconds", "online")}
        lat = self.latency_seconds
        values["mean_latency_seconds"] = round(float(np.mean(lat)), 4) if lat else None
        values["max_latency_seconds"] = round(float(np.max(lat)), 4) if lat else None
        return values


SELF_REPORTED = ("client_accuracy", "accuracy", "accuracy_std", "accuracy_median")
"""A deployed round's figures that only the devices know: each scores itself on its own test split
and the server cannot check it (the median is robust to one liar, ``suspect_scores`` flags a score
that does not fit; ``server_model_accuracy`` is the server's own, on its --holdout-dir)."""


@dataclass
class DeployedRoundRecord(RoundRecord):
    """A round's record plus what the wire carried: MQTT payload bytes (chunk headers included)
    of every message of the round, control and evaluation messages too; and the server's memory."""

    wire: dict[str, int] = field(default_factory=dict)
    self_reported: list[str] = field(default_factory=lambda: list(SELF_REPORTED))
    """The fields of this record that are the devices' own claims (`SELF_REPORTED`)."""
    peak_rss_mb: float | None = None
    """The server process's peak resident memory so far, in MiB, at the round's end: a round's
    growth over the round before is what the round cost (a test compares the peak under an attack
    with the peak before it)."""


@dataclass
class _Phase:
    """One send_and_receive: the requests out, the answers in."""

    verb: str
    round: int
    expected: list[str]
    requests: dict[str, Message]
    sent_at: float
    got: dict[str, Incoming] = field(default_factory=dict)
    last_sent: dict[str, float] = field(default_factory=dict)
    last_asked_again: dict[str, float] = field(default_factory=dict)
    asks_again: dict[str, int] = field(default_factory=dict)
    """How often each client was asked to answer again (at most MAX_ASKS_AGAIN)."""
    resent: set[str] = field(default_factory=set)
    """Clients whose request went out again when they came online: once a phase (and once more
    after each reconnection of the server)."""
    timeout: float = 0.0
    """Seconds the phase waits (after its start; on a verb that asks, after the server's last answer
    to a step)."""
    min_needed: int = 0
    """Answers the phase waits for past ``timeout`` (up to ``ends_at``): the hello's quorum."""
    skip_offline: bool = False
    """Stop waiting once every client still missing is offline."""
    asks: bool = False
    """The verb asks: its clients' step requests go to the loop, which answers each."""
    steps: int = 0
    """The most step requests a client makes (its hard deadline grows with them)."""
    pending: dict[str, Incoming] = field(default_factory=dict)
    """Each client's step request that the loop has not answered yet."""
    last_step: dict[str, int] = field(default_factory=dict)
    last_answer: dict[str, Message] = field(default_factory=dict)
    step_resends: dict[str, int] = field(default_factory=dict)
    """How often each client's ``last_answer`` went out again (at most MAX_STEP_RESENDS)."""
    active_at: float = 0.0
    """When the server last answered one of its clients' steps (a verb that asks waits from there,
    up to ``ends_at``)."""
    ends_at: float = float("inf")
    """The phase's hard deadline: no message extends it."""
    asked: frozenset[str] = frozenset()
    """``expected`` as a set: every message is checked against it (thousands of clients)."""

    def __post_init__(self) -> None:
        self.asked = frozenset(self.expected)


class MqttChannel:
    """The loop's channel over MQTT (see the module doc); `stats` keeps each client's record."""

    def __init__(
        self,
        config: SimulationConfig,
        settings: DeploymentSettings,
        client_ids: list[str],
        topics: Topics,
        bounds: Bounds | None = None,
    ) -> None:
        """``bounds``: for a client, the largest content the method can accept from it on each up
        verb, None where open (`edgefd.runtime.limits.method_bounds`); asked at the start of every
        round, after which larger messages are refused before they are buffered (the rule, with the
        run's --max-message-bytes: `edgefd.runtime.limits`, the rule a simulation applies too)."""
        self.limits = MessageLimits(config.max_message_bytes, bounds)
        self.config = config
        self.settings = settings
        self.run = settings.run
        """The run's name: every message of the run carries it."""
        self.client_ids = list(client_ids)
        self.topics = topics
        self.stats = {cid: ClientStats() for cid in self.client_ids}
        self.endpoint = MqttEndpoint(
            settings.broker,
            topics,
            f"edgefd-server-{settings.run}",
            chunk_size=settings.broker.chunk_size,
            max_message_bytes=config.max_message_bytes or OPEN_MESSAGE_BYTES,
            limit=self._largest_message,
            stale_retained=("up", "status"),
        )
        self.endpoint.subscribe(f"{topics.root}/up/+/+")
        self.endpoint.subscribe(f"{topics.root}/status/+")
        self._reconnected = False
        self._unsure: set[str] = set()
        """Clients not heard from since the server's own reconnection: their next "online" may be a
        reconnection of theirs the server never saw go offline (a broker restart loses no will)."""
        self.endpoint.on_connect_hooks.append(self._on_connect)
        self.phase: _Phase | None = None
        self._wire_at_last_record: dict[str, int] | None = None
        """The wire's totals when the last round's record was made (None: before the first message)."""
        self._limits_round: int | None = None
        self._configs_due = time.monotonic() + CONFIG_RESEND_SECONDS
        self._last_received = 0.0
        """When the server's thread last took a message (see `_ask_again`)."""
        self._held: dict[str, str] = {}
        """The clients whose steps phase was cut at its hard deadline, and how, since the last delivery."""
        self.last_seen: dict[str, float] = {}
        """Per client, when its last message arrived (time.monotonic), whatever became of it."""
        self.refusals: dict[str, Counter] = {cid: Counter() for cid in self.client_ids}
        """Per client, its messages refused so far, by reason: by the transport (counted at each
        delivery) and by the checks here."""

    def _largest_message(self, direction: str, cid: str, verb: str) -> int | None:
        """What the server takes on a topic, decided from the topic alone, before any byte of the
        message is buffered: nothing from a client not in the run, small statuses, and what the
        run's limits take from that client on that verb (`edgefd.runtime.limits`)."""
        if cid not in self.stats or direction not in ("up", "status"):
            return None
        if direction == "status":
            return STATUS_MAX_BYTES
        return self.limits.largest(cid, verb)

    def _budget_share(self, cid: str) -> int:
        """A client's share of the reassembly budget: twice the largest message it may send on any
        of its topics (the frames' overhead, and a resend beside an unfinished first copy). Each
        client gets its own, and the whole budget is their sum: a device that starts messages and
        never finishes them exhausts only its share, and every other device's messages still fit.
        The cost: the server may hold every client's share at once, what the run's messages need
        (twice each client's largest; where a size is open, twice 64 MiB or --max-message-bytes)."""
        verbs = [("status", "")] + [("up", verb) for verb in VERBS if VERBS[verb].answers]
        return 2 * max(self._largest_message(direction, cid, verb) or 0 for direction, verb in verbs)

    # ------------------------------------------------------------------ the Channel protocol
    def _follow_the_limits(self, round: int) -> None:
        """At a round's first message: the method's bounds of the round (they follow what it
        learnt, e.g. from the hellos), and the reassembly budget and inbox sized to them."""
        if round == self._limits_round:
            return
        self._limits_round = round
        self.limits.update(self.client_ids)
        shares = {cid: self._budget_share(cid) for cid in self.client_ids}
        self.endpoint.size_budget(shares)
        # room for four of the largest messages waiting for this thread: at least as for open sizes
        largest = max(shares.values(), default=0) // 2
        self.endpoint.size_inbox(max(largest, self.config.max_message_bytes or OPEN_MESSAGE_BYTES))

    def send_and_receive(self, messages: Sequence[Message], deadline: Deadline) -> Delivery:
        """Publish each message on its client's topic and collect what each client sends next until
        each came or the deadline passed (see the module doc), in client-id order: its answer, or on
        a verb that asks, a step request, whose answer the loop sends with the next call. A
        training verb waits first until at least `min_clients` clients are online; the hello waits
        past its timeout (up to `max_wait`) for `min_clients` hellos."""
        if self._wire_at_last_record is None:
            self._wire_at_last_record = self._wire_totals()
        if not messages:
            return Delivery({})
        if all(m.is_answer for m in messages):
            return self._answer_steps(messages)
        spec, round = VERBS[messages[0].verb], messages[0].round
        requests = {m.receiver: m for m in messages}
        if len(requests) != len(messages) or any(m.verb != spec.name or m.round != round for m in messages):
            raise ValueError("send_and_receive: one message per client, all of one verb and round")
        self._follow_the_limits(round)
        if spec.trains:
            self._wait_online(self.settings.min_clients)
        expected = sorted(requests)
        if spec.trains:
            for cid in expected:
                self.stats[cid].selected += 1
        timeout = {
            Wait.HELLO: self.settings.hello_timeout,
            Wait.ROUND: self.settings.round_timeout,
            Wait.EVAL: self.settings.eval_timeout,
        }[deadline.wait]
        now = time.monotonic()
        steps = deadline.steps or 0
        phase = _Phase(
            spec.name,
            round,
            expected,
            requests,
            now,
            timeout=timeout,
            min_needed=min(self.settings.min_clients, len(expected)) if deadline.wait is Wait.HELLO else 0,
            skip_offline=deadline.skip_offline,
            asks=spec.asks,
            steps=steps,
            active_at=now,
            ends_at=now + timeout + (self.step_allowance(steps) if spec.asks else self.settings.max_wait),
        )
        self._open(phase)
        return self._delivery(phase)

    def step_allowance(self, steps: int) -> float:
        """The seconds a steps phase of ``steps`` steps gets past --round-timeout: --step-seconds a
        step, at most --step-grace. The steps come from what the client's hello declared; the grace
        is the server's, so no claim holds a round longer than --round-timeout + --step-grace."""
        return min(self.settings.step_seconds * steps, self.settings.step_grace)

    def _answer_steps(self, answers: Sequence[Message]) -> Delivery:
        """Publish the loop's answers to the step requests its last delivery brought, and collect
        again in the same phase: its clients' next requests, or their answers."""
        phase = self.phase
        for answer in answers:
            cid = answer.receiver
            pending = phase.pending.get(cid) if phase is not None else None
            if phase is None or pending is None or (answer.round, answer.step) != (phase.round, pending.message.step):
                raise ValueError(f"send_and_receive: {cid} waits for no answer to step {answer.step} of this phase")
            del phase.pending[cid]
            phase.last_step[cid], phase.last_answer[cid], phase.step_resends[cid] = answer.step, answer, 0
            if answer.content is not None:  # taken; a refusal (no content) buys the client no time
                phase.active_at = time.monotonic()
            self.endpoint.publish(self.topics.down(cid, STEP), answer)
        assert phase is not None  # checked with each answer
        return self._delivery(phase)

    def _delivery(self, phase: _Phase) -> Delivery:
        """Wait in ``phase``, then what it brought: each client's answer or pending step request.
        The phase stays open while a request waits for the loop's answer."""
        self._wait(phase)
        came = {cid: incoming.message for cid, incoming in {**phase.got, **phase.pending}.items()}
        if not phase.pending:
            self._close(phase)
        held, self._held = self._held, {}
        return Delivery(dict(sorted(came.items())), self._refused_on_the_wire(), held)

    def send(self, messages: Sequence[Message]) -> None:
        """Publish messages that get no answer; a stop is retained (a client reconnecting now still
        gets it) and the server waits (a while) until the broker has them all."""
        for message in messages:
            self.endpoint.publish(self.topics.down(message.receiver, message.verb), message, retain=True)
        if not self.endpoint.flush(timeout=STOP_FLUSH_SECONDS):
            log.warning(
                "the broker has not acknowledged every %s after %.0f s; some clients may not have it",
                "/".join(sorted({m.verb for m in messages})),
                STOP_FLUSH_SECONDS,
            )

    def close(self) -> None:
        """Disconnect from the broker."""
        self.endpoint.stop()

    def deployed_record(self, record: RoundRecord) -> DeployedRoundRecord:
        """A round's record as a deployment keeps it: with what the wire carried since the round
        before's (MQTT bytes and frames) and the server's memory. Not part of the `Channel`: the
        server runtime calls it as it records each round."""
        values = {f.name: getattr(record, f.name) for f in fields(record)}
        before = self._wire_at_last_record if self._wire_at_last_record is not None else self._wire_totals()
        self._wire_at_last_record = self._wire_totals()
        wire = {k: v - before[k] for k, v in self._wire_at_last_record.items()}
        deployed = DeployedRoundRecord(**values, wire=wire, peak_rss_mb=peak_rss_mb())
        self._log_round(deployed)
        return deployed

    def _refused_on_the_wire(self) -> dict[str, str]:
        """The frames and messages the transport refused from each client since the last delivery
        (before they were ever a message the loop could see), by reason, with the verbs they came
        on, in one line however many frames it sent. An oversized frame on a verb the method takes
        no content on (FD's hello, FedAvg's step) is counted as VERB_NOT_EXPECTED."""
        rejected: dict[str, str] = {}
        per_client: dict[str, Counter] = {}
        verbs: dict[tuple[str, str], set[str]] = {}
        for (cid, verb, reason), n in self.endpoint.take_refused().items():
            if cid not in self.stats:
                continue
            if reason == "OversizedError" and self.limits.bound(cid, verb) == 0:
                reason = VERB_NOT_EXPECTED
            per_client.setdefault(cid, Counter())[reason] += n
            self.refusals[cid][reason] += n
            verbs.setdefault((cid, reason), set()).add(verb)
        for cid, reasons in sorted(per_client.items()):
            said = "; ".join(
                f"{reason} ({n} on {', '.join(sorted(verbs[cid, reason]))})" for reason, n in sorted(reasons.items())
            )
            rejected[cid] = said  # the loop names each in a warning
        return rejected

    # ------------------------------------------------------------------ the run's start and end
    def publish_configs(self, client_ids: list[str] | None = None) -> None:
        """Every client's config (or those of `client_ids`), retained: a client that connects later
        still gets it."""
        client_ids = self.client_ids if client_ids is None else client_ids
        for cid in client_ids:
            message = deploy_messages.config_message(self.config, cid, self.settings.run, self.endpoint.versions)
            self.endpoint.publish(self.topics.down(cid, deploy_messages.CONFIG), message, retain=True)
        self._configs_due = time.monotonic() + max(CONFIG_RESEND_SECONDS, len(client_ids) / CONFIG_RESEND_RATE)

    def _resend_configs(self) -> None:
        """Every CONFIG_RESEND_SECONDS of waiting, the configs of the clients not online go out again.
        RabbitMQ's MQTT plugin (3.10) keeps a retained message on the node that took it and hands it
        only to subscriptions of that exact topic, so a client that subscribes after the server
        published (``down/<id>/+``, on any node) gets no config from the store; a message published
        now reaches its subscription on every node."""
        if time.monotonic() < self._configs_due:
            return
        missing = [cid for cid, stats in self.stats.items() if not stats.online]
        if missing:
            log.debug("configs published again to %d client(s) not online: %s", len(missing), ", ".join(missing[:5]))
            self.publish_configs(missing)
        else:
            self._configs_due = time.monotonic() + CONFIG_RESEND_SECONDS

    def clear_stops(self) -> None:
        """A run starts: forget the retained stops an earlier run of this name left behind."""
        for cid in self.client_ids:
            for spec in VERBS.values():
                if spec.ends_run:
                    self.endpoint.clear_retained(self.topics.down(cid, spec.name))

    def clear_configs(self) -> None:
        """The run is over: its retained configs go (a client started later finds no run)."""
        for cid in self.client_ids:
            self.endpoint.clear_retained(self.topics.down(cid, deploy_messages.CONFIG))
        self.endpoint.flush(timeout=STOP_FLUSH_SECONDS)

    # ------------------------------------------------------------------ waiting for messages
    def _open(self, phase: _Phase) -> None:
        """Make ``phase`` the open one and send its requests; a phase still open (its loop stopped
        answering a client's steps) is closed first."""
        if self.phase is not None:
            log.warning("%s %d: closed unfinished: the server went on", self.phase.verb, self.phase.round)
            self.phase.pending.clear()
            self._close(self.phase)
        self.phase = phase
        for cid in phase.expected:
            self._send_request(cid)

    def _close(self, phase: _Phase) -> None:
        """The phase is over: who missed it, and who held it to its hard deadline."""
        self.phase = None
        if VERBS[phase.verb].trains:
            for cid in phase.expected:
                if cid not in phase.got:
                    self.stats[cid].missed += 1
        if phase.asks:
            self._cut_at_hard_deadline(phase)

    def _wait(self, phase: _Phase) -> None:
        """Take messages until every client of the phase answered or has a step request waiting
        for the loop, or the phase's deadline passed (see the module doc). Every phase has a hard
        deadline from its start that no message extends: `timeout` plus `max_wait` while it waits
        for `min_needed` answers; on a verb that asks, `timeout` + `step_allowance(steps)`, and
        in it the client's steps keep the phase open `timeout` after each the server answered,
        never past that deadline."""
        verb, round, expected, timeout = phase.verb, phase.round, phase.expected, phase.timeout
        warned = False
        scanned = time.monotonic()
        while len(phase.got) + len(phase.pending) < len(expected):
            now = time.monotonic()
            deadline = min(phase.active_at + timeout, phase.ends_at)
            # twice a second, not at every message: the scans are over every client still waited for
            if now - scanned >= 0.5:
                scanned = now
                if not phase.asks:  # a client in the middle of its steps asks by itself
                    self._ask_again(phase, now, min(self.settings.ask_again, timeout / 3))
                if (
                    phase.skip_offline
                    and now > phase.sent_at + 1.0
                    and not any(self.stats[c].online for c in expected if c not in phase.got)
                ):
                    break
            if now >= deadline and len(phase.got) >= phase.min_needed:
                break
            if now >= phase.ends_at:
                if not phase.asks:  # only a phase that waits for min_needed gets here (it closes at `deadline`)
                    self.phase = None
                    raise TooFewClients(
                        f"only {len(phase.got)} of the {phase.min_needed} clients needed (--min-clients) sent "
                        f"their {verb} within {timeout + self.settings.max_wait:g} s; the run stopped"
                    )
                break
            if now >= deadline and not warned:
                log.info(
                    "%s %d: deadline passed with %d answer(s); waiting for %d (--min-clients)",
                    verb,
                    round,
                    len(phase.got),
                    phase.min_needed,
                )
                warned = True
            self._pump(min(0.1, max(0.0, deadline - now)) or 0.1)

    def _cut_at_hard_deadline(self, phase: _Phase) -> None:
        """A steps phase that ended at its hard deadline while its client was still sending steps
        (not silent for its timeout): the client held the round, and the round's record says so."""
        now, timeout, steps = time.monotonic(), phase.timeout, phase.steps
        for cid in phase.expected:
            if cid in phase.got or now < phase.ends_at or phase.active_at + timeout <= phase.ends_at:
                continue
            seconds = phase.ends_at - phase.sent_at
            allowance = f"{steps} step(s) x --step-seconds {self.settings.step_seconds:g}"
            if self.step_allowance(steps) < self.settings.step_seconds * steps:
                allowance = f"--step-grace {self.settings.step_grace:g}, less than its {allowance}"
            how = (
                f"its steps phase was cut at its hard deadline, {seconds:.0f} s after it began "
                f"(--round-timeout {timeout:g} + {allowance}), after {phase.last_step.get(cid, 0)} step(s)"
            )
            log.warning("%s %d: %s held the round: %s", phase.verb, phase.round, cid, how)
            self._held[cid] = how

    def _wait_online(self, needed: int) -> None:
        """Until ``needed`` clients are online; `TooFewClients` after `max_wait` seconds."""
        started = time.monotonic()
        logged = False
        while sum(s.online for s in self.stats.values()) < needed:
            if time.monotonic() - started > self.settings.max_wait:
                raise TooFewClients(
                    f"only {sum(s.online for s in self.stats.values())} of the {needed} clients needed "
                    f"(--min-clients) came online within {self.settings.max_wait:g} s (--max-wait); the run stopped"
                )
            if not logged:
                log.info("waiting for %d client(s) online (%d now)", needed, sum(s.online for s in self.stats.values()))
                logged = True
            self._pump(0.1)

    def _pump(self, timeout: float) -> None:
        """Handle one incoming message (or a reconnection), waiting at most `timeout` seconds."""
        if self._reconnected:
            self._reconnected = False
            self._unsure = set(self.client_ids)
            self.publish_configs()
            if self.phase is not None:
                self.phase.resent.clear()
                for cid in self.phase.expected:
                    if cid not in self.phase.got:
                        self._send_request(cid)
        self._resend_configs()
        self.endpoint.evict_stale()  # also while no frame comes: a device that stopped sends none
        try:
            msg = self.endpoint.inbox.get(timeout=timeout)
        except queue.Empty:
            return
        self._last_received = time.monotonic()
        self._handle(msg)

    def _handle(self, msg: Incoming) -> None:
        cid, message = msg.client_id, msg.message
        topic = self.topics.status(cid) if msg.direction == "status" else self.topics.up(cid, msg.verb)
        if cid not in self.stats:
            self.endpoint.reject("unknown-client", topic, f"{cid!r} is not a client of this run")
            return
        self.last_seen[cid] = msg.received_at
        if message.sender != cid or message.receiver != SERVER:
            self._reject(
                cid,
                "sender-mismatch",
                topic,
                f"message from {message.sender!r} to {message.receiver!r} on {cid!r}'s topic",
            )
            return
        expected_verb = deploy_messages.STATUS if msg.direction == "status" else msg.verb
        if message.verb != expected_verb or message.run != self.settings.run:
            self._reject(
                cid, "wrong-topic", topic, f"a {message.verb!r} message of run {message.run!r} on {expected_verb!r}"
            )
            return
        # A device's last will is written before it knows the server, in the oldest version it speaks:
        # what it writes live says which version it chose.
        will = msg.direction == "status" and deploy_messages.state_of(message) == deploy_messages.OFFLINE
        if msg.version != self.endpoint.version_for(cid) and not will:
            log.info("%s writes protocol version %d: the server answers it in that version", cid, msg.version)
            self.endpoint.write_to(cid, msg.version)
        if msg.direction == "status":
            self._on_status(cid, message, topic, msg.received_at)
            return
        if msg.verb == STEP:
            self._on_step(msg, topic)
            return
        phase = self.phase
        stats = self.stats[cid]
        if phase is not None and msg.verb == phase.verb and message.round == phase.round:
            spec = VERBS[msg.verb]
            if cid not in phase.asked:
                self._reject(cid, "unrequested", topic, f"{cid} was not asked for {phase.verb} {phase.round}")
            elif cid in phase.got:
                log.debug("repeat of %s %d from %s ignored", phase.verb, phase.round, cid)
            elif not message.is_answer:
                self._reject(cid, "not-an-answer", topic, f"a {msg.verb} message that answers nothing")
            elif spec.check_answer is not None and (problem := _problem(spec.check_answer, message)):
                self._reject(cid, spec.refused_as, topic, problem)
            else:
                phase.got[cid] = msg
                phase.pending.pop(cid, None)  # its work is over: no request of it waits
                if spec.trains:
                    stats.on_time += 1
                    stats.latency_seconds.append(msg.received_at - phase.sent_at)
            return
        current = phase.round if phase is not None else self.config.rounds + 1
        if VERBS[msg.verb].trains and 1 <= message.round <= current:
            stats.late += 1
            log.info("late uplink of round %d from %s discarded", message.round, cid)
        elif message.round <= current:
            log.debug("stale %s %d from %s ignored", msg.verb, message.round, cid)
        else:
            self._reject(cid, "future-round", topic, f"{msg.verb} for round {message.round}")

    def _reject(self, cid: str, reason: str, topic: str, detail: str) -> None:
        """Refuse a message of client ``cid`` that the transport took: counted and logged by the
        endpoint, and against the client."""
        self.endpoint.reject(reason, topic, detail)
        self.refusals[cid][reason] += 1

    def _on_step(self, msg: Incoming, topic: str) -> None:
        """A client's step request: taken once, in order, for the loop to answer; a repeat of one
        answered gets the same answer again."""
        cid, request, phase = msg.client_id, msg.message, self.phase
        if phase is None or not phase.asks or request.round != phase.round or cid not in phase.asked:
            current = phase.round if phase is not None else self.config.rounds + 1
            if request.round > current:
                self._reject(cid, "future-round", topic, f"step for round {request.round}")
            else:
                self._reject(cid, "unrequested", topic, f"a step of round {request.round} from {cid}")
            return
        step = request.step
        if step < 1 or request.is_answer:
            self._reject(cid, "bad-step", topic, f"a step request needs a step number >= 1, got {step}")
            return
        if cid in phase.pending:
            if step != phase.pending[cid].message.step:
                self._reject(
                    cid, "step-out-of-order", topic, f"step {step} while step {phase.pending[cid].message.step} waits"
                )
            return  # else a repeat of the request the loop is answering
        last = phase.last_step.get(cid, 0)
        if step == last and cid in phase.last_answer:
            resends = phase.step_resends.get(cid, 0)
            if resends >= MAX_STEP_RESENDS:
                self._reject(cid, "step-repeated", topic, f"step {step} asked {MAX_STEP_RESENDS + 1} times")
                return
            phase.step_resends[cid] = resends + 1
            self.endpoint.publish(self.topics.down(cid, STEP), phase.last_answer[cid])  # its answer was lost
            return
        if step != last + 1:
            if step != 1:
                self._reject(cid, "step-out-of-order", topic, f"step {step} after step {last}")
                return
            log.warning("%s restarted its round-%d steps after step %d", cid, phase.round, last)
        phase.pending[cid] = msg

    def _on_status(self, cid: str, message: Message, topic: str, received_at: float) -> None:
        state = deploy_messages.state_of(message)
        if state is None:
            content = message.content
            shown = None if content is None else (content.kind, str(content.scalars)[:200])
            self._reject(cid, "bad-status", topic, f"not a status: {shown}")
            return
        stats = self.stats[cid]
        unsure = cid in self._unsure
        self._unsure.discard(cid)
        if state == deploy_messages.ONLINE:
            came_online = not stats.online
            if came_online:  # an "online" repeated while online (a config sent again) is no new connection
                stats.connects += 1
                log.info("%s is online", cid)
            stats.online = True
            phase = self.phase
            # A client that (re)connected after its request went out may have missed it (its session
            # is clean): it gets the request once more, once a phase. Each copy may be a whole
            # model, and the client decides when it says "online".
            if (
                (came_online or unsure)
                and phase is not None
                and cid in phase.asked
                and cid not in phase.got
                and cid not in phase.resent
                and received_at > phase.last_sent.get(cid, 0.0)
            ):
                phase.resent.add(cid)
                self._send_request(cid)
        else:
            if stats.online:
                log.info("%s went offline", cid)
            stats.disconnects += stats.online
            stats.online = False

    def _ask_again(self, phase: _Phase, now: float, interval: float) -> None:
        """Ask online clients silent for `interval` seconds to send their answer again. One still
        working ignores it (it answers once done); one whose answer was lost sends its stored answer;
        a repeat of an answer already taken is ignored here."""
        if now - self._last_received < QUIET_BEFORE_ASKING_AGAIN:
            return
        again = [
            cid
            for cid in phase.expected
            if cid not in phase.got
            and self.stats[cid].online
            and phase.asks_again.get(cid, 0) < MAX_ASKS_AGAIN
            and now - max(phase.last_sent.get(cid, now), phase.last_asked_again.get(cid, 0.0)) >= interval
        ]
        for cid in again:
            phase.last_asked_again[cid] = now
            phase.asks_again[cid] = phase.asks_again.get(cid, 0) + 1
            self.endpoint.publish(self.topics.down(cid, phase.verb), deploy_messages.again(phase.requests[cid]))
        if again:
            log.info(
                "%s %d: asked %d silent client(s) to answer again: %s",
                phase.verb,
                phase.round,
                len(again),
                ", ".join(again[:5]),
            )

    def _send_request(self, cid: str) -> None:
        assert self.phase is not None  # only called while a phase is open
        request = self.phase.requests[cid]
        self.phase.last_sent[cid] = time.monotonic()
        self.endpoint.publish(self.topics.down(cid, request.verb), request)

    def _on_connect(self) -> None:
        # paho's thread: the run's thread re-sends configs and requests at its next _pump
        if self.endpoint.stats.connects > 1:
            self._reconnected = True

    # ------------------------------------------------------------------ accounting and logs
    def _wire_totals(self) -> dict[str, int]:
        s = self.endpoint.stats
        return {
            "up": sum(s.received_bytes.values()),
            "down": sum(s.sent_bytes.values()),
            "up_train": s.received_bytes["up/train"],
            "down_train": s.sent_bytes["down/train"],
            "frames_up": sum(s.received_frames.values()),
            "frames_down": sum(s.sent_frames.values()),
            "rejected": sum(s.rejected.values()),
        }

    def _log_round(self, record: DeployedRoundRecord) -> None:
        accuracy = "-" if record.accuracy is None else self_reported_said(record)
        if LOST_EVALUATION in record.lost:
            accuracy = "none (no client's accuracy came back)"
        server = record.server_model_accuracy.get(GLOBAL_MODEL)
        if server is not None:
            accuracy = f"{100 * server:.2f}% (the server's global model on its held-out set); devices' {accuracy}"
        arrived = len(record.selected) - len(record.late)
        wire_bytes = record.wire.get("up", 0) + record.wire.get("down", 0)
        frames = record.wire.get("frames_up", 0) + record.wire.get("frames_down", 0)
        log.info(
            "round %d/%d: %d/%d uplinks in time%s%s, accuracy %s, up %d B (wire %d B), down %d B (wire %d B), "
            "%d frames, %.0f B/s, %.2f s",
            record.round,
            self.config.rounds,
            arrived,
            len(record.selected),
            f" (missing: {', '.join(record.late)})" if record.late else "",
            f", held open by {', '.join(record.held)}" if record.held else "",
            accuracy,
            record.bytes_up,
            record.wire.get("up", 0),
            record.bytes_down,
            record.wire.get("down", 0),
            frames,
            wire_bytes / max(record.seconds, 1e-9),
            record.seconds,
        )


def self_reported_said(record: RoundRecord) -> str:
    """The devices' accuracies of a round as the log says them: the median first (one liar cannot
    move it past the honest devices), the mean, and the scores flagged."""
    assert record.accuracy is not None and record.accuracy_median is not None  # an evaluated round
    said = f"median {100 * record.accuracy_median:.2f}% (mean {100 * record.accuracy:.2f}%, self-reported)"
    if record.suspect_scores:
        said += f", suspect: {', '.join(record.suspect_scores)}"
    return said


def _problem(check: Callable[[Any], None], message: Message) -> str | None:
    """What ``check`` says is wrong with the message's content, or None."""
    try:
        check(message.content)
    except ValueError as error:
        return str(error)
    return None
