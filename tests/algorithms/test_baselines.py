"""The three baselines end to end on digits, their server-side arithmetic by hand, and what their
servers accept."""

import functools

import as_sent
import numpy as np
import pytest

from edgefd.algorithms.fd import FDParams, FDServer
from edgefd.algorithms.fedavg import FedAvgParams, FedAvgServer
from edgefd.algorithms.schema import UplinkRejected
from edgefd.algorithms.toolkit import average_states
from edgefd.protocol import Payload
from edgefd.runtime.build import build
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run

DIGITS = dict(dataset="digits", clients=10, rounds=12, lr=0.05)
# 20 clients of ~72 samples: too few for a local model alone, plenty for a federation.
SMALL_CLIENTS = dict(DIGITS, clients=20, epochs=2)


def final(algo, partition, seed, tmp_path, settings=DIGITS):
    summary = run(
        SimulationConfig(
            algo=algo, partition=partition, seed=seed, out=str(tmp_path / f"{algo}-{partition}-{seed}"), **settings
        ),
        progress=False,
    )
    return summary["final_accuracy"]


@pytest.mark.parametrize("seed", [0, 1])
def test_fedavg_beats_local_on_iid_data(seed, tmp_path):
    fedavg = final("fedavg", "iid", seed, tmp_path, SMALL_CLIENTS)
    local = final("local", "iid", seed, tmp_path, SMALL_CLIENTS)
    assert fedavg > local + 0.03


def test_local_beats_fedavg_global_model_on_two_class_shards(tmp_path):
    local = final("local", "shards:2", 0, tmp_path)
    fedavg = final("fedavg", "shards:2", 0, tmp_path)
    assert local > 0.9
    assert local > fedavg + 0.1


def test_fd_learns_and_sends_far_fewer_bytes_than_fedavg(tmp_path):
    fd = run(SimulationConfig(algo="fd", out=str(tmp_path / "fd"), **DIGITS), progress=False)
    fedavg = run(SimulationConfig(algo="fedavg", out=str(tmp_path / "fedavg"), **DIGITS), progress=False)
    assert fd["final_accuracy"] > 0.6
    assert fd["bytes_up_total"] * 10 < fedavg["bytes_up_total"]


def test_average_states_weights_by_samples_and_keeps_integer_buffers():
    a = {"w": np.array([0.0, 2.0], np.float32), "n": np.array(10, np.int64)}
    b = {"w": np.array([4.0, 6.0], np.float32), "n": np.array(13, np.int64)}
    out = average_states([a, b], [1.0, 3.0])
    np.testing.assert_allclose(out["w"], [3.0, 5.0])
    assert out["w"].dtype == np.float32
    assert out["n"].dtype == np.int64 and int(out["n"]) == 12  # 10/4 + 39/4 = 12.25 -> 12
    with pytest.raises(ValueError, match="weights sum to zero"):
        average_states([a], [0.0])


def test_fd_server_averages_per_label_without_dilution_by_absent_labels():
    server = FDServer.__new__(FDServer)  # the arithmetic needs no context beyond the class count
    server.num_classes = 3
    server.global_logits = server.global_counts = None
    server.params = FDParams(weight_cap=0)  # the paper's weights (b declares 3 times a's samples)
    up_a = Payload(
        "knowledge",
        {"logits": np.array([[1, 0, 0], [0, 0, 0], [0, 0, 0]], np.float32), "counts": np.array([2, 0, 0], np.int64)},
    )
    up_b = Payload(
        "knowledge",
        {"logits": np.array([[4, 0, 0], [0, 3, 0], [0, 0, 0]], np.float32), "counts": np.array([1, 5, 0], np.int64)},
    )
    metrics = server.aggregate(1, {"a": up_a, "b": up_b})
    np.testing.assert_allclose(server.global_logits[0], [2.0, 0, 0])  # (2*1 + 1*4) / 3
    np.testing.assert_allclose(server.global_logits[1], [0, 3.0, 0])  # only b has label 1: not halved
    np.testing.assert_allclose(server.global_logits[2], 0)
    assert server.global_counts.tolist() == [3, 5, 0]
    assert metrics["labels_covered"] == 2.0
    assert FDParams().beta == 1.0


def bare_server(server_type, params):
    """A server for its arithmetic alone (no context): ``num_classes`` 3, nothing aggregated yet."""
    server = server_type.__new__(server_type)
    server.num_classes, server.params = 3, params
    server.global_logits = server.global_counts = None
    return server


