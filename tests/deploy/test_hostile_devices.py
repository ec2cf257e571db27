"""A device with valid credentials that sends payloads which decode but are not what the method
accepts, over a real Mosquitto: the server refuses each one (counted by reason, the device named in
the log), the round goes on with the honest devices, and the run completes.

The hostile device is a real `edgefd client` process whose uplinks and eval answers are replaced,
round by round, with one attack each (tests/deploy/hostile_client.py)."""

import subprocess
import sys
from pathlib import Path

from mqtt_helpers import ENV, client, finish, lines_of, needs_mosquitto, server

from edgefd.deploy.broker import start_broker

pytestmark = needs_mosquitto

HOSTILE = Path(__file__).with_name("hostile_client.py")
TIMEOUTS = ("--round-timeout", 60, "--eval-timeout", 5)  # a refused eval answer is waited for until then
RUN = dict(algo="fd", dataset="digits", clients=3, rounds=7, seed=4, threads=1, precision="fp16")
# what the server must say about each round's uplink from client-2 (see hostile_client.ATTACKS)
EXPECTED = {
    1: "missing-array",
    2: "shape",
    3: "out-of-range",
    4: "out-of-range",
    5: "out-of-range",
    6: "dtype",
    7: "wrong-kind",
}


def test_the_server_survives_a_hostile_device_and_the_honest_ones_finish(tmp_path):
    with start_broker(workdir=tmp_path / "broker") as broker:
        out = tmp_path / "out"
        processes = [server(broker, "hostile", RUN, out, *TIMEOUTS, log=tmp_path / "server.log")]
        for cid in ("client-0", "client-1"):
            processes.append(client(broker, "hostile", cid, tmp_path / "state", tmp_path / f"{cid}.log"))
        with open(tmp_path / "client-2.log", "ab") as log:
            processes.append(
                subprocess.Popen(
                    [sys.executable, HOSTILE, "--broker", broker.url, "--run", "hostile", "--client-id", "client-2"],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=ENV,
                )
            )
        finish(processes, timeout=300)
    logs = {p.name: p.read_text() for p in tmp_path.glob("*.log")}
    assert processes[0].returncode == 0, logs["server.log"][-3000:]
    lines = lines_of(out)
    assert [line["round"] for line in lines] == list(range(8))  # round 0 and all seven rounds
    assert {line["round"]: line["rejected"] for line in lines[1:]} == {
        r: {"client-2": reason} for r, reason in EXPECTED.items()
    }
    for line in lines[1:]:
        assert line["late"] == [] and line["server"]["labels_covered"] > 0  # the honest uplinks were aggregated
    # the hostile eval answers (text, Inf, 1.7) were refused, not averaged
    assert all(set(line["client_accuracy"]) == {"client-0", "client-1"} for line in lines[2:5])
    assert all(0.0 <= line["accuracy"] <= 1.0 for line in lines)
    assert lines[-1]["accuracy"] > 0.5  # the honest devices learned
    assert "client-2's uplink rejected: out-of-range" in logs["server.log"]
    assert "bad-accuracy" in logs["server.log"]
