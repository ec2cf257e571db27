"""Shared building blocks, shape handling and initialisers for the model zoo.

Everything here uses plain ONNX-friendly ops (Conv, BatchNorm, ReLU, Linear, pooling, Flatten, Add,
Concat, Reshape/Transpose) and never touches a device: models are built on the CPU and the caller moves
them with ``.to(device)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
from torch import nn

__all__ = [
    "BasicBlock",
    "ConvClassifier",
    "Bottleneck",
    "SplitModel",
    "conv1x1",
    "conv3x3",
    "image_shape",
    "flat_dim",
    "infer_output_shape",
    "init_kaiming_fan_out",
    "init_xavier",
]

ModuleT = TypeVar("ModuleT", bound=nn.Module)


# --------------------------------------------------------------------------------------------------
# Shapes
# --------------------------------------------------------------------------------------------------
def image_shape(name: str, in_channels: int, input_shape: Sequence[int]) -> tuple[int, int, int]:
    """Normalise ``input_shape`` of an image model to ``(C, H, W)``.

    Accepts ``(C, H, W)`` (C must equal ``in_channels``) or ``(H, W)`` (C is taken from
    ``in_channels``).
    """
    shape = tuple(int(s) for s in input_shape)
    if len(shape) == 2:
        shape = (int(in_channels),) + shape
    if len(shape) != 3:
        raise ValueError(f"{name}: expected an image input_shape (C, H, W) or (H, W), got {tuple(input_shape)}")
    if shape[0] != in_channels:
        raise ValueError(f"{name}: input_shape {shape} has {shape[0]} channels but in_channels={in_channels}")
    if min(shape) < 1:
        raise ValueError(f"{name}: input_shape must be positive, got {shape}")
    return shape


def flat_dim(shape: Sequence[int]) -> int:
    return int(math.prod(int(s) for s in shape))


@torch.no_grad()
def infer_output_shape(name: str, module: nn.Module, in_shape: Sequence[int]) -> tuple[int, ...]:
    """Per-sample output shape of ``module`` on a zero input of per-sample shape ``in_shape``.

    Used at build time to size the first Linear layer after a conv stack. Consumes no RNG. Raises
    ``ValueError`` when the input is too small for the architecture.
    """
    was_training = module.training
    module.eval()
    try:
        out = module(torch.zeros(1, *in_shape))
    except RuntimeError as exc:  # e.g. "Output size is too small", "Kernel size can't be greater"
        raise ValueError(
            f"{name} does not support input shape {tuple(in_shape)}: the feature map becomes empty"
        ) from exc
    finally:
        module.train(was_training)
    if out.numel() == 0:
        raise ValueError(f"{name} does not support input shape {tuple(in_shape)}: the feature map becomes empty")
    return tuple(out.shape[1:])


# --------------------------------------------------------------------------------------------------
# Initialisers
# --------------------------------------------------------------------------------------------------
def init_kaiming_fan_out(model: ModuleT) -> ModuleT:
    """FedML/FedGKT ResNet init: conv ``kaiming_normal_(fan_out, relu)``, BN weight 1 / bias 0,
    Linear left at the PyTorch default."""
    for m in model.modules():
        if isinstance(m, (nn.Conv1d, nn.Conv2d)):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)) and m.affine:
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    return model


def init_xavier(model: ModuleT) -> ModuleT:
    """FedZKT's "Glorot" init (Alg. 1 of the paper; docs/methods/fedzkt.md#initialisation):
    Xavier-uniform conv/linear weights, zero biases, BN weight 1 / bias 0."""
    for m in model.modules():
        if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)) and m.affine:
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    return model


INITS: dict[str, Callable[[nn.Module], nn.Module]] = {
    "default": lambda m: m,
    "kaiming": init_kaiming_fan_out,
    "xavier": init_xavier,
}


def apply_init(model: nn.Module, init: str) -> nn.Module:
    try:
        fn = INITS[init]
    except KeyError:
        raise ValueError(f"unknown init {init!r}; known: {sorted(INITS)}") from None
    return fn(model)


# --------------------------------------------------------------------------------------------------
# ResNet blocks (FedML / FedGKT / FedICT / FedCache conventions; all convs bias=False)
# --------------------------------------------------------------------------------------------------
def conv3x3(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


def conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN (+ shortcut) - ReLU. Shortcut: identity, or conv1x1-BN when the
    stride or the width changes (ResNet "option B")."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample: nn.Module | None = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(conv1x1(inplanes, planes, stride), nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """conv1x1-BN-ReLU-conv3x3(stride)-BN-ReLU-conv1x1(4x)-BN (+ shortcut) - ReLU."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1):
        super().__init__()
        width = planes * self.expansion
        self.conv1 = conv1x1(inplanes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = conv1x1(planes, width)
        self.bn3 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or inplanes != width:
            self.downsample = nn.Sequential(conv1x1(inplanes, width, stride), nn.BatchNorm2d(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


def make_stage(
    block: type[BasicBlock] | type[Bottleneck], inplanes: int, planes: int, blocks: int, stride: int
) -> tuple[nn.Sequential, int]:
    """``blocks`` residual blocks; the first one carries the stride. Returns (stage, out_channels)."""
    layers = [block(inplanes, planes, stride)]
    inplanes = planes * block.expansion
    for _ in range(1, blocks):
        layers.append(block(inplanes, planes, 1))
    return nn.Sequential(*layers), inplanes


# --------------------------------------------------------------------------------------------------
# Extractor / predictor split (FedICT, FedGKT-style SLIA-FE methods)
# --------------------------------------------------------------------------------------------------
class SplitModel(nn.Module):
    """A client model split into a feature ``extractor`` and a ``predictor``.

    ``forward(x) == predict(extract(x))``. ``feature_shape`` is the per-sample shape of
    ``extract(x)`` for the input shape the model was built for (spatial sizes scale with the input
    for convolutional extractors).
    """

    feature_shape: tuple[int, ...]

    def __init__(self, extractor: nn.Module, predictor: nn.Module, feature_shape: Sequence[int]):
        super().__init__()
        self.extractor = extractor
        self.predictor = predictor
        self.feature_shape = tuple(int(s) for s in feature_shape)

    def extract(self, x: torch.Tensor) -> torch.Tensor:
        return self.extractor(x)

    def predict(self, features: torch.Tensor) -> torch.Tensor:
        return self.predictor(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.predict(self.extract(x))


class GlobalAvgPoolFlatten(nn.Module):
    """AdaptiveAvgPool2d(1) + flatten: exports to GlobalAveragePool + Flatten."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.pool(x), 1)


# --------------------------------------------------------------------------------------------------
# Conv stack + fully connected head, with the flatten width inferred from the input shape
# --------------------------------------------------------------------------------------------------
class ConvClassifier(nn.Module):
    """``features`` (conv/pool stack) -> Flatten -> [Linear -> ReLU] * len(hidden) -> Linear(C).

    The first Linear's width is inferred from the per-sample input ``shape`` at build time, so the
    same layer list serves 8x8, 28x28 and 32x32 inputs (raising ``ValueError`` when the conv stack
    would shrink the map to nothing).
    """

    def __init__(
        self, name: str, features: nn.Sequential, shape: Sequence[int], hidden: Sequence[int], num_classes: int
    ):
        super().__init__()
        self.features = features
        feat_shape = infer_output_shape(name, features, shape)
        d = flat_dim(feat_shape)
        layers: list[nn.Module] = [nn.Flatten()]
        for h in hidden:
            layers += [nn.Linear(d, int(h)), nn.ReLU(inplace=True)]
            d = int(h)
        layers.append(nn.Linear(d, num_classes))
        self.classifier = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))
