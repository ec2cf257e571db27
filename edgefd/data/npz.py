"""Your own data as one ``.npz`` file: ``--dataset npz:PATH`` / ``load_dataset("npz:PATH")``.

The file holds four arrays, written with ``numpy.savez`` (or ``savez_compressed``):

- ``train_x``, ``test_x``: float inputs (float32; float16/float64 are converted), one of
  ``(N, C, H, W)`` images, ``(N, T, F)`` sensor windows (T steps of F features) or ``(N, D)`` vectors;
  train and test samples have the same shape;
- ``train_y``, ``test_y``: integer labels ``0 .. C-1``, one per sample.

Optional: ``class_names`` (C strings; without them the classes are ``0 .. max label`` and every one
must occur in ``train_y``), ``train_groups`` / ``test_groups`` (an integer subject / writer id
``0 .. G-1`` per sample, for ``--partition natural``) and ``num_classes`` (a 0-d integer, checked
against the labels).

Inputs are standardised like the built-in datasets: per channel (images) or per feature (sensor
windows, vectors), with the training set's mean and standard deviation only (``Dataset.mean`` /
``Dataset.std``; ``input_scale`` is 1: scale raw pixels yourself, e.g. ``x / 255``). A feature that
is constant in the training set keeps std 1, so it is shifted but never blown up. Anything wrong
with the file raises ``ValueError`` naming the file, the array and what to change.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np
import torch

from .dataset import Dataset, DatasetNotFoundError, channel_stats

PREFIX = "npz:"
"""Dataset names that start with this (any case) name a file: ``npz:~/data/mine.npz``."""

REQUIRED = ("train_x", "train_y", "test_x", "test_y")
"""Arrays every file must hold."""
OPTIONAL = ("class_names", "train_groups", "test_groups", "num_classes")
"""Arrays a file may hold."""

_LAYOUTS = {4: "(N, C, H, W) images", 3: "(N, T, F) sensor windows", 2: "(N, D) vectors"}


def is_npz_name(name: str) -> bool:
    """Whether a dataset name is ``npz:PATH``."""
    return name[: len(PREFIX)].lower() == PREFIX


def npz_path(name: str) -> Path:
    """The absolute file path a ``npz:PATH`` name points at (``~`` expanded)."""
    text = name[len(PREFIX) :].strip()
    if not text:
        raise ValueError("dataset 'npz:' needs a file: npz:PATH, e.g. --dataset npz:~/mydata.npz")
    return Path(os.path.expanduser(text)).resolve()


def npz_label(name: str) -> str:
    """A short, filesystem-safe label for a ``npz:PATH`` name (``npz-mydata``), for folder names."""
    stem = npz_path(name).stem
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in stem)
    return f"npz-{safe or 'data'}"


def load_npz_dataset(path: str | os.PathLike) -> Dataset:
    """Read, check and standardise one ``.npz`` dataset file (see the module docstring)."""
    path = Path(path)
    where = f"npz dataset {path}"
    if not path.is_file():
        raise DatasetNotFoundError(
            f"{where}: no such file (write one with numpy.savez(PATH, train_x=..., train_y=..., "
            f"test_x=..., test_y=...); docs/ADDING_A_DATASET.md)"
        )
    arrays = _read(path)
    unknown = sorted(set(arrays) - set(REQUIRED) - set(OPTIONAL))
    missing = [k for k in REQUIRED if k not in arrays]
    if missing or unknown:
        problems = []
        if missing:
            problems.append(f"missing {', '.join(missing)}")
        if unknown:
            problems.append(f"unexpected {', '.join(unknown)}")
        raise ValueError(
            f"{where}: {'; '.join(problems)} (it holds: {', '.join(sorted(arrays)) or 'nothing'}); "
            f"expected {', '.join(REQUIRED)} and optionally {', '.join(OPTIONAL)}"
        )
    return _build(f"{PREFIX}{path}", arrays, where)


def dataset_from_arrays(
    name: str,
    train_x: np.ndarray,
    train_y: np.ndarray,
    test_x: np.ndarray,
    test_y: np.ndarray,
    *,
    class_names: list[str] | tuple[str, ...] | np.ndarray | None = None,
    train_groups: np.ndarray | None = None,
    test_groups: np.ndarray | None = None,
) -> Dataset:
    """A :class:`Dataset` from numpy arrays, checked and standardised exactly as an ``npz:`` file is.

    For loaders of your own (:func:`edgefd.data.register_dataset`): read your files, then return
    ``dataset_from_arrays("mine", train_x, train_y, test_x, test_y)``. Inputs are float
    ``(N, C, H, W)`` / ``(N, T, F)`` / ``(N, D)``, labels integers ``0 .. C-1``; raises ValueError
    naming the problem.
    """
    given: dict[str, object] = {"train_x": train_x, "train_y": train_y, "test_x": test_x, "test_y": test_y}
    given |= {"class_names": class_names, "train_groups": train_groups, "test_groups": test_groups}
    arrays = {key: np.asarray(value) for key, value in given.items() if value is not None}
    return _build(name, arrays, f"dataset {name!r}")


def _build(name: str, arrays: dict[str, np.ndarray], where: str) -> Dataset:
    train_x = _inputs(arrays["train_x"], "train_x", where)
    test_x = _inputs(arrays["test_x"], "test_x", where)
    if train_x.shape[1:] != test_x.shape[1:]:
        raise ValueError(
            f"{where}: train_x samples are {train_x.shape[1:]} but test_x samples are "
            f"{test_x.shape[1:]}; both must have the same per-sample shape"
        )
    train_y = _labels(arrays["train_y"], "train_y", len(train_x), where)
    test_y = _labels(arrays["test_y"], "test_y", len(test_x), where)
    class_names = _class_names(arrays.get("class_names"), where)
    num_classes = _num_classes(train_y, test_y, class_names, arrays.get("num_classes"), where)
    train_groups = _groups(arrays.get("train_groups"), "train_groups", len(train_x), where)
    test_groups = _groups(arrays.get("test_groups"), "test_groups", len(test_x), where)
    if (train_groups is None) != (test_groups is None):
        raise ValueError(f"{where}: give both train_groups and test_groups, or neither")

    # Standardise per channel (axis 1 of images) or per feature (the last axis), with train statistics.
    axis = 1 if train_x.ndim == 4 else train_x.ndim - 1
    mean, std = channel_stats(train_x, channel_axis=axis)
    std = np.where(std <= 1e-8, 1.0, std)  # a constant feature: shift it, never divide by ~0
    shape = [1] * train_x.ndim
    shape[axis] = -1
    mean32, std32 = mean.reshape(shape).astype(np.float32), std.reshape(shape).astype(np.float32)

    def normalise(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray((x - mean32) / std32, dtype=np.float32))

    return Dataset(
        name=name,
        train_x=normalise(train_x),
        train_y=torch.from_numpy(train_y),
        test_x=normalise(test_x),
        test_y=torch.from_numpy(test_y),
        num_classes=num_classes,
        input_shape=tuple(int(s) for s in train_x.shape[1:]),
        mean=tuple(float(m) for m in mean),
        std=tuple(float(s) for s in std),
        input_scale=1.0,
        train_groups=None if train_groups is None else torch.from_numpy(train_groups),
        test_groups=None if test_groups is None else torch.from_numpy(test_groups),
        class_names=class_names,
    )


def _read(path: Path) -> dict[str, np.ndarray]:
    try:
        loaded = np.load(path, allow_pickle=False)
    except ValueError:  # numpy's word for "no .npy/.npz magic, and pickles are not allowed"
        raise ValueError(
            f"npz dataset {path}: not an .npz archive (numpy does not recognise the file); write it with "
            f"numpy.savez(PATH, train_x=..., train_y=..., test_x=..., test_y=...)"
        ) from None
    except (OSError, EOFError, zipfile.BadZipFile) as error:
        raise ValueError(f"npz dataset {path}: not a readable .npz archive ({error})") from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise ValueError(
            f"npz dataset {path}: this is a single .npy array, not an .npz archive; write the four arrays "
            f"with numpy.savez(PATH, train_x=..., train_y=..., test_x=..., test_y=...)"
        )
    with loaded as archive:
        arrays = {}
        for key in archive.files:
            try:
                arrays[key] = archive[key]
            except ValueError as error:
                if "Object arrays" not in str(error):
                    raise ValueError(f"npz dataset {path}: array {key} is unreadable ({error})") from None
                raise ValueError(
                    f"npz dataset {path}: {key} holds Python objects (dtype=object), which edgefd does not "
                    f"unpickle; store numbers as float32 / int64 arrays and class_names as np.array(names, dtype=str)"
                ) from None
            except (OSError, EOFError, zipfile.BadZipFile) as error:
                raise ValueError(f"npz dataset {path}: array {key} is unreadable ({error})") from None
            if not isinstance(arrays[key], np.ndarray):  # a zip member that is not a .npy file
                raise ValueError(f"npz dataset {path}: member {key} is not a numpy array; write it with numpy.savez")
        return arrays


def _inputs(x: np.ndarray, key: str, where: str) -> np.ndarray:
    if x.dtype.kind != "f":
        hint = " (for 8-bit images: x.astype(np.float32) / 255)" if x.dtype.kind in "iub" else ""
        raise ValueError(f"{where}: {key} has dtype {x.dtype}; inputs must be float32{hint}")
    if x.ndim not in _LAYOUTS:
        layouts = ", ".join(_LAYOUTS[n] for n in sorted(_LAYOUTS, reverse=True))
        hint = " (one grey image per row? add a channel axis: x[:, None])" if x.ndim == 3 else ""
        raise ValueError(f"{where}: {key} has shape {x.shape} (rank {x.ndim}); expected one of {layouts}{hint}")
    if len(x) == 0 or any(s == 0 for s in x.shape[1:]):
        raise ValueError(f"{where}: {key} has shape {x.shape}; it must hold at least one sample")
    x = x.astype(np.float32, copy=False)
    bad = ~np.isfinite(x)
    if bad.any():
        rows = np.unique(np.nonzero(bad.reshape(len(x), -1))[0])
        nan, inf = bool(np.isnan(x).any()), bool(np.isinf(x).any())
        kinds = " and ".join(k for k, found in (("NaN", nan), ("Inf", inf)) if found)
        overflow = " (values beyond float32's range, about 3.4e38, become Inf)" if inf else ""
        raise ValueError(
            f"{where}: {key} holds {kinds} in {len(rows)} sample(s), first at index {int(rows[0])}{overflow}; "
            f"drop or impute them"
        )
    return x


def _labels(y: np.ndarray, key: str, n: int, where: str) -> np.ndarray:
    if y.dtype.kind not in "iu":
        hint = " (convert with y.astype(np.int64))" if y.dtype.kind in "fb" else ""
        raise ValueError(f"{where}: {key} has dtype {y.dtype}; labels must be integers{hint}")
    if y.ndim != 1:
        raise ValueError(f"{where}: {key} has shape {y.shape}; labels must be one integer per sample (N,)")
    x_key = key.replace("_y", "_x")
    if len(y) != n:
        raise ValueError(f"{where}: {x_key} has {n} samples but {key} has {len(y)} labels")
    if len(y) and int(y.min()) < 0:
        raise ValueError(
            f"{where}: {key} holds label {int(y.min())}; labels must be 0 .. C-1 "
            f"(remap with np.unique(y, return_inverse=True))"
        )
    return y.astype(np.int64)


def _class_names(names: np.ndarray | None, where: str) -> tuple[str, ...] | None:
    if names is None:
        return None
    if names.dtype.kind not in "US" or names.ndim != 1 or len(names) == 0:
        raise ValueError(
            f"{where}: class_names has dtype {names.dtype} and shape {names.shape}; expected one "
            f"string per class, e.g. np.array(['cat', 'dog'])"
        )
    return tuple(n.decode() if isinstance(n, bytes) else str(n) for n in names.tolist())


def _num_classes(
    train_y: np.ndarray,
    test_y: np.ndarray,
    class_names: tuple[str, ...] | None,
    declared: np.ndarray | None,
    where: str,
) -> int:
    top = int(max(train_y.max(), test_y.max() if len(test_y) else 0))
    if declared is not None:
        if declared.dtype.kind not in "iu" or declared.ndim != 0:
            raise ValueError(f"{where}: num_classes must be a 0-d integer, e.g. np.int64(10)")
        if class_names is not None and int(declared) != len(class_names):
            raise ValueError(f"{where}: num_classes is {int(declared)} but class_names has {len(class_names)} names")
    declared_classes = None if declared is None else int(declared)
    if class_names is not None or declared_classes is not None:
        classes = len(class_names) if class_names is not None else int(declared_classes or 0)
        if top >= classes:
            key = "train_y" if int(train_y.max()) >= classes else "test_y"
            source = f"class_names has {classes} names" if class_names is not None else f"num_classes is {classes}"
            raise ValueError(f"{where}: {key} holds label {top} but {source}; labels must be 0 .. {classes - 1}")
        return classes
    classes = top + 1
    absent = sorted(set(range(classes)) - set(np.unique(train_y).tolist()))
    if absent:
        shown = ", ".join(str(c) for c in absent[:10]) + (" ..." if len(absent) > 10 else "")
        raise ValueError(
            f"{where}: labels run up to {top} but class(es) {shown} never occur in train_y; labels "
            f"must be 0 .. C-1 (1-based labels? subtract 1), or give class_names to declare classes without samples"
        )
    return classes


def _groups(groups: np.ndarray | None, key: str, n: int, where: str) -> np.ndarray | None:
    if groups is None:
        return None
    if groups.dtype.kind not in "iu" or groups.shape != (n,):
        raise ValueError(
            f"{where}: {key} has dtype {groups.dtype} and shape {groups.shape}; expected one integer "
            f"group id per sample, shape ({n},)"
        )
    if n and int(groups.min()) < 0:
        raise ValueError(f"{where}: {key} holds {int(groups.min())}; group ids must be 0 .. G-1")
    return groups.astype(np.int64)
