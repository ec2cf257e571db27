"""MNIST-family datasets stored as IDX files: MNIST, Fashion-MNIST, KMNIST and EMNIST.

One reader serves all four because they share the IDX format (LeCun's; plain or gzip). Files are
searched for in the layouts people actually have on disk: torchvision's ``root/<Name>/raw``, a
plain folder of the four files, and for Fashion-MNIST the Debian package's folder.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .dataset import Dataset, DatasetNotFoundError, download_hint, image_dataset

# IDX type codes (third byte of the magic number) and the numpy dtype they hold (big-endian).
_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
"""Where the Debian package ``dataset-fashion-mnist`` installs the four IDX ``.gz`` files."""


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read one IDX file (plain or gzip-compressed, detected by content) into a numpy array."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise ValueError(f"{path}: not an IDX file (bad magic {raw[:4].hex()})")
    dtype, ndim = _IDX_DTYPES[raw[2]], raw[3]
    dims = np.frombuffer(raw, dtype=">i4", count=ndim, offset=4)
    offset = 4 + 4 * ndim
    count = int(np.prod(dims)) if ndim else 1
    if len(raw) - offset < count * dtype.itemsize:
        raise ValueError(f"{path}: truncated IDX file ({len(raw) - offset} bytes for shape {tuple(dims)})")
    data = np.frombuffer(raw, dtype=dtype, count=count, offset=offset)
    return data.reshape(tuple(int(d) for d in dims)).astype(dtype.newbyteorder("="), copy=False)


def write_idx(path: str | os.PathLike, array: np.ndarray) -> None:
    """Write ``array`` as an IDX file (gzip when the name ends in ``.gz``); used to make test files."""
    codes = {np.dtype(v).newbyteorder("="): k for k, v in _IDX_DTYPES.items()}
    dtype = np.dtype(array.dtype).newbyteorder("=")
    if dtype not in codes:
        raise ValueError(f"IDX cannot store dtype {array.dtype}")
    code = codes[dtype]
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, dtype=">i4").tobytes()
    body = np.ascontiguousarray(array, dtype=_IDX_DTYPES[code]).tobytes()
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(header + body)


@dataclass(frozen=True)
class IdxSource:
    """Where and under which names one MNIST-family dataset's four IDX files live."""

    name: str
    """Registry name."""
    title: str
    """Human name used in messages."""
    torchvision_folder: str
    """Folder torchvision uses under ``root`` (files go in ``root/<folder>/raw``)."""
    files: tuple[str, str, str, str]
    """Base names (without ``.gz``) of train images, train labels, test images, test labels."""
    num_classes: int
    """Number of classes after any label shift."""
    label_offset: int = 0
    """Subtracted from raw labels (EMNIST letters are 1..26 on disk)."""
    transpose: bool = False
    """EMNIST images are stored transposed; flip them upright."""
    system_dirs: tuple[Path, ...] = ()
    """Folders installed by system packages, searched after ``root``."""
    how_to_get: str = ""
    """Extra advice for the not-found message (a package to install, ...)."""

    def candidate_dirs(self, root: Path) -> list[Path]:
        """Folders searched, in order: torchvision layout, plain folders under root, system folders."""
        lower = self.torchvision_folder.lower()
        dirs = [
            root / self.torchvision_folder / "raw",
            root / self.torchvision_folder,
            root / lower / "raw",
            root / lower,
            root / self.name,
            root / "gzip",  # the folder inside the EMNIST zip
            root,
            *self.system_dirs,
        ]
        unique: list[Path] = []
        for d in dirs:
            if d not in unique:
                unique.append(d)
        return unique

    def locate(self, root: Path) -> list[Path] | None:
        """Paths of the four files in the first folder holding all of them (plain or ``.gz``), else None."""
        for folder in self.candidate_dirs(root):
            found = [_existing(folder / f) for f in self.files]
            if all(p is not None for p in found):
                return [p for p in found if p is not None]
        return None

    def not_found(self, root: Path) -> DatasetNotFoundError:
        """The error raised when no folder holds the files, listing where we looked and how to fix it."""
        searched = "\n  ".join(str(d) for d in self.candidate_dirs(root))
        names = ", ".join(f"{f}[.gz]" for f in self.files)
        example = f"DIR/{self.torchvision_folder}/raw/"
        advice = f"{self.how_to_get}\n" if self.how_to_get else ""
        return DatasetNotFoundError(
            f"{self.title} ({self.name!r}) not found. Searched:\n  {searched}\n"
            f"{advice}"
            f"Put the four IDX files ({names}) in {example} and pass root=DIR (CLI: --data-root DIR), "
            f"{download_hint(self.name, root)}."
        )


