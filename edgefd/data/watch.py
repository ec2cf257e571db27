"""Smartwatch IMU activity data (seglearn's ``watch_dataset.npy``) cut into fixed-length windows.

This is edgefd's offline stand-in for FedICT's sensor data: 140 recordings of 6 channels
(accelerometer + gyroscope, 50 Hz) from 10 subjects doing 7 shoulder exercises. Each subject
becomes a natural group, so a per-subject partition (one subject per client) exists.

Each recording is split in time *before* windowing (first 80 % train, last 20 % test), so no
overlapping window straddles train and test, and every subject keeps every class on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .bundled import package_file
from .dataset import Dataset, DatasetNotFoundError, channel_stats

WATCH_PARTS = ("data", "watch_dataset.npy")
"""Location of the recordings inside the seglearn package."""
SAMPLE_RATE_HZ = 50


@dataclass(frozen=True)
class WatchConfig:
    """How recordings become windows."""

    window: int = 100
    """Steps per window (100 = 2 s at 50 Hz)."""
    step: int = 50
    """Steps between window starts (50 = 50 % overlap)."""
    test_fraction: float = 0.2
    """Trailing share of each recording (by time) whose windows form the test set."""

    def __post_init__(self) -> None:
        if self.window < 1 or self.step < 1:
            raise ValueError(f"window and step must be >= 1, got {self.window} and {self.step}")
        if not 0.0 < self.test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in (0, 1), got {self.test_fraction}")


def windows(series: np.ndarray, window: int, step: int) -> np.ndarray:
    """All full windows of a (T, F) series as (n, window, F); n = 0 when T < window."""
    if len(series) < window:
        return np.zeros((0, window, series.shape[1]), dtype=series.dtype)
    view = np.lib.stride_tricks.sliding_window_view(series, window, axis=0)[::step]  # (n, F, window)
    return np.ascontiguousarray(view.transpose(0, 2, 1))


def load_watch_dataset(config: WatchConfig = WatchConfig()) -> Dataset:
    """Windowed watch data: ``(N, window, 6)`` float32, 7 classes, groups = subject (0..9)."""
    path = package_file("seglearn", *WATCH_PARTS)
    if path is None:
        raise DatasetNotFoundError(
            "'watch' comes with seglearn (file seglearn/data/watch_dataset.npy): pip install seglearn"
        )
    raw = np.load(path, allow_pickle=True).item()
    _, subjects = np.unique(np.asarray(raw["subject"]), return_inverse=True)
    labels = np.asarray(raw["y"], dtype=np.int64)

    parts: dict[str, list[np.ndarray]] = {
        k: [] for k in ("train_x", "train_y", "train_g", "test_x", "test_y", "test_g")
    }
    train_series = []
    for series, label, subject in zip(raw["X"], labels, subjects):
        series = np.asarray(series, dtype=np.float64)
        cut = int(round(len(series) * (1.0 - config.test_fraction)))
        train_series.append(series[:cut])
        for split, segment in (("train", series[:cut]), ("test", series[cut:])):
            w = windows(segment, config.window, config.step)
            parts[f"{split}_x"].append(w)
            parts[f"{split}_y"].append(np.full(len(w), label, dtype=np.int64))
            parts[f"{split}_g"].append(np.full(len(w), subject, dtype=np.int64))
    arrays = {k: np.concatenate(v) for k, v in parts.items()}

    # Per-channel standardisation with statistics of the training time steps only.
    mean, std = channel_stats(np.concatenate(train_series), channel_axis=1)

    def normalise(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(((x - mean) / std).astype(np.float32))

    names = raw.get("y_labels")
    return Dataset(
        name="watch",
        train_x=normalise(arrays["train_x"]),
        train_y=torch.from_numpy(arrays["train_y"]),
        test_x=normalise(arrays["test_x"]),
        test_y=torch.from_numpy(arrays["test_y"]),
        num_classes=int(labels.max()) + 1,
        input_shape=(config.window, arrays["train_x"].shape[2]),
        mean=tuple(float(m) for m in mean),
        std=tuple(float(s) for s in std),
        input_scale=1.0,
        train_groups=torch.from_numpy(arrays["train_g"]),
        test_groups=torch.from_numpy(arrays["test_g"]),
        class_names=tuple(str(n) for n in names) if names is not None else None,
    )
