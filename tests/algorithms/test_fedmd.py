"""FedMD (FedZKT's public-data baseline, docs/methods/fedmd.md): the shared alignment subset, the
consensus by hand, the digest step, the wire bytes from the codec layout, and tiny digits runs
(digits as its own public set keeps them fast; the recipes pair fmnist with mnist5k)."""

import functools
import json
import math

import as_sent
import numpy as np
import pytest
import torch

from edgefd.algorithms import fedmd
from edgefd.algorithms.fedmd import CONSENSUS, KIND, LOGITS, FedMDParams, alignment_indices
from edgefd.algorithms.params import make_params
from edgefd.algorithms.schema import UplinkRejected
from edgefd.data import load_dataset
from edgefd.data.dataset import Dataset
from edgefd.protocol import Payload
from edgefd.protocol.codec import HEADER_SIZE
from edgefd.runtime.build import build
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.transport import DOWN, UP
from edgefd.simulate import run

PUBLIC = {"public_dataset": "digits", "alignment_size": 200}
QUICK = dict(
    dataset="digits",
    clients=3,
    rounds=2,
    models="zkt_tiny_b,zkt_tiny_d,zkt_tiny_e",
    lr=0.05,
    momentum=0.0,
    weight_decay=0.0,
    seed=0,
    threads=1,
)


def simulation(params=None, **settings):
    return build(SimulationConfig(algo="fedmd", params={**PUBLIC, **(params or {})}, **{**QUICK, **settings}))


def test_alignment_subset_is_shared_distinct_and_capped():
    a, b = alignment_indices(123, 1797, 200), alignment_indices(123, 1797, 200)
    assert torch.equal(a, b) and len(torch.unique(a)) == 200 and int(a.max()) < 1797
    assert not torch.equal(a, alignment_indices(124, 1797, 200))
    assert len(alignment_indices(1, 50, 200)) == 50


