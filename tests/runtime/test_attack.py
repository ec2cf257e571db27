"""Poisoning clients (`--attack`): what an attacker sends, and that a simulation routes every
training message of the attackers, and only theirs, through the attack."""

import numpy as np
import pytest
import torch

from edgefd.algorithms.schema import KNOWLEDGE_BOUND, WEIGHT_BOUND
from edgefd.protocol import Payload
from edgefd.runtime.attack import SCALE, Poisoning, attackers
from edgefd.runtime.build import build
from edgefd.runtime.config import SimulationConfig

UPLINK = Payload(
    "knowledge",
    {
        "logits": np.array([[3.0, -2.0, 0.0]], np.float32),
        "weights": np.array([0.5, -0.25], np.float32),
        "counts": np.array([4, 0, 1]),
    },
    {"samples": 5},
)


@pytest.mark.parametrize(
    ("attack", "logits", "weights"),
    [
        ("scaled", [[300.0, -200.0, 0.0]], [50.0, -25.0]),
        ("flipped", [[-3.0, 2.0, -0.0]], [-0.5, 0.25]),
        ("max-in-bounds", [[-0.999 * KNOWLEDGE_BOUND, 0.999 * KNOWLEDGE_BOUND, -0.999 * KNOWLEDGE_BOUND]], None),
    ],
)
def test_an_attack_changes_the_float_arrays_within_their_bounds_and_nothing_else(attack, logits, weights):
    poisoned = Poisoning(attack, weights=frozenset({"weights"})).apply(UPLINK)
    assert poisoned is not None and poisoned.scalars == {"samples": 5}
    np.testing.assert_allclose(poisoned.arrays["logits"], logits, rtol=1e-6)
    if weights is None:  # the weights' bound is not the knowledge's
        np.testing.assert_allclose(poisoned.arrays["weights"], [-0.999 * WEIGHT_BOUND, 0.999 * WEIGHT_BOUND])
    else:
        np.testing.assert_allclose(poisoned.arrays["weights"], weights)
    assert poisoned.arrays["logits"].dtype == np.float32
    np.testing.assert_array_equal(poisoned.arrays["counts"], UPLINK.arrays["counts"])


def test_scaling_stays_inside_the_bound():
    big = Payload("knowledge", {"logits": np.array([5e3, -5e3], np.float32)})
    poisoned = Poisoning("scaled", frozenset()).apply(big)
    assert poisoned is not None and np.abs(poisoned.arrays["logits"]).max() < KNOWLEDGE_BOUND
    assert SCALE == 100.0


def test_the_first_clients_in_id_order_attack():
    ids = [f"client-{i}" for i in range(12)]
    assert attackers(ids, "flipped", 2) == ["client-0", "client-1"]
    assert attackers(ids, "none", 2) == []
    with pytest.raises(ValueError, match="attackers: must be in"):
        attackers(ids, "flipped", 13)
    with pytest.raises(ValueError, match="attack: must be one of"):
        Poisoning("none", frozenset())
    with pytest.raises(ValueError, match=r"attackers: must be in \[1, 3\]"):
        SimulationConfig(clients=3, attack="scaled", attackers=4).validate()


QUICK = dict(dataset="digits", clients=3, rounds=1, partition="iid", samples_per_client=60, seed=0, threads=1)


@pytest.mark.parametrize("aggregator", ["mean", "median"])
def test_a_simulated_attacker_poisons_its_uplinks_and_the_median_outvotes_it(tmp_path, aggregator):
    config = SimulationConfig(
        algo="fd", attack="max-in-bounds", params={"aggregator": aggregator}, out=str(tmp_path), **QUICK
    )
    sim = build(config)
    start = sim.federation.start()
    assert start.rejected == {}
    record = sim.federation.run_round(1)
    assert record.rejected == {}  # every poisoned value is inside the schema: the server has to withstand it
    largest = np.abs(sim.server.global_logits).max()
    if aggregator == "mean":  # one of three at 9,990: a third of it
        assert largest > 0.3 * KNOWLEDGE_BOUND
    else:
        assert largest < 100


def fedcache_cache_after_round_1(tmp_path, attack):
    config = SimulationConfig(
        algo="fedcache", models="mlp", attack=attack, params={"knn": "exact"}, out=str(tmp_path / attack), **QUICK
    )
    sim = build(config)
    assert sim.federation.start().rejected == {}
    assert sorted(sim.server.cache.slices) == ["client-0", "client-1", "client-2"]  # every hello taken as is
    assert sim.federation.run_round(1).rejected == {}
    return sim.server.cache


def test_a_fedcache_attacker_poisons_its_step_requests(tmp_path):
    """FedCache's logits go up in step requests (the per-batch exchange): client-0's rows in the
    server's cache point away from the same rows of a clean run; client-1's do not."""
    clean, flipped = fedcache_cache_after_round_1(tmp_path, "none"), fedcache_cache_after_round_1(tmp_path, "flipped")
    for cid in ("client-0", "client-1"):
        a, b = clean.logits[clean.slices[cid]], flipped.logits[flipped.slices[cid]]
        cosine = float(torch.nn.functional.cosine_similarity(a, b, dim=1).mean())
        assert cosine < -0.5 if cid == "client-0" else cosine > 0.5, (cid, cosine)
