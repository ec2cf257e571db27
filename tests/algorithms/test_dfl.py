"""DFL (docs/methods/dfl.md): the rho schedule, soft-target aggregation and loss by hand, bit-for-bit
identity with FedAvg at threshold 1, the wire bytes against docs/methods/dfl.md#messages, and short runs on
digits."""

import functools
import json
import math

import as_sent
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from edgefd.algorithms.dfl import (
    CLASS_COUNTS,
    SOFT_TARGETS,
    DFLParams,
    DFLServer,
    aggregate_soft_targets,
    dfl_loss,
    rho,
)
from edgefd.algorithms.params import describe_params, make_params
from edgefd.algorithms.schema import UplinkRejected
from edgefd.protocol import Payload, encode
from edgefd.protocol.codec import HEADER_SIZE
from edgefd.runtime.build import build
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.transport import DOWN, UP
from edgefd.simulate import run

# digits, a handful of clients, a few rounds: every run here takes a second or two. One thread: on
# a shared 2-core machine a second torch thread mostly waits (and slows everyone's tests down).
# one local epoch a round (DFL's paper trains 5, its default): quick, and the same for the FedAvg arms
QUICK = dict(dataset="digits", clients=5, rounds=3, epochs=1, lr=0.05, seed=1, threads=1)


def simulation(algo, params=None, **settings):
    return build(SimulationConfig(algo=algo, params=dict(params or {}), **{**QUICK, **settings}))


# ----------------------------------------------------------------------------------------------
# rho schedule (Eq. 6, docs/methods/dfl.md#round-indexing)


def test_rho_schedule_matches_the_hand_computed_values():
    for r, expected in [(1, 0.99), (2, 0.98), (39, 0.61), (40, 0.6), (41, 0.6), (100, 0.6)]:
        assert rho(r, 100, 0.6) == pytest.approx(expected, abs=1e-12)
    assert [rho(r, 10, 0.6) for r in range(1, 11)] == pytest.approx([0.9, 0.8, 0.7] + [0.6] * 7, abs=1e-12)
    assert [rho(r, 4, 0.0) for r in range(1, 5)] == [0.75, 0.5, 0.25, 0.0]  # DFL-DRw/T reaches 0
    assert all(rho(r, 10, 1.0) == 1.0 for r in range(1, 11))  # threshold 1: FedAvg, exactly
    assert [rho(r, 10, 0.6, "fixed") for r in (1, 5, 10)] == [0.6, 0.6, 0.6]  # DFL-FR ablation
    with pytest.raises(ValueError, match="schedule"):
        rho(1, 10, 0.6, "cosine")


def test_the_ramps_horizon_is_200_rounds_by_default_or_the_runs_length():
    default = DFLParams()
    assert default.horizon == 200  # the paper never gives R (docs/methods/dfl.md#horizon)
    assert [default.rho(r, 3) for r in (1, 2, 3)] == pytest.approx([0.995, 0.99, 0.985], abs=1e-12)
    assert default.rho(80, 100) == pytest.approx(0.6) and default.rho(300, 300) == pytest.approx(0.6)
    literal = make_params(DFLParams, {"horizon": "none"})  # Alg. 1 read literally: R = --rounds
    assert [literal.rho(r, 3) for r in (1, 2, 3)] == pytest.approx([2 / 3, 0.6, 0.6], abs=1e-12)
    assert make_params(DFLParams, {"horizon": "10"}).rho(2, 3) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="param horizon: must be >= 1"):
        DFLParams(horizon=0)


