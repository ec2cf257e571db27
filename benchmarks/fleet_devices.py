"""The load test's devices (benchmarks/fleet.py): many lightweight MQTT clients in one process, replaying
real payloads.

Each device is its own MQTT connection with its own client id and last will, speaking the
deployment's protocol exactly as `edgefd client` does (retained "online" status, requests on
`down/<id>/<verb>`, answers on `up/<id>/<verb>`), but without training. Each device is a
:class:`~edgefd.runtime.verbs.ClientApp`, the dispatcher of every client, around a `ReplayRole`
that answers

    hello   with its real role's hello (built from the run's config, as `edgefd client` builds it)
    train   with the uplink a real client recorded (client 0 of the same run, one real round), for
            a method whose uplink names samples (an ``ids`` array: FedCache) with its own sample
            ids, the recorded rows repeated to its length
    eval    with the accuracy that client recorded
    stop    by going offline

and any other verb of the table as a client role that has nothing to add would (a method's own
verb reaches the load test as it reaches a device).

so that the server, the broker and the wire carry what a fleet of real devices would send, while
one process holds hundreds of devices. The connections are driven by one selector loop (paho's
external-loop API), not a thread per device.

    python3 benchmarks/fleet_devices.py --config run.toml --recorded recorded.npz \\
        --broker mqtt://127.0.0.1:1883 --run NAME --first 0 --count 250

prints one JSON line ``{"ready": N}`` once every device is connected and subscribed, and one
``{"report": {...}}`` when every device has been stopped (or ``--deadline`` passed).
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import selectors
import socket
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import paho.mqtt.client as mqtt

from edgefd.algorithms.base import ClientContext, ClientRole
from edgefd.deploy import control
from edgefd.deploy.mqtt_transport import DEFAULT_CHUNK_SIZE, QOS, BrokerSettings, Topics, encode_frames
from edgefd.protocol import Message, Payload, ProtocolError, Reassembler, decode_message
from edgefd.runtime.verbs import VERBS, ClientApp

log = logging.getLogger(__name__)

RECORDED_KIND = "uplink_kind"
RECORDED_ACCURACY = "accuracy"
ARRAY_PREFIX = "uplink."


@dataclass
class Recorded:
    """What one real client sent in one real round: its uplink and its accuracy."""

    uplink: Payload | None
    accuracy: float

    def save(self, path: Path) -> None:
        arrays: dict[str, Any] = {RECORDED_ACCURACY: np.float64(self.accuracy)}
        if self.uplink is not None:
            arrays[RECORDED_KIND] = np.str_(self.uplink.kind)
            arrays.update({ARRAY_PREFIX + name: value for name, value in self.uplink.arrays.items()})
        np.savez(path, **arrays)

    @staticmethod
    def load(path: Path) -> Recorded:
        with np.load(path, allow_pickle=False) as saved:
            uplink = None
            if RECORDED_KIND in saved.files:
                arrays = {k[len(ARRAY_PREFIX) :]: saved[k] for k in saved.files if k.startswith(ARRAY_PREFIX)}
                uplink = Payload(str(saved[RECORDED_KIND]), arrays)
            return Recorded(uplink, float(saved[RECORDED_ACCURACY]))


def with_device_ids(uplink: Payload | None, ids: np.ndarray | None) -> Payload | None:
    """The recorded uplink as a device of sample ids ``ids`` sends it: with an ``ids`` array, the
    device's own ids, and every array with one row per recorded id repeated (cyclically) to its length."""
    if uplink is None:
        return None
    arrays = dict(uplink.arrays)
    if "ids" in arrays and ids is not None:
        rows = len(arrays["ids"])
        cycle = np.arange(len(ids)) % max(rows, 1)
        arrays = {k: (v[cycle] if v.ndim and len(v) == rows else v) for k, v in arrays.items()}
        arrays["ids"] = ids.astype(arrays["ids"].dtype)
    return Payload(uplink.kind, arrays, uplink.scalars, uplink.precision)


@dataclass
class Script:
    """One device's answers (the round is stamped when it answers)."""

    hello: Payload | None
    uplink: Payload | None
    accuracy: float


def device_scripts(config_path: Path, recorded: Recorded, first: int, count: int) -> dict[str, Script]:
    """The answers of devices ``first .. first+count-1``: each one's hello from its real role
    (built exactly as `edgefd client` builds it), the recorded uplink re-addressed to it."""
    from edgefd.protocol.message import SERVER
    from edgefd.runtime.build import build_client, prepare
    from edgefd.runtime.config import SimulationConfig
    from edgefd.runtime.verbs import ClientApp
    from edgefd.settings import read_config_file

    config = SimulationConfig(**read_config_file(config_path))
    pieces = prepare(config)
    scripts = {}
    for index in range(first, first + count):
        cid = pieces.client_ids[index]
        role = build_client(config, pieces, index)
        hello = ClientApp(role).handle(Message("hello", SERVER, cid, 0)).content
        ids = hello.arrays.get("ids") if hello is not None else None
        if ids is None:
            ids = np.asarray(pieces.splits[index].train_indices, np.int32)
        scripts[cid] = Script(hello, with_device_ids(recorded.uplink, ids), recorded.accuracy)
        del role
    return scripts


