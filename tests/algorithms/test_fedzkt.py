"""FedZKT (docs/methods/fedzkt.md): the three disagreement losses on a hand-checked vector, the
generator / global / transfer-back steps doing what they optimise, the device's l2 pull, the
server handling only what arrived, the wire bytes from the codec layout, and tiny digits runs."""

import copy
import functools
import json
import math
from dataclasses import replace

import as_sent
import numpy as np
import pytest
import torch

from edgefd import kernels
from edgefd.algorithms.fedzkt import (
    KIND,
    FedZKTParams,
    FedZKTServer,
    TeacherEnsemble,
    bounded_outputs,
    disagreement,
    prox_term,
)
from edgefd.algorithms.params import make_params
from edgefd.algorithms.schema import UplinkRejected
from edgefd.data import load_dataset
from edgefd.models import count_bn_buffers, count_parameters
from edgefd.protocol import Payload
from edgefd.protocol.codec import HEADER_SIZE
from edgefd.runtime.build import build
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.transport import DOWN, UP
from edgefd.simulate import run
from edgefd.training import state_arrays

TINY_MODELS = "zkt_tiny_a,zkt_tiny_d,zkt_tiny_e"
TINY_SERVER = dict(
    global_model="zkt_tiny_global", generator="zkt_generator_mlp", iterations=3, server_batch_size=16, server_lr=0.05
)
QUICK = dict(
    dataset="digits",
    clients=3,
    rounds=2,
    epochs=1,  # quick (the paper's 5, the default, is the contract test's)
    models=TINY_MODELS,
    lr=0.05,
    momentum=0.0,
    weight_decay=0.0,
    seed=0,
    threads=1,
)


def simulation(params=None, **settings):
    return build(SimulationConfig(algo="fedzkt", params={**TINY_SERVER, **(params or {})}, **{**QUICK, **settings}))


# ----------------------------------------------------------------------------------------------
# A worked vector, checked by hand (Eq. 3-5): C = 3, B = 1, K = 2. tests/kernels/test_kernels.py checks the SL kernel
# against its torch reference and on other hand values; this is the hand-checked vector, through the
# loss the server calls, for all three losses and both kernel backends.

LN2 = math.log(2.0)


def spec_vector():
    u = torch.zeros(1, 3, requires_grad=True)
    v = torch.tensor([[[0.0, 0.0, LN2]], [[LN2, 0.0, 0.0]]], requires_grad=True)
    return u, v


@pytest.mark.parametrize("backend", kernels.BACKENDS)
def test_sl_loss_and_gradients_on_the_spec_vector(backend):
    u, v = spec_vector()
    with kernels.use_backend(backend):
        loss = disagreement(u, v, "sl")
        loss.backward()
    assert loss.item() == pytest.approx(1 / 6, abs=1e-6)
    assert u.grad[0].tolist() == pytest.approx([-2 / 9, 4 / 9, -2 / 9], abs=1e-6)
    assert v.grad[0, 0].tolist() == pytest.approx([0.0625, -0.1875, 0.125], abs=1e-6)
    assert v.grad[1, 0].tolist() == pytest.approx([0.125, -0.1875, 0.0625], abs=1e-6)


def test_kl_and_l1_losses_on_the_spec_vector():
    u, v = spec_vector()
    kl = disagreement(u, v, "kl", "reverse")
    kl.backward()
    assert kl.item() == pytest.approx((2 * math.log(8 / 9) + math.log(4 / 3)) / 3, abs=1e-6)
    assert kl.item() == pytest.approx(0.017372, abs=1e-6)
    assert u.grad[0].tolist() == pytest.approx([-0.045052, 0.090103, -0.045052], abs=1e-6)
    # forward KL(T || U) by hand: T = (.375, .25, .375), U = 1/3 each
    u, v = spec_vector()
    t = np.array([0.375, 0.25, 0.375])
    assert disagreement(u, v, "kl", "forward").item() == pytest.approx(float(np.sum(t * np.log(3 * t))), abs=1e-6)
    u, v = spec_vector()
    l1 = disagreement(u, v, "l1")
    l1.backward()
    assert l1.item() == pytest.approx(LN2, abs=1e-6)
    assert u.grad[0].tolist() == pytest.approx([-1.0, 0.0, -1.0])  # sign(0) = 0 in the middle
    assert v.grad.flatten().tolist() == pytest.approx([0.5, 0.0, 0.5] * 2)  # -(1/K) sign(u - mean v)


