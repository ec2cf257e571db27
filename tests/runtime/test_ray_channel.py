"""`--backend ray`: every method's run in Ray actors is the in-process run, bit for bit (metrics and
bytes), on a cluster of a head and two worker nodes; a worker killed mid-round loses no run; GPUs
are scheduled (declared ones: this machine has none); a Ray that cannot be had, a cluster too
small, or a node without the data is a one-line error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from run_settings import CAP, SKEWED_FEDICT

from edgefd.algorithms.base import list_methods
from edgefd.data.idx import write_idx
from edgefd.data.registry import DATA_ROOT_ENV
from edgefd.protocol import decode_message, encode_message
from edgefd.protocol.errors import ProtocolError
from edgefd.protocol.message import SERVER, Message
from edgefd.runtime.build import client_ids_of
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.ray_channel import ClientHost, RayChannel, SavedStates, host_indices
from edgefd.simulate import run

try:
    import ray
except ImportError:
    if os.environ.get("CI"):  # .ci/run installs edgefd[ray]: there a missing Ray is a failure, not a skip
        raise
    pytest.skip("ray is not installed (pip install 'edgefd[ray]')", allow_module_level=True)

METHODS = [method.name for method in list_methods()]
SMALL = dict(dataset="digits", clients=3, rounds=2, samples_per_client=40, threads=1, seed=1)
PARALLEL = dict(
    dataset="mnist5k", clients=3, rounds=1, samples_per_client=150, partition="dirichlet:0.5", threads=2, seed=1
)
"""Each method's own models and batch size on real 28x28 images at the default two threads: torch's
intra-op parallelism and the kernels' OpenMP loops run on two threads, and a client that ran at
another thread count would give other numbers (`test_the_parallel_case_depends_on_the_thread_count`)."""
THREAD_SENSITIVE = ("fedcache", "fedd2s")
"""Methods whose numbers on the `PARALLEL` case change with the thread count (FD's, FedAvg's and
DFL's small models give the same numbers at one and two threads there), with `THREAD_PARAMS`."""
THREAD_PARAMS = {"fedcache": {"aggregator": "mean"}}
"""FedCache's teachers through the `gather_mean` kernel (Eq. 17), whose OpenMP loop is what makes its
numbers depend on the thread count: its default median teachers (plain torch) give the same numbers
at one and two threads on this case."""
SERVER_TIMING = {"server_seconds", "server_cpu_seconds", "loss_kernel_seconds", "loss_kernel_share"}
"""A server's own clock readings (FedZKT's): not results."""


NODE_CPUS = 2
"""Each worker node's CPUs (declared: the machine's 2 cores are shared), and one declared GPU."""


@pytest.fixture(scope="module")
def data_roots(tmp_path_factory):
    """Each worker node's data root: node A's holds a small `kmnist` (its IDX files), node B's is empty."""
    root = tmp_path_factory.mktemp("data")
    (root / "b").mkdir()
    (root / "a").mkdir()
    rng = np.random.default_rng(0)
    for split, n in (("train", 60), ("t10k", 30)):
        write_idx(root / "a" / f"{split}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
        write_idx(root / "a" / f"{split}-labels-idx1-ubyte", (np.arange(n) % 10).astype(np.uint8))
    return root


@pytest.fixture(scope="module", autouse=True)
def cluster(data_roots):
    """One Ray cluster for the module: a head without CPUs and two worker nodes, so that every
    run's actors are spread over two nodes; the channel joins it and leaves it running."""
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for name in ("a", "b"):
        nodes.add_node(num_cpus=NODE_CPUS, num_gpus=1, env_vars={DATA_ROOT_ENV: str(data_roots / name)})
    ray.init(address=nodes.address, log_to_driver=False)
    yield nodes
    ray.shutdown()
    nodes.shutdown()


def results(out):
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for line in lines:
        del line["seconds"]
        line["server"] = {k: v for k, v in line["server"].items() if k not in SERVER_TIMING}
    return lines


@pytest.mark.parametrize("algo", METHODS)
def test_ray_run_is_the_in_process_run(algo, tmp_path):
    """Every method, at one thread (the suite's, and a user's who runs two simulations side by side)."""
    ours = run(SimulationConfig(algo=algo, out=str(tmp_path / "inprocess"), **SMALL), progress=False)
    theirs = run(
        SimulationConfig(algo=algo, out=str(tmp_path / "ray"), backend="ray", workers=2, **SMALL), progress=False
    )
    assert results(tmp_path / "ray") == results(tmp_path / "inprocess")
    assert (theirs["bytes_up_total"], theirs["bytes_down_total"]) == (ours["bytes_up_total"], ours["bytes_down_total"])
    assert ours["bytes_up_total"] > 0 or algo == "local"
    assert sorted(p.name for p in (tmp_path / "ray" / "models").iterdir()) == sorted(
        p.name for p in (tmp_path / "inprocess" / "models").iterdir()
    )


@pytest.mark.parametrize("algo, shapes", [("fedcache", (2, 3)), ("fedd2s", (2, 3)), ("fedict", (3,))])
def test_ray_run_is_the_in_process_run_at_two_threads(algo, shapes, tmp_path):
    """The methods whose numbers change with the thread count, at the default two threads on the two
    nodes, with an actor's clients one after another in one process (two workers) or each in a
    process of its own (three). Every method at two threads would cost the suite minutes (a Ray
    run's actors take about 12 s to start on two cores, and two-thread runs beside the suite's
    other worker wait at every parallel region)."""
    params = THREAD_PARAMS.get(algo, {})
    ours = run(SimulationConfig(algo=algo, out=str(tmp_path / "inprocess"), params=params, **PARALLEL), progress=False)
    for workers in shapes:
        out = tmp_path / f"ray-{workers}"
        theirs = run(
            SimulationConfig(algo=algo, out=str(out), backend="ray", workers=workers, params=params, **PARALLEL),
            progress=False,
        )
        assert results(out) == results(tmp_path / "inprocess"), f"{workers} workers"
        assert (theirs["bytes_up_total"], theirs["bytes_down_total"]) == (
            ours["bytes_up_total"],
            ours["bytes_down_total"],
        )


@pytest.mark.parametrize("algo", THREAD_SENSITIVE)
def test_the_parallel_case_depends_on_the_thread_count(algo, tmp_path):
    """The control of the test above: on its case these methods' numbers at one thread are not
    those at two, so a client that ran at one thread in an actor would be seen."""
    params = THREAD_PARAMS.get(algo, {})
    run(SimulationConfig(algo=algo, out=str(tmp_path / "two"), params=params, **PARALLEL), progress=False)
    one = PARALLEL | {"threads": 1}
    run(SimulationConfig(algo=algo, out=str(tmp_path / "one"), params=params, **one), progress=False)
    assert results(tmp_path / "one") != results(tmp_path / "two")


def test_an_answer_over_the_runs_cap_is_refused_as_in_process(tmp_path):
    """FedICT with a size skew under a 1 MB --max-message-bytes: client-0's 5.5 MB of features is
    refused in every round, in process and on Ray alike (tests/runtime/test_channel.py)."""
    capped = SKEWED_FEDICT | {"max_message_bytes": CAP}
    run(SimulationConfig(out=str(tmp_path / "inprocess"), **capped), progress=False)
    run(SimulationConfig(out=str(tmp_path / "ray"), backend="ray", workers=2, **capped), progress=False)
    lines = results(tmp_path / "ray")
    assert lines == results(tmp_path / "inprocess")
    assert all(list(line["rejected"]) == ["client-0"] for line in lines[1:])


def test_attack_and_full_test_scoring_are_the_in_process_ones(tmp_path):
    extra = dict(algo="fd", attack="scaled", attackers=1, score_full_test=True)
    run(SimulationConfig(out=str(tmp_path / "inprocess"), **extra, **SMALL), progress=False)
    run(SimulationConfig(out=str(tmp_path / "ray"), backend="ray", workers=2, **extra, **SMALL), progress=False)
    lines = results(tmp_path / "ray")
    assert lines == results(tmp_path / "inprocess")
    assert lines[-1]["accuracy_full"] is not None


def test_client_i_lives_on_actor_i_mod_workers():
    assert host_indices(5, 2) == [[0, 2, 4], [1, 3]]
    assert host_indices(2, 4) == [[0], [1]]


def simulate(*args, prelude=""):
    code = (
        f"import sys; sys.path[:] = [p for p in sys.path if p]; {prelude}from edgefd.cli import main; sys.exit(main())"
    )
    return subprocess.run(
        [sys.executable, "-c", code, "simulate", "--rounds", "1", "--clients", "2", "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_missing_ray_is_a_one_line_error(tmp_path):
    done = simulate("--backend", "ray", "--out", str(tmp_path), prelude="sys.modules['ray'] = None; ")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "needs Ray" in done.stderr and "edgefd[ray]" in done.stderr


def test_unreachable_ray_address_is_a_one_line_error(tmp_path):
    done = simulate("--backend", "ray", "--ray-address", "127.0.0.1:1", "--out", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "--ray-address 127.0.0.1:1" in done.stderr


class Unsendable:
    """A client whose message cannot be encoded (a diverged model's NaN), asking first where it may."""

    # what the actor sizes the client's limit from, and the method's hook after each exchange
    role = SimpleNamespace(model=torch.nn.Linear(1, 1), done_sharing=lambda: None)

    def handle(self, message, ask=None):
        if ask is not None:
            ask(message.answer(None))
        raise ProtocolError("NaN in the logits")


def unsendable_apps(config, indices):
    return {"client-0": Unsendable()}


@pytest.mark.parametrize("asks", [False, True])  # the client's work asks the server (a Conversation), or not
def test_a_message_that_does_not_encode_misses_the_round(asks, tmp_path):
    host = ClientHost(SimulationConfig(clients=1), [0], unsendable_apps, str(tmp_path))
    data = encode_message(Message("train", SERVER, "client-0", 1))
    if not asks:
        assert host.handle([data]) == [("missed", "NaN in the logits")]
        return
    kind, request = host.start(data)
    assert kind == "ask" and decode_message(request).sender == "client-0"
    assert host.resume(encode_message(Message("train", SERVER, "client-0", 1))) == ("missed", "NaN in the logits")


def test_saved_states_keep_each_clients_newest_state_in_one_file_a_round(tmp_path):
    from edgefd.runtime.build import client_apps

    roles = {cid: app.role for cid, app in client_apps(SimulationConfig(algo="fd", **SMALL), [0, 1, 2]).items()}

    def files():
        return sorted(path.name for path in tmp_path.iterdir())

    saved = SavedStates(tmp_path, "actor-0")
    saved.save(1, roles)
    saved.save(2, {cid: roles[cid] for cid in ("client-0", "client-1")})  # client-2 sat round 2 out
    assert files() == ["actor-0-round-000001.zip", "actor-0-round-000002.zip"]  # round 1's holds client-2's
    saved.save(3, {"client-2": roles["client-2"]})
    assert files() == ["actor-0-round-000002.zip", "actor-0-round-000003.zip"]
    SavedStates(tmp_path, "actor-1").save(3, {"client-1": roles["client-1"]})  # another actor on the node
    (tmp_path / ".actor-0-round-000004.zip.99.tmp").write_bytes(b"half")  # a save its process died in

    restarted = SavedStates(tmp_path, "actor-0")
    assert restarted.where == saved.where
    rounds = {cid: restarted.load(cid, {"data": role.context.data}).value("round") for cid, role in roles.items()}
    assert rounds == {"client-0": 2, "client-1": 2, "client-2": 3}
    assert ".actor-0-round-000004.zip.99.tmp" not in files()
    restarted.clear()
    assert files() == ["actor-1-round-000003.zip"]  # the other actor's are its own to delete
    SavedStates(tmp_path, "actor-1").clear()
    assert not tmp_path.exists()


# ------------------------------------------------------------------ nodes, GPUs, faults


def placements(channel):
    return ray.get([actor.placement.remote() for actor in channel.actors])


def test_actors_are_spread_over_the_nodes_and_given_their_declared_gpus():
    from edgefd.runtime.build import client_apps

    config = SimulationConfig(algo="fd", backend="ray", workers=4, gpus_per_worker=0.5, **SMALL | {"clients": 4})
    channel = RayChannel(config, client_ids_of(4), client_apps)
    try:
        where = placements(channel)
    finally:
        channel.close()
    nodes = [w["node_id"] for w in where]
    assert sorted(nodes.count(node) for node in set(nodes)) == [2, 2]  # two nodes, two actors each
    assert all(len(w["gpus"]) == 1 for w in where)  # half of its node's one GPU


def test_a_cluster_too_small_for_the_actors_is_an_error_not_a_wait():
    from edgefd.runtime.build import client_apps

    config = SimulationConfig(algo="fd", backend="ray", workers=4, gpus_per_worker=1, **SMALL | {"clients": 4})
    with pytest.raises(ValueError, match=r"--workers 4: the Ray cluster has room for 2 actor\(s\)"):
        RayChannel(config, client_ids_of(4), client_apps)
    config = SimulationConfig(algo="fd", backend="ray", workers=5, **SMALL | {"clients": 5})
    with pytest.raises(ValueError, match=r"room for 4 actor\(s\) \(4 CPU\(s\)"):
        RayChannel(config, client_ids_of(5), client_apps)


def test_a_run_on_declared_gpus_is_the_in_process_run(tmp_path):
    """This machine's GPUs are declared, not real: each actor says so and trains on the CPU. Three
    actors (one client each) on the two nodes: another shape of cluster, the same results."""
    run(SimulationConfig(algo="fd", out=str(tmp_path / "inprocess"), **SMALL), progress=False)
    config = SimulationConfig(
        algo="fd", out=str(tmp_path / "ray"), backend="ray", workers=3, gpus_per_worker=0.5, **SMALL
    )
    run(config, progress=False)
    assert results(tmp_path / "ray") == results(tmp_path / "inprocess")


def test_a_node_without_the_data_is_named(data_roots, tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_ROOT_ENV, str(data_roots / "a"))  # the driver has the data, as node A does; B lacks it
    config = SimulationConfig(algo="fd", dataset="kmnist", out=str(tmp_path), backend="ray", workers=2, **SMALL_KMNIST)
    with pytest.raises(ValueError) as error:
        run(config, progress=False)
    message = str(error.value)
    assert message.startswith("--backend ray: node ")
    assert "lacks their data (Kuzushiji-MNIST ('kmnist') not found" in message
    assert str(data_roots / "b") in message and message.endswith("every node needs the data (docs/RAY.md)")


SMALL_KMNIST = {k: v for k, v in SMALL.items() if k not in ("dataset", "samples_per_client")} | {"clients": 2}


class DiesOnce:
    """A client whose process dies the first time it is sent a message of ``round`` (``marker``
    remembers it across the restart)."""

    def __init__(self, app, marker: str, round: int) -> None:
        self.app, self.marker, self.round = app, marker, round

    def __getattr__(self, name):
        return getattr(self.app, name)

    def handle(self, message, ask=None):
        if message.round == self.round and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        return self.app.handle(message, ask)


def apps_where_one_dies(marker: str, client: str, round: int):
    def make(config, indices):
        from edgefd.runtime import build

        apps = build.client_apps(config, indices)
        if client in apps:
            apps[client] = DiesOnce(apps[client], marker, round)
        return apps

    return make


@pytest.fixture
def by_value():
    """This module's functions and classes go to the actors by value (Ray's workers cannot import it)."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.mark.parametrize("algo", ["fd", "fedcache"])  # fedcache: clients called one at a time (its steps)
def test_a_worker_killed_mid_round_loses_no_run(algo, tmp_path, monkeypatch, by_value):
    from edgefd.runtime import build

    monkeypatch.setattr(build, "client_apps", apps_where_one_dies(str(tmp_path / "died"), "client-1", 2))
    config = SimulationConfig(algo=algo, out=str(tmp_path / "run"), backend="ray", workers=2, **SMALL | {"rounds": 3})
    summary = run(config, progress=False)
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [line["round"] for line in lines] == [0, 1, 2, 3] and summary["rounds"] == 3
    assert [sorted(line["faults"]) for line in lines] == [[], [], ["client-1"], []]  # client-1 is alone on actor 1
    fault = lines[2]["faults"]["client-1"]
    assert "its Ray worker died during the round" in fault and "it missed the round" in fault
    assert "restored from its state after round 1" in fault
    assert "client-1" in lines[2]["late"] and "client-1" not in lines[3]["late"]
    assert "client-1" in lines[3]["client_accuracy"]


def test_actors_restarted_between_rounds_go_on_as_if_never_stopped(tmp_path, monkeypatch):
    """Every actor killed after every round (its saved states written) and restored: the run is
    the in-process run, bit for bit; so a restored client is the client it was."""
    run(SimulationConfig(algo="fedict", out=str(tmp_path / "inprocess"), **SMALL), progress=False)
    end_round = RayChannel.end_round

    def end_round_then_kill(channel, record):
        record = end_round(channel, record)
        killed = [where["pid"] for where in placements(channel)]
        for actor in channel.actors:
            ray.kill(actor, no_restart=False)
        deadline = time.monotonic() + 120
        for actor, pid in zip(channel.actors, killed):
            while True:  # calls fail, or reach the dying process, until Ray has restarted the actor
                try:
                    if ray.get(actor.placement.remote())["pid"] != pid:
                        break
                except ray.exceptions.RayActorError:
                    pass
                assert time.monotonic() < deadline, "an actor was not restarted within 120 s"
                time.sleep(0.1)
        return record

    monkeypatch.setattr(RayChannel, "end_round", end_round_then_kill)
    run(SimulationConfig(algo="fedict", out=str(tmp_path / "ray"), backend="ray", workers=2, **SMALL), progress=False)
    assert results(tmp_path / "ray") == results(tmp_path / "inprocess")
