"""Deployments past one broker: a two-node RabbitMQ cluster (its MQTT plugin) and a Mosquitto bridge
(two sites bridged to a central broker), each with one `edgefd server` and four `edgefd client`
processes spread over the brokers, run to completion with the results of `edgefd simulate`.

The clients start only once the server has published their retained configs. RabbitMQ's MQTT
plugin keeps them in node 1's store alone and hands them only to subscriptions of their exact topic
(a client subscribes to down/<id>/+), so on the cluster every client gets its config only because
the server publishes the configs again while it waits (edgefd/deploy/mqtt_channel.py); over the
bridge the retained configs reach the sites.

Without rabbitmq-server the RabbitMQ test is skipped here, and fails under CI (CI=true), where
scripts/install.sh --test installs it.
"""

import json
from pathlib import Path

import pytest
from broker_rigs import (
    NOT_INSTALLED,
    RunningBridge,
    RunningCluster,
    rabbitmq_folder,
    start_mosquitto_bridge,
    start_rabbitmq_cluster,
    still_running,
)
from mqtt_helpers import comparable, edgefd, finish, flags, lines_of, needs_mosquitto, skip_unless_ci, wait_for

from edgefd.deploy.mqtt_transport import BrokerSettings, MqttEndpoint, Topics
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run

CONFIG = dict(algo="fd", dataset="digits", clients=4, rounds=2, seed=11, threads=1)
CLIENTS = [f"client-{i}" for i in range(CONFIG["clients"])]


@pytest.fixture
def rabbitmq_cluster(tmp_path):
    if rabbitmq_folder() is None:
        skip_unless_ci(NOT_INSTALLED)
    cluster = start_rabbitmq_cluster(2, tmp_path / "rabbitmq")
    try:
        processes = cluster.processes()
        beams = [node.beam_pid() for node in cluster.nodes]
        assert None not in beams and set(beams) <= set(processes) and cluster.epmd.pid in processes
        yield cluster
    finally:
        cluster.stop()
    assert not still_running(processes), f"left running after stop(): {still_running(processes)}"


@pytest.fixture
def mosquitto_bridge(tmp_path):
    with start_mosquitto_bridge(2, tmp_path / "bridge") as bridge:
        yield bridge
    assert bridge.central is not None
    assert all(b.process.poll() is not None for b in [bridge.central, *bridge.sites])


def configs_published(url: str) -> MqttEndpoint:
    """A stranger on the server's broker that receives the retained config of the last client."""
    topics = Topics("past-one")
    stranger = MqttEndpoint(BrokerSettings(url), topics, "stranger")
    stranger.subscribe(topics.down(CLIENTS[-1], "config"))
    stranger.start(wait=30)
    return stranger


def deploy(tmp_path: Path, server_url: str, client_urls: list[str]) -> None:
    """Simulate, then run the same config with the server on `server_url` and client i on
    `client_urls[i % len]`, the clients started after the server published their configs, and
    compare."""
    simulated = tmp_path / "sim"
    run(SimulationConfig(**CONFIG, out=str(simulated)), progress=False)
    out, logs = tmp_path / "deploy", tmp_path / "logs"
    logs.mkdir()
    server = edgefd(
        "server", "--broker", server_url, "--run", "past-one", *flags(CONFIG), "--out", out, "--quiet",
        "--round-timeout", 60, "--hello-timeout", 120, "--min-clients", len(CLIENTS),
        log=logs / "server.log",
    )  # fmt: skip
    processes = [server]
    failed = lambda: any(p.poll() not in (None, 0) for p in processes[1:])  # noqa: E731
    try:
        stranger = configs_published(server_url)
        try:
            wait_for(lambda: not stranger.inbox.empty(), 120, "the server's retained configs", [server])
        finally:
            stranger.stop()
        for index, cid in enumerate(CLIENTS):
            url = client_urls[index % len(client_urls)]
            where = ["--broker", url, "--run", "past-one", "--client-id", cid, "--state-dir", tmp_path / "state"]
            processes.append(edgefd("client", *where, log=logs / f"{cid}.log"))
        # until the server ends, or a client fails (the server would wait for it)
        wait_for(lambda: server.poll() is not None or failed(), 150, "the end of the run")
    finally:
        if server.poll() is None:  # something failed: nothing to wait for
            for process in processes:
                process.kill()
        finish(processes, timeout=30)
    names = ["server", *CLIENTS]
    failures = [
        f"{name} exited with {process.returncode}:\n{(logs / f'{name}.log').read_text()[-1500:]}"
        for process, name in zip(processes, names)
        if process.returncode != 0
    ]
    assert not failures, "\n".join(failures)
    sim_lines, dep_lines = lines_of(simulated), lines_of(out)
    assert len(dep_lines) == CONFIG["rounds"] + 1  # round 0 (the start's evaluation) and each round
    assert [comparable(line) for line in dep_lines] == [comparable(line) for line in sim_lines]
    summary = json.loads((out / "summary.json").read_text())
    clients = summary["deployment"]["clients"]
    assert set(clients) == set(CLIENTS)
    assert all(c["on_time"] == CONFIG["rounds"] and c["late"] == c["missed"] == 0 for c in clients.values()), clients
    assert summary["deployment"]["rejected"] == {}


def test_a_run_over_a_two_node_rabbitmq_cluster_matches_simulate(tmp_path, rabbitmq_cluster: RunningCluster):
    """Server on node 1, clients 0 and 2 on node 1, clients 1 and 3 on node 2: every message of half
    the fleet crosses the cluster, and the results are simulate's."""
    urls = rabbitmq_cluster.urls
    deploy(tmp_path, urls[0], urls)


@needs_mosquitto
def test_a_run_over_a_mosquitto_bridge_matches_simulate(tmp_path, mosquitto_bridge: RunningBridge):
    """Server on the central broker, clients alternately on site 1 and site 2 (none on the central
    one): retained configs reach the sites over the bridges, uplinks and statuses come back."""
    deploy(tmp_path, mosquitto_bridge.central_url, mosquitto_bridge.site_urls)
