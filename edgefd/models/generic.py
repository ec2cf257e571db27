"""Generic small models for quick engine runs and sensor data (not from a paper).

- ``MLP``: flattens any per-sample input, then Linear-ReLU stacks.
- ``SmallCNN``: two conv3x3-ReLU-maxpool2 blocks and a linear classifier, for 8x8 / 28x28 / 32x32
  images with any channel count.
- ``SensorCNN1d``: a 1-D CNN over sensor windows laid out ``(N, T, F)`` (time, features).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ._common import flat_dim, image_shape, infer_output_shape

__all__ = ["MLP", "SmallCNN", "SensorCNN1d", "build_mlp", "build_cnn2", "build_cnn1d"]


class MLP(nn.Module):
    """Flatten -> [Linear -> ReLU] * len(hidden) -> Linear(num_classes).

    With ``in_features=64`` (8x8 digits), ``hidden=(64,)`` and 10 classes it has 4,810 parameters:
    the model of DFL's small CPU recipes (``edgefd reproduce dfl-iid``, ``dfl-noniid``).
    """

    def __init__(self, in_features: int, num_classes: int, hidden: Sequence[int] = (64,)):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        d = int(in_features)
        for h in hidden:
            layers += [nn.Linear(d, int(h)), nn.ReLU(inplace=True)]
            d = int(h)
        layers.append(nn.Linear(d, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class SmallCNN(nn.Module):
    """conv3x3(C->c1, pad 1)-ReLU-maxpool2 -> conv3x3(c1->c2, pad 1)-ReLU-maxpool2 -> flatten ->
    Linear(num_classes). Spatial sizes: 8 -> 4 -> 2, 28 -> 14 -> 7, 32 -> 16 -> 8."""

    def __init__(self, shape: tuple[int, int, int], num_classes: int, channels: Sequence[int] = (16, 32)):
        super().__init__()
        c1, c2 = (int(c) for c in channels)
        self.features = nn.Sequential(
            nn.Conv2d(shape[0], c1, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Flatten(),
        )
        (d,) = infer_output_shape("cnn2", self.features, shape)
        self.classifier = nn.Linear(d, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class SensorCNN1d(nn.Module):
    """1-D CNN for sensor windows. Input ``(N, T, F)``; it is transposed to ``(N, F, T)`` and passed
    through Conv1d(F->c1, k)-ReLU -> Conv1d(c1->c2, k)-ReLU (same padding), then the mean over time
    and Linear(c2 -> num_classes). Works for any window length T >= 1."""

    def __init__(self, num_features: int, num_classes: int, channels: Sequence[int] = (32, 64), kernel_size: int = 5):
        super().__init__()
        c1, c2 = (int(c) for c in channels)
        k = int(kernel_size)
        if k % 2 != 1:
            raise ValueError("cnn1d: kernel_size must be odd (same padding)")
        self.num_features = int(num_features)
        self.conv = nn.Sequential(
            nn.Conv1d(self.num_features, c1, k, padding=k // 2),
            nn.ReLU(inplace=True),
            nn.Conv1d(c1, c2, k, padding=k // 2),
            nn.ReLU(inplace=True),
        )
        self.fc = nn.Linear(c2, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x.transpose(1, 2))  # (N, F, T) -> (N, c2, T)
        return self.fc(h.mean(dim=2))


def build_mlp(*, in_channels: int, num_classes: int, input_shape: Sequence[int], hidden: Sequence[int] = (64,)) -> MLP:
    """``input_shape`` is the per-sample shape, flattened as is: (C,H,W), (T,F) or (D,)."""
    shape = tuple(int(s) for s in input_shape)
    if len(shape) == 3 and shape[0] != in_channels:
        raise ValueError(f"mlp: input_shape {shape} has {shape[0]} channels but in_channels={in_channels}")
    return MLP(flat_dim(shape), num_classes, hidden)


def build_cnn2(
    *, in_channels: int, num_classes: int, input_shape: Sequence[int], channels: Sequence[int] = (16, 32)
) -> SmallCNN:
    return SmallCNN(image_shape("cnn2", in_channels, input_shape), num_classes, channels)


def build_cnn1d(
    *,
    in_channels: int,
    num_classes: int,
    input_shape: Sequence[int],
    channels: Sequence[int] = (32, 64),
    kernel_size: int = 5,
) -> SensorCNN1d:
    """``input_shape`` is ``(T, F)``. ``in_channels`` may be F (conv1d channels) or 1."""
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 2:
        raise ValueError(f"cnn1d: expected input_shape (T, F), got {shape}")
    num_features = shape[1]
    if in_channels not in (1, num_features):
        raise ValueError(f"cnn1d: in_channels={in_channels} must be 1 or F={num_features} for input_shape {shape}")
    return SensorCNN1d(num_features, num_classes, channels, kernel_size)
