"""FedD2S (docs/methods/fedd2s.md): the Eq. 6 schedule table (docs/methods/fedd2s.md#dropping-set),
every message's bytes against docs/methods/fedd2s.md#messages plus the codec's header, the server's
C2S distillation, phase B's frozen head, and short runs."""

import copy
import json
import math

import as_sent
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from edgefd.algorithms.fedd2s import (
    DOWN_KIND,
    HEAD_PREFIX,
    INIT_KIND,
    UP_KIND,
    FedD2SClient,
    FedD2SParams,
    distil_global_copy,
    distillation_layer,
    kd_loss,
)
from edgefd.algorithms.params import make_params
from edgefd.algorithms.schema import UplinkRejected
from edgefd.algorithms.toolkit import average_states
from edgefd.protocol import Payload, encode
from edgefd.protocol.codec import HEADER_SIZE
from edgefd.runtime.build import build
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.transport import DOWN, UP
from edgefd.simulate import run
from edgefd.training import batches, state_arrays

# digits with "M1-mini" (docs/methods/fedd2s.md#small-scale-reproduction): 1x8x8 inputs, d_1 = 128, d_2 = 64, C = 10,
# P_total = 7,642. K = 143 training samples per client.
QUICK = dict(
    dataset="digits",
    clients=2,
    rounds=2,
    models="fedd2s_m1",
    partition="iid",
    samples_per_client=143,
    batch_size=32,
    seed=1,
    threads=1,
)
FAST = {"phase_epochs": 1}


def simulation(params=None, **settings):
    return build(SimulationConfig(algo="fedd2s", params={**FAST, **(params or {})}, **{**QUICK, **settings}))


def run_keeping_replies(sim, round: int) -> dict[str, Payload]:
    """Run ``round`` and return the replies the server sent after aggregating, as sent."""
    sent: dict[str, Payload] = {}
    channel = sim.federation.channel
    original = channel.send_and_receive

    def keep(messages, deadline):
        sent.update({m.receiver: m.content for m in messages if m.verb == "reply"})
        return original(messages, deadline)

    channel.send_and_receive = keep
    try:
        sim.federation.run_round(round)
    finally:
        del channel.send_and_receive  # the instance's attribute: the class's method again
    return sent


def header_bytes(payload: Payload) -> int:
    """Everything but the array data, from the codec's layout (protocol/codec.py): the fixed
    header, the kind, a scalar entry (2 + name + 8 for an int64) per scalar, and an array
    table entry (20 + name + 4 per dimension) per array."""
    scalars = sum(2 + len(name.encode()) + 8 for name, value in payload.scalars.items() if isinstance(value, int))
    assert all(isinstance(v, int) for v in payload.scalars.values())
    tables = sum(20 + len(name.encode()) + 4 * array.ndim for name, array in payload.arrays.items())
    return HEADER_SIZE + len(payload.kind) + scalars + tables


# ----------------------------------------------------------------------------------------------
# schedule (Eq. 6 + floor, docs/methods/fedd2s.md#dropping-set)


@pytest.mark.parametrize("z0", [3, 5, 7])
def test_schedule_reproduces_the_dropping_table(z0):
    # the table of docs/methods/fedd2s.md#dropping-set for L = 6, |S| = 4: l = 6 for Z in 1..Z0,
    # 5 for Z0+1..2Z0, ..., 2 from 4 Z0 + 1 on
    expected = []
    for z in range(1, 6 * z0 + 1):
        expected.append(6 if z <= z0 else 5 if z <= 2 * z0 else 4 if z <= 3 * z0 else 3 if z <= 4 * z0 else 2)
    got = [distillation_layer(z, 6, z0, 4) for z in range(1, 6 * z0 + 1)]
    assert got == expected
    assert got[0] == 6 and distillation_layer(4 * z0 + 1, 6, z0, 4) == 2 and distillation_layer(1000, 6, z0, 4) == 2


