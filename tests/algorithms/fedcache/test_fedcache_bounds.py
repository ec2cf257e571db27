"""What one FedCache client can make the server do: a hello no larger than the run lets one client
hold (refused in round 0's ``rejected``, with the reason in the log), the relation search bounded
whatever a class's size, no more step requests a round than the client's declared data makes, and
no teacher from a declared sample that the client never uploads."""

import math

import numpy as np
import pytest
import torch

from edgefd.algorithms.fedcache import relations
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
    whole = relations._exact_class(vectors, 5)
    monkeypatch.setattr(relations, "EXACT_BLOCK_ELEMENTS", 7 * 300)  # blocks of 7 rows
    assert np.array_equal(relations._exact_class(vectors, 5), whole)


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


def test_samples_a_hello_invents_and_its_client_never_uploads_are_nobodys_teacher(tmp_path, caplog):
    """The claim of issue 48: beside three honest clients (iid, about 359 samples each), client-0's
    hello declares its own samples and 1,050 more, the others' (their labels and hashes: each is
    where an honest sample is), listed first so that the neighbour bound lets 718 of them be
    neighbours. It makes 45 steps' worth of samples; it trains on its own, and uploads only theirs."""
    config = {**QUICK, "samples_per_client": None, "batch_size": 32, "params": {"knn": "exact", "aggregator": "mean"}}
    sim = build(SimulationConfig(out=str(tmp_path), **config))
    liar = sim.clients["client-0"]
    honest = {cid: sim.clients[cid].hello() for cid in ("client-1", "client-2", "client-3")}
    stolen = {k: np.concatenate([p.arrays[k] for p in honest.values()])[:1050] for k in ("labels", "hashes")}
    own = liar.hello().arrays
    invented = np.arange(100_000, 101_050, dtype=np.int32)
    claim = Payload(
        "fedcache.hello",
        {
            "ids": np.concatenate([invented, own["ids"]]),
            "labels": np.concatenate([stolen["labels"], own["labels"]]),
            "hashes": np.concatenate([stolen["hashes"], own["hashes"]]),
        },
        {"encoder": "pixels"},
    )
    liar.hello = lambda: claim
    assert sim.federation.start().rejected == {}  # within what one client of the run may hold
    cache = sim.server.cache
    assert sim.server.max_steps("client-0") == 45
    fake = cache.rows("client-0", invented)
    assert np.isin(cache.neighbours[cache.slices["client-1"]], fake).any()  # the claim made them neighbours

    record = sim.federation.run_round(1)
    for cid in ("client-1", "client-2", "client-3"):  # their teachers: the mean over the uploaded neighbours
        table = cache.neighbours[cache.slices[cid]]
        teaching = (table >= 0) & ~np.isin(table, fake)
        logits = cache.logits.numpy()
        expected = [
            logits[row[keep]].mean(axis=0) if keep.any() else np.zeros(10) for row, keep in zip(table, teaching)
        ]
        np.testing.assert_allclose(cache.fetch(cid).numpy(), np.array(expected), rtol=1e-5, atol=1e-6)
    assert record.server["cache_rows_never_uploaded"] == 1050
    assert "client-0 trained without uploading logits for 1050 of the samples its hello declared" in caplog.text
    assert sim.federation.run_round(2).server["cache_rows_never_uploaded"] == 1050
    assert not cache.filled[torch.from_numpy(fake)].any()


def test_an_honest_round_leaves_no_sample_untaught_and_adds_no_metric(tmp_path):
    config = {**QUICK, "batch_size": 16, "params": {"knn": "exact"}}
    sim = build(SimulationConfig(out=str(tmp_path), **config))
    sim.federation.start()
    record = sim.federation.run_round(1)
    assert "cache_rows_never_uploaded" not in record.server and sim.server.cache.silent == 0
    assert bool(sim.server.cache.filled.all())


def test_an_honest_client_whose_last_batch_is_one_sample_is_not_warned_of(tmp_path, caplog):
    """41 samples in batches of 8 leave a last batch of one, which a model with BatchNorm (ResNet-8)
    skips (`epoch_batches`): that sample has no logits after the round and is nobody's teacher, but
    the client is honest, and the server does not log it as one that declared samples it never
    uploaded (it did, for a liar: the test above)."""
    config = {**QUICK, "clients": 3, "models": "resnet8", "samples_per_client": 41, "batch_size": 8}
    sim = build(SimulationConfig(out=str(tmp_path), **{**config, "params": {"knn": "exact"}}))
    sim.federation.start()
    assert [sim.server.untrainable(cid) for cid in sorted(sim.clients)] == [1, 1, 1]
    with caplog.at_level("WARNING"):
        record = sim.federation.run_round(1)
    assert record.server["cache_rows_never_uploaded"] == 3  # one a client, counted all the same
    assert "trained without uploading logits" not in caplog.text