def test_params_validate_and_convert():
    p = make_params(FedZKTParams, {"loss": "l1", "iterations": "7", "prox": "0"})
    assert (p.loss, p.iterations, p.prox) == ("l1", 7, 0.0)
    for bad in (
        {"loss": "mse"},
        {"iterations": "0"},
        {"prox": "-1"},
        {"kl_direction": "up"},
        {"server_bn_mode": "eval"},
        {"lr_decay": "0"},
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            make_params(FedZKTParams, bad)
    with pytest.raises(ValueError, match="generator makes images"):
        build(SimulationConfig(algo="fedzkt", dataset="watch", clients=2, models="mlp", threads=1))


# ----------------------------------------------------------------------------------------------
# Server steps


def server_with_teachers(**params):
    """A server that has received all three tiny device models (trained one round on digits)."""
    sim = simulation(params)
    sim.federation.hello()
    uplinks = {cid: client.train_round(1, None) for cid, client in sim.clients.items()}
    server = sim.server
    for cid, payload in uplinks.items():
        model = server.device_models[cid] = server.context.build_model(server.context.client_models[cid])
        from edgefd.training import load_state_arrays

        load_state_arrays(model, payload.arrays)
    teachers = [server.device_models[cid] for cid in sorted(uplinks)]
    for t in teachers:
        t.eval()
        for p in t.parameters():
            p.requires_grad_(False)
    return server, teachers


def fixed_disagreement(server, teachers, z):
    with torch.no_grad():
        x = server.generator(z)
        return disagreement(server.global_model(x), torch.stack([t(x) for t in teachers])).item()


def test_generator_step_increases_the_disagreement_and_leaves_models_alone():
    torch.manual_seed(0)
    server, teachers = server_with_teachers(server_batch_size=64)
    server.generator.train()
    server.global_model.train()
    z = torch.randn(256, server.nz, generator=torch.Generator().manual_seed(1))
    global_before = copy.deepcopy(server.global_model.state_dict())
    teacher_before = copy.deepcopy(teachers[0].state_dict())
    before = fixed_disagreement(server, teachers, z)
    optimizer = torch.optim.Adam(server.generator.parameters(), lr=1e-2)
    norms = [server.generator_step(teachers, optimizer)[1] for _ in range(15)]
    after = fixed_disagreement(server, teachers, z)
    assert after > before + 0.05
    assert all(n > 0 and math.isfinite(n) for n in norms)
    # gradients reach the images only: no parameter of F or of a teacher gets a gradient or moves
    for model in (server.global_model, *teachers):
        assert all(p.grad is None for p in model.parameters())
    for name, value in server.global_model.state_dict().items():
        if "running" not in name and "num_batches" not in name:
            assert torch.equal(value, global_before[name])
    for name, value in teachers[0].state_dict().items():
        assert torch.equal(value, teacher_before[name])


def test_global_step_reduces_the_disagreement_without_touching_teachers_or_generator():
    torch.manual_seed(0)
    server, teachers = server_with_teachers(server_batch_size=64)
    server.generator.train()
    server.global_model.train()
    z = torch.randn(256, server.nz, generator=torch.Generator().manual_seed(2))
    generator_before = copy.deepcopy(server.generator.state_dict())
    before = fixed_disagreement(server, teachers, z)
    optimizer = torch.optim.SGD(server.global_model.parameters(), lr=0.1)
    for _ in range(20):
        server.student_step(teachers, optimizer)
    assert fixed_disagreement(server, teachers, z) < before - 0.05
    assert all(p.grad is None for t in teachers for p in t.parameters())
    for name, value in server.generator.state_dict().items():
        if "running" not in name and "num_batches" not in name:
            assert torch.equal(value, generator_before[name])


def test_transfer_back_reduces_the_kl_it_minimises():
    torch.manual_seed(0)
    server, teachers = server_with_teachers(iterations=30, server_batch_size=64, server_lr=0.1)
    z = torch.randn(256, server.nz, generator=torch.Generator().manual_seed(3))

    def kl_to_global():
        server.global_model.eval()
        with torch.no_grad():
            x = server.generator(z)
            p = server.global_model(x)
            return [kernels.weighted_kl(t(x), p).item() for t in teachers]

    server.generator.train()
    before = kl_to_global()
    metrics = server.transfer_back(teachers)
    after = kl_to_global()
    assert all(a < b for a, b in zip(after, before)), (before, after)
    assert metrics["transfer_kl_last"] < metrics["transfer_kl_first"]


# ----------------------------------------------------------------------------------------------
# Device: the l2 pull towards the received weights


def test_prox_term_by_hand_and_pull_towards_the_reference():
    sim = simulation({"prox": 0.0})
    client = sim.clients["client-0"]
    reference = [torch.zeros_like(p) for p in client.model.parameters()]
    expected = sum(float((p.detach() ** 2).sum()) for p in client.model.parameters())
    assert prox_term(client.model, reference).item() == pytest.approx(expected, rel=1e-5)

    received = state_arrays(client.model)
    downlink = Payload(KIND, received)
    distances = {}
    for lam in (0.0, 1.0):
        trial = copy.deepcopy(client)
        trial.params = FedZKTParams(**{**TINY_SERVER, "prox": lam})
        trial.context.torch_generator.manual_seed(5)  # same batches for both
        trial.context.train.epochs = 3
        trial.train_round(2, downlink)
        distances[lam] = sum(
            float(((p.detach() - torch.from_numpy(received[n])) ** 2).sum()) for n, p in trial.model.named_parameters()
        )
        assert trial.last_prox == pytest.approx(distances[lam], rel=1e-4)
    assert 0 < distances[1.0] < 0.5 * distances[0.0]


def test_the_literal_prox_scale_is_lambda_over_the_devices_samples():
    """Eq. 9 sums the cross-entropy over D_k: against each minibatch's mean, lambda / |D_k|. So the
    literal form at lambda = |D_k| trains exactly as the minibatch form at lambda = 1."""
    client = simulation({"prox": 0.0}).clients["client-0"]
    downlink = Payload(KIND, state_arrays(client.model))
    samples = len(client.data.train_y)

    def trained(**params):
        trial = copy.deepcopy(client)
        trial.params = FedZKTParams(**{**TINY_SERVER, **params})
        trial.context.torch_generator.manual_seed(5)  # same batches for every trial
        trial.train_round(2, downlink)
        return state_arrays(trial.model)

    minibatch = trained(prox=1.0)
    literal = trained(prox=float(samples), prox_scale="literal")
    assert all(np.array_equal(minibatch[name], literal[name]) for name in minibatch)
    weak = trained(prox=1.0, prox_scale="literal")
    assert not all(np.array_equal(minibatch[name], weak[name]) for name in minibatch)


def test_prox_is_off_until_the_device_has_received_weights():
    sim = simulation({"prox": 1e6})  # would freeze the model if it applied in round 1
    client = sim.clients["client-1"]
    before = state_arrays(client.model)
    client.train_round(1, None)
    moved = sum(float(np.abs(v - before[k]).sum()) for k, v in state_arrays(client.model).items())
    assert client.reference is None and moved > 1e-3


# ----------------------------------------------------------------------------------------------
# Rounds: only what arrived, bytes, end-to-end


def table_overhead(name, array):
    return 20 + len(name.encode()) + 4 * array.ndim


def state_message_size(state):
    """The codec's exact size of a full-state payload (protocol/codec.py layout): header, kind, and
    per array a table entry and its data; who sends it is the message's, not counted here."""
    return HEADER_SIZE + len(KIND) + sum(table_overhead(k, v) + v.nbytes for k, v in state.items())


def test_bytes_per_round_are_each_model_state_plus_headers():
    # fedict_c1 has BatchNorm: its running mean and var travel too (docs/methods/fedzkt.md#messages)
    sim = simulation(clients=3, models="fedict_c1,zkt_tiny_a,zkt_tiny_e")
    sim.federation.hello()
    sim.federation.run_round(1)
    sim.federation.run_round(2)
    ledger = sim.federation.ledger
    for cid, client in sim.clients.items():
        state = state_arrays(client.model)
        floats = sum(v.size for v in state.values() if v.dtype == np.float32)
        assert floats == count_parameters(client.model) + count_bn_buffers(client.model)  # P_k + R_k
        assert ledger.total(UP, 1, cid) == state_message_size(state)
        assert ledger.total(DOWN, 1, cid) == 0  # nothing distilled before round 1's upload
        assert ledger.total(UP, 2, cid) == state_message_size(state)
        assert ledger.total(DOWN, 2, cid) == state_message_size(state)
    assert count_bn_buffers(sim.clients["client-0"].model) > 0


def test_server_handles_only_the_devices_that_uploaded():
    sim = simulation(clients=4, models=TINY_MODELS, participation=0.5, rounds=1)
    fed = sim.federation
    fed.hello()
    record = fed.run_round(1)
    active = set(record.selected)
    assert len(active) == 2 and record.server["active_devices"] == 2.0
    assert set(sim.server.device_models) == active and set(sim.server.pending) == active
    for cid in sim.clients:
        assert (sim.server.evaluation_state(cid) is None) == (cid not in active)
        assert (sim.server.downlink(2, cid) is None) == (cid not in active)
    assert sim.server.aggregate(2, {}) == {"active_devices": 0.0}


def test_a_late_upload_is_not_distilled_and_the_device_keeps_its_weights():
    sim = simulation(clients=3, straggler_rate=0.999, rounds=1)
    sim.federation.hello()
    record = sim.federation.run_round(1)
    assert set(record.late) == set(sim.clients) and record.server == {"active_devices": 0.0}
    assert sim.server.pending == {} and all(sim.server.downlink(2, c) is None for c in sim.clients)


def test_upload_with_the_wrong_architecture_is_a_clear_error():
    sim = simulation()
    other = state_arrays(sim.clients["client-2"].model)
    with pytest.raises(ValueError, match="model state mismatch"):
        sim.server.aggregate(1, {"client-0": Payload(KIND, other)})


# client-0 and client-3 share fedict_c1 (BatchNorm: an int64 counter); zkt_tiny_d's state names are a
# subset of zkt_tiny_e's, with other shapes.
MIXED = dict(clients=4, models="fedict_c1,zkt_tiny_d,zkt_tiny_e")


@functools.cache
def honest_uplinks():
    """The server after round 1 (all of whose uplinks fit) and every device's honest state of round 2."""
    sim = simulation(**MIXED)
    sim.federation.hello()
    assert sim.federation.run_round(1).rejected == {}
    uplinks = {cid: as_sent.train_round(sim.clients[cid], 2, sim.federation.downlink(2, cid)) for cid in sim.clients}
    return sim.server, {cid: payload.arrays for cid, payload in uplinks.items()}


def test_each_device_architecture_has_its_schema_built_once(monkeypatch):
    server, states = honest_uplinks()
    assert set(server.state_schemas) == {"fedict_c1", "zkt_tiny_d", "zkt_tiny_e"}  # built in round 1
    monkeypatch.setattr(server.context, "build_model", None)  # the cache answers: no model is built again
    for cid, arrays in states.items():
        server.check_uplink(2, cid, Payload(KIND, arrays))
    fresh = simulation(**MIXED).server
    rng = torch.get_rng_state()
    fresh.uplink_schemas("client-2")
    assert torch.equal(torch.get_rng_state(), rng)  # building the throwaway model drew nothing from the run


def int_buffer(arrays):
    return next(name for name, array in arrays.items() if array.dtype == np.int64)


@pytest.mark.parametrize(
    ("sender", "change", "reason"),
    [
        ("client-1", lambda s: s["client-2"], "unexpected-array"),  # zkt_tiny_e's state as zkt_tiny_d's
        ("client-1", lambda s: {k: s["client-2"][k] for k in s["client-1"]}, "shape"),  # same names
        ("client-2", lambda s: s["client-1"], "missing-array"),
        ("client-0", lambda s: {**s["client-0"], int_buffer(s["client-0"]): np.array(-1)}, "out-of-range"),
        ("client-0", lambda s: {**s["client-0"], int_buffer(s["client-0"]): np.array(1.0, np.float32)}, "dtype"),
        ("client-0", lambda s: {k: np.full_like(v, 1e7) for k, v in s["client-0"].items()}, "out-of-range"),
        ("client-3", lambda s: {k: v.astype(np.float64) for k, v in s["client-3"].items()}, "dtype"),
        ("client-9", lambda s: s["client-0"], "wrong-kind"),  # not a client of this run
    ],
)
def test_server_accepts_honest_uplinks_and_refuses_tampered_ones(sender, change, reason):
    server, states = honest_uplinks()
    if sender in states:
        server.check_uplink(2, sender, Payload(KIND, states[sender]))
    with pytest.raises(UplinkRejected) as refused:
        server.check_uplink(2, sender, Payload(KIND, change(states)))
    assert refused.value.reason == reason


@pytest.mark.parametrize("loss", ["sl", "kl", "l1"])
def test_end_to_end_tiny_run_records_server_timing(tmp_path, loss):
    summary = run(
        SimulationConfig(algo="fedzkt", params={**TINY_SERVER, "loss": loss}, out=str(tmp_path), **QUICK),
        progress=False,
    )
    assert math.isfinite(summary["final_accuracy"]) and 0 <= summary["final_accuracy"] <= 1
    lines = [json.loads(t) for t in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    server = lines[-1]["server"]
    assert server["server_seconds"] > 0 and server["server_cpu_seconds"] > 0 and 0 <= server["loss_kernel_share"] <= 1
    assert server["loss_kernel_seconds"] <= server["server_seconds"]
    assert server["active_devices"] == 3.0
    assert all(math.isfinite(v) for v in server.values())


def test_a_simulation_scores_the_global_model_on_the_whole_test_set_and_changes_nothing_else(tmp_path, monkeypatch):
    """Every evaluated round, F and the ensemble of the devices' uploads are scored on the whole test
    set (docs/methods/fedzkt.md#accuracy-that-is-reported), by the simulation (the server holds no
    data); scoring leaves the run as it was."""
    config = SimulationConfig(algo="fedzkt", params=TINY_SERVER, **QUICK)
    scored = run(replace(config, out=str(tmp_path / "scored")), progress=False)
    lines = [json.loads(t) for t in (tmp_path / "scored" / "metrics.jsonl").read_text().splitlines()]
    both = ["global_model", "teacher_ensemble"]
    assert [sorted(line["server_model_accuracy"]) for line in lines] == [
        ["global_model"],
        both,
        both,
    ]  # no uploads in round 0

    sim = simulation()
    sim.federation.run()
    federation, global_model = sim.federation, sim.server.global_model
    whole = load_dataset("digits")  # the whole test set, not a client's split
    x, y = whole.test_rows(torch.arange(len(whole.test_y))), whole.test_y
    with torch.no_grad():
        by_hand = float((global_model.eval()(x).argmax(1) == y).double().mean())
    assert lines[-1]["server_model_accuracy"]["global_model"] == pytest.approx(by_hand)
    global_model.train()
    assert federation.score_server_models({"global_model": global_model}) == {"global_model": pytest.approx(by_hand)}
    assert global_model.training  # a measurement: F is left in the mode it was in

    # the ensemble: the last round's uploads as sent (not the devices after the transfer back), mean softmax
    server, votes = sim.server, []
    for cid, arrays in server.last_uploads.items():
        assert any(not np.array_equal(arrays[k], v) for k, v in state_arrays(server.device_models[cid]).items())
        member = copy.deepcopy(server.device_models[cid])
        member.load_state_dict({k: torch.from_numpy(v) for k, v in arrays.items()})
        with torch.no_grad():
            votes.append(member.eval()(x).softmax(1))
    ensemble_by_hand = float((torch.stack(votes).mean(0).argmax(1) == y).double().mean())
    assert lines[-1]["server_model_accuracy"]["teacher_ensemble"] == pytest.approx(ensemble_by_hand)

    monkeypatch.setattr(FedZKTServer, "server_models", lambda self: {})
    unscored = run(replace(config, out=str(tmp_path / "unscored")), progress=False)
    assert unscored["final_accuracy"] == scored["final_accuracy"]
    other = [json.loads(t) for t in (tmp_path / "unscored" / "metrics.jsonl").read_text().splitlines()]
    assert [line["client_accuracy"] for line in other] == [line["client_accuracy"] for line in lines]
    assert all(line["server_model_accuracy"] == {} for line in other)


def test_the_teacher_ensemble_is_the_log_of_the_mean_softmax_and_stays_finite():
    a, b = torch.tensor([[2.0, 0.0, -1.0]]), torch.tensor([[0.0, 3.0, 0.0]])
    members = [torch.nn.Linear(3, 3, bias=False) for _ in range(2)]
    for member, logits in zip(members, (a, b)):
        member.weight.data = torch.diag(logits[0])  # the member maps a row of ones to its logits
    ensemble = TeacherEnsemble(members)
    expected = ((a.softmax(1) + b.softmax(1)) / 2).log()
    assert torch.allclose(ensemble(torch.ones(1, 3)), expected, atol=1e-6)
    for member in members:
        member.weight.data = torch.diag(torch.tensor([1000.0, -1000.0, 0.0]))  # softmax underflows to 0
    assert torch.isfinite(ensemble(torch.ones(1, 3))).all()


def test_bounded_outputs_scale_only_a_teacher_past_the_others_and_keep_its_ranking():
    """clip=3: each teacher's rows at most 3 times the median of the others' typical row norm. A
    teacher whose model was scaled 50 times votes a near one-hot softmax; bounded, its logits are
    the others' size again and rank the classes as before. Honest teachers are left alone."""
    generator = torch.Generator().manual_seed(0)
    honest = torch.randn(2, 16, 10, generator=generator)
    teachers = torch.cat([honest, 50 * torch.randn(1, 16, 10, generator=generator)]).requires_grad_(True)
    bounded = bounded_outputs(teachers, 3.0)
    assert torch.equal(bounded[:2], teachers[:2])
    typical = honest.norm(dim=2).median(dim=1).values
    assert (bounded[2].norm(dim=1) <= 3 * typical.mean() * 1.0001).all()  # the median of two: their mean
    assert torch.equal(bounded[2].argsort(dim=1), teachers[2].argsort(dim=1))
    student = torch.zeros(16, 10)
    assert disagreement(student, bounded) < disagreement(student, teachers)
    bounded.sum().backward()
    assert torch.isfinite(teachers.grad).all()
    alone = torch.randn(1, 4, 10, generator=generator)
    assert torch.equal(bounded_outputs(alone, 3.0), alone)  # one teacher: nobody to bound it by


def test_recipes_give_every_arm_its_own_run_folder():
    from edgefd.recipes import RECIPES

    for name in ("fedzkt", "fedzkt-dir0.5"):
        arms = RECIPES[name].arms
        assert len({arm.folder or arm.algo for arm in arms}) == len(arms)
    assert {arm.params.get("loss") for arm in RECIPES["fedzkt-dir0.5"].arms if arm.algo == "fedzkt"} == {
        "sl",
        "kl",
        "l1",
    }


def test_presets_fill_only_what_is_left_unset():
    from edgefd.algorithms.fedzkt import preset_scale
    from edgefd.recipes.fedzkt import SERVER

    cpu = FedZKTParams().resolved((1, 8, 8))
    assert (cpu.global_model, cpu.generator, cpu.iterations, cpu.server_batch_size) == (
        "zkt_tiny_global", "zkt_generator_mlp", 100, 128
    )  # fmt: skip
    paper = FedZKTParams(preset="paper").resolved((1, 28, 28))
    assert (paper.global_model, paper.generator_ngf, paper.iterations, paper.server_batch_size, paper.server_lr) == (
        "resnet18", 64, 200, 256, 0.01
    )  # fmt: skip
    mine = make_params(FedZKTParams, {"iterations": "7", "preset": "paper"}).resolved((1, 28, 28))
    assert mine.iterations == 7 and mine.server_batch_size == 256
    # the reproduce recipes set every field a preset would: their settings do not move with the preset
    assert set(preset_scale("cpu", (1, 28, 28))) <= set(SERVER)
    with pytest.raises(ValueError, match="preset"):
        FedZKTParams(preset="gpu")