@dataclass(frozen=True)
class _Replayed:
    """What `ClientApp` reads of a role's context: the wire precision. The recorded contents
    travel as they were recorded (fp32 sends the arrays themselves)."""

    precision: str = "fp32"


class ReplayRole(ClientRole):
    """A load-test device's client role: it answers from its script, trains nothing and holds no
    model or data (a process holds hundreds of them)."""

    def __init__(self, client_id: str, script: Script) -> None:  # not super().__init__: it needs a model and data
        self.client_id, self.script = client_id, script
        self.context = cast(ClientContext, _Replayed())

    def hello(self) -> Payload | None:
        return self.script.hello

    def train_round(self, round: int, downlink: Payload | None) -> Payload | None:
        return self.script.uplink

    def evaluate(self, state: Payload | None = None, test: object = None) -> dict[str, float]:
        return {"accuracy": self.script.accuracy}


@dataclass
class DeviceReport:
    """What the devices of one process did."""

    devices: int = 0
    connected: int = 0
    stopped: int = 0
    answered: Counter = field(default_factory=Counter)
    """Answers sent, per verb."""
    asked_again: int = 0
    """Requests to send an answer again (the server had not received it), each answered again."""
    bytes_sent: int = 0
    connection_losses: int = 0
    bad_messages: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    peak_rss_mb: float = 0.0


class Device:
    """One device: a paho client driven by the fleet's selector loop."""

    def __init__(self, fleet: Fleet, cid: str, script: Script) -> None:
        self.fleet, self.cid = fleet, cid
        self.app = ClientApp(ReplayRole(cid, script))
        self.started = False
        """connect() was called: from then on a lost connection is reconnected."""
        self.connected = False
        self.stopped = False
        self.reassemblers: dict[str, Reassembler] = {}
        topics = fleet.topics
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2,
            client_id=f"edgefd-{topics.run}-{cid}",
            clean_session=True,
            protocol=mqtt.MQTTv311,
        )
        if fleet.broker.username is not None:
            self.client.username_pw_set(fleet.broker.username, fleet.broker.password)
        offline = encode_frames(control.status_message(cid, control.OFFLINE, fleet.topics.run), fleet.chunk_size)[0]
        self.client.will_set(topics.status(cid), offline, qos=QOS, retain=True)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.on_socket_register_write = lambda *_: fleet.dirty.add(self)
        self.client.on_socket_unregister_write = lambda *_: None

    def connect(self) -> None:
        broker = self.fleet.broker
        self.client.connect(broker.host, broker.port, keepalive=self.fleet.keepalive)
        self.started = True
        self.fleet.selector.register(_socket_of(self.client), selectors.EVENT_READ, self)
        self.fleet.dirty.add(self)

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        if reason_code.is_failure:
            log.error("%s: the broker refused the connection: %s", self.cid, reason_code)
            return
        topics = self.fleet.topics
        client.subscribe(f"{topics.root}/down/{self.cid}/+", qos=QOS)
        self._say(control.ONLINE)
        self.connected = True
        self.fleet.report.connected += 1

    def _say(self, state: str) -> None:
        status = control.status_message(self.cid, state, self.fleet.topics.run)
        self._publish(self.fleet.topics.status(self.cid), status, retain=True)

    def _publish(self, topic: str, message: Message, retain: bool = False) -> None:
        for frame in encode_frames(message, self.fleet.chunk_size):
            self.client.publish(topic, frame, qos=QOS, retain=retain)
            self.fleet.report.bytes_sent += len(frame)

    def _on_message(self, client, userdata, message) -> None:
        topic, data = message.topic, bytes(message.payload)
        if not data:
            return
        try:
            _, _, verb = self.fleet.topics.parse(topic)
            reassembler = self.reassemblers.setdefault(topic, Reassembler(max_messages=4, remember=64))
            whole = reassembler.feed(data)
            if whole is None:
                return
            request = decode_message(whole)
        except (ValueError, ProtocolError) as error:
            self.fleet.report.bad_messages += 1
            log.warning("%s: bad message on %s: %s", self.cid, topic, error)
            return
        self._answer(verb, request)

    def _answer(self, verb: str, request: Message) -> None:
        if verb in VERBS and VERBS[verb].ends_run:
            if not self.stopped:
                self.stopped = True
                self.fleet.report.stopped += 1
                self._say(control.OFFLINE)
            return
        if verb == control.CONFIG:
            # as `edgefd client` does: a config sent again means the server has not seen this device
            # online (a broker that hands retained statuses to exact-topic subscriptions only)
            self._say(control.ONLINE)
            return
        again = control.is_again(request)
        if again:  # answered at once, so its answer went out before the asking
            self.fleet.report.asked_again += 1
        try:  # an "again" has its request's verb and round: the script's answer is the same
            answer = self.app.handle(request)
        except (ValueError, NotImplementedError) as error:  # steps: the load test replays round-batched methods
            log.error("%s: a %s request it cannot answer: %s", self.cid, verb, error)
            return
        if not VERBS[verb].answers:
            return
        self._publish(self.fleet.topics.up(self.cid, verb), answer)
        if not again:
            self.fleet.report.answered[verb] += 1


