"""Every registered method deploys: one round over a real Mosquitto (a server process and a
process per client, `edgefd deploy-local`) gives exactly the metrics of the same run in-process,
nothing refused on either side, and each device saves the same model file as the simulation (what
`edgefd export` reads)."""

import pytest
import torch
from light_settings import LIGHT_SETTINGS
from mqtt_helpers import comparable, edgefd, finish, flags, lines_of, needs_mosquitto

from edgefd.algorithms.base import list_methods
from edgefd.deploy.broker import start_broker
from edgefd.export.checkpoint import list_checkpoints, load_checkpoint
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run

pytestmark = needs_mosquitto

CONFIG = dict(dataset="digits", clients=2, rounds=1, seed=3, threads=1, samples_per_client=60)
PARALLEL = dict(
    dataset="mnist5k", clients=2, rounds=1, seed=1, threads=2, samples_per_client=150, partition="dirichlet:0.5"
)
"""The methods' own models on real images at the default two threads (each device process runs at
the run's threads), where FedD2S's and FedICT's numbers change with the thread count."""
SETTINGS = {
    **LIGHT_SETTINGS,
    # the round-batched exchange (test_mqtt_deployment.py runs the paper's per-batch one); exact neighbours
    "fedcache": dict(params={"knn": "exact", "exchange": "round"}),
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with start_broker(workdir=tmp_path_factory.mktemp("broker")) as running:
        yield running


@pytest.mark.parametrize(
    "algo, setting",
    [(m.name, "light") for m in list_methods()] + [("fedd2s", "parallel"), ("fedict", "parallel")],
)
def test_one_round_over_mqtt_equals_the_simulation(tmp_path, broker, algo, setting):
    settings = {**CONFIG, **SETTINGS.get(algo, {})} if setting == "light" else dict(PARALLEL)
    params = settings.pop("params", {})
    run(SimulationConfig(algo=algo, **settings, params=params, out=str(tmp_path / "sim")), progress=False)
    process = edgefd(
        "deploy-local",
        "--broker",
        broker.url,
        "--run",
        f"every-{algo}",
        "--algo",
        algo,
        *flags(settings),
        *[item for name, value in params.items() for item in ("--param", f"{name}={value}")],
        "--out",
        tmp_path / "deploy",
        "--quiet",
        "--round-timeout",
        120,
        log=tmp_path / "deploy.log",
    )
    finish([process], timeout=300)
    assert process.returncode == 0, (tmp_path / "deploy.log").read_text()[-3000:]
    simulated, deployed = lines_of(tmp_path / "sim"), lines_of(tmp_path / "deploy")
    assert len(deployed) == 2  # round 0 (the hellos) and round 1
    assert [comparable(line) for line in deployed] == [comparable(line) for line in simulated]
    assert all(line["rejected"] == {} for line in simulated + deployed)  # each message within its method's bound
    simulated_models, deployed_models = list_checkpoints(tmp_path / "sim"), list_checkpoints(tmp_path / "deploy")
    assert deployed_models.keys() == simulated_models.keys()
    for cid, path in simulated_models.items():
        expected, saved = load_checkpoint(path), load_checkpoint(deployed_models[cid])
        assert saved.metadata() == expected.metadata(), cid
        assert (saved.train_indices, saved.test_indices) == (expected.train_indices, expected.test_indices)
        assert saved.state.keys() == expected.state.keys()
        assert all(torch.equal(saved.state[k], expected.state[k]) for k in expected.state), cid
