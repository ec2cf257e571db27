"""What one FedCache client can make the server do: a hello no larger than the run lets one client
hold (refused in round 0's ``rejected``, with the reason in the log), the relation search bounded
whatever a class's size, and no more step requests a round than the client's declared data makes."""

import math

import numpy as np
import pytest

from edgefd.algorithms.fedcache import cache as cache_module
from edgefd.algorithms.schema import UplinkRejected
from edgefd.protocol import Payload
from edgefd.protocol.message import SERVER, Message
from edgefd.runtime.build import build
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.loop import StepAnswers

QUICK = dict(
    algo="fedcache",
    dataset="digits",
    clients=4,
    rounds=1,
    models="mlp",
    partition="iid",
    samples_per_client=40,
    params={"knn": "exact", "exchange": "round"},
)


def hello(cid: str, labels, first_id: int = 0) -> Payload:
    """A hello that fits the schema (pixels: 64-wide hashes on digits), of ``len(labels)`` samples."""
    labels = np.asarray(labels, np.uint8)
    n = len(labels)
    rng = np.random.default_rng(n)
    ids = np.arange(first_id, first_id + n, dtype=np.int32)
    return Payload(
        "fedcache.hello",
        {"ids": ids, "labels": labels, "hashes": rng.random((n, 64), np.float32)},
        {"encoder": "pixels"},
    )


def test_a_hello_larger_than_one_client_may_hold_is_refused_and_the_others_are_taken(tmp_path, caplog):
    """--samples-per-client 40: client-0 declares 41 samples (a hello of 40,000 in one class cost the
    server 80 s and 4.5 GB before it was bounded)."""
    sim = build(SimulationConfig(out=str(tmp_path), **QUICK))
    sim.clients["client-0"].hello = lambda: hello("client-0", np.zeros(41))
    record = sim.federation.start()
    assert record.rejected == {"client-0": "too-many-samples"}
    assert sorted(sim.server.cache.slices) == ["client-1", "client-2", "client-3"]  # the honest hellos
    assert (
        "client-0's hello rejected: too-many-samples: a hello of 41 samples; one client of this run holds at most "
        "40 (--samples-per-client)" in caplog.text
    )


@pytest.fixture(scope="module")
def whole_set_server(tmp_path_factory):
    """A server whose run sets no --samples-per-client: a client may hold the whole training set."""
    config = {**QUICK, "partition": "dirichlet:0.5", "samples_per_client": None}
    return build(SimulationConfig(out=str(tmp_path_factory.mktemp("run")), **config)).server


def test_without_samples_per_client_the_training_set_bounds_a_hello_and_each_of_its_classes(whole_set_server):
    server = whole_set_server
    held = server.context.class_samples
    assert len(held) == 10 and sum(held) > 1000  # digits' training set
    server.check_hello("client-0", hello("client-0", np.zeros(held[0])))  # a whole class, all in one: taken
    with pytest.raises(UplinkRejected) as refused:
        server.check_hello("client-0", hello("client-0", np.zeros(held[0] + 1)))
    assert refused.value.reason == "too-many-samples"
    assert f"{held[0] + 1} samples of class 0; the run's training set holds {held[0]}" in str(refused.value)
    labels = np.resize(np.arange(10), sum(held) + 1)
    with pytest.raises(UplinkRejected) as refused:
        server.check_hello("client-0", hello("client-0", labels))
    assert refused.value.reason == "too-many-samples" and "(its training set)" in str(refused.value)


def test_the_exact_search_compares_bounded_blocks_and_finds_the_same_neighbours(monkeypatch):
    rng = np.random.default_rng(0)
    vectors = rng.random((300, 8), np.float32)
    whole = cache_module._exact_class(vectors, 5)
    monkeypatch.setattr(cache_module, "EXACT_BLOCK_ELEMENTS", 7 * 300)  # blocks of 7 rows
    assert np.array_equal(cache_module._exact_class(vectors, 5), whole)


def test_a_round_takes_no_more_step_requests_than_the_clients_declared_data_makes(tmp_path):
    config = {**QUICK, "batch_size": 16, "params": {"knn": "exact"}}  # the default exchange: per mini-batch
    sim = build(SimulationConfig(out=str(tmp_path), **config))
    sim.federation.hello()
    cap = sim.server.max_steps("client-1")
    assert cap == math.ceil(40 / 16) * 1  # its samples' mini-batches, one epoch (the paper's)
    record = sim.federation.run_round(1)
    ledger = sim.federation.ledger
    assert all(ledger.messages[(1, "up", cid, "step")] == cap for cid in sim.clients)  # honest clients fit
    assert record.held == {}
    ids = sim.server.cache.sample_ids("client-1")[:16].astype(np.int32)
    content = Payload("fedcache.logits", {"ids": ids, "logits": np.zeros((16, 10), np.float32)})
    answer_to = StepAnswers(sim.server, 2, "client-1", cap, sim.federation._sealed)
    for step in range(1, cap + 1):
        assert answer_to(Message("step", "client-1", SERVER, 2, content, step)).content is not None
    refusal = answer_to(Message("step", "client-1", SERVER, 2, content, cap + 1))
    assert refusal.is_answer and refusal.content is None  # refused: the client's round ends unanswered
    assert (answer_to.taken, answer_to.over_cap) == (cap, 1)
    assert sim.server.max_steps("client-9") == 0  # no hello taken: no step either