class Fleet:
    """Many devices, one selector loop."""

    def __init__(
        self,
        broker: BrokerSettings,
        run: str,
        scripts: dict[str, Script],
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        keepalive: int = 60,
    ) -> None:
        self.broker, self.topics, self.chunk_size, self.keepalive = broker, Topics(run), chunk_size, keepalive
        self.selector = selectors.DefaultSelector()
        self.dirty: set[Device] = set()
        self.report = DeviceReport(devices=len(scripts))
        self.devices = [Device(self, cid, script) for cid, script in scripts.items()]
        self._misc_at = time.monotonic()

    def connect(self, per_second: float = 500.0) -> None:
        """Connect every device (at most ``per_second`` new connections a second) and wait until
        all are subscribed."""
        for i, device in enumerate(self.devices):
            device.connect()
            if i % 50 == 49:
                self.pump(0.0)
                time.sleep(50 / per_second)
        while not all(d.connected for d in self.devices):
            self.pump(0.1)

    def pump(self, timeout: float) -> None:
        """One pass: write what waits, read what came, keep the connections alive."""
        for device in list(self.dirty):
            if device.client.want_write():
                device.client.loop_write()
            if not device.client.want_write():
                self.dirty.discard(device)
        for key, _ in self.selector.select(timeout=timeout):
            device = key.data
            if device.client.loop_read() != mqtt.MQTT_ERR_SUCCESS:
                self._lost(device)
        now = time.monotonic()
        if now - self._misc_at > 1.0:
            self._misc_at = now
            for device in self.devices:
                if device.started and not device.stopped and device.client.loop_misc() != mqtt.MQTT_ERR_SUCCESS:
                    self._lost(device)

    def _lost(self, device: Device) -> None:
        """A connection dropped: count it and reconnect (the server re-sends what is outstanding)."""
        self.report.connection_losses += 1
        try:
            self.selector.unregister(device.client.socket() or key_of(self.selector, device))
        except (KeyError, ValueError):
            pass
        device.connected = False
        try:
            device.client.reconnect()
            self.selector.register(_socket_of(device.client), selectors.EVENT_READ, device)
            self.dirty.add(device)
        except (OSError, ValueError) as error:
            log.warning("%s: reconnect failed: %s", device.cid, error)

    def serve(self, deadline: float) -> None:
        """Answer requests until every device has been stopped or ``deadline`` (monotonic) passed,
        then disconnect."""
        while self.report.stopped < len(self.devices) and time.monotonic() < deadline:
            self.pump(0.05)
        for device in self.devices:
            device.client.disconnect()
        end = time.monotonic() + 5.0
        while self.dirty and time.monotonic() < end:
            self.pump(0.05)


def _socket_of(client: mqtt.Client) -> socket.socket:
    """The socket of a client that has just connected."""
    sock = client.socket()
    if not isinstance(sock, socket.socket):
        raise OSError("no socket after connect")
    return sock


def key_of(selector: selectors.BaseSelector, device: Device):
    """The file object a device was registered under (its socket may already be closed)."""
    for key in selector.get_map().values():
        if key.data is device:
            return key.fileobj
    raise KeyError(device.cid)


def _peak_rss_mb() -> float:
    from edgefd.runtime.process import peak_rss_mb

    return peak_rss_mb()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 benchmarks/fleet_devices.py", description=__doc__)
    parser.add_argument("--config", type=Path, required=True, help="the run's config (run.toml)")
    parser.add_argument("--recorded", type=Path, required=True, help="the recorded uplink and accuracy (.npz)")
    parser.add_argument("--broker", required=True, help="mqtt://HOST:PORT")
    parser.add_argument("--run", required=True, help="the run name")
    parser.add_argument("--first", type=int, required=True, help="index of this process's first device")
    parser.add_argument("--count", type=int, required=True, help="devices in this process")
    parser.add_argument("--deadline", type=float, default=1800.0, help="seconds before giving up (default 1800)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s fleet-devices %(levelname)s %(message)s")
    started = time.monotonic()
    scripts = device_scripts(args.config, Recorded.load(args.recorded), args.first, args.count)
    fleet = Fleet(BrokerSettings(args.broker), args.run, scripts)
    fleet.connect()
    print(json.dumps({"ready": len(fleet.devices)}), flush=True)
    fleet.serve(started + args.deadline)
    report = fleet.report
    report.seconds = round(time.monotonic() - started, 2)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    report.cpu_seconds = round(usage.ru_utime + usage.ru_stime, 2)
    report.peak_rss_mb = _peak_rss_mb()
    values = {**report.__dict__, "answered": dict(report.answered)}
    print(json.dumps({"report": values}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
