"""FedCache: its loss, its payload sizes against docs/methods/fedcache.md#messages, id alignment, end to end."""

import as_sent
import numpy as np
import pytest
import torch
from torch import nn

from edgefd.algorithms.fedcache import FedCacheParams, fedcache_loss
from edgefd.algorithms.schema import UplinkRejected
from edgefd.protocol import Payload, encode
from edgefd.runtime.build import build
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run

QUICK = dict(
    algo="fedcache", dataset="digits", clients=4, rounds=2, models="mlp", params={"knn": "exact", "exchange": "round"}
)
PER_BATCH = {**QUICK, "params": {"knn": "exact", "aggregator": "mean"}}  # the default exchange: per mini-batch; Eq. 17


def test_loss_matches_the_authors_formula_and_gradient():
    # Eq. 18 as the authors' code computes it:
    # CE(z, y) + beta T^2 KLDivLoss(batchmean)(log_softmax(z/T), softmax(t/T) + eps)
    g = torch.Generator().manual_seed(0)
    z = torch.randn(8, 10, generator=g, requires_grad=True)
    t = torch.randn(8, 10, generator=g) * 2
    y = torch.randint(0, 10, (8,), generator=g)
    params = FedCacheParams()
    ours = fedcache_loss(z, y, t, params)
    (grad_ours,) = torch.autograd.grad(ours, z)
    T, beta = params.temperature, params.beta
    kl = nn.KLDivLoss(reduction="batchmean")(torch.log_softmax(z / T, 1), torch.softmax(t / T, 1) + 1e-7)
    reference = nn.functional.cross_entropy(z, y) + beta * T * T * kl
    (grad_ref,) = torch.autograd.grad(reference, z)
    torch.testing.assert_close(ours, reference, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(grad_ours, grad_ref, atol=1e-6, rtol=1e-5)


def test_a_constant_cache_gives_the_same_teacher():
    # zeros (paper) and 1/C (old code) initial caches are the same teacher
    # (docs/methods/fedcache.md#cache-initialisation)
    g = torch.Generator().manual_seed(1)
    z, y = torch.randn(4, 10, generator=g), torch.randint(0, 10, (4,), generator=g)
    params = FedCacheParams()
    torch.testing.assert_close(
        fedcache_loss(z, y, torch.zeros(4, 10), params), fedcache_loss(z, y, torch.full((4, 10), 0.1), params)
    )


def test_payload_sizes_follow_the_spec_formulas(tmp_path):
    sim = build(SimulationConfig(out=str(tmp_path), **QUICK))
    client = sim.clients["client-0"]
    n, classes = len(client.data.train_y), 10
    hello = client.hello()
    d_h = hello.arrays["hashes"].shape[1]
    assert d_h == 64  # digits pixels
    # B_init = N (d_h b_h + b_idx + b_y) with float32 hashes, 4-byte ids, 1-byte labels
    # (docs/methods/fedcache.md#messages)
    assert hello.array_bytes == n * (4 * d_h + 4 + 1)
    sim.federation.hello()
    up = client.train_round(1, sim.server.downlink(1, "client-0"))
    down = sim.server.downlink(1, "client-0")
    assert up.array_bytes == n * (classes * 4 + 4)  # B_up = N (C b_z + b_idx)
    # B_down = N C b_z; the ids that come with it (for alignment by id) add N b_idx
    assert down.array_bytes == n * (classes * 4 + 4)
    for payload in (hello, up, down):
        assert len(encode(payload)) - payload.array_bytes < 200  # header, array table, scalars
    half = up.with_precision("fp16", ["logits"])
    assert len(encode(up)) - len(encode(half)) == n * classes * 2  # fp16 logits: b_z = 2


def test_teachers_are_aligned_by_sample_id_not_by_position(tmp_path):
    sim = build(SimulationConfig(out=str(tmp_path), **QUICK))
    sim.federation.hello()
    server, client = sim.server, sim.clients["client-1"]
    rows = server.cache.slices["client-1"]
    server.cache.logits[rows] = torch.randn(rows.stop - rows.start, 10)
    down = server.downlink(1, "client-1")
    order = np.random.default_rng(0).permutation(len(down.arrays["ids"]))
    shuffled = type(down)(down.kind, {name: array[order] for name, array in down.arrays.items()})
    aligned = client._teachers(shuffled)
    expected = server.cache.fetch("client-1")  # registration order == the client's own order
    torch.testing.assert_close(aligned, expected)


def test_uplink_logits_land_in_the_right_rows(tmp_path):
    sim = build(SimulationConfig(out=str(tmp_path), **QUICK))
    sim.federation.hello()
    up = sim.clients["client-2"].train_round(1, sim.server.downlink(1, "client-2"))
    order = np.random.default_rng(1).permutation(len(up.arrays["ids"]))
    shuffled = type(up)(up.kind, {k: v[order] for k, v in up.arrays.items()})
    sim.server.aggregate(1, {"client-2": shuffled})
    rows = sim.server.cache.slices["client-2"]
    np.testing.assert_allclose(sim.server.cache.logits[rows].numpy(), up.arrays["logits"])


def test_fedcache_end_to_end_learns_with_hnsw(tmp_path):
    summary = run(
        SimulationConfig(**{**QUICK, "rounds": 4, "params": {"knn": "hnsw"}}, out=str(tmp_path)), progress=False
    )
    lines = [__import__("json").loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert summary["final_accuracy"] > lines[0]["accuracy"] + 0.3
    assert summary["bytes_hello"] > 0


def test_clients_without_a_usable_hello_are_left_out_and_the_others_go_on(tmp_path, caplog):
    sim = build(SimulationConfig(out=str(tmp_path), **QUICK))
    hellos = {cid: c.hello() for cid, c in sim.clients.items()}
    hellos["client-3"].scalars["encoder"] = "mobilenet"  # not the encoder every other client used
    del hellos["client-1"]  # refused, or never came
    sim.server.start(hellos)
    assert sorted(sim.server.cache.slices) == ["client-0", "client-2"]
    assert sim.server.downlink(1, "client-1") is None and sim.server.downlink(1, "client-3") is None
    assert sim.server.downlink(1, "client-0").arrays["knowledge"].shape[1] == 10
    assert sim.server.uplink_schemas("client-3") == ()  # nothing of theirs is taken either
    assert "no hashes from ['client-1']" in caplog.text and "client-3 hashes with another encoder" in caplog.text


def test_switchable_choices_reach_the_cache(tmp_path):
    params = {
        "knn": "exact",
        "exchange": "round",
        "exclude_same_client": "true",
        "mask_unfilled": "true",
        "max_ensemble": "10",
    }
    sim = build(SimulationConfig(out=str(tmp_path), **{**QUICK, "params": params}))
    sim.federation.hello()
    cache = sim.server.cache
    assert cache.mask_unfilled and cache.neighbours.shape[1] == 10
    owner = np.empty(cache.size, np.int64)
    for number, part in enumerate(cache.slices.values()):
        owner[part] = number
    named = cache.neighbours >= 0
    assert named.any() and (owner[cache.neighbours[named]] != np.broadcast_to(owner[:, None], named.shape)[named]).all()
    assert cache.cross_client_fraction() == 1.0


def test_per_batch_exchange_sends_the_spec_bytes_in_one_message_per_batch(tmp_path):
    config = SimulationConfig(out=str(tmp_path), **{**PER_BATCH, "rounds": 1, "batch_size": 8})
    sim = build(config)
    sim.federation.hello()
    record = sim.federation.run_round(1)
    ledger = sim.federation.ledger
    for cid, client in sim.clients.items():
        n = len(client.data.train_y)
        steps = -(-n // 8)
        assert ledger.messages[(1, "up", cid, "step")] == ledger.messages[(1, "down", cid, "step")] == steps
        # every sample's C logits + id go up once and its C teacher logits + id come down once, plus one
        # codec header per message (docs/methods/fedcache.md#messages)
        for direction in ("up", "down"):
            overhead = ledger.total(direction, 1, cid) - n * (10 * 4 + 4)
            assert 0 < overhead < 200 * steps
    assert record.server["cache_rows_updated"] == sum(len(c.data.train_y) for c in sim.clients.values())
    assert bool(sim.server.cache.filled.all())


def test_per_batch_teachers_come_from_the_live_cache(tmp_path):
    # drive one client by hand: the teachers of its first batch are the neighbours' rows as they
    # stand, and the batch's logits are in the cache before the second batch asks
    sim = build(SimulationConfig(out=str(tmp_path), **{**PER_BATCH, "batch_size": 8}))
    sim.federation.hello()
    cache = sim.server.cache
    cache.update(np.arange(cache.size), np.random.default_rng(0).normal(size=(cache.size, 10)).astype(np.float32))
    steps = sim.clients["client-0"].train_steps(1)
    first = next(steps)
    rows = cache.rows("client-0", first.arrays["ids"])
    before = cache.logits.clone()
    answer = sim.server.answer(1, "client-0", first)
    named = cache.neighbours[rows[0]]
    np.testing.assert_allclose(answer.arrays["knowledge"][0], before[named].mean(0).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cache.logits[rows].numpy(), first.arrays["logits"])
    second = steps.send(answer)
    assert not np.intersect1d(second.arrays["ids"], first.arrays["ids"]).size
    client = sim.clients["client-0"]
    order = client.batch_order.numpy()  # the fixed random order (docs/methods/fedcache.md#batch-order)
    assert np.array_equal(first.arrays["ids"], client.ids[order[:8]])


def test_per_batch_run_learns(tmp_path):
    """(Over MQTT: tests/deploy/test_mqtt_deployment.py runs the same exchange through a broker.)"""
    summary = run(SimulationConfig(**{**PER_BATCH, "rounds": 3}, out=str(tmp_path)), progress=False)
    lines = [__import__("json").loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert summary["final_accuracy"] > lines[0]["accuracy"] + 0.3


def test_fixed_batch_order_is_a_random_order_even_on_label_sorted_data(monkeypatch):
    """Regression: the fixed order (docs/methods/fedcache.md#batch-order) once walked each client's
    samples in stored (sorted id) order, so on data stored by label every mini-batch held one class
    and FedCache's default run ended at a third of Local's accuracy. The authors' fixed order is a
    fixed random order."""
    from label_order import label_ordered

    import edgefd.runtime.build as run_build

    original = run_build.load_dataset
    monkeypatch.setattr(
        run_build, "load_dataset", lambda name, root=None, **kw: label_ordered(original(name, root=root, **kw))
    )
    sim = build(SimulationConfig(**{**PER_BATCH, "clients": 2, "partition": "iid"}))
    client = sim.clients["client-0"]
    labels_of = dict(zip(client.ids.tolist(), client.data.train_y.tolist()))
    stored = [labels_of[i] for i in sorted(labels_of)]  # labels in stored (id) order: sorted
    assert stored == sorted(stored) and len(set(stored)) == 10

    def first_batches(round: int) -> list[np.ndarray]:
        steps, ids, answer = client.train_steps(round), [], None
        try:
            while len(ids) < 3:
                request = steps.send(answer)
                ids.append(request.arrays["ids"].copy())
                n = len(request.arrays["ids"])
                answer = type(request)("fedcache.knowledge", {
                    "ids": request.arrays["ids"], "knowledge": np.zeros((n, 10), np.float32)
                })  # fmt: skip
        finally:
            steps.close()
        return ids

    batches = first_batches(1)
    for ids in batches:  # 32 of ~700 label-sorted samples: one class if the stored order were walked
        assert len({labels_of[i] for i in ids.tolist()}) >= 3
    for again, ids in zip(first_batches(2), batches):  # and the order is kept from round to round
        np.testing.assert_array_equal(again, ids)


# ------------------------------------------------------------------------------------------------
# What the server accepts (edgefd.algorithms.schema): every honest message, and no tampered one


def altered(payload: Payload, **arrays) -> Payload:
    """``payload`` with these arrays replaced (None: removed)."""
    merged = {**payload.arrays, **arrays}
    kept = {name: array for name, array in merged.items() if array is not None}
    return Payload(payload.kind, kept, payload.scalars)


@pytest.fixture(scope="module")
def honest(tmp_path_factory):
    """client-1's hello and round-1 uplink (exchange=round), its first step request (exchange=batch),
    the server that checks each, and an id client-1 does not own (client-0's)."""
    by_round = build(SimulationConfig(out=str(tmp_path_factory.mktemp("round")), **QUICK))
    by_round.federation.hello()  # every hello passes the loop's check (fedcache's start needs all of them)
    client = by_round.clients["client-1"]
    uplink = as_sent.train_round(client, 1, by_round.federation.downlink(1, "client-1"))
    by_batch = build(SimulationConfig(out=str(tmp_path_factory.mktemp("batch")), **PER_BATCH))
    by_batch.federation.hello()
    request = as_sent.first_step_request(by_batch.clients["client-1"], 1)
    messages = {
        "hello": (lambda p: by_round.server.check_hello("client-1", p), as_sent.hello(client)),
        "uplink": (lambda p: by_round.server.check_uplink(1, "client-1", p), uplink),
        "request": (lambda p: by_batch.server.check_request(1, "client-1", p), request),
    }
    return messages, int(by_round.server.cache.sample_ids("client-0")[0]), by_round.server


def foreign(ids, other):
    ids = ids.copy()
    ids[-1] = other
    return ids


@pytest.mark.parametrize(
    "message, tamper, reason",
    [
        ("hello", lambda p, other: p, None),
        ("hello", lambda p, other: altered(p, hashes=None), "missing-array"),
        ("hello", lambda p, other: altered(p, labels=np.full_like(p.arrays["labels"], 10)), "out-of-range"),
        ("hello", lambda p, other: altered(p, labels=p.arrays["labels"].astype(np.int64)), "dtype"),
        ("hello", lambda p, other: altered(p, hashes=p.arrays["hashes"][:, :-1]), "shape"),  # pixels: 64 wide
        ("hello", lambda p, other: altered(p, ids=p.arrays["ids"][:-1]), "shape"),  # a label without an id
        ("hello", lambda p, other: altered(p, ids=np.zeros_like(p.arrays["ids"])), "repeated-ids"),
        ("uplink", lambda p, other: p, None),
        ("uplink", lambda p, other: altered(p, ids=foreign(p.arrays["ids"], other)), "foreign-ids"),
        ("uplink", lambda p, other: altered(p, logits=p.arrays["logits"] * 0 + 1e30), "out-of-range"),
        ("uplink", lambda p, other: altered(p, logits=p.arrays["logits"] * 0 + 7e4), "out-of-range"),  # > fp16
        ("uplink", lambda p, other: altered(p, logits=p.arrays["logits"][:, :-1]), "shape"),
        ("uplink", lambda p, other: altered(p, ids=p.arrays["ids"][1:], logits=p.arrays["logits"][1:]), "shape"),
        ("uplink", lambda p, other: altered(p, ids=p.arrays["ids"].astype(np.int64)), "dtype"),
        ("uplink", lambda p, other: altered(p, logits=None), "missing-array"),
        ("request", lambda p, other: p, None),
        ("request", lambda p, other: altered(p, ids=foreign(p.arrays["ids"], other)), "foreign-ids"),
        ("request", lambda p, other: altered(p, logits=p.arrays["logits"] * 0 - 1e30), "out-of-range"),
        ("request", lambda p, other: altered(p, logits=p.arrays["logits"][1:]), "shape"),  # a row short
        ("request", lambda p, other: altered(p, logits=p.arrays["logits"].astype(np.float64)), "dtype"),
        (
            "request",
            lambda p, other: altered(p, ids=np.repeat(p.arrays["ids"][:1], len(p.arrays["ids"]))),
            "repeated-ids",
        ),
        ("request", lambda p, other: altered(p, ids=p.arrays["ids"][1:], logits=p.arrays["logits"][1:]), None),
    ],
)
def test_the_server_accepts_honest_messages_and_refuses_tampered_ones(honest, message, tamper, reason):
    messages, other, _ = honest
    check, payload = messages[message]
    tampered = tamper(payload, other)
    if reason is None:
        check(tampered)
    else:
        with pytest.raises(UplinkRejected) as refused:
            check(tampered)
        assert refused.value.reason == reason


def test_nothing_is_accepted_that_the_client_does_not_send(honest):
    server = honest[2]  # exchange=round: no step requests
    assert server.request_schemas("client-1") == () and server.uplink_schemas("client-1")
    assert server.uplink_schemas("client-9") == ()  # no hello, no uplink


def test_fedcache_clients_let_go_of_what_they_share_when_an_exchange_is_done():
    """The simulated clients of a process share one hash encoder for their hellos; the method's
    hook (called by whatever runs clients, after each exchange) lets it go."""
    from edgefd.algorithms.fedcache.method import FedCacheClient
    from edgefd.algorithms.toolkit import shared_by_clients

    builds = []
    shared = shared_by_clients(lambda: builds.append(1) or object())  # like the mobilenet encoder
    assert shared() is shared()  # built once for every client
    FedCacheClient.done_sharing()
    shared()
    assert len(builds) == 2
