"""SVHN (cropped digits) from the official ``train_32x32.mat`` / ``test_32x32.mat`` files.

Read with scipy rather than torchvision because torchvision's SVHN checks each file's md5 and so
cannot be tested on small files; the layout (``root/train_32x32.mat``) is the one torchvision uses.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from .dataset import Dataset, DatasetNotFoundError, download_hint, image_dataset

SVHN_FILES = ("train_32x32.mat", "test_32x32.mat")


def read_svhn_mat(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Images as (N, 3, 32, 32) uint8 and labels 0..9 (the files store digit 0 as label 10)."""
    from scipy.io import loadmat

    mat = loadmat(str(path))
    images = np.transpose(mat["X"], (3, 2, 0, 1))  # stored as (H, W, C, N)
    labels = mat["y"].astype(np.int64).reshape(-1) % 10
    if len(images) != len(labels):
        raise ValueError(f"{path}: {len(images)} images but {len(labels)} labels")
    return np.ascontiguousarray(images, dtype=np.uint8), labels


def _find(root: Path) -> Path | None:
    for folder in (root, root / "SVHN", root / "svhn"):
        if all((folder / f).is_file() for f in SVHN_FILES):
            return folder
    return None


def load_svhn(root: Path, on_demand: bool = False) -> Dataset:
    """SVHN: 73,257 + 26,032 RGB 32x32 house-number digits, 10 classes (``extra`` not used).
    ``on_demand``: see :func:`edgefd.data.dataset.image_dataset`."""
    folder = _find(root)
    if folder is None:
        raise DatasetNotFoundError(
            f"SVHN ('svhn') not found: looked for {' and '.join(SVHN_FILES)} in {root}, {root / 'SVHN'}. "
            f"Put the official cropped-digits .mat files in DIR/ and pass root=DIR (CLI: --data-root DIR), "
            f"{download_hint('svhn', root)}."
        )
    if importlib.util.find_spec("scipy") is None:  # pragma: no cover - scipy comes with scikit-learn
        raise DatasetNotFoundError("SVHN needs scipy to read its .mat files: pip install scipy")
    train_x, train_y = read_svhn_mat(folder / SVHN_FILES[0])
    test_x, test_y = read_svhn_mat(folder / SVHN_FILES[1])
    return image_dataset("svhn", train_x, train_y, test_x, test_y, 10, on_demand=on_demand)