def test_a_fedavg_client_declaring_three_times_the_others_samples_weighs_as_the_other_two():
    """The issue's free rider (1,437 samples declared beside two honest devices of 479) sends a model
    of 1s beside two of 0s: under the bound its weight is 958 of 1,916, not 1,437 of 2,395 (the
    bound on updates, tested on its own, is off here)."""
    server = bare_server(FedAvgServer, FedAvgParams(update_cap=0))
    server.global_state = {"w": np.full(4, -1.0, np.float32)}  # every client trained: each sent a new model

    def uplink(value, samples):
        return Payload("weights", {"w": np.full(4, value, np.float32)}, {"samples": samples})

    uplinks = {"client-0": uplink(0.0, 479), "client-1": uplink(0.0, 479), "client-2": uplink(1.0, 1437)}
    assert server.aggregate(1, uplinks) == {"weights_capped": 1.0}
    np.testing.assert_allclose(server.global_state["w"], 0.5, rtol=1e-6)
    under = bare_server(FedAvgServer, FedAvgParams(update_cap=0))
    under.global_state = dict(server.global_state)
    assert under.aggregate(1, {**uplinks, "client-2": uplink(1.0, 900)}) == {}
    unbounded = bare_server(FedAvgServer, FedAvgParams(weight_cap=0, update_cap=0))
    unbounded.global_state = dict(under.global_state)
    assert unbounded.aggregate(1, uplinks) == {}
    np.testing.assert_allclose(unbounded.global_state["w"], 0.6, rtol=1e-6)  # the paper's weights


def test_a_model_sent_back_untrained_weighs_nothing_whatever_it_declares():
    """The issue's free rider returns the global model it was sent, untrained, and declares 1,437
    samples: its weight is 0, so the two honest devices' average is the global model, as it is when
    the rider declares 1 sample (before, its 958 capped samples halved every honest step)."""

    def uplink(value, samples):
        return Payload("weights", {"w": np.full(4, value, np.float32)}, {"samples": samples})

    def aggregated(rider_samples: int) -> tuple[dict[str, float], np.ndarray]:
        server = bare_server(FedAvgServer, FedAvgParams())
        server.global_state = {"w": np.full(4, 0.25, np.float32)}
        rider = uplink(0.25, rider_samples)
        metrics = server.aggregate(1, {"client-0": rider, "client-1": uplink(0.75, 479), "client-2": uplink(0.0, 479)})
        return metrics, server.global_state["w"]

    metrics, model = aggregated(1437)
    assert metrics == {"updates_empty": 1.0}  # no weight to cap: its count is left out of every bound
    np.testing.assert_allclose(model, 0.375, rtol=1e-6)  # the honest two's mean: the rider's 0.25 not in it
    honest_metrics, honest_model = aggregated(1)
    assert honest_metrics == {"updates_empty": 1.0}
    np.testing.assert_array_equal(honest_model, model)  # what it declares buys it nothing
    # when every client sends the model back, nothing moves (and nothing divides by zero)
    server = bare_server(FedAvgServer, FedAvgParams())
    server.global_state = {"w": np.full(4, 0.25, np.float32)}
    assert (
        server.aggregate(1, {"client-0": uplink(0.25, 5), "client-1": uplink(0.25, 5), "client-2": uplink(0.25, 5)})
        == {}
    )
    np.testing.assert_allclose(server.global_state["w"], 0.25)


def test_an_fd_client_declaring_three_times_the_others_counts_weighs_as_the_other_two():
    """FD weights each label's logits by the label's count: a liar's counts, scaled down to twice the
    others' median in all, weigh in every label as the two honest devices' together."""
    server = bare_server(FDServer, FDParams())
    honest = Payload("knowledge", {"logits": np.zeros((3, 3), np.float32), "counts": np.array([10, 10, 10])})
    liar = Payload("knowledge", {"logits": np.ones((3, 3), np.float32), "counts": np.array([30, 30, 30])})
    metrics = server.aggregate(1, {"client-0": honest, "client-1": honest, "client-2": liar})
    assert metrics == {"labels_covered": 3.0, "weights_capped": 1.0}
    np.testing.assert_allclose(server.global_logits, 0.5)  # 20 of 40 in each label, not 30 of 50
    assert server.global_counts.tolist() == [40, 40, 40]  # what the weights were: exclude_self subtracts its own


# ----------------------------------------------------------------------------------------------
# What the servers accept (edgefd.algorithms.schema): every honest uplink, and no tampered copy

QUICK = dict(dataset="digits", clients=3, rounds=2, lr=0.05, seed=0, threads=1)


@functools.cache
def honest_uplink(algo):
    """The server after round 1 (whose uplinks must all have been accepted) and client-0's
    honest uplink of round 2."""
    sim = build(SimulationConfig(algo=algo, **QUICK))
    sim.federation.hello()
    assert sim.federation.run_round(1).rejected == {}
    payload = as_sent.train_round(sim.clients["client-0"], 2, sim.federation.downlink(2, "client-0"))
    return sim.server, payload


