"""FedCache's knowledge cache: fetch-before-update, id mapping, robust teachers, the bound on one
client's share of the neighbours, and samples never uploaded teaching nobody (its neighbour tables:
test_fedcache_relations.py)."""

import numpy as np
import pytest
import torch
from clustered_hashes import clustered

from edgefd.algorithms.fedcache.cache import KnowledgeCache
from edgefd.algorithms.fedcache.method import FedCacheParams
from edgefd.algorithms.fedcache.relations import RelationConfig, neighbour_candidates


def make_cache():
    cache = KnowledgeCache(num_classes=3)
    hashes, labels = clustered(4, 2, dim=4)  # 8 samples, 2 classes
    cache.register("a", np.array([10, 11, 12, 13]), labels[:4], hashes[:4])
    cache.register("b", np.array([7, 3, 5, 1]), labels[4:], hashes[4:])
    cache.build(RelationConfig(neighbours=2, method="exact"))
    return cache


def test_fetch_is_the_mean_of_neighbours_and_reads_before_the_update():
    cache = make_cache()
    assert torch.count_nonzero(cache.fetch("a")) == 0  # the cache starts at zeros (Eq. 9)
    logits = np.arange(24, dtype=np.float32).reshape(8, 3)
    cache.update(np.arange(8), logits)
    expected = logits[cache.neighbours].mean(axis=1)
    np.testing.assert_allclose(cache.fetch_all().numpy(), expected)
    np.testing.assert_allclose(cache.fetch("b").numpy(), expected[4:])


def test_rows_map_sample_ids_in_any_order():
    # strangers never get here: the server's schemas refuse another client's ids (test_fedcache_method)
    cache = make_cache()
    assert cache.rows("b", np.array([1, 7, 5])).tolist() == [7, 4, 6]
    assert cache.sample_ids("b").tolist() == [7, 3, 5, 1]


def test_registration_errors_name_the_client():
    cache = KnowledgeCache(num_classes=2)
    cache.register("a", np.array([0, 1]), np.array([0, 1]), np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="registered twice"):
        cache.register("a", np.array([2]), np.array([0]), np.zeros((1, 4), np.float32))
    with pytest.raises(ValueError, match="same encoder"):
        cache.register("b", np.array([2]), np.array([0]), np.zeros((1, 5), np.float32))
    with pytest.raises(ValueError, match="labels outside"):
        cache.register("c", np.array([3]), np.array([2]), np.zeros((1, 4), np.float32))


def test_mask_unfilled_averages_only_uploaded_neighbours():
    hashes, labels = clustered(4, 2, dim=4)
    a, b = [0, 1, 4, 5], [2, 3, 6, 7]  # both clients hold both classes

    def build(**options):
        cache = KnowledgeCache(num_classes=3, **options)
        cache.register("a", np.array(a), labels[a], hashes[a])
        cache.register("b", np.array(b), labels[b], hashes[b])
        cache.build(RelationConfig(neighbours=2, method="exact"))
        cache.update(np.arange(4), logits)  # only client a (rows 0-3) has uploaded
        return cache

    logits = np.arange(12, dtype=np.float32).reshape(4, 3) + 1
    cache = build(mask_unfilled=True)
    filled = cache.neighbours < 4
    got = cache.fetch_all().numpy()
    for row in range(8):
        named = cache.neighbours[row][filled[row]]
        expected = logits[named].mean(axis=0) if len(named) else np.zeros(3)
        np.testing.assert_allclose(got[row], expected)
    # the paper's form divides by all R, so a half-filled neighbourhood has a smaller magnitude
    plain = build()
    half = [row for row in range(8) if filled[row].sum() == 1]
    assert half and np.all(np.abs(plain.fetch_all().numpy()[half]) < np.abs(got[half]))


