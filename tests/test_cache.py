"""FedCache's knowledge cache: relations (exact and HNSW), fetch-before-update, id mapping."""

import numpy as np
import pytest
import torch

from edgefd.cache import KnowledgeCache, RelationConfig, build_relations


def clustered(n_per_class=300, classes=5, dim=16, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes * 4, dim)) * 3
    labels = np.repeat(np.arange(classes), n_per_class)
    sub = rng.integers(0, 4, size=len(labels))
    hashes = centres[labels * 4 + sub] + rng.normal(size=(len(labels), dim))
    return hashes.astype(np.float32), labels


def brute_force(hashes, labels, r):
    unit = hashes / np.linalg.norm(hashes, axis=1, keepdims=True)
    out = np.full((len(labels), r), -1)
    for g in range(len(labels)):
        same = [j for j in np.flatnonzero(labels == labels[g]) if j != g]
        sims = unit[same] @ unit[g]
        ranked = sorted(zip(-sims, same))[:r]  # descending similarity, then smaller id
        out[g, :len(ranked)] = [j for _, j in ranked]
    return out


def test_exact_relations_equal_brute_force_and_respect_labels():
    hashes, labels = clustered(60, 3)
    table = build_relations(hashes, labels, RelationConfig(neighbours=5, method="exact"))
    np.testing.assert_array_equal(table, brute_force(hashes, labels, 5))
    assert (labels[table] == labels[:, None]).all()
    assert not (table == np.arange(len(labels))[:, None]).any()


def test_hnsw_recall_against_exact_on_gaussian_data():
    # the spec's acceptance setting (K1): N = 5k, d = 64, 10 classes, recall@R >= 0.95
    rng = np.random.default_rng(1)
    hashes = rng.normal(size=(5000, 64)).astype(np.float32)
    labels = rng.integers(0, 10, size=5000)
    exact = build_relations(hashes, labels, RelationConfig(neighbours=16, method="exact"))
    approx = build_relations(hashes, labels, RelationConfig(neighbours=16, method="hnsw"))
    recall = np.mean([len(set(a) & set(e)) / 16 for a, e in zip(approx, exact)])
    assert recall >= 0.95
    assert (labels[approx] == labels[:, None]).all()
    assert not (approx == np.arange(5000)[:, None]).any()


def test_small_classes_use_every_other_member_and_pad_with_minus_one():
    hashes, _ = clustered(10, 1, dim=8)
    labels = np.array([0, 0, 0, 1, 2, 2, 2, 2, 2, 2])
    for method in ("exact", "hnsw"):
        table = build_relations(hashes, labels, RelationConfig(neighbours=4, method=method))
        assert (table[:3, 2:] == -1).all() and (table[:3, :2] >= 0).all()  # class 0: R_eff = 2
        assert (table[3] == -1).all()  # a class of one has no neighbours
        assert (table[4:] >= 0).all()  # class 2: 5 others >= R


def test_duplicate_hashes_exclude_self_by_id():
    hashes = np.tile(np.array([[1.0, 2.0, 3.0]], np.float32), (6, 1))
    labels = np.zeros(6, np.int64)
    for method in ("exact", "hnsw"):
        table = build_relations(hashes, labels, RelationConfig(neighbours=3, method=method))
        assert not (table == np.arange(6)[:, None]).any()
        assert (table >= 0).all()


def test_bad_hashes_are_rejected():
    with pytest.raises(ValueError, match="NaN"):
        build_relations(np.array([[np.nan, 1.0], [1.0, 1.0]], np.float32), np.zeros(2), RelationConfig())
    with pytest.raises(ValueError, match="knn method"):
        RelationConfig(method="lsh").validate()


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


def test_rows_map_sample_ids_in_any_order_and_reject_strangers():
    cache = make_cache()
    assert cache.rows("b", np.array([1, 7, 5])).tolist() == [7, 4, 6]
    assert cache.sample_ids("b").tolist() == [7, 3, 5, 1]
    with pytest.raises(ValueError, match=r"sample ids \[99\] were never registered"):
        cache.rows("b", np.array([7, 99]))
    with pytest.raises(ValueError, match="unknown client"):
        cache.rows("zz", np.array([1]))


def test_registration_errors_name_the_client():
    cache = KnowledgeCache(num_classes=2)
    cache.register("a", np.array([0, 1]), np.array([0, 1]), np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="registered twice"):
        cache.register("a", np.array([2]), np.array([0]), np.zeros((1, 4), np.float32))
    with pytest.raises(ValueError, match="same encoder"):
        cache.register("b", np.array([2]), np.array([0]), np.zeros((1, 5), np.float32))
    with pytest.raises(ValueError, match="labels outside"):
        cache.register("c", np.array([3]), np.array([2]), np.zeros((1, 4), np.float32))
