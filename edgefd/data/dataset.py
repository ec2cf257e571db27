"""The in-memory dataset every loader returns, and the one error a missing dataset raises.

Federated simulations slice the same arrays for many clients, so a dataset here is just tensors
already normalised and ready to index, plus the facts (classes, shape, normalisation, groups) that
partitioners, models and the ONNX export need.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


class DatasetNotFoundError(Exception):
    """A dataset's files (or the package that bundles them) are not on this machine.

    The message always says how to get the data: which package to install, which folder layout
    to create and pass as ``root`` / ``--data-root``, or that ``download=True`` / ``--download``
    fetches it (where a network is available).
    """


@dataclass(frozen=True, eq=False)
class Dataset:
    """A train/test dataset held in memory as normalised tensors.

    The tensors are shared by every caller of :func:`edgefd.data.load_dataset` in a process
    (they are cached): index them, never modify them in place.
    """

    name: str
    """Registry name, e.g. ``"fmnist"``."""
    train_x: torch.Tensor
    """float32 inputs, ``(N, C, H, W)`` for images or ``(N, T, F)`` for sensor windows, normalised."""
    train_y: torch.Tensor
    """int64 labels in ``[0, num_classes)``."""
    test_x: torch.Tensor
    """float32 test inputs, same layout and normalisation as ``train_x``."""
    test_y: torch.Tensor
    """int64 test labels."""
    num_classes: int
    """Number of classes (labels are ``0 .. num_classes - 1``)."""
    input_shape: tuple[int, ...]
    """Shape of one sample, e.g. ``(1, 28, 28)`` or ``(100, 6)``."""
    mean: tuple[float, ...]
    """Per-channel (images) or per-feature (sensors) mean subtracted after scaling."""
    std: tuple[float, ...]
    """Per-channel / per-feature standard deviation divided by after subtracting ``mean``."""
    input_scale: float = 1.0
    """Raw values are divided by this first (255 for 8-bit images): ``x = (raw / scale - mean) / std``."""
    train_groups: torch.Tensor | None = None
    """int64 natural group (subject / writer, ``0 .. G-1``) of each training sample, if known."""
    test_groups: torch.Tensor | None = None
    """int64 group of each test sample, if known."""
    class_names: tuple[str, ...] | None = None
    """Human-readable class names, if the source provides them."""

    @property
    def num_groups(self) -> int:
        """Number of natural groups (0 when the dataset has none)."""
        if self.train_groups is None:
            return 0
        return int(self.train_groups.max().item()) + 1 if len(self.train_groups) else 0

    def __repr__(self) -> str:
        groups = f", groups={self.num_groups}" if self.train_groups is not None else ""
        return (
            f"Dataset({self.name!r}, train={len(self.train_y)}, test={len(self.test_y)}, "
            f"shape={self.input_shape}, classes={self.num_classes}{groups})"
        )


def channel_stats(x: np.ndarray, channel_axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std per channel of ``x`` (float64 accumulation, std floored to avoid division by 0)."""
    channel_axis %= x.ndim
    axes = tuple(a for a in range(x.ndim) if a != channel_axis)
    mean = x.mean(axis=axes, dtype=np.float64)
    # the squared deviations in float64 a block of samples at a time (x.std would make a float64 copy
    # of all of x: 376 MB for Fashion-MNIST)
    shape = [1] * x.ndim
    shape[channel_axis] = -1
    squares = np.zeros_like(mean)
    for start in range(0, len(x), STATS_BLOCK):
        deviation = x[start : start + STATS_BLOCK].astype(np.float64) - mean.reshape(shape)
        squares += np.square(deviation).sum(axis=axes)
    count = x.size // max(x.shape[channel_axis], 1)
    std = np.sqrt(squares / max(count, 1))
    return mean, np.maximum(std, 1e-8)


STATS_BLOCK = 4096
"""Samples per block of `channel_stats`."""


def image_dataset(
    name: str,
    train_x: np.ndarray,
    train_y: np.ndarray,
    test_x: np.ndarray,
    test_y: np.ndarray,
    num_classes: int,
    input_scale: float = 255.0,
    class_names: tuple[str, ...] | None = None,
) -> Dataset:
    """Build a :class:`Dataset` from raw ``(N, C, H, W)`` image arrays.

    Inputs are scaled by ``1 / input_scale`` and standardised per channel with statistics of the
    training set only, so the test set never leaks into the normalisation.
    """
    if train_x.ndim != 4 or test_x.ndim != 4:
        raise ValueError(f"{name}: expected (N, C, H, W) images, got {train_x.shape} and {test_x.shape}")
    # in place: a full-size float32 copy of the images is the only one made (Fashion-MNIST: 188 MB)
    train: np.ndarray = train_x.astype(np.float32)
    test: np.ndarray = test_x.astype(np.float32)
    for images in (train, test):
        images /= np.float32(input_scale)
    mean, std = channel_stats(train, channel_axis=1)
    shape = (1, -1, 1, 1)
    for images in (train, test):
        images -= mean.reshape(shape).astype(np.float32)
        images /= std.reshape(shape).astype(np.float32)
    return Dataset(
        name=name,
        train_x=torch.from_numpy(np.ascontiguousarray(train, dtype=np.float32)),
        train_y=torch.from_numpy(np.asarray(train_y, dtype=np.int64)),
        test_x=torch.from_numpy(np.ascontiguousarray(test, dtype=np.float32)),
        test_y=torch.from_numpy(np.asarray(test_y, dtype=np.int64)),
        num_classes=int(num_classes),
        input_shape=tuple(int(s) for s in train.shape[1:]),
        mean=tuple(float(m) for m in mean),
        std=tuple(float(s) for s in std),
        input_scale=float(input_scale),
        class_names=class_names,
    )