def test_params_validate():
    p = make_params(FedMDParams, {"alignment_size": "10", "public_data_root": "none"})
    assert p.alignment_size == 10 and p.public_data_root is None
    for bad in ({"alignment_size": "0"}, {"public_split": "test"}, {"digest_epochs": "-1"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            make_params(FedMDParams, bad)


def test_public_data_of_another_shape_is_a_clear_error(monkeypatch):
    real = load_dataset("digits")
    wide = Dataset(
        "wide",
        torch.zeros(4, 1, 28, 28),
        torch.zeros(4, dtype=torch.int64),
        torch.zeros(1, 1, 28, 28),
        torch.zeros(1, dtype=torch.int64),
        10,
        (1, 28, 28),
        (0.0,),
        (1.0,),
    )
    monkeypatch.setattr(fedmd, "load_dataset", lambda name, root=None: wide if name == "wide" else real)
    with pytest.raises(ValueError, match=r"public dataset 'wide' has samples of shape \(1, 28, 28\)"):
        simulation({"public_dataset": "wide", "resize_public": "false"})


def test_public_images_of_another_size_are_resized_to_the_private_size():
    """The default public set (mnist5k, 28x28) serves the bundled 8x8 digits."""
    sim = simulation({"public_dataset": "mnist5k", "alignment_size": 50})
    client = next(iter(sim.clients.values()))
    assert tuple(client.public_x.shape[1:]) == (1, 8, 8)
    assert torch.isfinite(client.public_x).all()
    # standardised again after the resize (antialiasing left mnist5k at 8x8 with std 0.68)
    assert abs(float(client.public_x.mean())) < 1e-4 and abs(float(client.public_x.std()) - 1.0) < 1e-4
    pool = fedmd.public_pool(fedmd.FedMDParams())[0]
    assert len(client.public_x) == len(pool)


def test_consensus_is_the_mean_of_the_received_logits_as_fedmd_has_it():
    sim = simulation({"aggregator": "mean"})
    server = sim.server
    tables = {f"client-{k}": np.random.default_rng(k).normal(size=(200, 10)).astype(np.float32) for k in range(3)}
    uplinks = {cid: Payload(KIND, {LOGITS: t}) for cid, t in tables.items()}
    assert server.aggregate(1, uplinks) == {"devices": 3.0}
    expected = np.mean([t.astype(np.float64) for t in tables.values()], axis=0)
    np.testing.assert_allclose(server.consensus, expected, rtol=1e-6, atol=1e-7)
    down = server.downlink(2, "client-0")
    assert down.scalars["consensus_seed"] == server.round_seed(1) != down.scalars["alignment_seed"]
    with pytest.raises(ValueError, match="shape"):
        server.aggregate(2, {"client-0": Payload(KIND, {LOGITS: np.zeros((5, 10), np.float32)})})


def test_digest_moves_the_logits_towards_the_consensus():
    sim = simulation({"digest_epochs": 3})
    client = sim.clients["client-2"]
    client.context.train.lr = 0.5  # MAE's gradient is sign / (B C): small steps need a large lr
    indices = alignment_indices(7, len(client.public_x), 200)
    consensus = 5.0 * torch.nn.functional.one_hot(client.public_y[indices], 10).float()  # a learnable target

    def mae():
        client.model.eval()
        with torch.no_grad():
            return torch.nn.functional.l1_loss(client.model(client.public_x[indices]), consensus).item()

    before = mae()
    client.digest(indices, consensus)
    assert mae() < before - 0.1


def test_the_digest_trains_at_batch_256_and_the_revisit_at_the_runs_batch(monkeypatch):
    sizes = []
    real = fedmd.train_epochs

    def spy(model, x, loss_fn, optimizer, config, *args, **kwargs):
        sizes.append((len(x), config.batch_size))
        return real(model, x, loss_fn, optimizer, config, *args, **kwargs)

    monkeypatch.setattr(fedmd, "train_epochs", spy)
    for params, digest_batch in (({}, 256), ({"digest_batch_size": "none"}, 32)):
        sizes.clear()
        sim = simulation(params, batch_size=32)
        sim.federation.run()
        private = {len(client.data.train_x) for client in sim.clients.values()}
        assert {batch for n, batch in sizes if n == 200} == {digest_batch}  # the 200-sample alignment set
        assert {batch for n, batch in sizes if n in private} == {32}
    with pytest.raises(ValueError, match="digest_batch_size"):
        make_params(FedMDParams, {"digest_batch_size": "0"})


def test_bytes_per_round_are_the_logit_tables_plus_headers():
    sim = simulation()
    sim.federation.hello()
    sim.federation.run_round(1)
    sim.federation.run_round(2)
    ledger = sim.federation.ledger
    table = 20 + len(LOGITS) + 8 + 200 * 10 * 4  # entry, name, 2 dims, N_a x C float32
    seed = 2 + len("alignment_seed") + 8
    for cid in sim.clients:
        assert ledger.total(UP, 1, cid) == HEADER_SIZE + len(KIND) + table
        assert ledger.total(UP, 2, cid) == HEADER_SIZE + len(KIND) + table
        assert ledger.total(DOWN, 1, cid) == HEADER_SIZE + len(KIND) + seed
        assert ledger.total(DOWN, 2, cid) == (
            HEADER_SIZE + len(KIND) + seed + 2 + len("consensus_seed") + 8 + 20 + len(CONSENSUS) + 8 + 200 * 10 * 4
        )


def test_end_to_end_tiny_run_with_partial_participation(tmp_path):
    summary = run(
        SimulationConfig(algo="fedmd", params=PUBLIC, out=str(tmp_path), **{**QUICK, "clients": 4}, participation=0.5),
        progress=False,
    )
    assert math.isfinite(summary["final_accuracy"]) and 0 <= summary["final_accuracy"] <= 1
    lines = [json.loads(t) for t in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["server"]["devices"] == 2.0


def test_public_label_pretraining_is_on_by_default_when_the_class_counts_match(monkeypatch):
    assert simulation().clients["client-0"].pretrain_epochs == fedmd.AUTO_PRETRAIN_EPOCHS  # digits: 10 and 10
    assert simulation({"pretrain_epochs": "0"}).clients["client-0"].pretrained  # 0: none
    real = load_dataset("digits")
    five = Dataset(
        "five",
        real.train_x[:20],
        real.train_y[:20] % 5,
        real.test_x[:5],
        real.test_y[:5] % 5,
        5,
        real.input_shape,
        (0.0,),
        (1.0,),
    )
    monkeypatch.setattr(fedmd, "load_dataset", lambda name, root=None: five if name == "five" else real)
    assert simulation({"public_dataset": "five", "alignment_size": 10}).clients["client-0"].pretrained  # cannot run
    with pytest.raises(ValueError, match="pretrain_epochs needs the public dataset to have 10 classes"):
        simulation({"public_dataset": "five", "alignment_size": 10, "pretrain_epochs": "1"})


def test_public_label_pretraining_runs_once_when_asked():
    client = simulation({"pretrain_epochs": 1}).clients["client-0"]
    calls = []
    original = client._train
    client._train = lambda x, loss_fn, epochs, order=None: calls.append(len(x)) or original(x, loss_fn, epochs, order)
    down = Payload(KIND, {}, {"alignment_seed": 3})
    client.train_round(1, down)
    client.train_round(2, down)
    # round 1: public pretraining on the whole pool (1,797 digits), then private; round 2: private only
    assert calls == [1797, len(client.data.train_x), len(client.data.train_x)]


CAPPED = (("alignment_size", 5000),)  # more than the 1,797 digits: the subset is the whole pool


@functools.cache
def honest_uplink(params=()):
    """The server after round 1 (all of whose uplinks fit) and client-0's honest uplink of round 2."""
    sim = simulation(dict(params))
    sim.federation.hello()
    assert sim.federation.run_round(1).rejected == {}
    return sim.server, as_sent.train_round(sim.clients["client-0"], 2, sim.federation.downlink(2, "client-0"))


@pytest.mark.parametrize(
    ("params", "change", "reason"),
    [
        ((), lambda logits: {LOGITS: logits[:-1]}, "shape"),  # another subset's size
        ((), lambda logits: {LOGITS: logits[:, :-1]}, "shape"),
        ((), lambda logits: {LOGITS: np.zeros((1, 1), np.float32)}, "shape"),  # would broadcast
        (CAPPED, lambda logits: {LOGITS: np.zeros((5000, 10), np.float32)}, "shape"),
        ((), lambda logits: {LOGITS: logits.astype(np.float64)}, "dtype"),
        ((), lambda logits: {LOGITS: np.full_like(logits, 1e30)}, "out-of-range"),
        ((), lambda logits: {}, "missing-array"),
        ((), lambda logits: {LOGITS: logits, CONSENSUS: logits}, "unexpected-array"),
    ],
)
def test_server_accepts_honest_uplinks_and_refuses_tampered_ones(params, change, reason):
    server, payload = honest_uplink(params)
    expected = (min(dict(params).get("alignment_size", PUBLIC["alignment_size"]), 1797), 10)
    assert payload.arrays[LOGITS].shape == expected
    server.check_uplink(2, "client-0", payload)
    with pytest.raises(UplinkRejected) as refused:
        server.check_uplink(2, "client-0", Payload(KIND, change(payload.arrays[LOGITS])))
    assert refused.value.reason == reason


def test_a_robust_consensus_holds_against_one_poisoned_table_and_needs_three_devices(caplog):
    """aggregator=median: the consensus is the coordinate-wise median, so one device's table (here
    1,000 times the others) moves no entry past the honest ones; with two devices it cannot tell
    which is honest and keeps the last consensus, its subset with it (below_quorum 1)."""
    server = simulation().server  # the median is the default
    rng = np.random.default_rng(0)
    honest = [rng.normal(size=(200, 10)).astype(np.float32) for _ in range(2)]
    tables = {"client-0": 1000 * np.ones((200, 10), np.float32), "client-1": honest[0], "client-2": honest[1]}
    uplinks = {cid: Payload(KIND, {LOGITS: t}) for cid, t in tables.items()}
    assert server.aggregate(1, uplinks) == {"devices": 3.0, "below_quorum": 0.0}
    np.testing.assert_allclose(server.consensus, np.maximum(honest[0], honest[1]), rtol=1e-6)
    assert server.consensus_seed == server.round_seed(1)
    kept = server.consensus.copy()
    del uplinks["client-2"]
    assert server.aggregate(2, uplinks) == {"devices": 2.0, "below_quorum": 1.0}
    np.testing.assert_array_equal(server.consensus, kept)
    assert server.consensus_seed == server.round_seed(1)
    assert "aggregator=median needs 3 uplinks, got 2" in caplog.text
    with pytest.raises(ValueError, match="trim"):
        FedMDParams(aggregator="trimmed", trim=0.5)
