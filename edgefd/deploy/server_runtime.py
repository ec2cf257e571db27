"""The server of a deployed run: the round loop of a simulation, with the clients behind MQTT.

A round here is a simulated round (same selection RNG, same downlinks, same aggregation, same
evaluation, same results files) except that the uplinks come over the network and a client that
does not answer by the round's deadline is left out, as a simulated straggler would be:

  1. wait until at least `min_clients` clients are online (their retained status says so);
  2. select clients with the run's RNG (the straggler draw of the simulation is drawn and unused,
     so that selections match `simulate` round for round);
  3. send each selected client its downlink (`down/<id>/train`) and collect uplinks until every one
     arrived or the round's deadline passed (a late uplink is counted and discarded);
  4. aggregate, then on evaluation rounds ask every client for its accuracy (`down/<id>/eval`);
  5. append the round to metrics.jsonl and write the checkpoint (atomically).

A client that comes online while its request is outstanding, or a reconnection of the server
itself (a broker restart), gets the outstanding requests again. `--resume` continues from the
checkpoint: the round after the last one written, with the RNG and the method's state as they were.
"""

from __future__ import annotations

import logging
import math
import queue
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgefd import kernels
from edgefd.deploy import checkpoint
from edgefd.deploy import messages as wire
from edgefd.deploy.mqtt_transport import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_MESSAGE_BYTES,
    BrokerSettings,
    Incoming,
    MqttEndpoint,
    Topics,
)
from edgefd.metrics.results import RunWriter, summarise
from edgefd.protocol import encoded_size
from edgefd.runtime.build import build_server, prepare, round_seconds, selection_rng
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.loop import HELLO_ROUND, RoundRecord

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "server.ckpt"


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
    chunk_size: int = DEFAULT_CHUNK_SIZE
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    connect_timeout: float = 60.0

    def validate(self) -> None:
        for name in ("round_timeout", "eval_timeout", "hello_timeout", "max_wait", "connect_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        if self.min_clients < 1:
            raise ValueError(f"min_clients: must be >= 1, got {self.min_clients}")


@dataclass
class ClientStats:
    """One client's connection and lateness record over the run."""

    online: bool = False
    connects: int = 0
    """"online" statuses seen (first connection and every reconnection)."""
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


class ServerRuntime:
    """Runs one method's server role against clients on a broker."""

    def __init__(self, config: SimulationConfig, settings: DeploymentSettings, resume: bool = False) -> None:
        settings.validate()
        self.config = config
        self.settings = settings
        self.resume = resume
        self.pieces = prepare(config)
        self.role = build_server(config, self.pieces)
        if config.score_full_test:
            raise ValueError(
                "score_full_test: a deployed client holds only its own data, so it cannot be scored on the whole "
                "test set; this measurement is for `edgefd simulate`"
            )
        if self.role.step_exchange:
            raise ValueError(
                f"{config.algo}: these params exchange messages at every training step (fedcache: "
                "exchange=batch), which the MQTT runtime does not run; pass --param exchange=round"
            )
        self.rng = selection_rng(config)
        self.client_ids = list(self.pieces.client_ids)
        self.stats = {cid: ClientStats() for cid in self.client_ids}
        self.topics = Topics(settings.run)
        self.out = config.out_dir()
        self.checkpoint_path = self.out / CHECKPOINT_FILE
        self.endpoint = MqttEndpoint(
            settings.broker,
            self.topics,
            f"edgefd-server-{settings.run}",
            chunk_size=settings.chunk_size,
            max_message_bytes=settings.max_message_bytes,
        )
        self.endpoint.subscribe(f"{self.topics.root}/up/+/+")
        self.endpoint.subscribe(f"{self.topics.root}/status/+")
        self._reconnected = False
        self.endpoint.on_connect_hooks.append(self._on_connect)
        self.phase: _Phase | None = None
        self.writer: RunWriter | None = None
        self.resumed_from: int | None = None

    # ------------------------------------------------------------------ the run
    def run(self) -> dict[str, Any]:
        started = time.perf_counter()
        self.endpoint.start(wait=self.settings.connect_timeout)
        try:
            self._publish_configs()
            first = self._restore() if self.resume else None
            if first is None:
                self.writer = RunWriter(self.out)
                self._start()
                first = 1
            assert self.writer is not None  # made above or by _restore
            for r in range(first, self.config.rounds + 1):
                self.writer.add(self._round(r))
                self._save(r)
            summary = self._summary(time.perf_counter() - started)
            self._stop_clients()
        finally:
            self.endpoint.stop()
        return summary

    def _start(self) -> None:
        """Hellos (round 0), `start`, and the accuracy before training, as `simulate` does."""
        t0, wire0 = time.perf_counter(), self._wire_totals()
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
        )
        hellos = {cid: msg.payload for cid, msg in got.items() if msg.payload.kind != wire.EMPTY}
        self.role.start(hellos)
        record = DeployedRoundRecord(HELLO_ROUND, None, None, sum(got[c].nbytes for c in hellos), 0, 0.0, [], [])
        self._evaluate(record)
        record.wire = self._wire_delta(wire0)
        record.seconds = time.perf_counter() - t0
        assert self.writer is not None  # run() makes it before _start
        self.writer.add(record)
        self._log_round(record)
        self._save(HELLO_ROUND)

    def select(self) -> list[str]:
        """`Federation.select` with simulate's LoopConfig (min_clients 1), on the same RNG."""
        k = min(len(self.client_ids), max(1, math.ceil(self.config.participation * len(self.client_ids))))
        if k == len(self.client_ids):
            return list(self.client_ids)
        return sorted(self.rng.choice(self.client_ids, size=k, replace=False).tolist())

    def _round(self, r: int) -> DeployedRoundRecord:
        t0, wire0 = time.perf_counter(), self._wire_totals()
        self._wait_online(self.settings.min_clients)
        selected = self.select()
        self.rng.random(len(selected))  # simulate's straggler draw: drawn so later selections match
        downlinks = {cid: self.role.downlink(r, cid) for cid in selected}
        bytes_down = sum(encoded_size(p) for p in downlinks.values() if p is not None)
        requests = {cid: (self.topics.down(cid, "train"), wire.request(downlinks[cid], r)) for cid in selected}
        for cid in selected:
            self.stats[cid].selected += 1
        got = self._collect("train", r, selected, requests, self.settings.round_timeout, min_needed=0)
        uplinks = {cid: msg.payload for cid, msg in got.items() if msg.payload.kind != wire.EMPTY}
        missing = [cid for cid in selected if cid not in got]
        for cid in missing:
            self.stats[cid].missed += 1
        server_metrics = self.role.aggregate(r, uplinks)
        record = DeployedRoundRecord(
            r,
            None,
            None,
            sum(got[c].nbytes for c in uplinks),
            bytes_down,
            0.0,
            selected,
            missing,
            server=server_metrics,
        )
        if r % self.config.eval_every == 0 or r == self.config.rounds:
            self._evaluate(record)
        record.wire = self._wire_delta(wire0)
        record.seconds = time.perf_counter() - t0
        self._log_round(record)
        return record

    def _evaluate(self, record: RoundRecord) -> None:
        """Every client's accuracy, like `Federation.evaluate`; clients that do not answer are left out."""
        requests = {
            cid: (self.topics.down(cid, "eval"), wire.request(self.role.evaluation_state(cid), record.round))
            for cid in self.client_ids
        }
        got = self._collect(
            "eval",
            record.round,
            self.client_ids,
            requests,
            self.settings.eval_timeout,
            min_needed=0,
            stop_when_rest_offline=True,
        )
        for cid in self.client_ids:
            if cid in got:
                record.client_accuracy[cid] = float(got[cid].payload.scalars.get("accuracy", float("nan")))
        values = np.array([v for v in record.client_accuracy.values() if not math.isnan(v)])
        record.accuracy = float(values.mean()) if len(values) else float("nan")
        record.accuracy_std = float(values.std()) if len(values) else float("nan")

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
    ) -> dict[str, Incoming]:
        """Send the requests, then take messages until the phase can close (see the module doc)."""
        self.phase = phase = _Phase(verb, round, list(expected), requests, time.monotonic())
        for cid in expected:
            self._send_request(cid)
        deadline = phase.sent_at + timeout
        hard_deadline = deadline + self.settings.max_wait
        warned = False
        while len(phase.got) < len(expected):
            now = time.monotonic()
            waiting = [cid for cid in expected if cid not in phase.got]
            if stop_when_rest_offline and now > phase.sent_at + 1.0 and not any(self.stats[c].online for c in waiting):
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
        return phase.got

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
            self._publish_configs()
            if self.phase is not None:
                for cid in self.phase.expected:
                    if cid not in self.phase.got:
                        self._send_request(cid)
        try:
            msg = self.endpoint.inbox.get(timeout=timeout)
        except queue.Empty:
            return
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
        phase = self.phase
        stats = self.stats[cid]
        if phase is not None and msg.verb == phase.verb and (phase.verb == "hello" or payload.round == phase.round):
            if cid not in phase.expected:
                self.endpoint.reject("unrequested", topic, f"{cid} was not asked for {phase.verb} {phase.round}")
            elif cid in phase.got:
                log.debug("repeat of %s %d from %s ignored", phase.verb, phase.round, cid)
            elif msg.verb == "eval" and payload.kind != wire.METRICS:
                self.endpoint.reject("wrong-kind", topic, f"eval answer of kind {payload.kind!r}")
            else:
                phase.got[cid] = msg
                if msg.verb == "train":
                    stats.on_time += 1
                    stats.latency_seconds.append(msg.received_at - phase.sent_at)
            return
        current = phase.round if phase is not None else self.config.rounds + 1
        if msg.verb == "train" and 1 <= payload.round <= current:
            stats.late += 1
            log.info("late uplink of round %d from %s discarded", payload.round, cid)
        elif payload.round <= current:
            log.debug("stale %s %d from %s ignored", msg.verb, payload.round, cid)
        else:
            self.endpoint.reject("future-round", topic, f"{msg.verb} for round {payload.round}")

    def _on_status(self, cid: str, payload, topic: str, received_at: float) -> None:
        state = payload.scalars.get("state") if payload.kind == wire.STATUS else None
        if state not in (wire.ONLINE, wire.OFFLINE):
            self.endpoint.reject("bad-status", topic, f"kind {payload.kind!r}, state {state!r}")
            return
        stats = self.stats[cid]
        if state == wire.ONLINE:
            stats.connects += 1
            if not stats.online:
                log.info("%s is online", cid)
            stats.online = True
            phase = self.phase
            # a client that (re)connected after its request went out may have missed it
            if (
                phase is not None
                and cid in phase.expected
                and cid not in phase.got
                and received_at > phase.last_sent.get(cid, 0.0)
            ):
                self._send_request(cid)
        else:
            if stats.online:
                log.info("%s went offline", cid)
            stats.disconnects += stats.online
            stats.online = False

    def _send_request(self, cid: str) -> None:
        assert self.phase is not None  # only called while a phase is open
        topic, payload = self.phase.requests[cid]
        self.phase.last_sent[cid] = time.monotonic()
        self.endpoint.publish(topic, payload)

    def _on_connect(self) -> None:
        # paho's thread: the run's thread re-sends configs and requests at its next _pump
        if self.endpoint.stats.connects > 1:
            self._reconnected = True

    def _publish_configs(self) -> None:
        payload = wire.config_payload(self.config)
        for cid in self.client_ids:
            self.endpoint.publish(self.topics.down(cid, "config"), payload, retain=True)

    def _stop_clients(self) -> None:
        for cid in self.client_ids:
            self.endpoint.publish(self.topics.down(cid, "stop"), wire.empty(wire.SERVER, self.config.rounds))
            self.endpoint.clear_retained(self.topics.down(cid, "config"))
        time.sleep(0.2)  # let paho flush the stops before the connection closes

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

    def _summary(self, seconds: float) -> dict[str, Any]:
        assert self.writer is not None  # the run has started
        lines = self.writer.lines
        stats = self.endpoint.stats
        summary = {
            "algo": self.config.algo,
            "dataset": self.config.dataset,
            "clients": self.config.clients,
            "rounds": self.config.rounds,
            "seed": self.config.seed,
            **summarise(lines),
            "bytes_hello": lines[0]["bytes_up"] if lines else 0,
            "wall_seconds": round_seconds(seconds),
            "models": dict(zip(self.pieces.client_ids, self.pieces.model_names)),
            "params": asdict(self.role.params),  # as the server resolved them (FedZKT's preset)
            "kernels": kernels.get_backend(),
            "config": asdict(self.config),
            "deployment": {
                "run": self.settings.run,
                "broker": self.settings.broker.url,
                "settings": {k: v for k, v in asdict(self.settings).items() if k != "broker"},
                "resumed_from_round": self.resumed_from,
                "wire_bytes_up_total": sum(line["wire"]["up"] for line in lines if "wire" in line),
                "wire_bytes_down_total": sum(line["wire"]["down"] for line in lines if "wire" in line),
                "wire": stats.snapshot(),
                "rejected": dict(stats.rejected),
                "clients": {cid: s.summary() for cid, s in self.stats.items()},
            },
        }
        self.writer.write_summary(summary)
        from edgefd.metrics.plots import plot_curves  # matplotlib: imported only at the end

        plot_curves({f"{self.config.algo} over MQTT (seed {self.config.seed})": lines}, self.out / "curves.png")
        return summary

    # ------------------------------------------------------------------ checkpoints
    def _references(self) -> dict[str, Any]:
        return {"build_model": self.role.context.build_model, "dataset": self.pieces.dataset}

    def _save(self, round: int) -> None:
        assert self.writer is not None  # the run has started
        state = {
            "round": round,
            "role": self.role,
            "rng": self.rng.bit_generator.state,
            "lines": self.writer.lines,
            "stats": self.stats,
            "config": asdict(self.config),
        }
        checkpoint.save(self.checkpoint_path, state, self._references())

    def _restore(self) -> int | None:
        """Load the checkpoint; returns the first round to run (None: no checkpoint, start afresh)."""
        if not self.checkpoint_path.exists():
            log.warning("--resume: no checkpoint at %s; starting from the beginning", self.checkpoint_path)
            return None
        state = checkpoint.load(self.checkpoint_path, self._references())
        if state["config"] != asdict(self.config):
            raise ValueError(f"--resume: {self.checkpoint_path} is from a run with another config")
        self.role = state["role"]
        self.rng.bit_generator.state = state["rng"]
        self.stats = state["stats"]
        for stats in self.stats.values():
            stats.online = False  # the retained statuses will say who is online now
        self.writer = _restored_writer(self.out, state["lines"])
        self.resumed_from = state["round"]
        log.info("resumed from the checkpoint of round %d", state["round"])
        return state["round"] + 1


def _restored_writer(out: Path, lines: list[dict[str, Any]]) -> RunWriter:
    """A RunWriter whose metrics.jsonl holds exactly the checkpointed rounds (a round that was
    written after the checkpoint is run again and written once)."""
    import json

    writer = RunWriter(out)
    with writer.metrics_path.open("a") as handle:
        for line in lines:
            handle.write(json.dumps(line, sort_keys=True) + "\n")
    writer.lines = list(lines)
    writer._up = sum(line["bytes_up"] for line in lines)
    writer._down = sum(line["bytes_down"] for line in lines)
    return writer
