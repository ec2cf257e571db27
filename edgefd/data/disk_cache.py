"""Bundled datasets kept on disk after their first load, so that later processes skip the parsing.

Loading ``digits`` imports scikit-learn for its file and its stratified split (about 1 s of CPU and
120 MB, most of a small process's start-up after torch), and ``mnist5k`` parses a 5,000-row CSV.
Every process of a deployment loads the same dataset again, as does every isolated arm of
``edgefd reproduce``. The first load stores the arrays as one ``.npz`` in
``$EDGEFD_CACHE_DIR/datasets`` (default ``~/.cache/edgefd/datasets``); later loads read that file.

The file's name holds a digest of everything that made it: the dataset's name, the versions of the
packages that bundle and split it, and the source of edgefd's loaders. A new package release or a
changed loader therefore never reads an old file. A file that cannot be read is loaded again and
rewritten; a cache folder that cannot be written only costs the speed-up.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from .dataset import Dataset

log = logging.getLogger(__name__)

FORMAT = "v1"
"""Bumped when the stored layout changes: files of another layout are then not read."""

LOADER_SOURCES = ("bundled.py", "dataset.py", "disk_cache.py")
"""The modules whose code decides the stored arrays: a change to any of them changes the digest."""

SPLIT_PACKAGE = "scikit-learn"
"""Every bundled dataset's train/test split is scikit-learn's (``bundled.stratified_split``)."""

_TENSORS = ("train_x", "train_y", "test_x", "test_y", "train_groups", "test_groups")


def cache_base() -> Path:
    """Where edgefd keeps what it computed once: ``$EDGEFD_CACHE_DIR``, else ``~/.cache/edgefd``."""
    base = os.environ.get("EDGEFD_CACHE_DIR")
    return Path(base) if base else Path.home() / ".cache" / "edgefd"


def stored_path(name: str, package: str) -> Path:
    """The file that holds dataset ``name`` as loaded with these versions of ``package`` (which
    bundles it) and scikit-learn (which splits it), and these loaders."""
    versions = "\0".join(f"{p}=={importlib.metadata.version(p)}" for p in sorted({package, SPLIT_PACKAGE}))
    digest = hashlib.sha256(f"{FORMAT}\0{name}\0{versions}".encode())
    here = Path(__file__).parent
    for source in LOADER_SOURCES:
        digest.update((here / source).read_bytes())
    return cache_base() / "datasets" / f"{name}-{digest.hexdigest()[:16]}.npz"


def load_stored(name: str, package: str, load: Callable[[], Dataset]) -> Dataset:
    """Dataset ``name`` (bundled by ``package``) from its stored file, else from ``load()``, which is then stored."""
    try:
        path = stored_path(name, package)
    except importlib.metadata.PackageNotFoundError:
        return load()  # the package is missing: its loader says how to get it
    if path.is_file():
        try:
            return _read(path)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as error:
            log.warning("%s: unreadable (%s); loading %s again", path, error, name)
    dataset = load()
    try:
        _write(dataset, path)
    except OSError as error:
        log.info("could not store %s in %s (%s): the next process parses it again", name, path.parent, error)
    return dataset


def _write(dataset: Dataset, path: Path) -> None:
    if dataset.raw is not None:
        raise ValueError(f"{dataset.name}: an on-demand dataset is not stored")
    arrays = {key: getattr(dataset, key).numpy() for key in _TENSORS if getattr(dataset, key) is not None}
    meta = {
        "name": dataset.name,
        "num_classes": dataset.num_classes,
        "input_shape": list(dataset.input_shape),
        "mean": list(dataset.mean),
        "std": list(dataset.std),
        "input_scale": dataset.input_scale,
        "class_names": None if dataset.class_names is None else list(dataset.class_names),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}")  # then renamed: a reader never sees half a file
    try:
        with open(partial, "wb") as f:
            np.savez(f, meta=np.array(json.dumps(meta)), **arrays)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def _read(path: Path) -> Dataset:
    with np.load(path, allow_pickle=False) as stored:
        meta = json.loads(str(stored["meta"]))

        def tensor(key: str) -> torch.Tensor:
            return torch.from_numpy(stored[key])

        return Dataset(
            name=meta["name"],
            train_x=tensor("train_x"),
            train_y=tensor("train_y"),
            test_x=tensor("test_x"),
            test_y=tensor("test_y"),
            num_classes=int(meta["num_classes"]),
            input_shape=tuple(meta["input_shape"]),
            mean=tuple(meta["mean"]),
            std=tuple(meta["std"]),
            input_scale=float(meta["input_scale"]),
            train_groups=tensor("train_groups") if "train_groups" in stored else None,
            test_groups=tensor("test_groups") if "test_groups" in stored else None,
            class_names=None if meta["class_names"] is None else tuple(meta["class_names"]),
        )