def test_max_ensemble_keeps_the_nearest_neighbours():
    full = make_cache()
    cache = KnowledgeCache(num_classes=3, max_ensemble=1)
    hashes, labels = clustered(4, 2, dim=4)
    cache.register("a", np.array([10, 11, 12, 13]), labels[:4], hashes[:4])
    cache.register("b", np.array([7, 3, 5, 1]), labels[4:], hashes[4:])
    cache.build(RelationConfig(neighbours=2, method="exact"))
    np.testing.assert_array_equal(cache.neighbours, full.neighbours[:, :1])
    with pytest.raises(ValueError, match="max_ensemble"):
        KnowledgeCache(num_classes=3, max_ensemble=-1)


def sequential_reference(cache, rows, logits):
    """Alg. 2 l.10-14 sample by sample: fetch the mean of the neighbours, then overwrite the row."""
    cache_logits, filled = cache.logits.clone(), cache.filled.clone()
    out = np.zeros((len(rows), cache.num_classes), np.float32)
    for t, row in enumerate(rows):
        named = [j for j in cache.neighbours[row] if j >= 0 and (filled[j] or not cache.mask_unfilled)]
        if named:
            out[t] = cache_logits[named].mean(dim=0).numpy()
        cache_logits[row] = torch.from_numpy(logits[t])
        filled[row] = True
    return out, cache_logits


@pytest.mark.parametrize("mask_unfilled", [False, True])
def test_exchange_fetches_then_updates_sample_by_sample(mask_unfilled):
    hashes, labels = clustered(12, 3, dim=6, seed=4)
    rng = np.random.default_rng(5)
    cache = KnowledgeCache(num_classes=4, mask_unfilled=mask_unfilled)
    cache.register("a", np.arange(len(labels)), labels, hashes)
    cache.build(RelationConfig(neighbours=4, method="exact"))
    cache.update(np.arange(10), rng.normal(size=(10, 4)))  # a partly filled cache
    checked_within_message = 0
    for _ in range(6):
        rows = rng.choice(len(labels), size=8, replace=False)
        logits = rng.normal(size=(8, 4)).astype(np.float32)
        expected, cache_logits = sequential_reference(cache, rows, logits)
        position = {row: t for t, row in enumerate(rows)}
        checked_within_message += sum(
            position.get(j, 99) < t for t, row in enumerate(rows) for j in cache.neighbours[row]
        )
        got = cache.exchange(rows, logits)
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(cache.logits, cache_logits)
    assert checked_within_message > 0  # some teachers did read a row written earlier in their message


def test_an_empty_exchange_answers_nothing():
    # repeated rows and misshapen logits never get here: the request schema refuses them (test_fedcache_method)
    cache = make_cache()
    assert cache.exchange(np.array([], np.int64), np.zeros((0, 3), np.float32)).shape == (0, 3)


def test_sequential_and_snapshot_differ_only_for_intra_message_neighbours():
    # docs/methods/fedcache.md#when-knowledge-is-exchanged: the faithful per-sample order changes a teacher only
    # when one of its neighbours
    # was written earlier in the same message
    hashes, labels = clustered(10, 2, dim=5, seed=6)
    cache = KnowledgeCache(num_classes=3)
    cache.register("a", np.arange(len(labels)), labels, hashes)
    cache.build(RelationConfig(neighbours=3, method="exact"))
    rng = np.random.default_rng(7)
    cache.update(np.arange(len(labels)), rng.normal(size=(len(labels), 3)))
    rows = rng.choice(len(labels), size=12, replace=False)
    snapshot = cache.fetch_all()[rows].numpy()
    sequential = cache.exchange(rows, rng.normal(size=(12, 3)).astype(np.float32)).numpy()
    earlier = np.array([np.isin(cache.neighbours[row], rows[:t]).any() for t, row in enumerate(rows)])
    assert earlier.any() and not earlier.all()
    np.testing.assert_allclose(sequential[~earlier], snapshot[~earlier], rtol=1e-6)
    assert (np.abs(sequential[earlier] - snapshot[earlier]).max(axis=1) > 1e-4).all()


