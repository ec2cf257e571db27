"""A deployed run that never gets --min-clients clients stops, exits with TOO_FEW_CLIENTS_EXIT and
says so in its last line: it does not go on with fewer clients than the operator asked for."""

from types import SimpleNamespace

import pytest
from mqtt_helpers import client, finish, needs_mosquitto, server, wait_for

from edgefd.deploy import mqtt_channel
from edgefd.deploy.broker import start_broker
from edgefd.deploy.mqtt_channel import DeploymentSettings, MqttChannel, TooFewClients
from edgefd.deploy.mqtt_transport import BrokerSettings, Topics
from edgefd.deploy.server import TOO_FEW_CLIENTS_EXIT
from edgefd.protocol import Message
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.verbs import VERBS

CLIENTS = ["client-0", "client-1"]


@pytest.fixture
def channel(monkeypatch):
    """A server's channel of two clients wanting both (--min-clients 2, --max-wait 5), client-0
    online, on a clock of the test's (each wait for a message moves it a second); nothing is sent."""
    channel = MqttChannel(
        SimulationConfig(clients=2, rounds=1),
        DeploymentSettings(
            run="u", broker=BrokerSettings("mqtt://127.0.0.1:1883"), min_clients=2, max_wait=5.0, hello_timeout=3.0
        ),
        CLIENTS,
        Topics("u"),
    )
    channel.endpoint.publish = lambda topic, message, retain=False: None
    clock = [0.0]
    monkeypatch.setattr(mqtt_channel, "time", SimpleNamespace(monotonic=lambda: clock[0]))

    def wait(timeout):
        clock[0] += 1.0
        assert clock[0] < 100, "the channel never stopped waiting"

    channel._pump = wait
    channel.stats["client-0"].online = True
    return channel


def test_a_round_that_never_gets_min_clients_online_stops_the_run(channel):
    request = Message("train", "server", "client-0", 1, run="u")
    with pytest.raises(TooFewClients) as stopped:
        channel.send_and_receive([request], VERBS["train"].deadline)
    assert str(stopped.value) == (
        "only 1 of the 2 clients needed (--min-clients) came online within 5 s (--max-wait); the run stopped"
    )


def test_a_start_that_never_gets_min_clients_hellos_stops_the_run(channel):
    hellos = [Message("hello", "server", cid, 0, run="u") for cid in CLIENTS]
    with pytest.raises(TooFewClients) as stopped:
        channel.send_and_receive(hellos, VERBS["hello"].deadline)
    assert str(stopped.value) == (
        "only 0 of the 2 clients needed (--min-clients) sent their hello within 8 s; the run stopped"
    )


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with start_broker(workdir=tmp_path_factory.mktemp("broker")) as running:
        yield running


@needs_mosquitto
def test_a_server_whose_min_clients_never_came_exits_non_zero_saying_so(broker, tmp_path):
    """Two clients wanted, one device: the server takes its hello, waits --hello-timeout and then
    --max-wait for the other, and stops with TOO_FEW_CLIENTS_EXIT; its last line says how many came."""
    device_log = tmp_path / "client-0.log"
    device = client(broker, "few", "client-0", tmp_path / "state", device_log)
    try:
        wait_for(lambda: "connected to" in device_log.read_text(), 120, "client-0's connection", [device])
        config = dict(algo="fd", dataset="digits", clients=2, rounds=1, seed=5, threads=1)
        log = tmp_path / "server.log"
        flags = ("--min-clients", 2, "--hello-timeout", 10, "--max-wait", 1)
        started = server(broker, "few", config, tmp_path / "out", *flags, log=log)
        finish([started], timeout=120)
    finally:
        device.terminate()
        finish([device], timeout=30)
    text = log.read_text()
    assert started.returncode == TOO_FEW_CLIENTS_EXIT, text[-3000:]
    assert text.strip().splitlines()[-1] == (
        "edgefd server: only 1 of the 2 clients needed (--min-clients) sent their hello within 11 s; the run stopped"
    )