def test_schedule_variants_and_bad_input():
    assert [distillation_layer(z, 6, 3, 3) for z in (1, 4, 7, 10, 13, 100)] == [6, 5, 4, 3, 3, 3]  # S = [F1..F3]
    assert [distillation_layer(z, 6, 1, 4, "floor") for z in (1, 2, 50)] == [2, 2, 2]  # FedD2S*
    assert [distillation_layer(z, 6, 1, 4, "none") for z in (1, 2, 50)] == [6, 6, 6]  # no dropping
    assert [distillation_layer(z, 6, 1, 5) for z in range(1, 8)] == [6, 5, 4, 3, 2, 1, 1]
    with pytest.raises(ValueError, match="participations"):
        distillation_layer(0, 6, 3, 4)
    with pytest.raises(ValueError, match="dropping_set"):
        distillation_layer(1, 6, 3, 6)
    with pytest.raises(ValueError, match="schedule"):
        distillation_layer(1, 6, 3, 4, "fast")
    with pytest.raises(ValueError, match="z0"):
        make_params(FedD2SParams, {"z0": "0"})
    with pytest.raises(ValueError, match="kd_mode"):
        make_params(FedD2SParams, {"kd_mode": "weighted"})
    assert make_params(FedD2SParams, {"phase_epochs": "none"}).phase_epochs is None
    # the paper's E = 4 is both the param's default and what FedD2S declares (the contract's baseline trains it)
    assert make_params(FedD2SParams, {}).phase_epochs == FedD2SClient.local_training.epochs == 4


def test_clients_walk_the_schedule_in_a_run():
    sim = simulation({"z0": 1}, rounds=6)
    layers = []
    for r in range(1, 7):
        layers.append(sim.federation.run_round(r).server["mean_layer"])
    assert layers == [6, 5, 4, 3, 2, 2]  # Z0 = 1: one layer shallower per participation, floor 2


def test_refuses_models_that_cannot_be_split():
    with pytest.raises(ValueError, match="fedd2s_m1"):
        build(SimulationConfig(algo="fedd2s", **{**QUICK, "models": "cnn2"}))


# ----------------------------------------------------------------------------------------------
# bytes of every message (docs/methods/fedd2s.md#messages; K = 143)


K, C, D1, D2, P_TOTAL, P_HEAD_2 = 143, 10, 128, 64, 7642, 6394


def test_m1_mini_dimensions_are_as_documented():
    sim = simulation()
    model = sim.server.global_model
    assert model.layer_dims() == [D1, D2, 32, 32, 16, C]
    assert sum(p.numel() for p in model.parameters()) == P_TOTAL
    assert model.head_parameter_count(2) == P_HEAD_2
    assert all(len(c.data.train_y) == K for c in sim.clients.values())


@pytest.mark.parametrize("precision, s_f", [("fp32", 4), ("fp16", 2)])
@pytest.mark.parametrize("schedule, layer", [("deep_to_shallow", 6), ("floor", 2)])
def test_bytes_of_each_message_follow_the_formulas(schedule, layer, precision, s_f):
    sim = simulation({"schedule": schedule}, precision=precision)
    ledger = sim.federation.ledger
    sim.federation.hello()
    first = run_keeping_replies(sim, 1)["client-0"]
    down = run_keeping_replies(sim, 2)["client-0"]
    client = sim.clients["client-0"]

    # init (docs/methods/fedd2s.md#common-initialisation): theta^0, 4 P_total bytes, once, at the
    # first downlink; then round 1's reply
    init = Payload(INIT_KIND, sim.server.initial_state)
    assert ledger.total(DOWN, 1, "client-0") == 4 * P_TOTAL + header_bytes(init) + len(encode(first))

    # uplink: K [s_f (d_1 + d_l 1[l > 1]) + s_y] + h_up; 79,079 / 109,967 B at fp32 (l = 6 / 2)
    up = as_sent.sealed(client, client.extract(2, layer))  # as the runtime sends it
    assert up.kind == UP_KIND and up.scalars == {"layer": layer, "samples": K}
    d_l = C if layer == 6 else D2
    formula = K * (s_f * (D1 + d_l) + 1)
    if precision == "fp32":
        assert formula == {6: 79_079, 2: 109_967}[layer]
    assert len(encode(up)) == formula + header_bytes(up)
    for r in (1, 2):
        assert ledger.total(UP, r, "client-0") == formula + header_bytes(up)

    # reply, after aggregation in the same round: K s_f C + s_w P_head(l) + h_down; 5,720 / 31,296 B
    # at fp32 (l = 6 / 2)
    assert down.kind == DOWN_KIND and down.scalars == {"layer": layer}
    p_head = {6: 0, 2: P_HEAD_2}[layer]
    formula = K * s_f * C + 4 * p_head
    if precision == "fp32":
        assert formula == {6: 5_720, 2: 31_296}[layer]
    assert sum(a.size for k, a in down.arrays.items() if k.startswith(HEAD_PREFIX)) == p_head
    assert len(encode(down)) == formula + header_bytes(down)
    assert ledger.total(DOWN, 2, "client-0") == formula + header_bytes(down)


