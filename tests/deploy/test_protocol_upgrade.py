"""A fleet upgrades one machine at a time while its run goes on: a server of this release runs with
a device of the previous protocol version, and that device is then restarted as this release; a
device of this release joins a server of the previous version; and a frame of a version neither
side speaks is refused with one line naming both versions and the side to upgrade."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mqtt_helpers import ENV, client, edgefd, finish, flags, lines_of, needs_mosquitto, wait_for

from edgefd.deploy import control
from edgefd.deploy.broker import start_broker
from edgefd.deploy.mqtt_channel import DeploymentSettings, MqttChannel
from edgefd.deploy.mqtt_transport import BrokerSettings, Incoming, Topics
from edgefd.runtime.config import SimulationConfig

CONFIG = dict(algo="fd", dataset="digits", clients=3, rounds=4, seed=2, threads=1, samples_per_client=80)
LONGER = dict(CONFIG, rounds=24, samples_per_client=300, epochs=3)
"""Rounds long enough (a few tenths of a second) for a device to be stopped and restarted mid-run."""
PREVIOUS = Path(__file__).with_name("previous_protocol.py")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with start_broker(workdir=tmp_path_factory.mktemp("broker")) as running:
        yield running


def speaking(versions: str, *args, log: Path) -> subprocess.Popen:
    """An edgefd command of the protocol ``versions`` only (the previous release's: "2")."""
    handle = open(log, "ab")
    command = [sys.executable, str(PREVIOUS), versions, *map(str, args)]
    return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=ENV, cwd=PREVIOUS.parent)


def server_args(broker, run, out, config=CONFIG):
    """A server that waits for all three devices before each round (a device being upgraded is offline)."""
    return ("server", "--broker", broker.url, "--run", run, *flags(config), "--out", out, "--min-clients", 3)


def client_args(broker, run, cid, state):
    return ("client", "--broker", broker.url, "--run", run, "--client-id", cid, "--state-dir", state)


def log_of(path: Path) -> str:
    return path.read_text() if path.exists() else ""


@needs_mosquitto
def test_a_device_of_the_previous_version_trains_then_upgrades_while_the_run_goes_on(tmp_path, broker):
    out, logs = tmp_path / "out", {name: tmp_path / f"{name}.log" for name in ("server", "old", "new", "c1", "c2")}

    server = edgefd(*server_args(broker, "up", out, LONGER), "--quiet", log=logs["server"])
    old = speaking("2", *client_args(broker, "up", "client-0", tmp_path / "s0"), log=logs["old"])
    others = [client(broker, "up", f"client-{i}", tmp_path / f"s{i}", logs[f"c{i}"]) for i in (1, 2)]
    processes = [server, old, *others]
    try:
        wait_for(lambda: any(line["round"] >= 2 for line in lines_of(out)), 300, "round 2", processes)
        upgraded_at = max(line["round"] for line in lines_of(out))  # every round to here ran before the upgrade
        os.kill(old.pid, signal.SIGTERM)  # the upgrade: stop the device, start this release in its place
        assert old.wait(timeout=60) == 0
        new = client(broker, "up", "client-0", tmp_path / "s0", logs["new"])
        processes.append(new)
        finish([server, new, *others], timeout=300)
    finally:
        finish(processes, timeout=1)
    server_log = log_of(logs["server"])
    assert server.returncode == 0, server_log[-3000:]
    lines = lines_of(out)
    assert upgraded_at < LONGER["rounds"] - 2 and [line["round"] for line in lines][-1] == LONGER["rounds"]
    for line in lines:  # every client answered every round before the upgrade, and the last one after it
        if 1 <= line["round"] <= upgraded_at or line["round"] == LONGER["rounds"]:
            assert line["late"] == [] and sorted(line["selected"]) == ["client-0", "client-1", "client-2"], line
    # the previous-version device was written to in version 2 throughout and refused nothing
    assert "UnsupportedVersionError" not in log_of(logs["old"]) + server_log
    assert "client-0 writes protocol version" not in server_log.split("client-0 writes protocol version 3")[0]
    for cid in ("client-0", "client-1", "client-2"):
        assert f"{cid} writes protocol version 3" in server_log, server_log[-3000:]
    assert "the server speaks protocol versions 2-3: this device writes version 3" in log_of(logs["new"])


@needs_mosquitto
def test_a_device_of_this_release_joins_a_server_of_the_previous_version(tmp_path, broker):
    out = tmp_path / "out"
    server = speaking("2", *server_args(broker, "old", out), "--quiet", log=tmp_path / "server.log")
    clients = [client(broker, "old", f"client-{i}", tmp_path / f"s{i}", tmp_path / f"c{i}.log") for i in range(3)]
    finish([server, *clients], timeout=300)
    assert server.returncode == 0, log_of(tmp_path / "server.log")[-3000:]
    assert all(line["late"] == [] for line in lines_of(out) if line["round"] >= 1)
    everything = "".join(log_of(tmp_path / f"c{i}.log") for i in range(3)) + log_of(tmp_path / "server.log")
    assert "UnsupportedVersionError" not in everything and "writes protocol version" not in everything


def test_the_server_answers_a_device_in_the_version_it_writes_live_not_in_its_last_will():
    """A device's last will is written in the oldest version it speaks, before it knows the
    server: it says the device is offline, not that it chose that version."""
    channel = MqttChannel(
        SimulationConfig(clients=1, rounds=1),
        DeploymentSettings(run="u", broker=BrokerSettings("mqtt://127.0.0.1:1883")),
        ["client-0"],
        Topics("u"),
    )
    endpoint = channel.endpoint

    def status(state: str, version: int) -> Incoming:
        return Incoming("status", "client-0", "", control.status_message("client-0", state, "u"), 60, version=version)

    assert endpoint.version_for("client-0") == 2  # not heard yet: the oldest, which both releases read
    channel._handle(status(control.ONLINE, 3))
    assert endpoint.version_for("client-0") == 3
    channel._handle(status(control.OFFLINE, 2))  # its last will
    assert endpoint.version_for("client-0") == 3 and not channel.stats["client-0"].online
    channel._handle(status(control.ONLINE, 2))  # restarted as the previous release
    assert endpoint.version_for("client-0") == 2
