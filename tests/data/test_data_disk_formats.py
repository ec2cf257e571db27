"""On-disk datasets, loaded from small files written here in the exact official formats.

The real files cannot be fetched on these machines, so each test writes a tiny file set in the
layout torchvision uses (or the official archive's), loads it through the registry, and where
torchvision can read the same files, checks that both readers see the same pixels and labels.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from edgefd.data import Dataset, clear_cache, load_dataset
from edgefd.data.cifar import write_cifar_batch
from edgefd.data.idx import read_idx, write_idx

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def fresh_cache():
    clear_cache()
    yield
    clear_cache()


def raw_pixels(ds: Dataset, x: torch.Tensor) -> np.ndarray:
    """Undo the normalisation: back to the stored uint8 values."""
    channel_shape = (-1, 1, 1)
    mean = torch.tensor(ds.mean).reshape(channel_shape)
    std = torch.tensor(ds.std).reshape(channel_shape)
    return np.rint(((x * std + mean) * ds.input_scale).numpy()).astype(np.int64)


def images(n: int, *shape: int) -> np.ndarray:
    return RNG.integers(0, 256, size=(n, *shape), dtype=np.uint8)


def cycling_labels(n: int, classes: int, start: int = 0) -> np.ndarray:
    return (np.arange(n) % classes + start).astype(np.uint8)


def write_mnist_like(folder: Path, prefix: str, classes: int, gz: bool, label_start: int = 0, h: int = 28, w: int = 28):
    """Four IDX files: ``train-*`` / ``t10k-*`` (or ``<prefix>train-*`` / ``<prefix>test-*``)."""
    folder.mkdir(parents=True, exist_ok=True)
    suffix = ".gz" if gz else ""
    test_name = f"{prefix}test" if prefix else "t10k"
    arrays = {
        f"{prefix}train-images-idx3-ubyte": images(2 * classes, h, w),
        f"{prefix}train-labels-idx1-ubyte": cycling_labels(2 * classes, classes, label_start),
        f"{test_name}-images-idx3-ubyte": images(classes, h, w),
        f"{test_name}-labels-idx1-ubyte": cycling_labels(classes, classes, label_start),
    }
    for name, array in arrays.items():
        write_idx(folder / (name + suffix), array)
    return list(arrays.values())


def test_idx_round_trip_plain_and_gzip(tmp_path: Path):
    a = images(5, 3, 4)
    for name in ("a-idx3-ubyte", "a-idx3-ubyte.gz"):
        write_idx(tmp_path / name, a)
        np.testing.assert_array_equal(read_idx(tmp_path / name), a)
    ints = np.arange(6, dtype=np.int32).reshape(2, 3)
    write_idx(tmp_path / "i", ints)
    np.testing.assert_array_equal(read_idx(tmp_path / "i"), ints)
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(tmp_path / "bad")


def test_idx_reader_matches_torchvision(tmp_path: Path):
    from torchvision.datasets.mnist import read_image_file, read_label_file

    x, y = images(4, 28, 28), cycling_labels(4, 10)
    write_idx(tmp_path / "x", x)
    write_idx(tmp_path / "y", y)
    np.testing.assert_array_equal(read_image_file(str(tmp_path / "x")).numpy(), read_idx(tmp_path / "x"))
    np.testing.assert_array_equal(read_label_file(str(tmp_path / "y")).numpy(), read_idx(tmp_path / "y"))


@pytest.mark.parametrize("name,folder", [("mnist", "MNIST"), ("kmnist", "KMNIST"), ("fmnist", "FashionMNIST")])
def test_mnist_family_in_torchvision_layout(name: str, folder: str, tmp_path: Path):
    import torchvision.datasets as tvd

    train_x, train_y, test_x, test_y = write_mnist_like(tmp_path / folder / "raw", "", 10, gz=False)
    ds = load_dataset(name, root=tmp_path)
    assert ds.train_x.shape == (20, 1, 28, 28) and ds.test_x.shape == (10, 1, 28, 28)
    assert ds.num_classes == 10 and ds.train_x.dtype == torch.float32 and ds.train_y.dtype == torch.int64
    np.testing.assert_array_equal(raw_pixels(ds, ds.train_x)[:, 0], train_x)
    np.testing.assert_array_equal(ds.test_y.numpy(), test_y)
    # torchvision itself reads these files as the same dataset.
    tv_class = {"mnist": tvd.MNIST, "kmnist": tvd.KMNIST, "fmnist": tvd.FashionMNIST}[name]
    tv = tv_class(str(tmp_path), train=True, download=False)
    np.testing.assert_array_equal(tv.data.numpy(), train_x)
    np.testing.assert_array_equal(tv.targets.numpy(), train_y)


def test_fmnist_from_a_plain_folder_of_gz_files(tmp_path: Path):
    train_x, *_ = write_mnist_like(tmp_path / "fashion", "", 10, gz=True)
    ds = load_dataset("fmnist", root=tmp_path / "fashion")
    np.testing.assert_array_equal(raw_pixels(ds, ds.train_x)[:, 0], train_x)


def test_emnist_balanced_is_turned_upright(tmp_path: Path):
    import torchvision.datasets as tvd

    train_x, train_y, _, _ = write_mnist_like(tmp_path / "EMNIST" / "raw", "emnist-balanced-", 47, gz=False)
    ds = load_dataset("emnist", root=tmp_path)
    assert ds.num_classes == 47 and ds.train_x.shape == (94, 1, 28, 28)
    np.testing.assert_array_equal(raw_pixels(ds, ds.train_x)[:, 0], train_x.transpose(0, 2, 1))
    tv = tvd.EMNIST(str(tmp_path), split="balanced", train=True, download=False)
    np.testing.assert_array_equal(tv.data.numpy().transpose(0, 2, 1), raw_pixels(ds, ds.train_x)[:, 0])
    np.testing.assert_array_equal(tv.targets.numpy(), ds.train_y.numpy())


def test_emnist_letters_labels_start_at_zero(tmp_path: Path):
    write_mnist_like(tmp_path / "gzip", "emnist-letters-", 26, gz=True, label_start=1)  # the official zip's folder
    ds = load_dataset("emnist-letters", root=tmp_path)
    assert ds.num_classes == 26
    assert ds.train_y.min() == 0 and ds.train_y.max() == 25


def test_inconsistent_idx_files_are_rejected(tmp_path: Path):
    raw = tmp_path / "MNIST" / "raw"
    write_mnist_like(raw, "", 10, gz=False)
    write_idx(raw / "train-labels-idx1-ubyte", cycling_labels(7, 10))
    with pytest.raises(ValueError, match="inconsistent"):
        load_dataset("mnist", root=tmp_path)


def write_cifar10(root: Path, per_batch: int = 10) -> tuple[np.ndarray, np.ndarray]:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    xs, ys = [], []
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        x, y = images(per_batch, 3, 32, 32), cycling_labels(per_batch, 10)
        write_cifar_batch(folder / name, x, y, batch_label=name)
        xs.append(x)
        ys.append(y)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"c{i}" for i in range(10)], "num_cases_per_batch": per_batch}, f)
    return np.concatenate(xs[:5]), np.concatenate(ys[:5])


def test_cifar10_python_pickles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import torchvision.datasets as tvd
    import torchvision.datasets.cifar as tv_cifar

    train_x, train_y = write_cifar10(tmp_path)
    ds = load_dataset("cifar10", root=tmp_path)
    assert ds.train_x.shape == (50, 3, 32, 32) and ds.test_x.shape == (10, 3, 32, 32)
    assert ds.num_classes == 10 and len(ds.mean) == 3
    assert ds.class_names == tuple(f"c{i}" for i in range(10))
    np.testing.assert_array_equal(raw_pixels(ds, ds.train_x), train_x)
    np.testing.assert_array_equal(ds.train_y.numpy(), train_y)
    # torchvision refuses these files only because of their md5; past that it reads the same data.
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *a, **k: True)
    monkeypatch.setattr(tvd.CIFAR10, "_check_integrity", lambda self: True)
    tv = tvd.CIFAR10(str(tmp_path), train=True, download=False)
    np.testing.assert_array_equal(tv.data.transpose(0, 3, 1, 2), raw_pixels(ds, ds.train_x))
    assert list(tv.targets) == ds.train_y.tolist()


@pytest.mark.parametrize("coarse", [False, True])
def test_cifar100_fine_and_coarse_labels(coarse: bool, tmp_path: Path):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    for name, n in (("train", 200), ("test", 100)):
        fine = np.arange(n) % 100
        write_cifar_batch(
            folder / name, images(n, 3, 32, 32), fine, label_key="fine_labels", coarse_labels=list(map(int, fine // 5))
        )
    ds = load_dataset("cifar100-coarse" if coarse else "cifar100", root=tmp_path)
    assert ds.num_classes == (20 if coarse else 100)
    assert ds.train_x.shape == (200, 3, 32, 32)
    expected = (np.arange(200) % 100) // (5 if coarse else 1)
    np.testing.assert_array_equal(ds.train_y.numpy(), expected)


def test_svhn_mat_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import torchvision.datasets as tvd
    from scipy.io import savemat

    for name, n in (("train_32x32.mat", 30), ("test_32x32.mat", 20)):
        x = images(n, 32, 32, 3).transpose(1, 2, 3, 0)  # stored (H, W, C, N)
        y = (np.arange(n) % 10 + 1).reshape(-1, 1).astype(np.uint8)  # digit 0 is label 10
        savemat(tmp_path / name, {"X": x, "y": y})
    ds = load_dataset("svhn", root=tmp_path)
    assert ds.train_x.shape == (30, 3, 32, 32) and ds.num_classes == 10
    assert ds.train_y.tolist()[:10] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 0]
    monkeypatch.setattr(tvd.SVHN, "_check_integrity", lambda self: True)
    tv = tvd.SVHN(str(tmp_path), split="train", download=False)
    np.testing.assert_array_equal(tv.data, raw_pixels(ds, ds.train_x))
    np.testing.assert_array_equal(tv.labels, ds.train_y.numpy())


@pytest.mark.parametrize("name", ["fmnist", "emnist", "cifar10"])
def test_on_demand_rows_equal_the_whole_load(name: str, tmp_path: Path):
    """A deployed client loads on demand (8-bit images kept, only its share made float): its rows
    must be the simulation's, bit for bit, or a deployment would not reproduce `simulate`."""
    if name == "fmnist":
        write_mnist_like(tmp_path / "fashion", "", 10, gz=True)
        root = tmp_path / "fashion"
    elif name == "emnist":  # stored transposed: the raw images are a strided view
        write_mnist_like(tmp_path / "EMNIST" / "raw", "emnist-balanced-", 47, gz=False)
        root = tmp_path
    else:
        write_cifar10(tmp_path)
        root = tmp_path
    whole = load_dataset(name, root=root)
    lazy = load_dataset(name, root=root, on_demand=True)
    assert lazy is not whole and whole.raw is None and lazy.raw is not None
    assert len(lazy.train_x) == len(lazy.test_x) == 0 and lazy.train_x.shape[1:] == whole.train_x.shape[1:]
    assert (lazy.mean, lazy.std, lazy.input_shape) == (whole.mean, whole.std, whole.input_shape)
    assert torch.equal(lazy.train_y, whole.train_y) and torch.equal(lazy.test_y, whole.test_y)
    picked = torch.tensor([3, 0, 7, 7, len(whole.train_y) - 1])
    assert torch.equal(lazy.train_rows(picked), whole.train_x[picked])
    assert torch.equal(lazy.test_rows(picked[:3]), whole.test_x[picked[:3]])
    assert torch.equal(whole.train_rows(picked), whole.train_x[picked])
    assert lazy.raw.train.dtype == np.uint8  # a quarter of float32's bytes


def test_uint8_stats_agree_with_the_float_stats():
    from edgefd.data.dataset import channel_stats, uint8_channel_stats

    raw = images(5000, 3, 8, 8)
    scaled = raw.astype(np.float32) / np.float32(255)
    mean, std = uint8_channel_stats(raw, 255.0)
    reference_mean, reference_std = channel_stats(scaled, channel_axis=1)
    np.testing.assert_allclose(mean, reference_mean, rtol=1e-12)
    np.testing.assert_allclose(std, reference_std, rtol=1e-12)
    assert np.array_equal(mean.astype(np.float32), reference_mean.astype(np.float32))
