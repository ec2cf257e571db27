"""Deployment over a real Mosquitto broker, with server and clients as separate processes.

Each test is a whole small run (digits, tiny CNN, 2-3 clients, 2-3 rounds); most of its time is
the processes importing torch.
"""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from mqtt_helpers import comparable, edgefd, finish, flags, lines_of, needs_mosquitto, wait_for, write_holdout

from edgefd import cli
from edgefd.deploy.broker import start_broker
from edgefd.deploy.mqtt_transport import BrokerSettings, MqttEndpoint, Topics
from edgefd.export.checkpoint import load_checkpoint
from edgefd.protocol import Message, Payload, encode_message, split
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run

pytestmark = needs_mosquitto


@pytest.fixture
def broker(tmp_path):
    with start_broker(workdir=tmp_path / "broker") as running:
        yield running


def server_is_up(broker, run_name) -> MqttEndpoint:
    """A stranger that has seen the server's retained config (so the server is connected)."""
    topics = Topics(run_name)
    stranger = MqttEndpoint(BrokerSettings(broker.url), topics, "stranger")
    stranger.subscribe(topics.down("client-0", "config"))
    stranger.start(wait=10)
    return stranger


GARBAGE_REASONS = {
    "MagicError",
    "TruncatedError",
    "UnsupportedVersionError",
    "OversizedError",
    "NonFiniteError",
    "sender-mismatch",
    "ChecksumError",
}


def publish_garbage(broker, run_name, raw, work: Path) -> None:
    """Random bytes (with mosquitto_pub), a truncated frame, a wrong-version payload, an oversized
    payload, NaN knowledge, a bit flip, and a valid payload whose sender is not its topic's client."""
    topics = Topics(run_name)
    up = topics.up("client-0", "train")
    blob = work / "random.bin"
    blob.write_bytes(np.random.default_rng(1).bytes(500))
    subprocess.run(
        ["mosquitto_pub", "-h", broker.host, "-p", str(broker.port), "-q", "1", "-t", up, "-f", str(blob)],
        check=True,
        timeout=10,
    )

    def uplink(sender: str, logits: np.ndarray) -> bytes:
        content = Payload("knowledge", {"logits": logits})
        return encode_message(Message("train", sender, "server", 1, content, run=run_name, is_answer=True))

    good = uplink("client-0", np.ones((10, 10), np.float32))
    wrong_version = bytearray(good)
    wrong_version[4] = 99  # the message's version byte
    flipped = bytearray(split(good, 4096)[0])
    flipped[-1] ^= 0xFF
    frames = [
        split(good, 4096)[0][:40],
        split(bytes(wrong_version), 4096)[0],
        bytes(flipped),
        split(np.zeros(300_000, np.uint8).tobytes(), 100_000)[0],
        split(uplink("client-0", np.full((10, 10), np.nan, np.float32)), 4096)[0],
        split(uplink("client-1", np.ones((10, 10), np.float32)), 4096)[0],
    ]
    for frame in frames:
        raw.publish(up, frame, qos=1).wait_for_publish(5)


def test_deploy_local_matches_simulate_despite_garbage(tmp_path, broker):
    """Same seed, same selection, same data, same accuracy and codec bytes, round for round, while
    a stranger publishes garbage that the server rejects and counts."""
    config = dict(algo="fd", dataset="digits", clients=3, rounds=2, seed=5, threads=1, participation=0.6)
    simulated = tmp_path / "sim"
    run(SimulationConfig(**config, out=str(simulated)), progress=False)
    deployed = tmp_path / "deploy"
    process = edgefd(
        "deploy-local",
        "--broker",
        broker.url,
        "--run",
        "eq",
        *flags(config),
        "--out",
        deployed,
        "--round-timeout",
        60,
        "--max-message-bytes",
        200_000,
        log=tmp_path / "deploy.log",
    )
    stranger = server_is_up(broker, "eq")
    try:
        wait_for(lambda: not stranger.inbox.empty(), 120, "the server's config", [process])
        publish_garbage(broker, "eq", stranger._client, tmp_path)
    finally:
        stranger.stop()
    finish([process], timeout=240)
    assert process.returncode == 0, (tmp_path / "deploy.log").read_text()[-3000:]

    sim_lines, dep_lines = lines_of(simulated), lines_of(deployed)
    assert [comparable(line) for line in dep_lines] == [comparable(line) for line in sim_lines]
    assert any(len(line["selected"]) == 2 for line in dep_lines[1:])  # participation < 1 was exercised
    summary = json.loads((deployed / "summary.json").read_text())
    rejected = summary["deployment"]["rejected"]
    assert GARBAGE_REASONS <= set(rejected), rejected
    assert all(line["wire"]["up"] > line["bytes_up"] for line in dep_lines)
    assert (deployed / "curves.png").stat().st_size > 1000
    assert set(summary["deployment"]["clients"]) == {"client-0", "client-1", "client-2"}
    # every device saved its final model where `edgefd export` reads it, with the run's last accuracy
    assert cli.main(["export", str(deployed), "--out", str(tmp_path / "onnx")]) == 0
    final = dep_lines[-1]["client_accuracy"]
    for cid in ("client-0", "client-1", "client-2"):
        assert load_checkpoint(deployed / "models" / f"{cid}.pt").accuracy == pytest.approx(final[cid])
        assert (tmp_path / "onnx" / f"{cid}.onnx").stat().st_size > 1000
    # the rounds showed on the console as they finished, not only in the server's log
    console = (tmp_path / "deploy.log").read_text()
    assert "fd on digits over MQTT" in console and "2/2" in console and "acc " in console, console[-2000:]


