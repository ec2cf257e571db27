"""Faults a deployment survives, each on a real Mosquitto with server and clients as processes:
a client SIGKILLed mid-round, the broker restarted mid-run, the server SIGKILLed and resumed."""

import json
import signal
from pathlib import Path

import numpy as np
import pytest
from mqtt_helpers import client, comparable, finish, lines_of, needs_mosquitto, server, wait_for

from edgefd.deploy.broker import start_broker
from edgefd.deploy.server_runtime import CHECKPOINT_FILE
from edgefd.runtime.build import client_data, prepare
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run

pytestmark = needs_mosquitto


@pytest.fixture
def broker(tmp_path):
    with start_broker(workdir=tmp_path / "broker") as running:
        yield running


FAULT_RUN = dict(algo="fd", dataset="digits", clients=2, rounds=3, seed=2, threads=1)


def start_run(broker, tmp_path, run_name, config, *server_flags, client_flags=(), own_flags=None):
    out = tmp_path / "out"
    processes = {"server": server(broker, run_name, config, out, *server_flags, log=tmp_path / "server.log")}
    for i in range(config["clients"]):
        cid = f"client-{i}"
        extra = (*client_flags, *(own_flags or {}).get(cid, ()))
        processes[cid] = client(broker, run_name, cid, tmp_path / "state", tmp_path / f"{cid}.log", *extra)
    return out, processes


def logs(tmp_path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-2500:]}" for p in sorted(tmp_path.glob("*.log")))


def simulated_lines(tmp_path, config):
    run(SimulationConfig(**config, out=str(tmp_path / "sim")), progress=False)
    return [comparable(line) for line in lines_of(tmp_path / "sim")]


def write_device_data(folder, config, index):
    """A device's data.npz holding exactly client `index`'s share of the run's dataset."""
    pieces = prepare(SimulationConfig(**config))
    data = client_data(pieces, index)
    folder.mkdir()
    np.savez(
        folder / "data.npz",
        train_x=data.train_x.numpy(),
        train_y=data.train_y.numpy(),
        test_x=data.test_x.numpy(),
        test_y=data.test_y.numpy(),
        train_ids=data.train_ids.numpy(),
        num_classes=np.array(data.num_classes),
    )


def test_killed_client_misses_its_deadline_then_rejoins(tmp_path, broker):
    """client-2 is SIGKILLed while it trains round 1: round 1 closes at its deadline with the other
    two. With --min-clients 3 the next round waits until client-2, restarted from its checkpoint, is back."""
    config = dict(FAULT_RUN, clients=3, epochs=3)
    out, processes = start_run(
        broker, tmp_path, "kill", config, "--round-timeout", 8, "--eval-timeout", 8, "--min-clients", 3
    )
    try:
        first_log = tmp_path / "client-2.log"
        wait_for(lambda: "train 1 requested" in first_log.read_text(), 180, "round 1", processes.values())
        processes["client-2"].send_signal(signal.SIGKILL)
        processes["client-2"].wait()
        wait_for(lambda: len(lines_of(out)) >= 2, 60, "round 1", [processes["server"]])
        processes["client-2"] = client(broker, "kill", "client-2", tmp_path / "state", tmp_path / "client-2b.log")
        finish(processes.values(), timeout=180)
    finally:
        finish(processes.values(), timeout=1)
    assert all(p.returncode == 0 for p in processes.values()), logs(tmp_path)
    lines = lines_of(out)
    assert [line["round"] for line in lines] == [0, 1, 2, 3]
    assert lines[1]["late"] == ["client-2"] and "client-2" not in lines[1]["client_accuracy"]
    assert lines[1]["seconds"] >= 8  # it waited for its deadline
    assert lines[3]["late"] == [] and set(lines[3]["client_accuracy"]) == {"client-0", "client-1", "client-2"}
    stats = json.loads((out / "summary.json").read_text())["deployment"]["clients"]["client-2"]
    assert stats["missed"] >= 1 and stats["on_time"] >= 1 and stats["disconnects"] >= 1 and stats["connects"] >= 2
    assert "resumed from its checkpoint after round 0" in (tmp_path / "client-2b.log").read_text()
    assert "waiting for 3 client(s) online" in (tmp_path / "server.log").read_text()