def test_send_v_adds_k_c_floats():
    sim = simulation({"send_v": True, "schedule": "floor"})
    sim.federation.hello()
    down = run_keeping_replies(sim, 1)["client-1"]
    assert down.arrays["v"].shape == (K, C)
    assert len(encode(down)) == K * 4 * C * 2 + 4 * P_HEAD_2 + header_bytes(down)


# ----------------------------------------------------------------------------------------------
# C2S (server) and S2C (client)


def test_server_distillation_minimises_its_kl_and_keeps_layer_one():
    """The C2S copy moves towards the teacher p: its J + Q falls, and its KL to p ends far below that of
    the same copy trained by the Q (CE) steps alone. (J alone may rise from a near-uniform start: the
    CE steps make the copy confident, and a fresh global head's p is not.)"""
    sim = simulation({"phase_epochs": 3})
    client, server = sim.clients["client-0"], sim.server
    up = client.extract(1, 2)  # the client's own random init: its features differ from the global model's
    h1 = torch.from_numpy(up.arrays["h1"]).reshape(K, 8, 4, 4)
    hl = torch.from_numpy(up.arrays["hl"]).reshape(K, 16, 2, 2)
    labels = torch.from_numpy(up.arrays["labels"].astype(np.int64))
    global_model = server.global_model
    before_global = state_arrays(global_model)
    params, train = sim.params, sim.config.train_config()
    with torch.no_grad():
        teacher = global_model.head(hl, 2)  # p (as logits), from the round-start global head

    def objectives(model):
        with torch.no_grad():
            u = model.head(h1, 1)
            return kd_loss(u, teacher, params).item(), F.cross_entropy(u, labels).item()

    local = copy.deepcopy(global_model)
    j0, q0 = objectives(local)
    distil_global_copy(local, global_model, h1, hl, 2, labels, params, train, torch.Generator().manual_seed(0))
    j1, q1 = objectives(local)

    ce_only = copy.deepcopy(global_model)  # the same optimiser, batches and number of steps, Q steps only
    optimizer = torch.optim.Adam(list(ce_only.parts_parameters(1, 6)), lr=train.lr)
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        for idx in batches(K, train.batch_size, generator):
            for _ in range(2):
                optimizer.zero_grad(set_to_none=True)
                F.cross_entropy(ce_only.head(h1[idx], 1), labels[idx]).backward()
                optimizer.step()
    j_ce, _ = objectives(ce_only)
    assert j1 + q1 < j0 + q0
    assert j1 < 0.25 * j_ce
    # the round-start global model is untouched, and the copy's layer 1 (never used) too
    # (docs/methods/fedd2s.md#global-layer-1)
    after = state_arrays(local)
    for name, value in before_global.items():
        np.testing.assert_array_equal(state_arrays(global_model)[name], value)
        if name.startswith("layers.0."):
            np.testing.assert_array_equal(after[name], value)
    # KL(p || q) by hand for a few samples at tau = 1
    with torch.no_grad():
        u = local.head(h1[:5], 1)
        p = torch.softmax(teacher[:5], 1)
        by_hand = (p * (torch.log_softmax(teacher[:5], 1) - torch.log_softmax(u, 1))).sum(1).mean()
        assert kd_loss(u, teacher[:5], params).item() == pytest.approx(by_hand.item(), rel=1e-4, abs=1e-6)


def test_aggregation_is_the_unweighted_mean_and_layer_one_stays_bit_identical():
    a = {"w": np.array([1.0, 2.0], np.float32), "b": np.array([0.1], np.float32)}
    b = {"w": np.array([3.0, 6.0], np.float32), "b": np.array([0.1], np.float32)}
    c = {"w": np.array([5.0, 1.0], np.float32), "b": np.array([0.1], np.float32)}
    mean = average_states([a, b, c])
    np.testing.assert_array_equal(mean["w"], np.array([3.0, 3.0], np.float32))
    np.testing.assert_array_equal(mean["b"], a["b"])  # identical inputs: bit-identical output

    sim = simulation()
    start = state_arrays(sim.server.global_model)
    sim.federation.hello()
    sim.federation.run_round(1)
    end = state_arrays(sim.server.global_model)
    for name in start:
        if name.startswith("layers.0."):
            np.testing.assert_array_equal(end[name], start[name])
        else:
            assert not np.array_equal(end[name], start[name])


