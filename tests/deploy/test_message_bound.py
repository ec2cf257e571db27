"""A deployment refuses what its simulation refuses: with the same --max-message-bytes, `edgefd
deploy-local` (a real Mosquitto, a server and a process per client) refuses the same client's
uplinks as `edgefd simulate`, records them alike, learns the same from the rest, names the client in
its last line and ends with exit status 4 (every round refused someone). By default nothing is
refused: each message's limit is its method's bound (tests/runtime/test_limits.py; FedICT's and
FedGKT's default deployments: test_every_method_over_mqtt.py)."""

import json

import pytest
from mqtt_helpers import comparable, edgefd, finish, flags, lines_of, needs_mosquitto
from run_settings import CAP, SKEWED_FEDICT

from edgefd.deploy.broker import start_broker
from edgefd.metrics.results import REFUSED_EXIT
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run

pytestmark = needs_mosquitto


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with start_broker(workdir=tmp_path_factory.mktemp("broker")) as running:
        yield running


def test_deploy_local_refuses_the_uplinks_simulate_refuses_and_learns_the_same(tmp_path, broker):
    simulated = run(SimulationConfig(**SKEWED_FEDICT, max_message_bytes=CAP, out=str(tmp_path / "sim")), progress=False)
    process = edgefd(
        "deploy-local",
        "--broker",
        broker.url,
        "--run",
        "bound",
        *flags(SKEWED_FEDICT),
        "--max-message-bytes",
        CAP,
        "--out",
        tmp_path / "deploy",
        "--quiet",
        "--round-timeout",  # what a round waits for the refused uplink: it never comes
        6,
        log=tmp_path / "deploy.log",
    )
    finish([process], timeout=300)
    text = (tmp_path / "deploy.log").read_text()
    assert process.returncode == REFUSED_EXIT, text[-3000:]
    sim_lines, dep_lines = lines_of(tmp_path / "sim"), lines_of(tmp_path / "deploy")
    assert [comparable(line) for line in dep_lines] == [comparable(line) for line in sim_lines]
    assert [list(line["rejected"]) for line in dep_lines] == [list(line["rejected"]) for line in sim_lines]
    assert [list(line["rejected"]) for line in dep_lines] == [[], ["client-0"], ["client-0"]]
    assert all(line["rejected"]["client-0"].startswith("OversizedError (") for line in dep_lines[1:])
    deployed = json.loads((tmp_path / "deploy" / "summary.json").read_text())
    assert deployed["refused_clients"] == simulated["refused_clients"] == {"client-0": 2}
    assert "refused: client-0 in 2/2 rounds" in text  # deploy-local's last line
    server_log = (tmp_path / "deploy" / "logs" / "server.log").read_text()
    assert "round 1: refused from client-0: OversizedError" in server_log
