"""FedCache's neighbour tables: exact and HNSW search within a label, self and same-owner
exclusion, rows that are nobody's neighbour, and the tables stored on disk."""

import numpy as np
import pytest
from clustered_hashes import clustered

from edgefd.algorithms.fedcache.relations import RelationConfig, RelationStore, build_relations


def brute_force(hashes, labels, r):
    unit = hashes / np.linalg.norm(hashes, axis=1, keepdims=True)
    out = np.full((len(labels), r), -1)
    for g in range(len(labels)):
        same = [j for j in np.flatnonzero(labels == labels[g]) if j != g]
        sims = unit[same] @ unit[g]
        ranked = sorted(zip(-sims, same))[:r]  # descending similarity, then smaller id
        out[g, : len(ranked)] = [j for _, j in ranked]
    return out


def test_exact_relations_equal_brute_force_and_respect_labels():
    hashes, labels = clustered(60, 3)
    table = build_relations(hashes, labels, RelationConfig(neighbours=5, method="exact"))
    np.testing.assert_array_equal(table, brute_force(hashes, labels, 5))
    assert (labels[table] == labels[:, None]).all()
    assert not (table == np.arange(len(labels))[:, None]).any()


def test_hnsw_recall_against_exact_on_gaussian_data():
    # acceptance setting of the relation search: N = 5k, d = 64, 10 classes, recall@R >= 0.95
    rng = np.random.default_rng(1)
    hashes = rng.normal(size=(5000, 64)).astype(np.float32)
    labels = rng.integers(0, 10, size=5000)
    exact = build_relations(hashes, labels, RelationConfig(neighbours=16, method="exact"))
    approx = build_relations(hashes, labels, RelationConfig(neighbours=16, method="hnsw"))
    recall = np.mean([len(set(a) & set(e)) / 16 for a, e in zip(approx, exact)])
    assert recall >= 0.95
    assert (labels[approx] == labels[:, None]).all()
    assert not (approx == np.arange(5000)[:, None]).any()


def test_each_hnsw_index_is_built_by_one_thread_so_a_fresh_table_is_the_same_every_time(monkeypatch):
    """hnswlib inserting with several threads makes a graph that depends on their timing (two fresh
    2-thread builds of one Fashion-MNIST class of 6,000 hashes differed in 2 of 100,000 neighbours):
    `threads` runs classes at once instead, each index built by one thread."""
    import hnswlib

    threads_at_insert = []

    class Recording(hnswlib.Index):
        def add_items(self, *args, **kwargs):
            threads_at_insert.append(self.num_threads)
            return super().add_items(*args, **kwargs)

    monkeypatch.setattr(hnswlib, "Index", Recording)
    hashes, labels = clustered(200, 4)
    tables = [build_relations(hashes, labels, RelationConfig(neighbours=8, threads=t)) for t in (2, 1, 3)]
    assert threads_at_insert == [1] * 12
    for table in tables[1:]:
        np.testing.assert_array_equal(table, tables[0])


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


@pytest.mark.parametrize("method", ["exact", "hnsw"])
def test_exclude_same_owner_relates_only_to_other_owners(method):
    hashes, labels = clustered(12, 2, dim=8)  # 24 samples, 2 classes of 12
    owners = np.arange(24) % 3  # three owners, 4 samples of each class each
    config = RelationConfig(neighbours=5, method=method, exclude_same_owner=True)
    table = build_relations(hashes, labels, config, owners)
    assert (table >= 0).all()  # 8 members of other owners per class: R = 5 fits
    assert (owners[table] != owners[:, None]).all()
    assert (labels[table] == labels[:, None]).all()
    # without the option the same data does relate samples of one owner (the paper's Eq. 10)
    plain = build_relations(hashes, labels, RelationConfig(neighbours=5, method=method), owners)
    assert (owners[plain] == owners[:, None]).any()