def test_params_defaults_docs_and_text_conversion():
    p = DFLParams()
    assert (p.threshold, p.temperature, p.kl_factor) == (0.6, 1.0, 1.0)
    assert (p.soft_targets, p.aggregation, p.kl_reduction, p.schedule, p.soft_target_dtype) == (
        "logits",
        "masked",
        "batchmean",
        "dynamic",
        "float32",
    )
    assert all(doc for _, _, doc in describe_params(DFLParams))
    q = make_params(DFLParams, {"threshold": "1", "temperature": "2", "kappa": "none"})
    assert (q.threshold, q.temperature, q.kappa, q.kl_factor) == (1.0, 2.0, None, 4.0)  # kappa = tau^2
    assert make_params(DFLParams, {"kappa": "0.5"}).kl_factor == 0.5
    for bad in (
        {"threshold": "1.5"},
        {"temperature": "0"},
        {"aggregation": "mean"},
        {"soft_targets": "x"},
        {"kl_reduction": "sum"},
        {"soft_target_dtype": "float16"},
    ):
        with pytest.raises(ValueError):
            make_params(DFLParams, bad)


# ----------------------------------------------------------------------------------------------
# soft-target aggregation (Eq. 2, docs/methods/dfl.md#absent-classes)

YA = np.array([[1.0, 2.0, 3.0], [0.5, -1.25, 7.0], [0.0, 0.0, 0.0]], np.float32)  # a lacks class 2
YB = np.array([[3.0, 6.0, -1.0], [0.0, 0.0, 0.0], [0.1, 0.2, 0.3]], np.float32)  # b lacks class 1
COUNTS_A = np.array([6, 4, 0], np.int32)  # n_a = 10
COUNTS_B = np.array([20, 0, 10], np.int32)  # n_b = 30
PREV = np.full((3, 3), 9.0)


def test_masked_aggregation_by_hand_absent_classes_do_not_dilute():
    y = aggregate_soft_targets([YA, YB], [COUNTS_A, COUNTS_B], [10, 30], PREV, "masked")
    np.testing.assert_allclose(y[0], (10 * YA[0].astype(float) + 30 * YB[0]) / 40, rtol=1e-15)  # [2.5, 5, 0]
    np.testing.assert_allclose(y[0], [2.5, 5.0, 0.0], rtol=1e-7)
    np.testing.assert_array_equal(y[1], YA[1].astype(np.float64))  # only a has class 1: its row exactly
    np.testing.assert_array_equal(y[2], YB[2].astype(np.float64))  # only b has class 2
    nobody = aggregate_soft_targets([YA], [np.array([6, 0, 0])], [6], PREV, "masked")
    np.testing.assert_array_equal(nobody[1:], PREV[1:])  # rows nobody reported keep their value


def test_paper_and_class_count_aggregation_by_hand():
    paper = aggregate_soft_targets([YA, YB], [COUNTS_A, COUNTS_B], [10, 30], PREV, "paper")
    np.testing.assert_allclose(paper[1], YA[1] * 10 / 40, rtol=1e-7)  # Eq. 2 verbatim: diluted by b's zeros
    np.testing.assert_allclose(paper[2], YB[2] * 30 / 40, rtol=1e-7)
    by_count = aggregate_soft_targets([YA, YB], [COUNTS_A, COUNTS_B], [10, 30], PREV, "class_count")
    np.testing.assert_allclose(by_count[0], (6 * YA[0].astype(float) + 20 * YB[0]) / 26, rtol=1e-15)
    np.testing.assert_array_equal(by_count[1], YA[1].astype(np.float64))
    with pytest.raises(ValueError, match="mode"):
        aggregate_soft_targets([YA], [COUNTS_A], [10], PREV, "mean")