def test_cross_client_fraction_counts_links_to_other_clients():
    hashes, labels = clustered(6, 2, dim=4, seed=3)
    a, b = [0, 1, 2, 6, 7, 8], [3, 4, 5, 9, 10, 11]  # both clients hold both classes
    cache = KnowledgeCache(num_classes=2)
    cache.register("a", np.array(a), labels[a], hashes[a])
    cache.register("b", np.array(b), labels[b], hashes[b])
    cache.build(RelationConfig(neighbours=3, method="exact"))  # rows 0-5 are a's, 6-11 b's
    named = cache.neighbours >= 0
    other = (cache.neighbours // 6 != np.arange(12)[:, None] // 6) & named
    assert cache.cross_client_fraction() == pytest.approx(other.sum() / named.sum())
    assert 0 < cache.cross_client_fraction() < 1


def test_fedcache_keeps_hnsw_tables_by_default_and_never_exact_ones(tmp_path, monkeypatch):
    from edgefd.algorithms.fedcache import FedCacheParams, relation_store

    monkeypatch.setenv("EDGEFD_CACHE_DIR", str(tmp_path))
    assert relation_store(FedCacheParams()).folder == tmp_path / "relations"
    assert relation_store(FedCacheParams(knn="exact")) is None
    assert relation_store(FedCacheParams(relation_cache="off")) is None
    assert relation_store(FedCacheParams(knn="exact", relation_cache=str(tmp_path / "x"))).folder == tmp_path / "x"


@pytest.mark.parametrize("aggregator", ["median", "trimmed"])
def test_a_robust_teacher_is_not_dragged_by_one_clients_extreme_logits(aggregator):
    """Five clients' samples of one class; client-4 writes logits of 9,999 on a wrong class for its
    own samples. The mean teacher (Eq. 17) follows them; the median and trimmed mean do not, in the
    fetch and in the sequential exchange alike. (Up to 3 of a sample's 8 neighbours are client-4's:
    the trimmed mean drops 3 at each end with trim 0.4, the default 0.2 drops 1.)"""
    hashes, labels = clustered(20, 1, seed=3)
    caches = {}
    for name in ("mean", aggregator):
        cache = KnowledgeCache(2, aggregator=name, trim=0.4)
        for k in range(5):
            part = slice(20 * k // 5, 20 * (k + 1) // 5)
            cache.register(f"client-{k}", np.arange(4), labels[part], hashes[part])
        cache.build(RelationConfig(neighbours=8, method="exact"))
        honest = np.tile([[4.0, -4.0]], (16, 1)).astype(np.float32)
        cache.update(np.arange(16), honest)
        cache.update(np.arange(16, 20), np.tile([[0.0, 9999.0]], (4, 1)).astype(np.float32))
        caches[name] = cache
    assert (caches["mean"].fetch_all()[:, 1] > 100).any()  # a poisoned neighbour moves a mean teacher
    robust = caches[aggregator].fetch_all()
    assert torch.allclose(robust, torch.tensor([4.0, -4.0]).expand_as(robust))  # at most 4 of 8 neighbours
    teachers = caches[aggregator].exchange(np.array([0, 1]), np.array([[4.0, -4.0]] * 2, np.float32))
    assert torch.allclose(teachers, torch.tensor([4.0, -4.0]).expand_as(teachers))
    with pytest.raises(ValueError, match="aggregator"):
        KnowledgeCache(2, aggregator="mode")


def test_a_client_registering_three_times_the_others_samples_is_the_neighbour_of_no_more_than_twice():
    """The cache's weight: a liar registering 60 samples beside two clients of 20 (all of one class,
    its hashes where the honest ones are) has only its first 40 in anyone's neighbours."""
    assert neighbour_candidates([20, 20, 40], 2.0) is None  # within the bound: every row, as before
    assert neighbour_candidates([20, 20, 60], 0) is None  # weight_cap=0: the paper's cache
    hashes, _ = clustered(100, 1, dim=8)

    def built(**options):
        cache = KnowledgeCache(num_classes=2, **options)
        for client, rows in (("a", slice(0, 20)), ("b", slice(20, 40)), ("liar", slice(40, 100))):
            part = hashes[rows]
            cache.register(client, np.arange(len(part)) + rows.start, np.zeros(len(part)), part)
        cache.build(RelationConfig(neighbours=8, method="exact"))
        return cache

    cache = built()
    assert cache.held_back == 20
    assert cache.neighbours.max() < 80  # the liar's rows 40..79 at most; 80..99 are no sample's neighbour
    assert (cache.neighbours[80:] >= 0).all()  # but have teachers of their own
    unbounded = built(weight_cap=0)
    assert unbounded.held_back == 0 and unbounded.neighbours.max() >= 80


def test_a_sample_its_client_never_uploaded_teaches_nobody_once_that_client_has_trained():
    """One class of 8: client a's rows 0-3, the liar's real rows 4-5 and rows 6-7 its hello declared
    and it never uploads. Every row names the 7 others (R = 7)."""
    hashes, _ = clustered(8, 1, dim=4)
    cache = KnowledgeCache(num_classes=2)
    cache.register("a", np.arange(4), np.zeros(4), hashes[:4])
    cache.register("liar", np.arange(4), np.zeros(4), hashes[4:])
    cache.build(RelationConfig(neighbours=7, method="exact"))
    cache.update(np.arange(4), np.ones((4, 2), np.float32))  # a's logits: 1
    cache.update(np.array([4, 5]), np.full((2, 2), 4.0, np.float32))  # the liar's real ones: 4
    assert cache.fetch("a")[0].tolist() == pytest.approx([11 / 7] * 2)  # Eq. 9: rows 6, 7 count as zeros

    assert cache.close_round(["a", "liar"]) == {"liar": 2}
    assert cache.silent == 2
    assert cache.fetch("a")[0].tolist() == pytest.approx([11 / 5] * 2)  # 3 x 1 + 2 x 4 over the 5 uploaded
    teachers = cache.exchange(np.array([0]), np.full((1, 2), 9.0, np.float32))
    assert teachers[0].tolist() == pytest.approx([11 / 5] * 2)  # a step's teacher as well
    cache.update(np.array([6]), np.full((1, 2), 2.0, np.float32))  # uploaded at last: it teaches from now on
    assert cache.fetch("a")[1].tolist() == pytest.approx([(9 + 1 + 1 + 4 + 4 + 2) / 6] * 2)
    assert cache.close_round(["a", "liar"]) == {"liar": 1}


def test_before_its_clients_first_round_a_row_is_the_zero_row_of_eq_9():
    """A client that has not trained yet has uploaded nothing: its rows count as zeros (the paper's),
    and a round of the others' leaves them so."""
    hashes, _ = clustered(4, 1, dim=4)
    cache = KnowledgeCache(num_classes=2)
    cache.register("a", np.arange(2), np.zeros(2), hashes[:2])
    cache.register("b", np.arange(2), np.zeros(2), hashes[2:])
    cache.build(RelationConfig(neighbours=3, method="exact"))
    cache.update(np.arange(2), np.full((2, 2), 3.0, np.float32))
    assert cache.close_round(["a"]) == {} and cache.silent == 0
    assert cache.fetch("a")[0].tolist() == pytest.approx([1.0, 1.0])  # (3 + 0 + 0) / 3


def three_clients_of_one_class(clip: float, aggregator: str = "median") -> KnowledgeCache:
    """Three clients of 6 samples of one class, each sample related to all 17 others."""
    hashes, labels = clustered(18, 1, seed=5)
    cache = KnowledgeCache(2, aggregator=aggregator, clip=clip)
    for k in range(3):
        cache.register(f"client-{k}", np.arange(6), labels[6 * k : 6 * k + 6], hashes[6 * k : 6 * k + 6])
    cache.build(RelationConfig(neighbours=17, method="exact"))
    return cache


@pytest.mark.parametrize("aggregator", ["mean", "median"])
def test_a_clients_rows_teach_at_most_clip_times_the_others_typical_norm(aggregator):
    """Client-0 writes logits at the schemas' bound (9,990, the wrong class); the two others write
    honest rows of norm 5 and 10. Its rows then teach with norm 3 x 7.5 (the median of the others'
    typical norms), in the fetch and in the sequential exchange alike, and unclipped (clip=0) they
    would dominate every teacher."""
    poisoned = np.tile([[-9990.0, 9990.0]], (6, 1)).astype(np.float32)
    caches = {}
    for clip in (0.0, 3.0):
        cache = caches[clip] = three_clients_of_one_class(clip, aggregator)
        cache.update(np.arange(6, 12), np.tile([[3.0, -4.0]], (6, 1)).astype(np.float32))  # norm 5
        cache.update(np.arange(12, 18), np.tile([[6.0, -8.0]], (6, 1)).astype(np.float32))  # norm 10
        cache.update(np.arange(6), poisoned)
    assert caches[3.0].bounds()[0] == 22.5  # from the other two alone: client-0 cannot raise it
    bounded = caches[3.0].teaching_logits()
    assert torch.allclose(bounded[:6].norm(dim=1), torch.full((6,), 22.5))  # scaled down, same direction
    assert torch.equal(bounded[6:], caches[3.0].logits[6:])  # honest rows within their bounds: as uploaded
    assert caches[3.0].clipped_rows() == 6
    if aggregator == "mean":  # 6 of a sample's 17 neighbours are client-0's: they pull a mean teacher
        assert caches[0.0].fetch_all()[6:, 1].min() > 3000
        assert caches[3.0].fetch_all()[6:, 1].max() < 10
    teachers = caches[3.0].exchange(np.array([0, 1]), poisoned[:2])
    assert teachers.abs().max() < 30  # a teacher of bounded rows, the sender's own included
    with pytest.raises(ValueError, match="clip"):
        FedCacheParams(clip=0.5)


def test_a_clients_rows_teach_nothing_until_another_client_has_uploaded():
    """The bound comes from the others alone; before any other client has uploaded there is none,
    and the first client's rows teach as the zero rows of Eq. 9 (as every row not yet uploaded)."""
    cache = three_clients_of_one_class(3.0)
    cache.update(np.arange(6), np.tile([[500.0, 0.0]], (6, 1)).astype(np.float32))
    assert np.isnan(cache.bounds()[0]) and torch.count_nonzero(cache.teaching_logits()) == 0
    cache.update(np.arange(6, 8), np.tile([[1.0, 0.0]], (2, 1)).astype(np.float32))
    assert cache.bounds()[0] == 3.0 and torch.allclose(cache.teaching_logits()[0], torch.tensor([3.0, 0.0]))


def test_an_honest_clients_rows_within_the_bound_teach_as_uploaded():
    """Rows of similar norms (within 3 times the others' median) bind nothing: the teachers are
    those of clip=0 exactly."""
    rng = np.random.default_rng(0)
    directions = rng.normal(size=(18, 2))
    logits = (directions / np.linalg.norm(directions, axis=1, keepdims=True) * rng.uniform(1, 2, (18, 1))).astype(
        np.float32
    )
    caches = [three_clients_of_one_class(clip) for clip in (0.0, 3.0)]
    for cache in caches:
        cache.update(np.arange(18), logits)
    assert caches[1].clipped_rows() == 0
    assert torch.equal(caches[0].fetch_all(), caches[1].fetch_all())


def test_a_cache_restored_without_its_typical_norms_measures_them_again():
    """A server checkpoint of an older checkout holds no `typical_norm`: the bounds are measured
    again from the uploaded rows, the same as the live cache's."""
    cache = three_clients_of_one_class(3.0)
    cache.update(np.arange(18), np.tile([[3.0, -4.0]], (18, 1)).astype(np.float32) * np.repeat([1, 2, 4], 6)[:, None])
    expected = cache.bounds()
    del cache.typical_norm
    np.testing.assert_array_equal(cache.bounds(), expected)
    assert expected.tolist() == [3 * 15.0, 3 * 12.5, 3 * 7.5]