def test_broker_restart_mid_run(tmp_path, broker):
    """The broker goes down for a second after round 1; everyone reconnects, the run completes with
    every uplink, and its results are the simulation's. FedAvg: whole models, in 16 KiB chunks,
    and the global model sent for evaluation."""
    config = dict(FAULT_RUN, algo="fedavg", rounds=4, epochs=20)  # ~0.7 s a round: the restart lands mid-run
    expected = simulated_lines(tmp_path, config)
    chunks = ("--chunk-size", 16384)
    out, processes = start_run(broker, tmp_path, "restart", config, "--round-timeout", 60, *chunks, client_flags=chunks)
    try:
        wait_for(lambda: len(lines_of(out)) >= 2, 180, "round 1", processes.values())
        broker.restart(down_seconds=1.0)
        finish(processes.values(), timeout=180)
    finally:
        finish(processes.values(), timeout=1)
    assert all(p.returncode == 0 for p in processes.values()), logs(tmp_path)
    assert [comparable(line) for line in lines_of(out)] == expected
    summary = json.loads((out / "summary.json").read_text())
    assert summary["deployment"]["wire"]["connects"] >= 2
    frames = summary["deployment"]["wire"]["received_frames"]["up/train"]
    assert frames > summary["deployment"]["wire"]["received_messages"]["up/train"]  # chunked


def checkpointed(out: Path) -> bool:
    """The server's checkpoint is at least as new as its last metrics line (it writes the line, then
    the checkpoint): a kill now finds the round it has just written checkpointed."""
    checkpoint, metrics = out / CHECKPOINT_FILE, out / "metrics.jsonl"
    return checkpoint.exists() and checkpoint.stat().st_mtime_ns >= metrics.stat().st_mtime_ns


def test_server_killed_and_resumed(tmp_path, broker):
    """The server is SIGKILLed after round 1; `edgefd server --resume` continues from its checkpoint:
    every round appears once and the results are the simulation's (no round lost or trained twice).
    client-1 reads its data from a device folder (--data-dir) holding its dataset share.

    The clients are paused (SIGSTOP) once round 1 is written, so that on a loaded machine the
    server cannot run to the last round before the kill lands: it finishes at most the round whose
    uploads it already holds."""
    config = dict(FAULT_RUN, rounds=5)
    expected = simulated_lines(tmp_path, config)
    write_device_data(tmp_path / "device-1", config, index=1)
    out, processes = start_run(
        broker,
        tmp_path,
        "resume",
        config,
        "--round-timeout",
        60,
        own_flags={"client-1": ("--data-dir", tmp_path / "device-1")},
    )
    clients = [processes["client-0"], processes["client-1"]]
    try:
        wait_for(lambda: len(lines_of(out)) >= 2, 180, "round 1", processes.values())
        for process in clients:
            process.send_signal(signal.SIGSTOP)
        wait_for(lambda: checkpointed(out), 60, "the checkpoint of the last round written", [processes["server"]])
        processes["server"].send_signal(signal.SIGKILL)
        processes["server"].wait()
        for process in clients:
            process.send_signal(signal.SIGCONT)
        processes["server"] = server(
            broker, "resume", config, out, "--round-timeout", 60, "--resume", log=tmp_path / "server-resumed.log"
        )
        finish(processes.values(), timeout=180)
    finally:
        finish(processes.values(), timeout=1)
    assert all(p.returncode == 0 for p in processes.values()), logs(tmp_path)
    assert [comparable(line) for line in lines_of(out)] == expected
    assert f"data from {tmp_path / 'device-1'}" in (tmp_path / "client-1.log").read_text()
    resumed = (tmp_path / "server-resumed.log").read_text()
    assert "resumed from the checkpoint of round" in resumed
    summary = json.loads((out / "summary.json").read_text())
    assert 1 <= summary["deployment"]["resumed_from_round"] < config["rounds"]  # rounds ran after the resume
