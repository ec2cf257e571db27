"""Role checkpoints: a role saved after training and loaded in a fresh build goes on exactly as
the original would (same uplink next round), without writing its data."""

import numpy as np
import pytest
import torch

from edgefd.algorithms.base import list_methods
from edgefd.deploy import checkpoint
from edgefd.runtime.channel import InProcessChannel
from edgefd.simulate import SimulationConfig, build_client, build_server, prepare

CONFIG = dict(dataset="digits", clients=2, rounds=3, seed=1, threads=1, samples_per_client=60)
# methods that need particular models or lighter settings to run on digits in a test
SETTINGS = {
    "fedcache": dict(params={"exchange": "round"}),  # checkpoints serve the MQTT runtime, which runs rounds
    "fedict": dict(models="fedict_c1"),
    "fedgkt": dict(models="fedict_c1"),
    "fedmd": dict(params={"public_dataset": "digits", "alignment_size": 50}),
    "fedd2s": dict(models="fedd2s_m1", params={"phase_epochs": 1}),
    "fedzkt": dict(
        models="zkt_tiny_a,zkt_tiny_e",
        params=dict(global_model="zkt_tiny_global", generator="zkt_generator_mlp", iterations=2, server_batch_size=16),
    ),
}


def run_round(server, clients, r):
    """Round r with every client, without the loop (the roles are checkpointed in between)."""
    uplinks = InProcessChannel(clients).train(r, {cid: server.downlink(r, cid) for cid in clients})
    server.aggregate(r, {c: p for c, p in uplinks.items() if p is not None})
    return uplinks


@pytest.mark.parametrize("algo", [m.name for m in list_methods()])
def test_every_method_resumes_from_a_checkpoint(tmp_path, algo):
    config = SimulationConfig(algo=algo, **{**CONFIG, **SETTINGS.get(algo, {})})
    pieces = prepare(config)
    clients = {pieces.client_ids[i]: build_client(config, pieces, i) for i in range(config.clients)}
    server = build_server(config, pieces)
    server.start(InProcessChannel(clients).hello())
    run_round(server, clients, 1)

    for cid, role in clients.items():
        checkpoint.save(tmp_path / f"{cid}.ckpt", role, {"data": role.context.data})
    checkpoint.save(
        tmp_path / "server.ckpt", server, {"build_model": server.context.build_model, "dataset": pieces.dataset}
    )
    fresh_pieces = prepare(config)
    fresh = {cid: build_client(config, fresh_pieces, i) for i, cid in enumerate(fresh_pieces.client_ids)}
    restored = {cid: checkpoint.load(tmp_path / f"{cid}.ckpt", {"data": fresh[cid].context.data}) for cid in fresh}
    fresh_server = build_server(config, fresh_pieces)
    restored_server = checkpoint.load(
        tmp_path / "server.ckpt", {"build_model": fresh_server.context.build_model, "dataset": fresh_pieces.dataset}
    )
    assert restored["client-0"].data is fresh["client-0"].context.data  # the data was not written

    expected = run_round(server, clients, 2)
    got = run_round(restored_server, restored, 2)
    for cid in expected:
        if expected[cid] is None:
            assert got[cid] is None
        else:
            assert got[cid].same_as(expected[cid]), f"{algo}: {cid}'s round-2 uplink differs after a checkpoint"


def test_generators_travel_as_their_state(tmp_path):
    generator = torch.Generator().manual_seed(7)
    torch.rand(3, generator=generator)
    state = {"g": generator, "rng": np.random.default_rng(3)}
    checkpoint.save(tmp_path / "x.ckpt", state, {})
    back = checkpoint.load(tmp_path / "x.ckpt", {})
    assert torch.equal(torch.rand(4, generator=back["g"]), torch.rand(4, generator=generator))
    assert back["rng"].random() == state["rng"].random()


def test_a_missing_reference_is_a_clear_error(tmp_path):
    marker = object()
    checkpoint.save(tmp_path / "x.ckpt", {"m": marker}, {"marker": marker})
    with pytest.raises(Exception, match="marker"):
        checkpoint.load(tmp_path / "x.ckpt", {})


def test_a_checkpoint_of_another_version_is_a_clear_error(tmp_path, monkeypatch):
    """A class the checkpoint names has moved (here: its module is gone): --resume says why."""
    import sys
    import types

    module = types.ModuleType("edgefd_moved_away")

    class Moved:
        pass

    Moved.__module__ = module.__name__
    Moved.__qualname__ = "Moved"
    module.Moved = Moved
    monkeypatch.setitem(sys.modules, module.__name__, module)
    checkpoint.save(tmp_path / "old.ckpt", {"x": Moved()}, {})
    monkeypatch.delitem(sys.modules, module.__name__)
    with pytest.raises(ValueError, match="another version of edgefd.*edgefd_moved_away.*without --resume"):
        checkpoint.load(tmp_path / "old.ckpt", {})