def test_phase_b_kd_step_moves_only_the_trunk_and_uses_the_received_head():
    sim = simulation({"schedule": "floor", "kd_mode": "alternating"})
    sim.federation.hello()
    down = run_keeping_replies(sim, 1)["client-0"]
    client = sim.clients["client-0"]
    head_sent = {k[len(HEAD_PREFIX) :]: v.copy() for k, v in down.arrays.items() if k.startswith(HEAD_PREFIX)}
    assert sorted({k.split(".")[1] for k in head_sent}) == ["2", "3", "4", "5"]  # global layers 3..6 above l = 2
    before = state_arrays(client.model)
    # the J step alone: a CE step that does nothing (lr 0 for it is not available, so compare J's gradients)
    head = client._frozen_head(down, 2)
    x, t = client.data.train_x[:16], torch.from_numpy(down.arrays["t"][:16])
    client.model.zero_grad(set_to_none=True)
    kd_loss(head.head(client.model.trunk(x, 2), 2), t, sim.params).backward()
    for name, p in client.model.named_parameters():
        layer = int(name.split(".")[1])
        assert (p.grad is not None) == (layer < 2), name  # only layers 1..l get a KD gradient
    assert all(p.grad is None for p in head.parameters())
    for k, v in head.head_state_dict(2).items():
        np.testing.assert_array_equal(v.numpy(), head_sent[k])  # the global head, not the client's own
    client.model.zero_grad(set_to_none=True)
    # the full phase B trains, leaves the frozen head as received, and the client's model changes
    j, q = client.distil_from_server(down)
    assert math.isfinite(j) and math.isfinite(q)
    for k, v in head.head_state_dict(2).items():
        np.testing.assert_array_equal(v.numpy(), head_sent[k])
    assert any(not np.array_equal(v, state_arrays(client.model)[k]) for k, v in before.items())


def test_phase_b_refuses_a_downlink_of_the_wrong_size():
    sim = simulation()
    sim.federation.hello()
    down = run_keeping_replies(sim, 1)["client-0"]
    bad = Payload(DOWN_KIND, {**down.arrays, "t": down.arrays["t"][:-1]}, down.scalars)
    with pytest.raises(ValueError, match="t must have shape"):
        sim.clients["client-0"].distil_from_server(bad)


# ----------------------------------------------------------------------------------------------
# what the server accepts (edgefd.algorithms.schema): every honest uplink, and no tampered one


def altered(payload: Payload, scalars=None, **arrays) -> Payload:
    """``payload`` with these arrays replaced (None: removed) and these scalars."""
    merged = {**payload.arrays, **arrays}
    kept = {name: array for name, array in merged.items() if array is not None}
    return Payload(payload.kind, kept, {**payload.scalars, **(scalars or {})})


@pytest.fixture(scope="module")
def honest_uplink():
    """The server and client-0's round-1 uplink (its first participation: l = L = 6, hl = the logits)."""
    sim = simulation()
    sim.federation.hello()
    return sim.server, as_sent.train_round(sim.clients["client-0"], 1, sim.federation.downlink(1, "client-0"))