def _existing(base: Path) -> Path | None:
    for candidate in (base, base.with_name(base.name + ".gz")):
        if candidate.is_file():
            return candidate
    return None


def load_idx_dataset(source: IdxSource, root: Path, on_demand: bool = False) -> Dataset:
    """Load one MNIST-family dataset from its IDX files, or raise :class:`DatasetNotFoundError`.
    ``on_demand``: see :func:`edgefd.data.dataset.image_dataset`."""
    paths = source.locate(root)
    if paths is None:
        raise source.not_found(root)
    train_x, train_y, test_x, test_y = (read_idx(p) for p in paths)
    if train_x.ndim != 3 or test_x.ndim != 3 or len(train_x) != len(train_y) or len(test_x) != len(test_y):
        raise ValueError(
            f"{source.name}: inconsistent IDX files {[str(p) for p in paths]}: "
            f"images {train_x.shape}/{test_x.shape}, labels {train_y.shape}/{test_y.shape}"
        )
    if source.transpose:
        train_x, test_x = train_x.transpose(0, 2, 1), test_x.transpose(0, 2, 1)
    train_y = train_y.astype(np.int64) - source.label_offset
    test_y = test_y.astype(np.int64) - source.label_offset
    for labels in (train_y, test_y):
        if len(labels) and (labels.min() < 0 or labels.max() >= source.num_classes):
            raise ValueError(f"{source.name}: labels outside [0, {source.num_classes}) in {paths}")
    return image_dataset(
        source.name,
        train_x[:, None],
        train_y,
        test_x[:, None],
        test_y,
        source.num_classes,
        input_scale=255.0,
        on_demand=on_demand,
    )


def _names(prefix: str = "") -> tuple[str, str, str, str]:
    return (
        f"{prefix}train-images-idx3-ubyte",
        f"{prefix}train-labels-idx1-ubyte",
        f"{prefix}test-images-idx3-ubyte" if prefix else "t10k-images-idx3-ubyte",
        f"{prefix}test-labels-idx1-ubyte" if prefix else "t10k-labels-idx1-ubyte",
    )


MNIST = IdxSource("mnist", "MNIST", "MNIST", _names(), 10)
FASHION_MNIST = IdxSource(
    "fmnist",
    "Fashion-MNIST",
    "FashionMNIST",
    _names(),
    10,
    system_dirs=(DEBIAN_FASHION_MNIST,),
    how_to_get="On Debian/Ubuntu: apt-get install dataset-fashion-mnist (installs it in "
    f"{DEBIAN_FASHION_MNIST}, found automatically).",
)
KMNIST = IdxSource("kmnist", "Kuzushiji-MNIST", "KMNIST", _names(), 10)
EMNIST_BALANCED = IdxSource(
    "emnist", "EMNIST balanced (47 classes)", "EMNIST", _names("emnist-balanced-"), 47, transpose=True
)
EMNIST_LETTERS = IdxSource(
    "emnist-letters",
    "EMNIST letters (26 classes)",
    "EMNIST",
    _names("emnist-letters-"),
    26,
    label_offset=1,
    transpose=True,
)

IDX_SOURCES: Sequence[IdxSource] = (MNIST, FASHION_MNIST, KMNIST, EMNIST_BALANCED, EMNIST_LETTERS)
