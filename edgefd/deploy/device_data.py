"""A device's own data on disk: the `data.npz` of `edgefd client --data-dir`, which a server's
`--holdout-dir` also reads (its test arrays are the server's held-out set)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from edgefd.algorithms.base import ClientData

DATA_FILE = "data.npz"


@dataclass
class DeviceDataset:
    """What the run needs to know of a device's own data to build its model."""

    input_shape: tuple[int, ...]
    num_classes: int


def load_device_data(folder: str | Path) -> tuple[ClientData, DeviceDataset]:
    """`folder/data.npz` with arrays train_x, train_y, test_x, test_y, num_classes (a 0-d integer
    array: the run's number of classes) and optionally train_ids (globally unique sample ids;
    default 0..n-1). x: float32 samples shaped like the run's dataset; y: labels in [0, num_classes)."""
    path = Path(folder) / DATA_FILE
    if not path.is_file():
        raise ValueError(f"--data-dir {folder}: no {DATA_FILE} (arrays train_x, train_y, test_x, test_y)")
    with np.load(path) as arrays:
        missing = [k for k in ("train_x", "train_y", "test_x", "test_y", "num_classes") if k not in arrays]
        if missing:
            raise ValueError(f"{path}: missing array(s) {', '.join(missing)}")
        values = {k: arrays[k] for k in arrays.files}
    num_classes = int(values["num_classes"])
    train_x, test_x = (torch.from_numpy(np.asarray(values[k], np.float32)) for k in ("train_x", "test_x"))
    train_y, test_y = (torch.from_numpy(np.asarray(values[k], np.int64)) for k in ("train_y", "test_y"))
    if train_x.shape[1:] != test_x.shape[1:] or len(train_x) != len(train_y) or len(test_x) != len(test_y):
        raise ValueError(
            f"{path}: train/test shapes disagree ({tuple(train_x.shape)}, {tuple(train_y.shape)}, "
            f"{tuple(test_x.shape)}, {tuple(test_y.shape)})"
        )
    for name, y in (("train_y", train_y), ("test_y", test_y)):
        if len(y) and (int(y.min()) < 0 or int(y.max()) >= num_classes):
            raise ValueError(f"{path}: {name} has labels outside [0, {num_classes})")
    ids = torch.from_numpy(np.asarray(values.get("train_ids", np.arange(len(train_x))), np.int64))
    data = ClientData(train_x, train_y, test_x, test_y, ids, num_classes)
    return data, DeviceDataset(tuple(train_x.shape[1:]), num_classes)