def test_exclude_same_owner_leaves_minus_one_where_too_few_others():
    hashes, labels = clustered(4, 1, dim=4)
    owners = np.array([0, 0, 0, 1])
    table = build_relations(
        hashes, labels, RelationConfig(neighbours=2, method="exact", exclude_same_owner=True), owners
    )
    assert table[:3, 0].tolist() == [3, 3, 3] and (table[:3, 1] == -1).all()
    assert set(table[3].tolist()) <= {0, 1, 2} and table[3, 0] != table[3, 1]
    with pytest.raises(ValueError, match="one owner per sample"):
        build_relations(hashes, labels, RelationConfig(neighbours=2, exclude_same_owner=True))


def test_missing_hnswlib_names_the_extra_and_the_exact_alternative(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "hnswlib", None)  # as on a device without the extra
    hashes, labels = clustered(5, 2, dim=4)
    with pytest.raises(ModuleNotFoundError, match=r"edgefd\[server\].*knn=exact"):
        build_relations(hashes, labels, RelationConfig(neighbours=2, method="hnsw"))


def test_relations_from_row_blocks_equal_relations_from_the_stacked_matrix():
    rng = np.random.default_rng(3)
    hashes = rng.standard_normal((90, 6)).astype(np.float32)
    labels = rng.integers(0, 3, 90)
    config = RelationConfig(neighbours=4, method="exact")
    blocks = [hashes[:25], hashes[25:26], hashes[26:90]]
    np.testing.assert_array_equal(build_relations(blocks, labels, config), build_relations(hashes, labels, config))
    with pytest.raises(ValueError, match="do not match"):
        build_relations([hashes[:10], hashes[10:20, :5]], labels[:20], config)


def test_a_relation_store_builds_once_and_rebuilds_when_anything_it_depends_on_changes(tmp_path, monkeypatch):
    hashes, labels = clustered(n_per_class=60, classes=3)
    parts = [hashes[:100], hashes[100:]]  # two clients' blocks
    config = RelationConfig(neighbours=4, method="hnsw", m=8, ef_construction=50, ef=50, threads=1)
    store = RelationStore(tmp_path / "relations")
    first = store.relations(parts, labels, config, None)
    assert not store.loaded and np.array_equal(first, build_relations(parts, labels, config))
    assert len(list((tmp_path / "relations").glob("*.npy"))) == 1

    searches = []
    import edgefd.algorithms.fedcache.relations as relations_module

    original = relations_module.build_relations
    monkeypatch.setattr(relations_module, "build_relations", lambda *a: searches.append(1) or original(*a))
    again = store.relations(parts, labels, RelationConfig(**{**config.__dict__, "threads": 2}), None)
    assert store.loaded and not searches and np.array_equal(again, first) and again.dtype == np.int64

    changed_hash = [parts[0].copy(), parts[1]]
    changed_hash[0][5, 0] += 1.0
    store.relations(changed_hash, labels, config, None)
    store.relations(parts, labels, RelationConfig(**{**config.__dict__, "neighbours": 3}), None)
    store.relations(parts, labels[::-1].copy(), config, None)
    assert not store.loaded and len(searches) == 3
    assert len(list((tmp_path / "relations").glob("*.npy"))) == 4


@pytest.mark.parametrize("method", ["exact", "hnsw"])
def test_rows_that_are_not_candidates_get_neighbours_but_are_nobodys(method):
    hashes, labels = clustered(60, 3, dim=8)
    config = RelationConfig(neighbours=6, method=method)
    candidates = np.arange(len(labels)) % 3 != 0  # every third row held back
    table = build_relations(hashes, labels, config, candidates=candidates)
    assert (table >= 0).all()  # every row, held back or not, has its R neighbours
    assert candidates[table].all() and (labels[table] == labels[:, None]).all()
    assert not (table == np.arange(len(labels))[:, None]).any()
    everyone = np.ones(len(labels), np.bool_)
    np.testing.assert_array_equal(  # all candidates: the table of before
        build_relations(hashes, labels, config, candidates=everyone), build_relations(hashes, labels, config)
    )