def tampered(payload, changes):
    """A copy of ``payload`` with arrays or scalars replaced (None: removed, a new name: added)."""
    arrays, scalars = dict(payload.arrays), dict(payload.scalars)
    for name, value in changes.items():
        target = arrays if name in arrays or isinstance(value, np.ndarray) else scalars
        if value is None:
            del target[name]
        else:
            target[name] = value
    return Payload(payload.kind, arrays, scalars)


def first_weight(payload):
    return next(name for name, array in payload.arrays.items() if array.dtype == np.float32 and array.ndim == 2)


@pytest.mark.parametrize(
    ("algo", "change", "reason"),
    [
        ("fd", lambda p: {"logits": np.zeros((1, 1), np.float32)}, "shape"),  # would broadcast into the table
        ("fd", lambda p: {"counts": np.append(p.arrays["counts"], 0)}, "shape"),
        ("fd", lambda p: {"counts": p.arrays["counts"] - 10**6}, "out-of-range"),
        ("fd", lambda p: {"logits": np.full_like(p.arrays["logits"], 1e30)}, "out-of-range"),
        ("fd", lambda p: {"logits": p.arrays["logits"].astype(np.float64)}, "dtype"),
        ("fd", lambda p: {"counts": p.arrays["counts"].astype(np.float32)}, "dtype"),
        ("fd", lambda p: {"counts": None}, "missing-array"),
        ("fd", lambda p: {"samples": 10}, "unexpected-scalar"),
        ("fedavg", lambda p: {first_weight(p): None}, "missing-array"),
        ("fedavg", lambda p: {first_weight(p): p.arrays[first_weight(p)][:, :1]}, "shape"),
        ("fedavg", lambda p: {first_weight(p): p.arrays[first_weight(p)].astype(np.float64)}, "dtype"),
        ("fedavg", lambda p: {first_weight(p): np.full_like(p.arrays[first_weight(p)], 1e7)}, "out-of-range"),
        ("fedavg", lambda p: {"extra": np.zeros(3, np.float32)}, "unexpected-array"),
        ("fedavg", lambda p: {"samples": None}, "missing-scalar"),
        ("fedavg", lambda p: {"samples": 0}, "out-of-range"),
        ("fedavg", lambda p: {"samples": 2.5}, "scalar-type"),
        # more than one client of the run can hold: a declaration weights the client's contribution
        ("fedavg", lambda p: {"samples": 2**31 - 1}, "too-many-samples"),
        ("fd", lambda p: {"counts": p.arrays["counts"] + 10**5}, "too-many-samples"),
    ],
)
def test_servers_accept_honest_uplinks_and_refuse_tampered_ones(algo, change, reason):
    server, payload = honest_uplink(algo)
    server.check_uplink(2, "client-0", payload)
    with pytest.raises(UplinkRejected) as refused:
        server.check_uplink(2, "client-0", tampered(payload, change(payload)))
    assert refused.value.reason == reason


def test_local_clients_send_nothing_and_the_server_accepts_nothing():
    sim = build(SimulationConfig(algo="local", **QUICK))
    sim.federation.hello()
    assert sim.federation.run_round(1).rejected == {}
    assert as_sent.train_round(sim.clients["client-0"], 2, sim.federation.downlink(2, "client-0")) is None
    assert sim.server.uplink_schemas("client-0") == () and sim.server.hello_schemas("client-0") == ()
    with pytest.raises(UplinkRejected) as refused:
        sim.server.check_uplink(2, "client-0", Payload("weights"))
    assert refused.value.reason == "wrong-kind"


def test_a_robust_fedavg_server_keeps_its_model_when_fewer_than_three_uplinks_arrive(caplog):
    """The median of two models is their mean: one poisoned of two would be half the global model.
    (Its update is also held to twice the honest one's: ``updates_capped``.)"""
    server, payload = honest_uplink("fedavg")
    robust = FedAvgServer(server.context, FedAvgParams(aggregator="median"))
    before = {name: array.copy() for name, array in robust.global_state.items()}
    poisoned = tampered(payload, {first_weight(payload): np.full_like(payload.arrays[first_weight(payload)], 9e5)})
    assert robust.aggregate(2, {"client-0": payload, "client-1": poisoned}) == {
        "below_quorum": 1.0,
        "updates_capped": 1.0,
    }
    assert all(np.array_equal(robust.global_state[name], before[name]) for name in before)
    assert "aggregator=median needs 3 uplinks, got 2: the global model is kept" in caplog.text
    assert robust.aggregate(2, {"client-0": payload, "client-1": poisoned, "client-2": payload}) == {
        "below_quorum": 0.0,
        "updates_capped": 1.0,
    }
    assert np.array_equal(robust.global_state[first_weight(payload)], payload.arrays[first_weight(payload)])