@pytest.mark.parametrize(
    "tamper, reason",
    [
        (lambda p: p, None),
        (lambda p: altered(p, h1=p.arrays["h1"] * 0 + 1e30), "out-of-range"),
        (lambda p: altered(p, hl=p.arrays["hl"] * 0 + 7e4), "out-of-range"),  # logits beyond fp16
        (lambda p: altered(p, labels=p.arrays["labels"] * 0 + C), "out-of-range"),
        (lambda p: altered(p, {"layer": 5}), "out-of-range"),  # Z = 1 gives l = 6 (schedule)
        (lambda p: altered(p, {"layer": 7}), "out-of-range"),  # not a layer
        (lambda p: altered(p, labels=None), "missing-array"),
        (lambda p: altered(p, hl=None), "missing-array"),  # l = 6 > 1
        (lambda p: altered(p, h1=p.arrays["h1"][:, :-1]), "shape"),
        (lambda p: altered(p, hl=p.arrays["hl"][:, :-1]), "shape"),
        (lambda p: altered(p, h1=p.arrays["h1"][1:]), "shape"),  # K - 1 rows, samples = K
        (lambda p: altered(p, {"samples": K + 1}), "shape"),
        (lambda p: altered(p, labels=p.arrays["labels"].astype(np.int64)), "dtype"),
        (lambda p: altered(p, h1=p.arrays["h1"].astype(np.float64)), "dtype"),
    ],
)
def test_the_server_accepts_honest_uplinks_and_refuses_tampered_ones(honest_uplink, tamper, reason):
    server, uplink = honest_uplink
    tampered = tamper(uplink)
    if reason is None:
        server.check_uplink(1, "client-0", tampered)
    else:
        with pytest.raises(UplinkRejected) as refused:
            server.check_uplink(1, "client-0", tampered)
        assert refused.value.reason == reason


def test_the_layers_allowed_span_the_participations_a_client_can_have_had():
    sim = simulation({"z0": 1})
    server = sim.server
    server.downlink(1, "client-0")
    assert server.allowed_layers("client-0") == (6, 6)  # Z = 1
    server.downlink(2, "client-0")  # no uplink taken: Z = 2 (round 1's was late) or 1 (round 1's request was lost)
    assert server.allowed_layers("client-0") == (5, 6)
    server.uploaded["client-0"] = 1  # had it been taken, Z would be 2
    assert server.allowed_layers("client-0") == (5, 5)
    assert simulation({"schedule": "floor"}).server.allowed_layers("client-1") == (2, 2)  # FedD2S*: always L - |S|


# ----------------------------------------------------------------------------------------------
# end to end


def test_end_to_end_on_digits_with_partial_participation(tmp_path):
    config = SimulationConfig(
        **{**QUICK, "clients": 4, "rounds": 3, "samples_per_client": 60},
        algo="fedd2s",
        participation=0.5,
        params={**FAST, "z0": 1},
        out=str(tmp_path),
    )
    summary = run(config, progress=False)
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [len(line["selected"]) for line in lines[1:]] == [2, 2, 2]
    assert all(math.isfinite(line["accuracy"]) for line in lines)
    participations: dict[str, int] = {}
    for line in lines[1:]:  # Z0 = 1: each client's layer is 6 - (its participations - 1)
        for cid in line["selected"]:
            participations[cid] = participations.get(cid, 0) + 1
        expected = np.mean([6 - (participations[cid] - 1) for cid in line["selected"]])
        assert line["server"]["mean_layer"] == expected
    assert math.isfinite(summary["final_accuracy"]) and 0.0 <= summary["final_accuracy"] <= 1.0
    assert all(len(line["client_accuracy"]) == 4 for line in lines)  # every local model is evaluated
    assert summary["bytes_up_total"] > summary["bytes_down_total"]  # per-sample feature maps go up


def test_fmnist_recipes_compare_the_issues_methods_single_threaded():
    from edgefd.recipes import RECIPES

    fedd2s, dfl = RECIPES["fedd2s"], RECIPES["dfl-noniid"]
    assert [arm.algo for arm in fedd2s.arms] == ["local", "fd", "fedavg", "fedmd", "fedd2s", "fedd2s"]
    assert fedd2s.arms[-1].params["schedule"] == "floor" and fedd2s.arms[-1].folder == "fedd2s-floor"
    assert fedd2s.base.models == "fedd2s_m1" and fedd2s.base.partition == "dirichlet:0.3"
    assert [arm.algo for arm in dfl.arms][:4] == ["local", "fd", "fedavg", "dfl"]
    assert dfl.base.partition == "dominant:0.8"
    for recipe in (fedd2s, dfl):
        assert recipe.base.dataset == "fmnist" and recipe.base.threads == 1 and len(recipe.seeds) == 5
    assert make_params(FedD2SParams, dict(fedd2s.arms[-2].params)).phase_epochs is None  # = the run's --epochs


