"""The shared trainer's run-level choices: the local epochs, the optimiser's lifecycle and the batch
order."""

from __future__ import annotations

import copy
from contextlib import nullcontext
from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

from edgefd.algorithms.base import list_methods
from edgefd.models import RESIDUAL_BLOCKS, build_model
from edgefd.runtime.build import build, build_client, prepare
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run
from edgefd.training import (
    LocalTraining,
    RoundOptimizer,
    TrainConfig,
    batches,
    draw_batch_order,
    for_method,
    recomputing,
    train_epochs,
)


def train_config(**settings) -> TrainConfig:
    """The run's local training, made as a run makes it, on the CPU."""
    return SimulationConfig(device="cpu", **settings).train_config()


def test_fresh_builds_a_new_optimiser_every_round_and_kept_one_for_the_run():
    model = nn.Linear(3, 2)
    fresh = RoundOptimizer(model.parameters, train_config(optimizer_lifecycle="fresh"))
    kept = RoundOptimizer(model.parameters, train_config(optimizer_lifecycle="kept"))
    assert fresh.for_round() is not fresh.for_round()
    assert kept.for_round() is kept.for_round()


def test_a_kept_optimiser_keeps_its_momentum_across_rounds():
    model = nn.Linear(1, 1, bias=False)
    for lifecycle, survives in (("kept", True), ("fresh", False)):
        holder = RoundOptimizer(model.parameters, train_config(optimizer_lifecycle=lifecycle))
        model.weight.grad = torch.ones_like(model.weight)
        holder.for_round().step()  # round 1 leaves a momentum buffer
        assert bool(holder.for_round().state) == survives  # round 2


def test_method_resolves_to_the_methods_own_choice_and_an_explicit_choice_wins():
    paper = LocalTraining(optimizer_lifecycle="fresh", batch_order="fixed")
    resolved = for_method(train_config(), paper)
    assert (resolved.optimizer_lifecycle, resolved.batch_order) == ("fresh", "fixed")
    resolved = for_method(train_config(optimizer_lifecycle="kept", batch_order="reshuffle"), paper)
    assert (resolved.optimizer_lifecycle, resolved.batch_order) == ("kept", "reshuffle")


def test_unset_epochs_resolve_to_the_papers_and_an_explicit_count_wins():
    paper = LocalTraining(epochs=5)
    assert for_method(train_config(), paper).epochs == 5
    assert for_method(train_config(epochs=1), paper).epochs == 1
    assert for_method(train_config(), LocalTraining()).epochs == 1


def test_training_on_unresolved_epochs_is_refused():
    model = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="local epochs are not resolved"):
        train_epochs(
            model,
            torch.zeros(4, 2),
            lambda logits, idx: logits.sum(),
            torch.optim.SGD(model.parameters(), lr=0.1),
            train_config(),
            torch.Generator(),
        )


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(optimizer_lifecycle="sometimes"), "optimizer_lifecycle: expected one of method, fresh, kept"),
        (dict(batch_order="sorted"), "batch_order: expected one of method, fixed, reshuffle"),
        (dict(epochs=0), "epochs: must be an integer >= 1, got 0"),
    ],
)
def test_unknown_choices_are_refused_by_name(settings, message):
    with pytest.raises(ValueError, match=message):
        SimulationConfig(**settings).validate()
    resolved = for_method(train_config(), LocalTraining())
    with pytest.raises(ValueError, match=message):  # a TrainConfig made otherwise is checked too
        replace(resolved, **settings)


def test_every_method_declares_a_valid_local_training():
    for method in list_methods():
        training = method.client.local_training
        assert training.optimizer_lifecycle in ("fresh", "kept"), method.name
        assert training.batch_order in ("fixed", "reshuffle"), method.name
        assert training.epochs >= 1, method.name


def test_a_fixed_order_is_one_permutation_drawn_once_and_reshuffle_draws_every_epoch():
    generator = torch.Generator().manual_seed(0)
    order = draw_batch_order(10, train_config(batch_order="fixed"), generator)
    assert order is not None and sorted(order.tolist()) == list(range(10))
    assert order.tolist() != list(range(10))  # never the stored order
    epochs = [torch.cat(list(batches(10, 4, generator, order))).tolist() for _ in range(2)]
    assert epochs[0] == epochs[1] == order.tolist()
    assert draw_batch_order(10, train_config(batch_order="reshuffle"), generator) is None
    shuffled = [torch.cat(list(batches(10, 4, generator))).tolist() for _ in range(2)]
    assert shuffled[0] != shuffled[1]


def _tiny(algo: str, **overrides) -> SimulationConfig:
    return SimulationConfig(algo=algo, clients=2, rounds=2, samples_per_client=40, threads=1, **overrides)


@pytest.mark.parametrize("algo", ["local", "fedcache"])
@pytest.mark.parametrize("lifecycle", ["fresh", "kept"])
def test_the_run_sets_the_lifecycle_of_every_method(algo, lifecycle):
    sim = build(_tiny(algo, optimizer_lifecycle=lifecycle, params={"knn": "exact"} if algo == "fedcache" else {}))
    client = next(iter(sim.clients.values()))
    assert client.context.train.optimizer_lifecycle == lifecycle
    sim.federation.hello()
    sim.federation.run_round(1)
    first = client.optimizer.optimizer
    sim.federation.run_round(2)
    assert (client.optimizer.optimizer is first) == (lifecycle == "kept")


