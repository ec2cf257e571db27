"""The clients of a deployed run, behind an MQTT broker: the loop's channel for `edgefd server`.

Each phase of a round sends one request per client (`down/<id>/hello|train|reply|eval`) and collects
the answers (`up/<id>/...`) until every one arrived or the phase's deadline passed:

- training rounds wait first until at least `min_clients` clients are online (their retained
  status says so); an uplink that comes after its round closed is counted as late and discarded;
- a client that comes online while its request is outstanding, or a reconnection of the server
  itself (a broker restart), gets the outstanding requests again;
- an online client without an answer after `ask_again` seconds is asked, in a few bytes, to send
  its answer again (a broker under load may have dropped it); the client answers from its cache;
- while the server waits, it publishes again, every few seconds, the configs of the clients it does
  not see online (a broker may not hand a retained config to every client: RabbitMQ's MQTT plugin);
- an evaluation does not wait for clients that are offline;
- anything else that arrives (a stranger's client id, a payload whose sender differs from its
  topic, an answer nobody asked for, a future round) is rejected and counted, never raised.

What the loop does with the answers (selection, stragglers, aggregation, the accuracy average,
the records) is `edgefd.runtime.loop.Federation`'s, as in a simulation.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from edgefd.deploy import messages as wire
from edgefd.deploy.mqtt_transport import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_MESSAGE_BYTES,
    BrokerSettings,
    Incoming,
    MqttEndpoint,
    Topics,
)
from edgefd.protocol import Payload, encoded_size
from edgefd.runtime.channel import Scores
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.records import HELLO_ROUND, RoundRecord

if TYPE_CHECKING:
    from torch import nn

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
STATUS_MAX_BYTES = 4 * 1024
"""Largest status message the server takes (an online/offline payload is ~100 bytes)."""
EVAL_MAX_BYTES = 64 * 1024
"""Largest eval answer the server takes (a few scalars)."""
WRAPPING_BYTES = 1024
"""What the deployment adds to a method's message (a step number; an "empty" answer)."""