def test_fedcache_paper_exchange_over_mqtt_matches_simulate(tmp_path, broker):
    """FedCache's default exchange (a request and an answer per mini-batch, through the broker, the
    clients one after another) gives simulate's accuracies and codec bytes, round for round
    (hnswlib's relations too: its indexes are built one thread each, in the server's process here and
    in the simulation's there), with the simulation's kernels. (test_every_method_over_mqtt.py
    deploys the exact relation search with the round-batched exchange.)"""
    clients = 4
    config = dict(
        algo="fedcache",
        dataset="digits",
        clients=clients,
        rounds=2,
        seed=2718,
        threads=1,
        models="mlp",
        samples_per_client=60,
    )
    simulated, deployed = tmp_path / "sim", tmp_path / "deploy"
    run(SimulationConfig(**config, out=str(simulated)), progress=False)
    process = edgefd(
        "deploy-local",
        "--broker",
        broker.url,
        "--run",
        "steps",
        *flags(config),
        "--out",
        deployed,
        "--quiet",
        "--round-timeout",
        60,
        log=tmp_path / "deploy.log",
    )
    finish([process], timeout=240)
    assert process.returncode == 0, (tmp_path / "deploy.log").read_text()[-3000:]
    sim_lines, dep_lines = lines_of(simulated), lines_of(deployed)
    assert [comparable(line) for line in dep_lines] == [comparable(line) for line in sim_lines]
    summary = json.loads((deployed / "summary.json").read_text())
    assert summary["kernels"] == json.loads((simulated / "summary.json").read_text())["kernels"]
    assert summary["params"]["exchange"] == "batch" and summary["params"]["knn"] == "hnsw"
    steps_up = summary["deployment"]["wire"]["received_messages"]["up/step"]
    assert steps_up >= 2 * clients * 2  # several mini-batches per client, every client, 2 rounds


def test_a_deployment_marks_the_devices_scores_as_theirs_and_reports_the_servers_own_score_first(tmp_path, broker):
    """FedAvg over MQTT with `--holdout-dir`: every round's line names its self-reported fields and
    carries the server's score of the global model on its held-out set, which the summary and the
    last line report first."""
    holdout = tmp_path / "holdout"
    holdout.mkdir()
    write_holdout(holdout)
    config = dict(algo="fedavg", dataset="digits", clients=3, rounds=2, seed=5, threads=1)
    deployed = tmp_path / "deploy"
    process = edgefd(
        "deploy-local",
        "--broker",
        broker.url,
        "--run",
        "held",
        *flags(config),
        "--out",
        deployed,
        "--holdout-dir",
        holdout,
        log=tmp_path / "deploy.log",
    )
    finish([process], timeout=240)
    console = (tmp_path / "deploy.log").read_text()
    assert process.returncode == 0, console[-3000:]
    lines = lines_of(deployed)
    assert all(
        line["self_reported"] == ["client_accuracy", "accuracy", "accuracy_std", "accuracy_median"] for line in lines
    )
    assert all(set(line["server_model_accuracy"]) == {"global_model"} for line in lines)
    summary = json.loads((deployed / "summary.json").read_text())
    assert summary["headline_accuracy_of"] == "final_server_accuracy"
    assert (
        summary["headline_accuracy"]
        == summary["final_server_accuracy"]
        == lines[-1]["server_model_accuracy"]["global_model"]
    )
    assert "final_accuracy" in summary["self_reported"] and "final_server_accuracy" not in summary["self_reported"]
    assert f"final accuracy {100 * summary['headline_accuracy']:.2f}% (the server's global model" in console