def test_the_run_sets_the_batch_order_of_every_method():
    for algo, order in (("fd", "fixed"), ("fedcache", "reshuffle")):
        sim = build(_tiny(algo, batch_order=order))
        for client in sim.clients.values():
            assert (client.batch_order is not None) == (order == "fixed")


def test_the_summary_records_the_resolved_choices(tmp_path):
    summary = run(_tiny("fedcache", out=str(tmp_path / "a"), params={"knn": "exact"}), progress=False)
    assert summary["local_training"] == {"epochs": 1, "optimizer_lifecycle": "fresh", "batch_order": "fixed"}
    summary = run(_tiny("fd", out=str(tmp_path / "b"), optimizer_lifecycle="fresh", epochs=2), progress=False)
    assert summary["local_training"] == {"epochs": 2, "optimizer_lifecycle": "fresh", "batch_order": "reshuffle"}


def test_simulate_refuses_an_unknown_lifecycle():
    with pytest.raises(ValueError, match="optimizer_lifecycle: expected one of"):
        build(_tiny("fd", optimizer_lifecycle="never"))


def test_simulate_refuses_a_count_of_epochs_below_one():
    with pytest.raises(ValueError, match="epochs: must be an integer >= 1, got 0"):
        build(_tiny("fd", epochs=0))


def test_a_method_trains_its_papers_epochs_unless_the_run_sets_them():
    sim = build(_tiny("fedzkt"))
    assert {client.context.train.epochs for client in sim.clients.values()} == {5}  # FedZKT's T_l (Sec. IV-A3)
    sim = build(_tiny("fedzkt", epochs=2))
    assert {client.context.train.epochs for client in sim.clients.values()} == {2}


def _saved_bytes(model: nn.Module, x: torch.Tensor) -> int:
    """Bytes of the distinct tensors a forward pass keeps for the backward pass."""
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(kept.values())


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("name, blocks", [("fedict_c3", 2), ("fedict_c4", 2), ("resnet8", 3)])
def test_recomputing_blocks_keeps_less_and_trains_to_the_same_bits(name, blocks, channels_last):
    """Training with the residual blocks but the last recomputed in the backward pass gives the
    same weights, gradients and BatchNorm statistics, bit for bit (in either memory layout: the
    run's default is channels-last), while the forward pass keeps less for the backward; outside
    the context the model is as it was."""
    torch.manual_seed(0)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    kept = build_model(name, in_channels=3, num_classes=10, input_shape=(3, 32, 32)).to(memory_format=layout)
    recomputed = copy.deepcopy(kept)
    assert sum(isinstance(m, RESIDUAL_BLOCKS) for m in kept.modules()) == blocks
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 3, 32, 32, generator=generator), torch.randint(0, 10, (16,), generator=generator)
    x = x.contiguous(memory_format=layout)
    optimisers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, nesterov=True) for m in (kept, recomputed)]
    for _ in range(3):
        for model, optimiser, context in zip(
            (kept, recomputed), optimisers, (nullcontext(), recomputing(recomputed, RESIDUAL_BLOCKS))
        ):
            with context:
                optimiser.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                optimiser.step()
        assert all(torch.equal(a.grad, b.grad) for a, b in zip(kept.parameters(), recomputed.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(kept.state_dict().values(), recomputed.state_dict().values()))
    with recomputing(recomputed, RESIDUAL_BLOCKS):
        assert _saved_bytes(recomputed, x) < _saved_bytes(kept, x)
        with torch.no_grad():
            assert torch.equal(recomputed(x), kept(x))
    assert not any("forward" in vars(m) for m in recomputed.modules())
    assert _saved_bytes(recomputed, x) == _saved_bytes(kept, x)


def test_a_device_that_recomputes_activations_sends_the_same_uplink_bit_for_bit():
    """`edgefd client --recompute-activations` changes where memory goes, not what a client
    learns: FedICT's fedict_c3 client (two residual blocks), two rounds, the same uplinks to the
    bit with it on and off; simulations never recompute."""
    config = _tiny("fedict", models="fedict_c3", batch_size=8)
    pieces = prepare(config)
    uplinks = {}
    for recompute in (False, True):
        client = build_client(config, pieces, 0, recompute_activations=recompute)
        assert client.context.train.recompute_activations is recompute
        assert sum(isinstance(m, RESIDUAL_BLOCKS) for m in client.model.modules()) == 2
        uplinks[recompute] = [client.train_round(r, None) for r in (1, 2)]
    for off, on in zip(uplinks[False], uplinks[True]):
        assert off.same_as(on)
        assert all(np.array_equal(off.arrays[k], on.arrays[k]) for k in off.arrays)
    assert not any(c.context.train.recompute_activations for c in build(config).clients.values())