@pytest.mark.parametrize(
    "params",
    [
        {"kd_mode": "sum"},
        {"c2s_teacher": "current", "schedule": "floor"},
        {"optimizer": "run", "temperature": 2.0, "kd_tau_sq_scale": True},
    ],
)
def test_switchable_choices_run(params):
    sim = simulation(params, samples_per_client=40)
    sim.federation.hello()
    records = [sim.federation.run_round(r) for r in (1, 2)]
    assert all(math.isfinite(r.server["server_kl"]) and math.isfinite(r.accuracy) for r in records)
    assert all(math.isfinite(v) for v in sim.clients["client-0"].last_losses)  # phase B ran in round 2


def test_kd_loss_has_no_tau_squared_unless_asked():
    z, t = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 0.0]]), torch.tensor([[3.0, 1.0, 0.0], [0.0, 0.0, 2.0]])
    plain, scaled = FedD2SParams(temperature=2.0), FedD2SParams(temperature=2.0, kd_tau_sq_scale=True)
    assert kd_loss(z, t, FedD2SParams()).item() == pytest.approx(1.088468, abs=1e-6)  # = torch kl_div batchmean, tau 1
    assert kd_loss(z, t, plain).item() == pytest.approx(0.328780, abs=1e-6)  # golden at tau 2 (s = 1, no tau^2)
    assert kd_loss(z, t, scaled).item() == pytest.approx(4 * 0.328780, abs=4e-6)


def test_phase_epochs_none_takes_fedd2s_epochs_on_both_sides_or_the_runs():
    """``phase_epochs=none``: the client and the server's copies both train FedD2S's own 4 passes,
    or the run's ``--epochs`` when set (the server's settings are resolved as the clients' are)."""
    for epochs, expected in ((2, 2), (None, 4)):
        sim = simulation({"phase_epochs": None}, rounds=1, epochs=epochs)
        assert sim.server.context.train.epochs == expected
        assert {client.context.train.epochs for client in sim.clients.values()} == {expected}
    sim.federation.run()  # without --epochs: a whole round, the server's distillation included


def test_phase_b_runs_in_the_round_of_its_upload_before_the_evaluation():
    """Alg. 1: C2S then S2C in one round, so round 1's accuracy is of models that learnt (until
    2026-11-26 phase B waited for the client's next participation, and round 1 scored theta^0)."""
    sim = simulation()
    sim.federation.start()
    record = sim.federation.run_round(1)
    for cid, client in sim.clients.items():
        assert client.last_losses is not None, cid
        trained = state_arrays(client.model)
        assert any(not np.array_equal(trained[k], v) for k, v in sim.server.initial_state.items()), cid
        assert record.client_accuracy[cid] == client.evaluate()["accuracy"]
    assert sim.server.replies == {}  # every reply went out


def test_a_robust_server_takes_the_median_of_the_distilled_copies_and_needs_three(monkeypatch):
    """aggregator=median replaces Eq. 11's mean of the clients' distilled copies by their coordinate-
    wise median: copies set to 1, 2 and 100 everywhere give 2 (the mean would be 34.3). With two
    copies the server keeps its model (below_quorum 1)."""
    from edgefd.algorithms import fedd2s

    values = iter([1.0, 2.0, 100.0, 5.0, 7.0])

    def fake_copy(local, *args, **kwargs):
        value = next(values)
        with torch.no_grad():
            for tensor in local.state_dict().values():
                if tensor.is_floating_point():
                    tensor.fill_(value)
        return 0.0, 0.0

    monkeypatch.setattr(fedd2s, "distil_global_copy", fake_copy)
    sim = simulation({"aggregator": "median"}, clients=3)
    sim.federation.hello()
    before = {k: v.copy() for k, v in state_arrays(sim.server.global_model).items()}
    assert sim.federation.run_round(1).server["below_quorum"] == 0.0
    for name, array in state_arrays(sim.server.global_model).items():
        if np.issubdtype(array.dtype, np.floating):
            np.testing.assert_array_equal(array, np.full_like(array, 2.0), err_msg=name)
            assert not np.array_equal(array, before[name]), name
    sim = simulation({"aggregator": "median"}, clients=2)
    sim.federation.hello()
    before = state_arrays(sim.server.global_model)
    assert sim.federation.run_round(1).server["below_quorum"] == 1.0
    for name, array in state_arrays(sim.server.global_model).items():
        np.testing.assert_array_equal(array, before[name], err_msg=name)