def test_server_aggregates_models_like_fedavg_and_tables_per_row():
    sim = simulation("dfl", {"weight_cap": 0, "update_cap": 0}, clients=2, rounds=1)  # the paper's Eq. 1 and n_k
    server: DFLServer = sim.server
    # zeros (docs/methods/dfl.md#initial-soft-targets)
    np.testing.assert_array_equal(server.soft_targets, np.zeros((10, 10), np.float32))
    state = server.global_state
    first = {k: np.full_like(v, 1.0) for k, v in state.items()}
    second = {k: np.full_like(v, 5.0) for k, v in state.items()}
    ya, yb = np.zeros((10, 10), np.float32), np.zeros((10, 10), np.float32)
    ya[0], yb[0], yb[3] = 2.0, 6.0, 1.5
    ca, cb = np.zeros(10, np.int32), np.zeros(10, np.int32)
    ca[0], cb[0], cb[3] = 10, 20, 10
    uplinks = {
        "client-0": Payload("dfl", {**first, SOFT_TARGETS: ya, CLASS_COUNTS: ca}, {"samples": 10}),
        "client-1": Payload("dfl", {**second, SOFT_TARGETS: yb, CLASS_COUNTS: cb}, {"samples": 30}),
    }
    metrics = server.aggregate(1, uplinks)
    for name in state:
        np.testing.assert_array_equal(server.global_state[name], np.full_like(state[name], 4.0))  # (10 + 150) / 40
    np.testing.assert_allclose(server.soft_targets[0], 5.0)  # (10*2 + 30*6) / 40
    np.testing.assert_array_equal(server.soft_targets[3], 1.5)  # client-1 only
    np.testing.assert_array_equal(server.soft_targets[5], 0.0)  # nobody: previous (zeros)
    assert metrics == {"rho": 0.995, "labels_covered": 2.0}  # R = horizon 200: rho_1 = 1 - 1/200