@dataclass
class DeploymentSettings:
    """How a deployed run talks and waits (what it learns is the SimulationConfig)."""

    run: str
    """Run name: the topics are edgefd/<run>/..."""
    broker: BrokerSettings = field(default_factory=BrokerSettings)
    round_timeout: float = 60.0
    """Seconds a round waits for uplinks after sending its downlinks."""
    eval_timeout: float = 30.0
    """Seconds an evaluation waits for the clients' accuracies (offline clients are not waited for)."""
    hello_timeout: float = 600.0
    """Seconds the start waits for every client's hello (then goes on with those it has)."""
    min_clients: int = 1
    """A round starts only when at least this many clients are online; the start waits for at
    least this many hellos (all of them until `hello_timeout`)."""
    max_wait: float = 3600.0
    """Seconds the run waits for `min_clients` before it goes on with fewer (logged as an error)."""
    ask_again: float = 10.0
    """Seconds without an answer from an online client after which the server asks it, and then
    asks again this often, to send its answer again (at most a third of the phase's timeout, so that
    every phase asks at least twice): a broker that drops messages under load (a full session queue)
    would otherwise lose an honest uplink for the whole round."""
    chunk_size: int = DEFAULT_CHUNK_SIZE
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    connect_timeout: float = 60.0

    def validate(self) -> None:
        for name in ("round_timeout", "eval_timeout", "hello_timeout", "max_wait", "connect_timeout", "ask_again"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
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


@dataclass
class DeployedRoundRecord(RoundRecord):
    """A round's record plus what the wire carried: MQTT payload bytes (chunk headers included)
    of every message of the round, control and evaluation messages too."""

    wire: dict[str, int] = field(default_factory=dict)


@dataclass
class _Phase:
    verb: str
    round: int
    expected: list[str]
    requests: dict[str, tuple[str, Any]]
    sent_at: float
    got: dict[str, Incoming] = field(default_factory=dict)
    last_sent: dict[str, float] = field(default_factory=dict)
    last_asked_again: dict[str, float] = field(default_factory=dict)
    answer: Callable[[Payload], Payload] | None = None
    """The server's answer to a step request (a ``steps`` phase only)."""
    last_step: int = 0
    last_reply: Payload | None = None
    active_at: float = 0.0
    """When the phase last heard from its client (a ``steps`` phase waits from there)."""
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
        bounds: Callable[[str], dict[str, int | None]] | None = None,
    ) -> None:
        """``bounds``: for a client, the largest message (encoded bytes) the method can accept from it
        on each up verb, None where open (``edgefd.algorithms.schema.message_bound``); asked at the
        start of every round, after which larger messages are refused before they are buffered."""
        self.bounds = bounds
        self._largest: dict[str, dict[str, int | None]] = {}
        self.config = config
        self.settings = settings
        self.client_ids = list(client_ids)
        self.topics = topics
        self.stats = {cid: ClientStats() for cid in self.client_ids}
        self.endpoint = MqttEndpoint(
            settings.broker,
            topics,
            f"edgefd-server-{settings.run}",
            chunk_size=settings.chunk_size,
            max_message_bytes=settings.max_message_bytes,
            limit=self._largest_message,
        )
        self.endpoint.subscribe(f"{topics.root}/up/+/+")
        self.endpoint.subscribe(f"{topics.root}/status/+")
        self._reconnected = False
        self.endpoint.on_connect_hooks.append(self._on_connect)
        self.phase: _Phase | None = None
        self._bytes: dict[int, list[int]] = {}
        self._wire_at_begin: dict[str, int] = {}
        self._configs_due = time.monotonic() + CONFIG_RESEND_SECONDS
        self._last_received = 0.0
        """When the server's thread last took a message (see `_ask_again`)."""

    def _largest_message(self, direction: str, cid: str, verb: str) -> int | None:
        """What the server takes on a topic, decided from the topic alone, before any byte of the
        message is buffered: nothing from a client not in the run, small statuses and eval answers,
        method messages up to --max-message-bytes."""
        if cid not in self.stats or direction not in ("up", "status"):
            return None
        if direction == "status":
            return STATUS_MAX_BYTES
        if verb in ("eval", "reply"):  # an accuracy; an acknowledgement
            return EVAL_MAX_BYTES
        bound = self._largest.get(cid, {}).get(verb)
        if bound is None:
            return self.settings.max_message_bytes
        return min(bound + WRAPPING_BYTES, self.settings.max_message_bytes)

    # ------------------------------------------------------------------ the Channel protocol
    def hello(self) -> dict[str, Payload]:
        requests = {
            cid: (self.topics.down(cid, "hello"), wire.empty(wire.SERVER, HELLO_ROUND)) for cid in self.client_ids
        }
        got = self._collect(
            "hello",
            HELLO_ROUND,
            self.client_ids,
            requests,
            self.settings.hello_timeout,
            min_needed=min(self.settings.min_clients, len(self.client_ids)),
        ).got
        hellos = {cid: msg.payload for cid, msg in got.items() if msg.payload.kind != wire.EMPTY}
        self._count(HELLO_ROUND, sum(got[cid].nbytes for cid in hellos), 0)
        return hellos

    def begin(self, round: int) -> None:
        if self.bounds is not None:  # replaced whole: paho's thread reads it
            self._largest = {cid: self.bounds(cid) for cid in self.client_ids}
            # room for every client's largest known message at once (twice: frames' overhead), on top
            # of the default room for the messages whose size is open
            known = sum(max([b for b in verbs.values() if b is not None] or [0]) for verbs in self._largest.values())
            self.endpoint.budget.max_bytes = 2 * (self.settings.max_message_bytes + known)
        self._wire_at_begin = self._wire_totals()
        if round != HELLO_ROUND:
            self._wait_online(self.settings.min_clients)

    def train(self, round: int, downlinks: dict[str, Payload | None]) -> dict[str, Payload | None]:
        bytes_down = sum(encoded_size(p) for p in downlinks.values() if p is not None)
        requests = {cid: (self.topics.down(cid, "train"), wire.request(p, round)) for cid, p in downlinks.items()}
        for cid in downlinks:
            self.stats[cid].selected += 1
        got = self._collect("train", round, list(downlinks), requests, self.settings.round_timeout, min_needed=0).got
        for cid in downlinks:
            if cid not in got:
                self.stats[cid].missed += 1
        answered = {cid: (None if msg.payload.kind == wire.EMPTY else msg.payload) for cid, msg in got.items()}
        self._count(round, sum(got[cid].nbytes for cid, p in answered.items() if p is not None), bytes_down)
        return answered

    def train_steps(
        self, round: int, client_id: str, answer: Callable[[Payload], Payload]
    ) -> dict[str, Payload | None]:
        """Ask one client to train with ``steps``, answer each numbered step request as it comes
        (``answer``, in order; a repeated request gets the same answer again), and wait for its
        final uplink. The client has ``round_timeout`` seconds after each message it sends."""
        self.stats[client_id].selected += 1
        requests = {client_id: (self.topics.down(client_id, "steps"), wire.request(None, round))}
        phase = self._collect("steps", round, [client_id], requests, self.settings.round_timeout, 0, answer=answer)
        if client_id not in phase.got:
            self.stats[client_id].missed += 1
            return {}
        final = wire.unwrap(phase.got[client_id].payload)
        self._count(round, 0 if final is None else phase.got[client_id].nbytes, 0)
        return {client_id: final}

    def reply(self, round: int, replies: dict[str, Payload]) -> list[str]:
        """Send each reply on ``down/<id>/reply`` and wait, as for uplinks (``round_timeout``), for
        the clients' acknowledgements: each answers "empty" once it has learnt from its reply."""
        requests = {cid: (self.topics.down(cid, "reply"), wire.request(p, round)) for cid, p in replies.items()}
        got = self._collect("reply", round, list(replies), requests, self.settings.round_timeout, min_needed=0).got
        self._count(round, 0, sum(encoded_size(p) for p in replies.values()))
        return list(got)

    def evaluate(self, round: int, states: dict[str, Payload | None]) -> dict[str, Scores]:
        requests = {
            cid: (self.topics.down(cid, "eval"), wire.request(states.get(cid), round)) for cid in self.client_ids
        }
        got = self._collect(
            "eval",
            round,
            self.client_ids,
            requests,
            self.settings.eval_timeout,
            min_needed=0,
            stop_when_rest_offline=True,
        ).got
        return {cid: {"accuracy": wire.accuracy_of(msg.payload)} for cid, msg in got.items()}  # checked on arrival

    def score_server_models(self, models: Callable[[], dict[str, nn.Module]]) -> dict[str, float]:
        """Nothing to score with: a deployment's server holds no test data (``models`` is not called)."""
        return {}

    def round_bytes(self, round: int) -> tuple[int, int]:
        up, down = self._bytes.get(round, (0, 0))
        return up, down

    def _count(self, round: int, up: int, down: int) -> None:
        """Method payload bytes of ``round``, as the codec counts them (what `simulate` counts)."""
        totals = self._bytes.setdefault(round, [0, 0])
        totals[0] += up
        totals[1] += down

    def finish(self, record: RoundRecord) -> DeployedRoundRecord:
        values = {f.name: getattr(record, f.name) for f in fields(record)}
        deployed = DeployedRoundRecord(**values, wire=self._wire_delta(self._wire_at_begin))
        self._log_round(deployed)
        return deployed

    # ------------------------------------------------------------------ the run's start and end
    def publish_configs(self, client_ids: list[str] | None = None) -> None:
        """Every client's config (or those of `client_ids`), retained: a client that connects later
        still gets it."""
        payload = wire.config_payload(self.config)
        client_ids = self.client_ids if client_ids is None else client_ids
        for cid in client_ids:
            self.endpoint.publish(self.topics.down(cid, "config"), payload, retain=True)
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
            self.endpoint.clear_retained(self.topics.down(cid, "stop"))

    def stop_clients(self) -> None:
        """The run is over: every client gets a stop, retained, so that one that is reconnecting now
        still gets it; the server waits (a while) until the broker has them all."""
        for cid in self.client_ids:
            self.endpoint.publish(
                self.topics.down(cid, "stop"), wire.empty(wire.SERVER, self.config.rounds), retain=True
            )
            self.endpoint.clear_retained(self.topics.down(cid, "config"))
        if not self.endpoint.flush(timeout=STOP_FLUSH_SECONDS):
            log.warning(
                "the broker has not acknowledged every stop after %.0f s; some clients may not stop", STOP_FLUSH_SECONDS
            )

    # ------------------------------------------------------------------ waiting for messages
    def _collect(
        self,
        verb: str,
        round: int,
        expected: list[str],
        requests: dict[str, tuple[str, Any]],
        timeout: float,
        min_needed: int,
        stop_when_rest_offline: bool = False,
        answer: Callable[[Payload], Payload] | None = None,
    ) -> _Phase:
        """Send the requests, then take messages until the phase can close (see the module doc)."""
        now = time.monotonic()
        self.phase = phase = _Phase(verb, round, list(expected), requests, now, answer=answer, active_at=now)
        for cid in expected:
            self._send_request(cid)
        warned = False
        scanned = now
        while len(phase.got) < len(expected):
            now = time.monotonic()
            deadline = phase.active_at + timeout
            hard_deadline = deadline + self.settings.max_wait
            # twice a second, not at every message: the scans are over every client still waited for
            if now - scanned >= 0.5:
                scanned = now
                if verb != "steps":  # a client in the middle of its steps asks, and is answered, by itself
                    self._ask_again(phase, now, min(self.settings.ask_again, timeout / 3))
                if (
                    stop_when_rest_offline
                    and now > phase.sent_at + 1.0
                    and not any(self.stats[c].online for c in expected if c not in phase.got)
                ):
                    break
            if now >= deadline and len(phase.got) >= min_needed:
                break
            if now >= hard_deadline:
                log.error(
                    "%s %d: %d of the %d answers needed after %.0f s more; going on",
                    verb,
                    round,
                    len(phase.got),
                    min_needed,
                    self.settings.max_wait,
                )
                break
            if now >= deadline and not warned:
                log.info(
                    "%s %d: deadline passed with %d answer(s); waiting for %d (--min-clients)",
                    verb,
                    round,
                    len(phase.got),
                    min_needed,
                )
                warned = True
            self._pump(min(0.1, max(0.0, deadline - now)) or 0.1)
        self.phase = None
        return phase

    def _wait_online(self, needed: int) -> None:
        started = time.monotonic()
        logged = False
        while sum(s.online for s in self.stats.values()) < needed:
            if time.monotonic() - started > self.settings.max_wait:
                log.error(
                    "only %d client(s) online after %.0f s; going on",
                    sum(s.online for s in self.stats.values()),
                    self.settings.max_wait,
                )
                return
            if not logged:
                log.info("waiting for %d client(s) online (%d now)", needed, sum(s.online for s in self.stats.values()))
                logged = True
            self._pump(0.1)

    def _pump(self, timeout: float) -> None:
        """Handle one incoming message (or a reconnection), waiting at most `timeout` seconds."""
        if self._reconnected:
            self._reconnected = False
            self.publish_configs()
            if self.phase is not None:
                for cid in self.phase.expected:
                    if cid not in self.phase.got:
                        self._send_request(cid)
        self._resend_configs()
        try:
            msg = self.endpoint.inbox.get(timeout=timeout)
        except queue.Empty:
            return
        self._last_received = time.monotonic()
        self._handle(msg)

    def _handle(self, msg: Incoming) -> None:
        cid, payload = msg.client_id, msg.payload
        topic = self.topics.status(cid) if msg.direction == "status" else self.topics.up(cid, msg.verb)
        if cid not in self.stats:
            self.endpoint.reject("unknown-client", topic, f"{cid!r} is not a client of this run")
            return
        if payload.sender != cid:
            self.endpoint.reject("sender-mismatch", topic, f"payload sender {payload.sender!r} on {cid!r}'s topic")
            return
        if msg.direction == "status":
            self._on_status(cid, payload, topic, msg.received_at)
            return
        if msg.verb == "step":
            self._on_step(msg, topic)
            return
        phase = self.phase
        stats = self.stats[cid]
        if phase is not None and msg.verb == phase.verb and (phase.verb == "hello" or payload.round == phase.round):
            if cid not in phase.asked:
                self.endpoint.reject("unrequested", topic, f"{cid} was not asked for {phase.verb} {phase.round}")
            elif cid in phase.got:
                log.debug("repeat of %s %d from %s ignored", phase.verb, phase.round, cid)
            elif msg.verb == "eval" and not _valid_accuracy(payload):
                shown = str(payload.scalars)[:200]
                self.endpoint.reject("bad-accuracy", topic, f"eval answer {payload.kind!r}, {shown}")
            else:
                phase.got[cid] = msg
                if msg.verb in ("train", "steps"):
                    stats.on_time += 1
                    stats.latency_seconds.append(msg.received_at - phase.sent_at)
            return
        current = phase.round if phase is not None else self.config.rounds + 1
        if msg.verb in ("train", "steps") and 1 <= payload.round <= current:
            stats.late += 1
            log.info("late uplink of round %d from %s discarded", payload.round, cid)
        elif payload.round <= current:
            log.debug("stale %s %d from %s ignored", msg.verb, payload.round, cid)
        else:
            self.endpoint.reject("future-round", topic, f"{msg.verb} for round {payload.round}")

    def _on_step(self, msg: Incoming, topic: str) -> None:
        """A client's step request: answered once, in order; a repeat gets the same answer again."""
        cid, phase = msg.client_id, self.phase
        if phase is None or phase.verb != "steps" or msg.payload.round != phase.round or cid not in phase.asked:
            current = phase.round if phase is not None else self.config.rounds + 1
            if msg.payload.round > current:
                self.endpoint.reject("future-round", topic, f"step for round {msg.payload.round}")
            else:
                self.endpoint.reject("unrequested", topic, f"a step of round {msg.payload.round} from {cid}")
            return
        assert phase.answer is not None  # a steps phase is opened with the server's answer
        try:
            step, request = wire.step_of(msg.payload)
        except ValueError as error:
            self.endpoint.reject("bad-step", topic, str(error))
            return
        if step == phase.last_step and phase.last_reply is not None:
            self.endpoint.publish(self.topics.down(cid, "step"), phase.last_reply)  # its answer was lost
            return
        if step != phase.last_step + 1:
            if step != 1:
                self.endpoint.reject("step-out-of-order", topic, f"step {step} after step {phase.last_step}")
                return
            log.warning("%s restarted its round-%d steps after step %d", cid, phase.round, phase.last_step)
        try:
            reply = phase.answer(request)
        except ValueError as error:  # the method refused the request: the run goes on without it
            self.endpoint.reject("bad-request", topic, str(error))
            return
        phase.last_step, phase.last_reply = step, wire.numbered(reply, wire.SERVER, phase.round, step)
        phase.active_at = time.monotonic()
        self._count(phase.round, encoded_size(request), encoded_size(reply))
        self.endpoint.publish(self.topics.down(cid, "step"), phase.last_reply)

    def _on_status(self, cid: str, payload, topic: str, received_at: float) -> None:
        state = payload.scalars.get("state") if payload.kind == wire.STATUS else None
        if state not in (wire.ONLINE, wire.OFFLINE):
            self.endpoint.reject("bad-status", topic, f"kind {payload.kind!r}, state {state!r}")
            return
        stats = self.stats[cid]
        if state == wire.ONLINE:
            if not stats.online:  # an "online" repeated while online (a config sent again) is no new connection
                stats.connects += 1
                log.info("%s is online", cid)
            stats.online = True
            phase = self.phase
            # a client that (re)connected after its request went out may have missed it
            if (
                phase is not None
                and cid in phase.asked
                and cid not in phase.got
                and received_at > phase.last_sent.get(cid, 0.0)
            ):
                self._send_request(cid)
        else:
            if stats.online:
                log.info("%s went offline", cid)
            stats.disconnects += stats.online
            stats.online = False

    def _ask_again(self, phase: _Phase, now: float, interval: float) -> None:
        """Ask online clients silent for `interval` seconds to send their answer again. One still
        working ignores it (it answers once done); one whose answer was lost sends it from its cache;
        a repeat of an answer already taken is ignored here."""
        if now - self._last_received < QUIET_BEFORE_ASKING_AGAIN:
            return
        again = [
            cid
            for cid in phase.expected
            if cid not in phase.got
            and self.stats[cid].online
            and now - max(phase.last_sent.get(cid, now), phase.last_asked_again.get(cid, 0.0)) >= interval
        ]
        for cid in again:
            topic, _ = phase.requests[cid]
            phase.last_asked_again[cid] = now
            self.endpoint.publish(topic, wire.again(phase.round))
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
        topic, payload = self.phase.requests[cid]
        self.phase.last_sent[cid] = time.monotonic()
        self.endpoint.publish(topic, payload)

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

    def _wire_delta(self, before: dict[str, int]) -> dict[str, int]:
        return {k: v - before[k] for k, v in self._wire_totals().items()}

    def _log_round(self, record: DeployedRoundRecord) -> None:
        accuracy = "-" if record.accuracy is None else f"{100 * record.accuracy:.2f}%"
        arrived = len(record.selected) - len(record.late)
        wire_bytes = record.wire.get("up", 0) + record.wire.get("down", 0)
        frames = record.wire.get("frames_up", 0) + record.wire.get("frames_down", 0)
        log.info(
            "round %d/%d: %d/%d uplinks in time%s, accuracy %s, up %d B (wire %d B), down %d B (wire %d B), "
            "%d frames, %.0f B/s, %.2f s",
            record.round,
            self.config.rounds,
            arrived,
            len(record.selected),
            f" (missing: {', '.join(record.late)})" if record.late else "",
            accuracy,
            record.bytes_up,
            record.wire.get("up", 0),
            record.bytes_down,
            record.wire.get("down", 0),
            frames,
            wire_bytes / max(record.seconds, 1e-9),
            record.seconds,
        )


def _valid_accuracy(payload: Payload) -> bool:
    try:
        wire.accuracy_of(payload)
    except ValueError:
        return False
    return True
