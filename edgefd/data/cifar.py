"""CIFAR-10 and CIFAR-100 from the official "python version" pickles.

torchvision's CIFAR classes verify every batch file against a fixed md5, so they refuse any file
but the original one; reading the pickles here is a few lines, accepts the same folders
(``root/cifar-10-batches-py``, ``root/cifar-100-python``) and can be tested on small files.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from .dataset import Dataset, DatasetNotFoundError, download_hint, image_dataset

CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR10_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST = ("test_batch",)
CIFAR100_FOLDER = "cifar-100-python"


def read_cifar_batch(path: Path, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    """One pickled batch: ``data`` (N x 3072 uint8, channel-major) as (N, 3, 32, 32) and its labels."""
    with open(path, "rb") as f:
        entry = pickle.load(f, encoding="latin1")
    data = np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
    labels = np.asarray(entry[label_key], dtype=np.int64)
    if len(labels) != len(data):
        raise ValueError(f"{path}: {len(data)} images but {len(labels)} labels")
    return data, labels


def _read_meta_names(path: Path, key: str) -> tuple[str, ...] | None:
    if not path.is_file():
        return None
    with open(path, "rb") as f:
        meta = pickle.load(f, encoding="latin1")
    names = meta.get(key)
    return tuple(str(n) for n in names) if names is not None else None


def _missing(
    title: str, key: str, root: Path, folder: str, files: tuple[str, ...], archive: str
) -> DatasetNotFoundError:
    return DatasetNotFoundError(
        f"{title} ({key!r}) not found: looked in {root / folder}. Extract the official python version ({archive}) "
        f"so that DIR/{folder}/ holds {', '.join(files)}, and pass root=DIR (CLI: --data-root DIR), "
        f"{download_hint(key, root)}."
    )


def _stack(parts: list[np.ndarray]) -> np.ndarray:
    """``np.concatenate(parts)``, freeing each part once copied: the pages of the result are touched
    as they are written, so the images are held about once (150 MB for CIFAR-10), not twice."""
    out = np.empty((sum(len(p) for p in parts), *parts[0].shape[1:]), dtype=parts[0].dtype)
    start = 0
    while parts:
        part = parts.pop(0)  # the list lets go of it: freed once copied
        out[start : start + len(part)] = part
        start += len(part)
    return out


def load_cifar10(root: Path, on_demand: bool = False) -> Dataset:
    """CIFAR-10: 50,000 + 10,000 RGB 32x32 images, 10 classes. ``on_demand``: see
    :func:`edgefd.data.dataset.image_dataset`."""
    files = CIFAR10_TRAIN + CIFAR10_TEST
    folder = root / CIFAR10_FOLDER
    if not all((folder / f).is_file() for f in files):
        raise _missing("CIFAR-10", "cifar10", root, CIFAR10_FOLDER, files, "cifar-10-python.tar.gz")
    images, labels = [], []
    for file in CIFAR10_TRAIN:
        x, y = read_cifar_batch(folder / file, "labels")
        images.append(x)
        labels.append(y)
    del x
    train_x, train_y = _stack(images), np.concatenate(labels)
    test_x, test_y = read_cifar_batch(folder / CIFAR10_TEST[0], "labels")
    names = _read_meta_names(folder / "batches.meta", "label_names")
    return image_dataset("cifar10", train_x, train_y, test_x, test_y, 10, class_names=names, on_demand=on_demand)


def load_cifar100(root: Path, coarse: bool = False, on_demand: bool = False) -> Dataset:
    """CIFAR-100: 50,000 + 10,000 images; 100 fine classes, or the 20 superclasses when ``coarse``.

    The DFL paper trains on the 20 coarse labels, hence the ``cifar100-coarse`` registry entry.
    """
    name = "cifar100-coarse" if coarse else "cifar100"
    files = ("train", "test")
    folder = root / CIFAR100_FOLDER
    if not all((folder / f).is_file() for f in files):
        raise _missing("CIFAR-100", name, root, CIFAR100_FOLDER, files, "cifar-100-python.tar.gz")
    key = "coarse_labels" if coarse else "fine_labels"
    train_x, train_y = read_cifar_batch(folder / "train", key)
    test_x, test_y = read_cifar_batch(folder / "test", key)
    names = _read_meta_names(folder / "meta", "coarse_label_names" if coarse else "fine_label_names")
    return image_dataset(
        name, train_x, train_y, test_x, test_y, 20 if coarse else 100, class_names=names, on_demand=on_demand
    )


def write_cifar_batch(
    path: Path, images: np.ndarray, labels: np.ndarray, label_key: str = "labels", **extra: list
) -> None:
    """Write a batch in the official pickle format (used by tests to make small real-format files)."""
    entry = {"data": np.asarray(images, dtype=np.uint8).reshape(len(images), -1), label_key: list(map(int, labels))}
    entry.update(extra)
    with open(path, "wb") as f:
        pickle.dump(entry, f, protocol=2)
