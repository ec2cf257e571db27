"""A broker that cannot be reached is said, with its cause, within seconds: `broker_problem` tells an
unresolvable host, a closed port and a failed TLS handshake apart, `edgefd server` and `edgefd
deploy-local` stop with one line naming it, and a device says it at every attempt, with its wait."""

import socket
import subprocess
import sys
import time

import pytest

from edgefd.deploy.mqtt_transport import BrokerSettings, broker_problem

UNRESOLVABLE = "mqtt://no-such-host.invalid:1883"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def listener():
    """A TCP port that accepts connections (its backlog) and never speaks."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


def test_each_cause_is_told_apart(listener):
    assert broker_problem(BrokerSettings(UNRESOLVABLE)).startswith("cannot resolve the host 'no-such-host.invalid' (")
    port = free_port()
    assert broker_problem(BrokerSettings(f"mqtt://127.0.0.1:{port}")) == (
        f"nothing listens on 127.0.0.1:{port} (connection refused)"
    )
    assert broker_problem(BrokerSettings(f"mqtt://127.0.0.1:{listener}")) is None  # it connects: MQTT's to answer
    tls = broker_problem(BrokerSettings(f"mqtts://127.0.0.1:{listener}"), timeout=1.0)
    assert tls is not None and tls.startswith(f"the TLS handshake with 127.0.0.1:{listener} failed (")


def edgefd(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "edgefd.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.parametrize("where", ["unresolvable", "refused"])
def test_the_server_and_deploy_local_stop_within_seconds_saying_why(tmp_path, where):
    """Before, a wrong host froze deploy-local's progress bar at 0% for 68 s, then pointed at a log
    that never said the name did not resolve; the server said one line after 62 s."""
    url = UNRESOLVABLE if where == "unresolvable" else f"mqtt://127.0.0.1:{free_port()}"
    cause = "cannot resolve the host" if where == "unresolvable" else "(connection refused)"
    started = time.monotonic()
    server = edgefd("server", "--broker", url, "--run", "r", "--rounds", "1", "--out", str(tmp_path / "s"), "--quiet")
    local = edgefd("deploy-local", "--broker", url, "--rounds", "1", "--out", str(tmp_path / "d"), "--quiet")
    _, server_said = server.communicate(timeout=60)
    server_took = time.monotonic() - started
    _, local_said = local.communicate(timeout=60)
    assert server.returncode == 2 and server_said.strip().splitlines()[-1].startswith(
        f"edgefd server: cannot connect to {url}: "
    ), server_said
    assert cause in server_said.strip().splitlines()[-1]
    assert server_took < 15, server_took  # start-up, then 5 s of failed attempts (FAIL_FAST)
    assert local.returncode == 2 and local_said.strip().splitlines() == [
        f"edgefd deploy-local: cannot connect to {url}: {broker_problem(BrokerSettings(url))}"
    ], local_said


def test_a_device_says_at_each_attempt_why_it_cannot_connect_and_when_it_tries_again():
    """A device goes on trying (its broker may come later), and says so at every attempt: before,
    `edgefd client` printed nothing for 120 s and more."""
    port = free_port()
    device = edgefd("client", "--broker", f"mqtt://127.0.0.1:{port}", "--run", "r", "--client-id", "client-0")
    try:
        time.sleep(8)
    finally:
        device.terminate()
        _, said = device.communicate(timeout=30)
    attempts = [line for line in said.splitlines() if "cannot connect to" in line]
    assert len(attempts) >= 2, said
    assert f"nothing listens on 127.0.0.1:{port} (connection refused); trying again in 0.2 s" in attempts[0]
    assert "trying again in 0.4 s" in attempts[1]
