"""Partitioners: invariants, skew, determinism, local test splits, and errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgefd.data import (
    ClientSplit,
    PartitionConfig,
    label_counts,
    load_dataset,
    parse_scheme,
    partition,
    partition_labels,
    plot_label_counts,
)

COVERING = ["iid", "dirichlet:0.1", "dirichlet:10", "quantity:0.5", "shards:2"]
"""Schemes that hand every training sample to exactly one client (with 10 clients of digits)."""


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def all_train(splits: list[ClientSplit]) -> np.ndarray:
    return np.concatenate([s.train_indices for s in splits])


def mean_entropy(counts: np.ndarray) -> float:
    p = counts / counts.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.nansum(np.where(p > 0, p * np.log(p), 0.0), axis=1)
    return float(h.mean())


@pytest.mark.parametrize("scheme", COVERING)
def test_every_training_sample_goes_to_exactly_one_client(digits, scheme: str):
    splits = partition(digits, 10, scheme, seed=1)
    assert [s.client_id for s in splits] == list(range(10))
    used = all_train(splits)
    assert len(used) == len(digits.train_y) and len(np.unique(used)) == len(used)
    counts = label_counts(digits, splits)
    assert counts.shape == (10, 10) and counts.sum() == len(digits.train_y)
    np.testing.assert_array_equal(counts.sum(axis=0), np.bincount(digits.train_y.numpy()))
    for s in splits:
        assert s.train_indices.dtype == s.test_indices.dtype == np.int64
        assert s.num_train > 0 and np.all(np.diff(s.train_indices) > 0)


@pytest.mark.parametrize("scheme", COVERING + ["dominant:0.8"])
def test_local_test_splits_are_disjoint_and_within_the_test_set(digits, scheme: str):
    splits = partition(digits, 10, scheme, seed=2)
    tests = np.concatenate([s.test_indices for s in splits])
    assert len(np.unique(tests)) == len(tests)
    assert tests.min() >= 0 and tests.max() < len(digits.test_y)
    assert len(tests) >= 0.9 * len(digits.test_y)  # shrinks only where train and test balance differ


def test_dirichlet_skew_grows_as_alpha_falls(digits):
    def entropy(alpha: float) -> float:
        return np.mean(
            [mean_entropy(label_counts(digits, partition(digits, 10, f"dirichlet:{alpha}", s))) for s in range(3)]
        )

    skewed, mild, flat = entropy(0.1), entropy(1.0), entropy(10.0)
    assert skewed < mild < flat
    assert flat > 0.9 * np.log(10) and skewed < 0.6 * np.log(10)


def test_dirichlet_gives_every_client_the_minimum(digits):
    splits = partition(digits, 10, "dirichlet:0.1", seed=3, min_samples=40)
    assert min(s.num_train for s in splits) >= 40
    # 20 clients sharing 10 classes at alpha 0.05: half of them would get next to nothing.
    with pytest.raises(ValueError, match="use a larger alpha, fewer clients or a smaller min_samples"):
        partition(digits, 20, "dirichlet:0.05", seed=3, min_samples=20)


@pytest.mark.parametrize("k", [1, 2, 3, 10])
def test_shards_give_exactly_k_classes_per_client(digits, k: int):
    counts = label_counts(digits, partition(digits, 10, f"shards:{k}", seed=4))
    assert np.all((counts > 0).sum(axis=1) == k)
    # Every class is held by the same number of clients and split evenly among them.
    holders = (counts > 0).sum(axis=0)
    assert holders.min() == holders.max() == k
    for c in range(10):
        held = counts[:, c][counts[:, c] > 0]
        assert held.max() - held.min() <= 1


def test_quantity_skew_varies_sizes_not_labels(digits):
    splits = partition(digits, 10, "quantity:0.3", seed=5)
    sizes = np.array([s.num_train for s in splits])
    assert sizes.max() > 3 * sizes.min() and sizes.min() >= 10
    counts = label_counts(digits, splits)
    big = counts[np.argmax(sizes)]
    assert (big > 0).all()  # labels stay IID: a large client has every class


def test_iid_is_balanced(digits):
    splits = partition(digits, 10, "iid", seed=6)
    sizes = [s.num_train for s in splits]
    assert max(sizes) - min(sizes) <= 1
    assert mean_entropy(label_counts(digits, splits)) > 0.97 * np.log(10)


def test_same_seed_same_splits_different_seed_different(digits):
    for scheme in COVERING + ["dominant:0.8"]:
        a, b, c = (partition(digits, 10, scheme, seed) for seed in (7, 7, 8))
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x.train_indices, y.train_indices)
            np.testing.assert_array_equal(x.test_indices, y.test_indices)
        assert any(not np.array_equal(x.train_indices, z.train_indices) for x, z in zip(a, c)), scheme


def test_local_test_follows_the_train_label_distribution(digits):
    splits = partition(digits, 10, "dirichlet:0.3", seed=9, test_fraction=0.25)
    train, test = label_counts(digits, splits, "train"), label_counts(digits, splits, "test")
    assert np.all(np.abs(test - 0.25 * train) <= 1)
    # Default: the test set is shared out in proportion, with the same per-client label mix.
    splits = partition(digits, 10, "dirichlet:0.3", seed=9)
    train, test = label_counts(digits, splits, "train"), label_counts(digits, splits, "test")
    scale = test.sum() / train.sum()
    assert np.all(np.abs(test - scale * train) <= 1)
    assert np.all(test[train == 0] == 0)


def test_a_too_small_test_set_is_reused_not_distorted():
    train_y = np.repeat(np.arange(2), 50)
    test_y = np.array([0, 0, 1, 1])
    splits = partition_labels(train_y, test_y, 4, "iid", seed=0, test_fraction=0.2)
    for s in splits:
        want = np.bincount(train_y[s.train_indices], minlength=2) * 0.2
        got = np.bincount(test_y[s.test_indices], minlength=2)
        assert np.all(np.abs(got - want) <= 1)


def test_dominant_label_split_follows_dfl():
    ds = load_dataset("digits")
    splits = partition(ds, 20, "dominant:0.8", seed=0, samples_per_client=70)
    counts = label_counts(ds, splits)
    assert np.all(counts.sum(axis=1) == 70)
    for k, row in enumerate(counts):
        assert row[k % 10] == 56  # round(0.8 * 70), dominant label k mod 10
        others = np.delete(row, k % 10)
        assert others.sum() == 14 and others.max() - others.min() <= 1
    test = label_counts(ds, splits, "test")
    assert np.all(test.argmax(axis=1) == np.arange(20) % 10)


def test_natural_partition_on_watch_is_one_subject_per_client():
    watch = load_dataset("watch")
    splits = partition(watch, 10, "natural", seed=0)
    train_g, test_g = watch.train_groups.numpy(), watch.test_groups.numpy()
    assert sorted(s.group for s in splits) == list(range(10))
    for s in splits:
        assert set(train_g[s.train_indices]) == {s.group}
        assert set(test_g[s.test_indices]) == {s.group}
    assert len(all_train(splits)) == len(watch.train_y)
    fewer = partition(watch, 4, "natural", seed=0)
    assert len({s.group for s in fewer}) == 4
    with pytest.raises(ValueError, match="only 10 groups"):
        partition(watch, 11, "natural", seed=0)


def test_natural_needs_groups(digits):
    with pytest.raises(ValueError, match="needs a dataset with groups"):
        partition(digits, 5, "natural", seed=0)


@pytest.mark.parametrize(
    "scheme,match",
    [
        ("dirichlet:0", "alpha must be > 0"),
        ("dirichlet:-1", "alpha must be > 0"),
        ("quantity:0", "alpha must be > 0"),
        ("dirichlet", "needs a parameter"),
        ("dirichlet:abc", "not a number"),
        ("shards:1.5", "integer"),
        ("shards:11", "data has 10"),
        ("dominant:1.5", r"in \(0, 1\]"),
        ("iid:3", "takes no parameter"),
        ("zipf:2", "unknown partition scheme"),
    ],
)
def test_bad_schemes_are_value_errors(digits, scheme: str, match: str):
    with pytest.raises(ValueError, match=match):
        partition(digits, 10, scheme, seed=0)


def test_bad_sizes_are_value_errors(digits):
    with pytest.raises(ValueError, match="larger than the number of training samples"):
        partition(digits, len(digits.train_y) + 1, "iid", seed=0)
    with pytest.raises(ValueError, match="num_clients must be"):
        partition(digits, 0, "iid", seed=0)
    with pytest.raises(ValueError, match="samples_per_client applies"):
        partition(digits, 10, "quantity:0.5", seed=0, samples_per_client=10)
    with pytest.raises(ValueError, match="needs .* samples of class"):
        partition(digits, 2, "dominant:0.9", seed=0)
    assert parse_scheme(" Dirichlet:0.5 ").param == 0.5


def test_config_splits_like_partition(digits):
    config = PartitionConfig(num_clients=5, scheme="shards:2", seed=3)
    for x, y in zip(config.split(digits), partition(digits, 5, "shards:2", 3)):
        np.testing.assert_array_equal(x.train_indices, y.train_indices)


def test_plot_writes_a_png(digits, tmp_path: Path):
    path = tmp_path / "counts.png"
    plot_label_counts(label_counts(digits, partition(digits, 8, "dirichlet:0.5", 0)), path, title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@settings(max_examples=60, deadline=None)
@given(
    labels=st.lists(st.integers(0, 5), min_size=12, max_size=300),
    clients=st.integers(1, 6),
    scheme=st.sampled_from(
        ["iid", "dirichlet:0.2", "dirichlet:5", "quantity:0.5", "quantity:5", "shards:1", "shards:2"]
    ),
    seed=st.integers(0, 2**32 - 1),
)
def test_partition_invariants(labels: list[int], clients: int, scheme: str, seed: int):
    train_y = np.array(labels)
    test_y = train_y[::3]
    kind, _, param = scheme.partition(":")
    if kind == "shards" and (int(param) > len(np.unique(train_y)) or clients * 2 > len(train_y)):
        return
    try:
        splits = partition_labels(train_y, test_y, clients, scheme, seed, min_samples=1)
    except ValueError as e:  # allowed only for shards with a class too small for its holders
        assert kind == "shards" and "got no training samples" in str(e)
        return
    again = partition_labels(train_y, test_y, clients, scheme, seed, min_samples=1)
    assert len(splits) == clients
    used = all_train(splits)
    assert len(np.unique(used)) == len(used)  # never a sample on two clients
    if kind != "shards":
        assert len(used) == len(train_y)  # nor a sample left out
    else:
        held = {c for s in splits for c in np.unique(train_y[s.train_indices])}
        assert all(len(np.unique(train_y[s.train_indices])) <= int(param) for s in splits)
        assert len(used) == np.isin(train_y, list(held)).sum()
    tests = np.concatenate([s.test_indices for s in splits])
    assert len(np.unique(tests)) == len(tests) and (len(tests) == 0 or tests.max() < len(test_y))
    for s, t in zip(splits, again):
        assert s.num_train > 0
        np.testing.assert_array_equal(s.train_indices, t.train_indices)
        np.testing.assert_array_equal(s.test_indices, t.test_indices)
        # The local test split only has labels the client trains on.
        assert set(test_y[s.test_indices]) <= set(train_y[s.train_indices])


def test_samples_per_client_caps_a_dirichlet_split_and_keeps_its_skew():
    ds = load_dataset("digits")
    full = label_counts(ds, partition(ds, 5, "dirichlet:0.3", seed=4))
    capped = label_counts(ds, partition(ds, 5, "dirichlet:0.3", seed=4, samples_per_client=60))
    assert np.all(capped.sum(axis=1) == np.minimum(full.sum(axis=1), 60))
    assert np.all(capped <= full)  # a subset of the same client's share
    # the label mix survives the cut: total variation from the full share is sampling noise (< 0.2),
    # far below the skew between clients
    mix = lambda counts: counts / counts.sum(axis=1, keepdims=True)  # noqa: E731
    drift = 0.5 * np.abs(mix(full) - mix(capped)).sum(axis=1)
    between = 0.5 * np.abs(mix(full)[:, None] - mix(full)[None]).sum(axis=2)
    assert drift.max() < 0.2 < between[~np.eye(5, dtype=bool)].min()
