"""The in-memory dataset every loader returns, and the one error a missing dataset raises.

Federated simulations slice the same arrays for many clients, so a dataset here is just tensors
already normalised and ready to index, plus the facts (classes, shape, normalisation, groups) that
partitioners, models and the ONNX export need.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

import numpy as np
import torch


class DatasetNotFoundError(Exception):
    """A dataset's files (or the package that bundles them) are not on this machine.

    The message always says how to get the data: which package to install, which folder layout
    to create and pass as ``root`` / ``--data-root``, or how to fetch it (:func:`download_hint`).
    """


def download_hint(name: str, root: object) -> str:
    """How to fetch a missing on-disk dataset into ``root``, in Python and from the shell. Only
    `edgefd partition` takes ``--download``: the error reaches `simulate`, `server` and devices too,
    so it names that command in full rather than a flag theirs lack."""
    return (
        f"or fetch it where a network is available: load_dataset({name!r}, root=DIR, download=True) in Python, "
        f"or `edgefd partition --dataset {name} --data-root {shlex.quote(str(root))} --download` from the shell"
    )


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
    raw: RawImages | None = None
    """Set when the dataset was loaded ``on_demand`` (a device that takes only its share): the 8-bit
    images are kept as they came, ``train_x`` and ``test_x`` are empty, and :meth:`train_rows` /
    :meth:`test_rows` normalise only the rows asked for (the same numbers ``train_x`` would hold)."""

    def train_rows(self, indices: torch.Tensor) -> torch.Tensor:
        """The normalised training inputs at ``indices`` (int64), whether loaded whole or on demand."""
        return self.train_x[indices] if self.raw is None else self.raw.rows(self.raw.train, indices)

    def test_rows(self, indices: torch.Tensor) -> torch.Tensor:
        """The normalised test inputs at ``indices`` (int64), whether loaded whole or on demand."""
        return self.test_x[indices] if self.raw is None else self.raw.rows(self.raw.test, indices)

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


@dataclass(frozen=True, eq=False)
class ImageNormaliser:
    """``(raw / input_scale - mean) / std`` in float32, element by element: the same numbers for a
    few rows as for the whole set. It holds only the statistics, so a client that keeps its share
    of the images as bytes can carry it (`ClientData.normalise`) without the whole set."""

    input_scale: float
    mean: np.ndarray
    """float32, one per channel."""
    std: np.ndarray
    """float32, one per channel."""

    def array(self, images: np.ndarray) -> np.ndarray:
        x = images.astype(np.float32)
        x /= np.float32(self.input_scale)
        x -= self.mean.reshape(1, -1, 1, 1)
        x /= self.std.reshape(1, -1, 1, 1)
        return x

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(self.array(images.numpy())))


@dataclass(frozen=True, eq=False)
class RawImages:
    """8-bit ``(N, C, H, W)`` images and the normalisation that makes a Dataset's float32 inputs of them.

    Fashion-MNIST's training images are 47 MB as bytes and 188 MB as float32: a process that needs
    only some of them (a deployed client), or that hands them out to clients that keep them as
    bytes (a simulation), keeps the bytes and normalises rows when they are used."""

    train: np.ndarray
    test: np.ndarray
    normaliser: ImageNormaliser

    def rows(self, images: np.ndarray, indices: torch.Tensor) -> torch.Tensor:
        return self.normaliser(torch.from_numpy(images[np.asarray(indices, dtype=np.int64)]))


def uint8_channel_stats(images: np.ndarray, input_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std per channel (axis 1) of ``images / input_scale`` for 8-bit images, from a
    histogram of each channel's 256 values: no float copy of the images is made. The values are
    the float32 ones ``image_dataset`` normalises, and the sums are float64 as in
    :func:`channel_stats` (they agree with it to ~1e-16, and exactly once cast to float32)."""
    channels = images.shape[1]
    counts = np.zeros((channels, 256), np.int64)
    for start in range(0, len(images), STATS_BLOCK):
        block = images[start : start + STATS_BLOCK]
        for c in range(channels):
            counts[c] += np.bincount(block[:, c].ravel(), minlength=256)
    values = (np.arange(256, dtype=np.uint8).astype(np.float32) / np.float32(input_scale)).astype(np.float64)
    n = np.maximum(counts.sum(axis=1), 1)
    mean = (counts * values).sum(axis=1) / n
    std = np.sqrt((counts * np.square(values[None, :] - mean[:, None])).sum(axis=1) / n)
    return mean, np.maximum(std, 1e-8)


def image_dataset(
    name: str,
    train_x: np.ndarray,
    train_y: np.ndarray,
    test_x: np.ndarray,
    test_y: np.ndarray,
    num_classes: int,
    input_scale: float = 255.0,
    class_names: tuple[str, ...] | None = None,
    on_demand: bool = False,
) -> Dataset:
    """Build a :class:`Dataset` from raw ``(N, C, H, W)`` image arrays.

    Inputs are scaled by ``1 / input_scale`` and standardised per channel with statistics of the
    training set only, so the test set never leaks into the normalisation. ``on_demand`` (8-bit
    images only): keep the bytes (``Dataset.raw``) and normalise rows when they are asked for.
    """
    if train_x.ndim != 4 or test_x.ndim != 4:
        raise ValueError(f"{name}: expected (N, C, H, W) images, got {train_x.shape} and {test_x.shape}")
    shape = tuple(int(s) for s in train_x.shape[1:])

    def made(
        train: torch.Tensor, test: torch.Tensor, mean: np.ndarray, std: np.ndarray, raw: RawImages | None
    ) -> Dataset:
        return Dataset(
            name=name,
            train_x=train,
            train_y=torch.from_numpy(np.asarray(train_y, dtype=np.int64)),
            test_x=test,
            test_y=torch.from_numpy(np.asarray(test_y, dtype=np.int64)),
            num_classes=int(num_classes),
            input_shape=shape,
            mean=tuple(float(m) for m in mean),
            std=tuple(float(s) for s in std),
            input_scale=float(input_scale),
            class_names=class_names,
            raw=raw,
        )

    if train_x.dtype == np.uint8 and test_x.dtype == np.uint8:
        mean, std = uint8_channel_stats(train_x, input_scale)
        normaliser = ImageNormaliser(float(input_scale), mean.astype(np.float32), std.astype(np.float32))
        raw = RawImages(train_x, test_x, normaliser)
        if on_demand:
            empty = torch.empty((0, *shape), dtype=torch.float32)
            return made(empty, empty, mean, std, raw)
        # a full-size float32 copy of the images is the only one made (Fashion-MNIST: 188 MB)
        whole_train, whole_test = (torch.from_numpy(normaliser.array(x)) for x in (train_x, test_x))
        return made(whole_train, whole_test, mean, std, None)
    # in place: a full-size float32 copy of the images is the only one made
    train = train_x.astype(np.float32)
    test = test_x.astype(np.float32)
    for images in (train, test):
        images /= np.float32(input_scale)
    mean, std = channel_stats(train, channel_axis=1)
    for images in (train, test):
        images -= mean.reshape(1, -1, 1, 1).astype(np.float32)
        images /= std.reshape(1, -1, 1, 1).astype(np.float32)
    train_t = torch.from_numpy(np.ascontiguousarray(train, dtype=np.float32))
    test_t = torch.from_numpy(np.ascontiguousarray(test, dtype=np.float32))
    return made(train_t, test_t, mean, std, None)
