"""A method with a server-to-client verb of its own (tests/deploy/toy_method.py: its roles and its
one line in the verb table, in its own file, nothing else) runs in-process and over a real
Mosquitto, with the same records: the loop sends the verb in its phase (before each round's
training), both channels carry it, both clients' runtimes dispatch it, and the deployed server
takes the clients' answers on it."""

import subprocess
import sys
from pathlib import Path

import pytest
import toy_method
from mqtt_helpers import ENV, comparable, finish, flags, lines_of, needs_mosquitto

from edgefd.deploy.broker import start_broker
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run

TOY = Path(toy_method.__file__)
CONFIG = dict(algo="toy", dataset="digits", clients=3, rounds=3, seed=1, threads=1, samples_per_client=40)


@pytest.fixture
def toy():
    """The toy registered in this process for the test only (the registries are shared by the suite)."""
    toy_method.install()
    yield
    toy_method.uninstall()


def check_the_briefs(lines):
    assert [line["round"] for line in lines] == [0, 1, 2, 3]
    # each round's evaluation sees that round's brief: accuracy = briefs taken in / 10
    assert [line["accuracy"] for line in lines] == pytest.approx([0.0, 0.1, 0.2, 0.3])
    totals = [line["server"]["total"] for line in lines[1:]]
    assert totals == [120.0] * 3  # three clients of 40 samples
    # each client heard the round before's total before it trained: nothing aggregated before round 1
    assert [line["server"]["heard"] for line in lines[1:]] == [0.0, 360.0, 360.0]
    assert all(line["bytes_down"] > 0 for line in lines[1:])  # the briefs are the round's downlink


def test_a_new_verb_runs_in_process(tmp_path, toy):
    run(SimulationConfig(**CONFIG, out=str(tmp_path / "sim")), progress=False)
    check_the_briefs(lines_of(tmp_path / "sim"))


@needs_mosquitto
def test_a_new_verb_runs_over_mqtt_as_in_process(tmp_path, toy):
    run(SimulationConfig(**CONFIG, out=str(tmp_path / "sim")), progress=False)
    settings = {k: v for k, v in CONFIG.items() if k != "algo"}
    with start_broker(workdir=tmp_path / "broker") as broker:

        def toy_process(*args, log):
            with open(log, "ab") as handle:
                return subprocess.Popen(
                    [sys.executable, TOY, *map(str, args)], stdout=handle, stderr=subprocess.STDOUT, env=ENV
                )

        common = ("--broker", broker.url, "--run", "toy")
        out = tmp_path / "deploy"
        processes = [
            toy_process(
                "server",
                *common,
                "--algo",
                "toy",
                *flags(settings),
                "--out",
                out,
                "--quiet",
                log=tmp_path / "server.log",
            )
        ]
        for cid in ("client-0", "client-1", "client-2"):
            processes.append(toy_process("client", *common, "--client-id", cid, log=tmp_path / f"{cid}.log"))
        finish(processes[:1], timeout=180)  # the server; then its clients, which it has stopped
        finish(processes[1:], timeout=30)
    logs = {p.name: p.read_text() for p in tmp_path.glob("*.log")}
    assert [p.returncode for p in processes] == [0, 0, 0, 0], logs["server.log"][-3000:]
    deployed = lines_of(out)
    check_the_briefs(deployed)
    assert [comparable(line) for line in deployed] == [comparable(line) for line in lines_of(tmp_path / "sim")]
    assert "brief 3 requested" in logs["client-1.log"]