def test_a_client_declaring_three_times_the_others_samples_weighs_as_the_other_two():
    """Eq. 1 and 2 weight by n_k (masked rows: n_k where the client holds the class): a client
    declaring 3 times the others' samples is held to twice their median, in the model and the table
    (the bound on updates, tested with FedAvg's, is off here)."""
    sim = simulation("dfl", {"update_cap": 0}, clients=3, rounds=1)
    server: DFLServer = sim.server

    def uplink(value, samples):
        table, counts = np.full((10, 10), value, np.float32), np.full(10, samples // 10, np.int32)
        arrays = {**{k: np.full_like(v, value) for k, v in server.global_state.items()}, SOFT_TARGETS: table}
        return Payload("dfl", {**arrays, CLASS_COUNTS: counts}, {"samples": samples})

    uplinks = {"client-0": uplink(0.0, 480), "client-1": uplink(0.0, 480), "client-2": uplink(1.0, 1440)}
    metrics = server.aggregate(1, uplinks)
    assert metrics["weights_capped"] == 1.0
    weights = [name for name, v in server.global_state.items() if v.dtype == np.float32]
    np.testing.assert_allclose(server.global_state[weights[0]], 0.5, rtol=1e-6)  # 960 of 1,920, not 1,440 of 2,400
    np.testing.assert_allclose(server.soft_targets, 0.5, rtol=1e-6)


def test_a_model_sent_back_untrained_weighs_nothing_in_the_global_model():
    """A free rider returns the global model untrained: Eq. 1 averages the two honest models alone,
    whatever it declares; its soft targets (it holds data) still count in Eq. 2, at its bounded weight."""
    sim = simulation("dfl", {"update_cap": 0}, clients=3, rounds=1)
    server: DFLServer = sim.server
    sent = {name: array.copy() for name, array in server.global_state.items()}

    def uplink(model, value, samples):
        table, counts = np.full((10, 10), value, np.float32), np.full(10, samples // 10, np.int32)
        return Payload("dfl", {**model, SOFT_TARGETS: table, CLASS_COUNTS: counts}, {"samples": samples})

    def filled(value):
        return {k: np.full_like(v, value) for k, v in sent.items()}

    uplinks = {
        "client-0": uplink(filled(0.0), 0.0, 480),
        "client-1": uplink(filled(1.0), 0.0, 480),
        "client-2": uplink(sent, 1.0, 1440),
    }
    metrics = server.aggregate(1, uplinks)
    assert metrics["updates_empty"] == 1.0 and metrics["weights_capped"] == 1.0  # in Eq. 2
    weights = [name for name, v in server.global_state.items() if v.dtype == np.float32]
    np.testing.assert_allclose(server.global_state[weights[0]], 0.5, rtol=1e-6)  # the honest two's mean
    np.testing.assert_allclose(server.soft_targets, 0.5, rtol=1e-6)  # 960 of 1,920 in the table


def test_a_robust_server_takes_the_median_of_three_and_keeps_what_two_cannot_decide(caplog):
    sim = simulation("dfl", {"aggregator": "median"}, clients=4, rounds=1)
    server: DFLServer = sim.server
    state = server.global_state

    def uplink(cid, weight, row0, holds_3):
        table, counts = np.zeros((10, 10), np.float32), np.zeros(10, np.int32)
        table[0], counts[0] = row0, 10
        if holds_3:
            table[3], counts[3] = 9e3, 5  # class 3: only the poisoner and one other
        arrays = {**{k: np.full_like(v, weight) for k, v in state.items()}, SOFT_TARGETS: table, CLASS_COUNTS: counts}
        return Payload("dfl", arrays, {"samples": 10**4 if weight > 100 else 10})

    uplinks = {
        "client-0": uplink("client-0", 1.0, 2.0, False),
        "client-1": uplink("client-1", 2.0, 3.0, True),
        "client-2": uplink("client-2", 3.0, 4.0, False),
        "client-3": uplink("client-3", 9e5, 9e3, True),  # the poisoner, declaring many samples
    }
    metrics = server.aggregate(1, uplinks)
    for name in state:
        np.testing.assert_array_equal(server.global_state[name], np.full_like(state[name], 2.5))  # median of 1,2,3,9e5
    np.testing.assert_allclose(server.soft_targets[0], 3.5)  # median of 2, 3, 4, 9e3
    np.testing.assert_array_equal(server.soft_targets[3], 0.0)  # two holders: the row keeps its last value
    assert metrics["below_quorum"] == 1.0
    before = {k: v.copy() for k, v in server.global_state.items()}
    assert server.aggregate(2, {c: uplinks[c] for c in ("client-0", "client-3")})["below_quorum"] >= 1.0
    assert all(np.array_equal(server.global_state[k], before[k]) for k in before)  # two models: kept
    assert "aggregator=median needs 3 uplinks, got 2: the global model is kept" in caplog.text


# ----------------------------------------------------------------------------------------------
# the local loss (Eq. 3) against closed-form values


def loss_and_grad(z, y, table, rho_value, params):
    z = torch.tensor(z, dtype=torch.float32, requires_grad=True)
    loss = dfl_loss(z, torch.tensor(y), torch.tensor(table, dtype=torch.float32), rho_value, params)
    loss.backward()
    return loss.item(), z.grad.numpy()


def test_loss_matches_closed_form_values():
    # z = [0, 0], y = 0, q = [0.75, 0.25], rho = 0.5; logits mode: the row log(q) has softmax q
    table = [[math.log(0.75), math.log(0.25)], [0.0, 0.0]]
    loss, grad = loss_and_grad([[0.0, 0.0]], [0], table, 0.5, DFLParams())
    assert loss == pytest.approx(0.4119796083, rel=1e-6)
    np.testing.assert_allclose(grad, [[-0.375, 0.375]], atol=1e-6)
    # z = [2, 0, -1], y = 1, q = [0.2, 0.7, 0.1], rho = 0.6; probs mode: the row is q itself
    table = [[1 / 3] * 3, [0.2, 0.7, 0.1], [1 / 3] * 3]
    loss, grad = loss_and_grad([[2.0, 0.0, -1.0]], [1], table, 0.6, DFLParams(soft_targets="probs"))
    assert loss == pytest.approx(1.7291185985, rel=1e-6)
    np.testing.assert_allclose(grad, [[0.7637947345, -0.7658048006, 0.0020100661]], atol=1e-6)


def test_loss_on_a_tiny_batch_is_rho_ce_plus_one_minus_rho_kd_by_hand():
    z = np.array([[1.0, -0.5, 0.25, 2.0], [0.0, 0.3, -1.0, 0.5], [-2.0, 1.5, 0.5, 0.0]])
    y = [3, 1, 1]
    table = np.array([[0.0, 1.0, 2.0, 3.0], [1.0, 4.0, -1.0, 0.5], [2.0, 2.0, 0.0, 0.0], [0.5, 0.0, 0.0, 3.0]])
    tau, r = 2.0, 0.7

    def log_softmax(v):
        return v - np.log(np.exp(v - v.max()).sum()) - v.max()

    ce = np.mean([-log_softmax(z[i])[y[i]] for i in range(3)])
    kl = np.mean(
        [
            np.sum(np.exp(log_softmax(table[y[i]] / tau)) * (log_softmax(table[y[i]] / tau) - log_softmax(z[i] / tau)))
            for i in range(3)
        ]
    )
    loss, _ = loss_and_grad(z, y, table, r, DFLParams(temperature=tau))  # kappa = tau^2 = 4
    assert loss == pytest.approx(r * ce + (1 - r) * tau**2 * kl, rel=1e-6)
    loss, _ = loss_and_grad(z, y, table, r, DFLParams(temperature=tau, kappa=1.0, kl_reduction="torch_mean"))
    assert loss == pytest.approx(r * ce + (1 - r) * kl / 4, rel=1e-6)  # KLDivLoss() 'mean': / (B C)
    loss, _ = loss_and_grad(z, y, table, 0.0, DFLParams())
    assert loss == pytest.approx(
        np.mean(
            [
                np.sum(np.exp(log_softmax(table[y[i]])) * (log_softmax(table[y[i]]) - log_softmax(z[i])))
                for i in range(3)
            ]
        ),
        rel=1e-6,
    )  # rho 0: KD only
    # against torch's own losses (the reference for randomized tests)
    zt, yt, qt = torch.tensor(z, dtype=torch.float32), torch.tensor(y), torch.tensor(table, dtype=torch.float32)
    reference = r * F.cross_entropy(zt, yt) + (1 - r) * tau**2 * F.kl_div(
        F.log_softmax(zt / tau, 1), torch.softmax(qt[yt] / tau, 1), reduction="batchmean"
    )
    assert loss_and_grad(z, y, table, r, DFLParams(temperature=tau))[0] == pytest.approx(reference.item(), rel=1e-5)


def test_loss_at_rho_one_is_plain_cross_entropy_bit_for_bit():
    z = torch.randn(7, 10, generator=torch.Generator().manual_seed(0), requires_grad=True)
    y = torch.arange(7) % 10
    nan_table = torch.full((10, 10), float("nan"))  # never looked at: the KL term is skipped
    ours = dfl_loss(z, y, nan_table, 1.0, DFLParams())
    (grad_ours,) = torch.autograd.grad(ours, z)
    plain = F.cross_entropy(z, y)
    (grad_plain,) = torch.autograd.grad(plain, z)
    assert torch.equal(ours, plain) and torch.equal(grad_ours, grad_plain)


# ----------------------------------------------------------------------------------------------
# threshold 1 is FedAvg, bit for bit (Table V's T = 1, docs/methods/dfl.md#model-or-delta-upload)


@pytest.mark.parametrize(
    "model, settings",
    [
        ("cnn2", dict(participation=0.6, partition="dirichlet:0.5")),  # some clients lack classes
        ("resnet8", dict(clients=4, rounds=2, participation=0.5)),  # BatchNorm: the eval pass must not touch it
    ],
)
def test_threshold_one_reproduces_fedavg_bit_for_bit(model, settings):
    fedavg = simulation("fedavg", models=model, **settings)
    dfl = simulation("dfl", {"threshold": "1"}, models=model, **settings)
    fedavg_records, dfl_records = fedavg.federation.run()[1:], dfl.federation.run()[1:]  # rounds 1..R
    assert [r.selected for r in dfl_records] == [r.selected for r in fedavg_records]
    assert len(dfl_records[0].selected) < len(dfl.clients)  # partial participation is exercised
    assert [r.accuracy for r in dfl_records] == [r.accuracy for r in fedavg_records]
    assert [r.client_accuracy for r in dfl_records] == [r.client_accuracy for r in fedavg_records]
    assert list(dfl.server.global_state) == list(fedavg.server.global_state)
    for name, value in fedavg.server.global_state.items():
        assert dfl.server.global_state[name].dtype == value.dtype
        np.testing.assert_array_equal(dfl.server.global_state[name], value, err_msg=name)
    assert np.abs(dfl.server.soft_targets).sum() > 0  # the soft targets were computed all along
    assert all(r.server["rho"] == 1.0 for r in dfl_records)


def test_threshold_one_run_writes_the_same_curve_as_fedavg(tmp_path):
    def lines(algo, params):
        config = SimulationConfig(
            **{**QUICK, "clients": 4, "rounds": 2},
            algo=algo,
            participation=0.5,
            params=params,
            out=str(tmp_path / algo),
        )
        run(config, progress=False)
        return [json.loads(line) for line in (tmp_path / algo / "metrics.jsonl").read_text().splitlines()]

    fedavg, dfl = lines("fedavg", {}), lines("dfl", {"threshold": "1"})  # as `--param threshold=1`
    for key in ("round", "selected", "accuracy", "accuracy_std", "client_accuracy"):
        assert [line[key] for line in dfl] == [line[key] for line in fedavg], key


def test_default_threshold_differs_from_fedavg():
    fedavg, dfl = simulation("fedavg", participation=0.6), simulation("dfl", participation=0.6)
    fedavg.federation.run()
    records = dfl.federation.run()[1:]
    assert [r.server["rho"] for r in records] == pytest.approx([0.995, 0.99, 0.985])  # R = horizon 200
    assert any(not np.array_equal(dfl.server.global_state[k], v) for k, v in fedavg.server.global_state.items())


# ----------------------------------------------------------------------------------------------
# bytes on the wire (docs/methods/dfl.md#messages) = payload terms + the codec's header and table entries


def table_overhead(name, array):
    """One array table entry: 20 bytes, the name, 4 bytes per dimension (protocol/codec.py)."""
    return 20 + len(name.encode()) + 4 * array.ndim


@pytest.mark.parametrize(
    "dtype, precision, b_s", [("float32", "fp32", 4), ("float64", "fp32", 8), ("float32", "fp16", 2)]
)
def test_bytes_per_client_per_round_follow_the_formula(dtype, precision, b_s):
    sim = simulation("dfl", {"soft_target_dtype": dtype}, clients=4, rounds=1, precision=precision)
    state = sim.server.global_state
    classes = 10
    P = sum(v.size for v in state.values())
    assert all(v.dtype == np.float32 for v in state.values()) and P == 6090  # cnn2 on 8x8 digits
    soft, counts = np.zeros((classes, classes)), np.zeros(classes)
    tables = sum(table_overhead(k, v) for k, v in state.items())
    # B_down = P b_w + Cn^2 b_s + 4 (round) ; B_up = P b_w + Cn^2 b_s + 4 (round) + 4 (n_k) + 4 Cn
    formula_down = P * 4 + classes**2 * b_s + 4
    formula_up = P * 4 + classes**2 * b_s + 4 + 4 + 4 * classes
    # codec: the round is the message's metadata, not in the payload (wire version 2: no sender or
    # round in the codec's header either); n_k is the int64 scalar "samples" (8 bytes, not 4)
    down = formula_down - 4 + HEADER_SIZE + len("dfl") + tables + table_overhead(SOFT_TARGETS, soft)
    up_fixed = (
        formula_up
        - 4
        - 4
        + HEADER_SIZE
        + len("dfl")
        + tables
        + table_overhead(SOFT_TARGETS, soft)
        + table_overhead(CLASS_COUNTS, counts)
        + (2 + len("samples") + 8)
    )
    # (with --precision fp16 only the table shrinks: model weights always travel as float32)
    sim.federation.hello()
    sim.federation.run_round(1)
    ledger = sim.federation.ledger
    for cid in sim.clients:
        assert ledger.total(DOWN, 1, cid) == down
        assert ledger.total(UP, 1, cid) == up_fixed
    if dtype == "float64":
        assert classes**2 * b_s == 800  # the paper's "0.8 KB" of soft targets (Sec. IV-B3)
    # and the ledger counts exactly what the codec emits
    payload = as_sent.train_round(sim.clients["client-0"], 2, sim.federation.downlink(2, "client-0"))
    assert len(encode(payload)) == up_fixed


def test_soft_targets_cost_cn_squared_plus_counts_over_fedavg():
    dfl, fedavg = simulation("dfl", clients=4, rounds=1), simulation("fedavg", clients=4, rounds=1)
    for sim in (dfl, fedavg):
        sim.federation.hello()
        sim.federation.run_round(1)
    soft, counts = np.zeros((10, 10)), np.zeros(10)
    extra_down = 10 * 10 * 4 + table_overhead(SOFT_TARGETS, soft) + len("dfl") - len("weights")
    extra_up = extra_down + 10 * 4 + table_overhead(CLASS_COUNTS, counts)
    d, f = dfl.federation.ledger, fedavg.federation.ledger
    for cid in dfl.clients:
        assert d.total(DOWN, 1, cid) - f.total(DOWN, 1, cid) == extra_down
        assert d.total(UP, 1, cid) - f.total(UP, 1, cid) == extra_up


# ----------------------------------------------------------------------------------------------
# the client's label-wise table (E7) and short runs


def test_client_uploads_label_wise_means_of_its_updated_model_in_eval_mode():
    sim = simulation("dfl", {"horizon": None}, clients=4, rounds=1, partition="dirichlet:0.1")
    client = sim.clients["client-0"]
    payload = client.train_round(1, sim.server.downlink(1, "client-0"))
    data = client.data
    model = client.model.eval()
    with torch.no_grad():
        logits = model(data.train_x).double()
    counts = np.bincount(data.train_y.numpy(), minlength=10)
    np.testing.assert_array_equal(payload.arrays[CLASS_COUNTS], counts)
    assert payload.scalars["samples"] == len(data.train_y)
    for c in range(10):
        expected = logits[data.train_y == c].mean(0).numpy() if counts[c] else np.zeros(10)
        np.testing.assert_allclose(payload.arrays[SOFT_TARGETS][c], expected, rtol=1e-5, atol=1e-5)
    assert (counts == 0).any()  # a skewed client: its absent rows are zeros, masked by the server
    assert client.last_rho == 0.6  # horizon none, so R = the run's 1 round: max(1 - 1/1, 0.6)


def test_end_to_end_partial_participation_on_digits(tmp_path):
    config = SimulationConfig(
        **{**QUICK, "clients": 6, "seed": 0, "epochs": 2},
        algo="dfl",
        participation=0.5,
        partition="iid",
        params={"threshold": "0.6", "horizon": "none"},  # the paper's Alg. 1: R = the run's 3 rounds
        out=str(tmp_path),
    )
    summary = run(config, progress=False)
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [len(line["selected"]) for line in lines[1:]] == [3, 3, 3]
    assert [line["server"]["rho"] for line in lines[1:]] == pytest.approx([2 / 3, 0.6, 0.6])
    assert lines[1]["bytes_up"] == 3 * (lines[1]["bytes_up"] // 3)
    assert summary["params"]["threshold"] == 0.6
    assert summary["final_accuracy"] > 0.6 > lines[0]["accuracy"]


def test_end_to_end_on_the_papers_80_20_split():
    sim = simulation("dfl", clients=10, rounds=3, participation=0.5, partition="dominant:0.8", epochs=2)
    for k, cid in enumerate(sorted(sim.clients)):
        counts = np.bincount(sim.clients[cid].data.train_y.numpy(), minlength=10)
        assert counts.argmax() == k % 10  # client k's dominant label is k mod 10 (docs/methods/dfl.md#non-iid-split)
        assert counts.max() == round(0.8 * counts.sum())
    records = sim.federation.run()[1:]
    assert all(len(r.selected) == 5 for r in records)
    assert records[-1].accuracy > 0.25  # 3 short rounds on a hard split: well above chance (0.1)
    assert np.all(np.isfinite(sim.server.soft_targets))


# ----------------------------------------------------------------------------------------------
# what the server accepts (edgefd.algorithms.schema)

F64 = (("soft_target_dtype", "float64"),)
PROBS = (("soft_targets", "probs"),)


@functools.cache
def honest_uplink(params=(), precision="fp32"):
    """The server after round 1 (all of whose uplinks fit) and client-0's honest uplink of round 2."""
    sim = simulation("dfl", dict(params), precision=precision)
    sim.federation.hello()
    assert sim.federation.run_round(1).rejected == {}
    return sim.server, as_sent.train_round(sim.clients["client-0"], 2, sim.federation.downlink(2, "client-0"))


def tampered(payload, changes):
    """A copy of ``payload`` with arrays or scalars replaced (None: removed)."""
    arrays, scalars = dict(payload.arrays), dict(payload.scalars)
    for name, value in changes.items():
        target = arrays if name in arrays else scalars
        if value is None:
            del target[name]
        else:
            target[name] = value
    return Payload(payload.kind, arrays, scalars)


ONE_OF_CLASS_0 = np.eye(10, dtype=np.int32)[0]


@pytest.mark.parametrize(
    ("params", "precision", "change", "reason"),
    [
        ((), "fp32", lambda p: {SOFT_TARGETS: np.zeros((1, 1), np.float32)}, "shape"),
        ((), "fp32", lambda p: {SOFT_TARGETS: p.arrays[SOFT_TARGETS].astype(np.float64)}, "dtype"),
        (F64, "fp16", lambda p: {SOFT_TARGETS: p.arrays[SOFT_TARGETS].astype(np.float32)}, "dtype"),
        (PROBS, "fp32", lambda p: {SOFT_TARGETS: np.full_like(p.arrays[SOFT_TARGETS], 1e30)}, "out-of-range"),
        ((), "int8", lambda p: {SOFT_TARGETS: None}, "missing-array"),
        ((), "fp32", lambda p: {CLASS_COUNTS: p.arrays[CLASS_COUNTS].astype(np.int64)}, "dtype"),
        ((), "fp32", lambda p: {CLASS_COUNTS: p.arrays[CLASS_COUNTS] - 10**6}, "out-of-range"),
        ((), "fp32", lambda p: {CLASS_COUNTS: p.arrays[CLASS_COUNTS][:1]}, "shape"),
        ((), "fp32", lambda p: {name: None for name in list(p.arrays)[:1]}, "missing-array"),  # a weight
        ((), "fp32", lambda p: {name: a[..., :1] for name, a in list(p.arrays.items())[:1]}, "shape"),
        ((), "fp32", lambda p: {"samples": 0}, "out-of-range"),
        ((), "fp32", lambda p: {"samples": "many"}, "scalar-type"),
        ((), "fp32", lambda p: {"samples": 2**31 - 1}, "too-many-samples"),  # it weights the client's model
        ((), "fp32", lambda p: {CLASS_COUNTS: p.arrays[CLASS_COUNTS] + 10**5}, "too-many-samples"),
        # the sample count and the class counts count the same samples: one contradicts the other
        ((), "fp32", lambda p: {"samples": int(p.scalars["samples"]) - 1}, "counts-disagree"),
        ((), "fp32", lambda p: {CLASS_COUNTS: p.arrays[CLASS_COUNTS] + ONE_OF_CLASS_0}, "counts-disagree"),
    ],
)
def test_server_accepts_honest_uplinks_and_refuses_tampered_ones(params, precision, change, reason):
    server, payload = honest_uplink(params, precision)
    server.check_uplink(2, "client-0", payload)
    with pytest.raises(UplinkRejected) as refused:
        server.check_uplink(2, "client-0", tampered(payload, change(payload)))
    assert refused.value.reason == reason
