"""A device with its own valid credentials, on its own topics only, against a real `edgefd server`
over the broker as server/README.md installs it (TLS, passwords, the run-scoped ACL, the shipped
edgefd.conf included by Debian's mosquitto.conf): one broker for the module, a run name per test.

The device is client-0, driven by the test through edgefd's own transport (its frames reassembled
and decoded as any device's are): it answers what the test says and keeps every message the
server sent it, so a test counts what the server published."""

from __future__ import annotations

import json
import os
import time

import pytest
from mqtt_helpers import edgefd, finish, flags, lines_of
from shipped_broker import start_installed

from edgefd.deploy import messages as wire
from edgefd.deploy.mqtt_transport import BrokerSettings, MqttEndpoint, Topics
from edgefd.deploy.server import LOST_ROUNDS_EXIT
from edgefd.protocol import Payload
from edgefd.protocol.message import Message
from edgefd.runtime.verbs import SCORES_KIND

PASSWORDS = {"edgefd-server": "server-secret", "client-0": "zero-secret"}
RUNS = ["flood", "lost"]
CID = "client-0"
# one device, one round: FedAvg's requests carry the whole global model
RUN = dict(algo="fedavg", dataset="digits", clients=1, rounds=1, seed=3, threads=1)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with start_installed(tmp_path_factory.mktemp("broker"), RUNS, PASSWORDS) as running:
        yield running


def start_server(broker, run: str, folder, *timeouts) -> tuple:
    """`edgefd server` logged in as edgefd-server over TLS; (process, out folder, log file)."""
    password = folder / "server.password"
    password.write_text(PASSWORDS["edgefd-server"] + "\n")
    os.chmod(password, 0o600)
    out, log = folder / "out", folder / "server.log"
    login = ("--username", "edgefd-server", "--password-file", password, "--ca-cert", broker.ca)
    process = edgefd(
        "server", "--broker", broker.url, *login, "--run", run, *flags(RUN), *timeouts, "--out", out, "--quiet", log=log
    )
    return process, out, log


class Device:
    """client-0 as the test drives it: its own login, its own topics."""

    def __init__(self, broker, run: str) -> None:
        self.run = run
        self.topics = Topics(run)
        login = BrokerSettings(broker.url, username=CID, password=PASSWORDS[CID], ca_cert=broker.ca)
        self.endpoint = MqttEndpoint(login, self.topics, CID)
        self.endpoint.subscribe(f"{self.topics.root}/down/{CID}/+")
        self.received: list[Message] = []
        """Every message the server sent it, in order."""

    def __enter__(self) -> Device:
        self.endpoint.start(wait=10)
        return self

    def __exit__(self, *exc) -> None:
        self.endpoint.stop()

    def say(self, state: str) -> None:
        self.endpoint.publish(self.topics.status(CID), wire.status_message(CID, state, self.run), retain=True)

    def next(self, verb: str, timeout: float = 120.0) -> Message:
        """The next message of ``verb`` from the server (those before it are kept, not answered)."""
        deadline = time.monotonic() + timeout
        while True:
            incoming = self.endpoint.inbox.get(timeout=max(0.0, deadline - time.monotonic()))
            self.received.append(incoming.message)
            if incoming.verb == verb:
                return incoming.message

    def answer(self, request: Message, content: Payload | None = None) -> None:
        self.endpoint.publish(self.topics.up(CID, request.verb), request.answer(content))

    def scores(self, request: Message) -> None:
        self.answer(request, Payload(SCORES_KIND, CID, request.round, scalars={"accuracy": 0.5}))


def test_a_device_flooding_its_status_gets_its_request_again_at_most_once(broker, tmp_path):
    """While its training request is outstanding, the device says "online" 40 times, then goes
    "offline" and "online" 30 times: each would have had the whole request (the global model)
    published again. It gets it again once at most (one offline-to-online transition a phase)."""
    server, out, log = start_server(broker, "flood", tmp_path, "--round-timeout", 60, "--eval-timeout", 60)
    try:
        with Device(broker, "flood") as device:
            device.say(wire.ONLINE)
            device.answer(device.next("hello"))
            device.scores(device.next("evaluate"))
            request = device.next("train")
            # The pauses only give the server time to take each status before the next: the bound
            # asserted below does not depend on them.
            for _ in range(40):
                device.say(wire.ONLINE)
                time.sleep(0.02)
            for _ in range(30):
                device.say(wire.OFFLINE)
                device.say(wire.ONLINE)
                time.sleep(0.02)
            device.answer(request)  # taken after every status above: one session, in order
            device.scores(device.next("evaluate"))
            device.next("stop")
    finally:
        finish([server])
    copies = [m for m in device.received if m.verb == "train" and m.round == 1 and not wire.is_again(m)]
    assert request.content is not None and len(copies) in (1, 2), len(copies)
    assert server.returncode == 0, log.read_text()[-3000:]
    deployment = json.loads((out / "summary.json").read_text())["deployment"]
    assert deployment["clients"][CID]["connects"] == 31  # every transition is still counted
    assert deployment["wire"]["sent_messages"]["down/train"] == len(copies)  # nor asked again: it was not silent


def test_a_round_that_no_device_answers_is_reported_lost(broker, tmp_path):
    """The device answers its hello and the first evaluation, then nothing: round 1 has no uplink
    and no evaluation. The run says so in summary.json, in its log and in its exit status, and
    reports no final accuracy (round 0's is not the final models')."""
    server, out, log = start_server(broker, "lost", tmp_path, "--round-timeout", 2, "--eval-timeout", 2)
    try:
        with Device(broker, "lost") as device:
            device.say(wire.ONLINE)
            device.answer(device.next("hello"))
            device.scores(device.next("evaluate"))
            device.next("train")  # never answered, nor round 1's evaluation
            device.next("stop")
    finally:
        finish([server])
    text = log.read_text()
    assert server.returncode == LOST_ROUNDS_EXIT, text[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["lost_rounds"] == {"1": ["uplinks", "evaluation"]}
    assert summary["final_accuracy"] is None and summary["best_accuracy"] is None
    assert [line["lost"] for line in lines_of(out)] == [[], ["uplinks", "evaluation"]]
    assert lines_of(out)[1]["accuracy"] is None
    assert "round 1: no uplink taken from the 1 selected client(s)" in text
    assert "round 1: no client's accuracy came back" in text and "nan%" not in text
    assert "final accuracy none" in text and "lost_rounds" in text
