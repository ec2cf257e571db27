"""DFL's models (paper Sec. IV-A / Table IV; docs/methods/dfl.md#model-sizes).

The paper says "CNN models used in McMahan et al." but McMahan's CNNs do not match Table IV's
sizes; edgefd reconstructs size-matched CNNs (4 bytes per parameter + ~1.5 KB serialisation):

- ``dfl_cnn_mnist``  1x28x28: conv5(1->20)-pool-ReLU, conv5(20->50)-pool-ReLU, FC 800->50->C.
  66,130 params for C = 10 (Table IV 265.9 KB).
- ``dfl_cnn_cifar``  3x32x32: LeNet-5 of the PyTorch tutorial, conv5(3->6)-ReLU-pool,
  conv5(6->16)-ReLU-pool, FC 400->120->84->C. 62,006 params for C = 10 (249.7 KB) and 62,856 for
  C = 20 (CIFAR-100 coarse, 253.1 KB).
- ``dfl_cnn_femnist`` 1x28x28: conv5(1->16)-pool-ReLU, conv5(16->32)-pool-ReLU, FC 512->256->C.
  160,510 params for C = 62 (643.5 KB). NOTE: the paper's text says FEMNIST uses "the MNIST CNN with
  62 outputs", which would be 68,782 params (275.1 KB) and contradicts Table IV; the Table-IV
  consistent net is the default, the text variant is ``dfl_cnn_mnist`` with ``num_classes=62``.
- ``resnet20a``: CIFAR ResNet-20 of He et al. with the parameter-free "option A" shortcut
  (strided identity + zero channel padding), 269,722 params for 3x32x32, C = 10 (torchvision has no
  ResNet-20; the paper's shortcut type is unknown, edgefd chooses option A).
- ``mobilenet_v2`` / ``vgg16``: ``torchvision.models`` builders with the first conv adapted to the
  channel count. Table IV cannot validate them (docs/methods/dfl.md#model-sizes).

No dropout and no BN in the CNNs; PyTorch default initialisation. Input sizes: the flatten width is
inferred, so the CNNs accept any input the conv stack supports (28x28 and 32x32 with 1 or 3
channels; 8x8 is too small for two unpadded 5x5 convs and raises ``ValueError``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ._common import (
    BasicBlock,
    ConvClassifier,
    GlobalAvgPoolFlatten,
    conv3x3,
    image_shape,
    init_kaiming_fan_out,
)

__all__ = [
    "build_dfl_cnn_mnist",
    "build_dfl_cnn_cifar",
    "build_dfl_cnn_femnist",
    "build_resnet20a",
    "build_tv_mobilenet_v2",
    "build_tv_vgg16",
    "lenet5_features",
]


def build_dfl_cnn_mnist(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> ConvClassifier:
    shape = image_shape("dfl_cnn_mnist", in_channels, input_shape)
    features = nn.Sequential(
        nn.Conv2d(shape[0], 20, 5), nn.MaxPool2d(2), nn.ReLU(inplace=True),
        nn.Conv2d(20, 50, 5), nn.MaxPool2d(2), nn.ReLU(inplace=True),
    )  # fmt: skip
    return ConvClassifier("dfl_cnn_mnist", features, shape, (50,), num_classes)


def lenet5_features(in_channels: int, first_padding: int = 0) -> nn.Sequential:
    """conv5(C->6)-ReLU-pool2, conv5(6->16)-ReLU-pool2 (LeNet-5 / kuangliu ``LeNet``)."""
    return nn.Sequential(
        nn.Conv2d(in_channels, 6, 5, padding=first_padding), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(inplace=True), nn.MaxPool2d(2),
    )  # fmt: skip


def build_dfl_cnn_cifar(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> ConvClassifier:
    shape = image_shape("dfl_cnn_cifar", in_channels, input_shape)
    return ConvClassifier("dfl_cnn_cifar", lenet5_features(shape[0]), shape, (120, 84), num_classes)


def build_dfl_cnn_femnist(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> ConvClassifier:
    shape = image_shape("dfl_cnn_femnist", in_channels, input_shape)
    features = nn.Sequential(
        nn.Conv2d(shape[0], 16, 5), nn.MaxPool2d(2), nn.ReLU(inplace=True),
        nn.Conv2d(16, 32, 5), nn.MaxPool2d(2), nn.ReLU(inplace=True),
    )  # fmt: skip
    return ConvClassifier("dfl_cnn_femnist", features, shape, (256,), num_classes)


# --------------------------------------------------------------------------------------------------
# ResNet-20, option A shortcuts
# --------------------------------------------------------------------------------------------------
class _ShortcutA(nn.Module):
    """Parameter-free shortcut: subsample by 2 and zero-pad the channels (He et al., option A)."""

    def __init__(self, pad: int):
        super().__init__()
        self.pad = int(pad)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.pad, self.pad))


class _BlockA(BasicBlock):
    def __init__(self, inplanes: int, planes: int, stride: int = 1):
        super().__init__(inplanes, planes, stride)
        if self.downsample is not None:
            if stride != 2 or planes != 2 * inplanes:
                raise ValueError("option-A shortcut needs stride 2 and doubled width")
            self.downsample = _ShortcutA(planes // 4)


class ResNet20A(nn.Module):
    def __init__(self, shape: tuple[int, int, int], num_classes: int, n: int = 3):
        super().__init__()
        self.conv1 = conv3x3(shape[0], 16)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        stages = []
        c = 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            blocks = [_BlockA(c, planes, stride)] + [_BlockA(planes, planes) for _ in range(n - 1)]
            stages.append(nn.Sequential(*blocks))
            c = planes
        self.layer1, self.layer2, self.layer3 = stages
        self.pool = GlobalAvgPoolFlatten()
        self.fc = nn.Linear(64, num_classes)
        init_kaiming_fan_out(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(self.pool(x))


def build_resnet20a(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> ResNet20A:
    return ResNet20A(image_shape("resnet20a", in_channels, input_shape), num_classes)


# --------------------------------------------------------------------------------------------------
# torchvision models (DFL's "popular models from Torchvision")
# --------------------------------------------------------------------------------------------------
def build_tv_mobilenet_v2(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> nn.Module:
    """``torchvision.models.mobilenet_v2(num_classes=C)`` (2,236,682 params for 3 channels, C = 10),
    first conv rebuilt for ``in_channels`` when it is not 3. Five stride-2 stages: 32 -> 1,
    28 -> 1, 8 -> 1 (adaptive pooling), so any input >= 1 pixel works."""
    from torchvision.models import mobilenet_v2

    shape = image_shape("mobilenet_v2", in_channels, input_shape)
    model = mobilenet_v2(weights=None, num_classes=num_classes)
    if shape[0] != 3:
        old = model.features[0][0]
        model.features[0][0] = nn.Conv2d(shape[0], old.out_channels, 3, stride=2, padding=1, bias=False)
        nn.init.kaiming_normal_(model.features[0][0].weight, mode="fan_out")
    return model


def build_tv_vgg16(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> nn.Module:
    """``torchvision.models.vgg16(num_classes=C)`` (configuration D, 134,301,514 params for
    3 channels, C = 10), first conv rebuilt for ``in_channels`` when it is not 3. Its five max-pools
    need H, W >= 32 (28x28 raises ``ValueError``). Heavy: ~0.5 GB of fp32 weights."""
    from torchvision.models import vgg16

    shape = image_shape("vgg16", in_channels, input_shape)
    h = min(shape[1], shape[2])
    for _ in range(5):
        h //= 2
    if h < 1:
        raise ValueError(f"vgg16 does not support input shape {shape}: needs H, W >= 32")
    model = vgg16(weights=None, num_classes=num_classes)
    if shape[0] != 3:
        old = model.features[0]
        model.features[0] = nn.Conv2d(shape[0], old.out_channels, 3, padding=1)
        nn.init.kaiming_normal_(model.features[0].weight, mode="fan_out", nonlinearity="relu")
        nn.init.zeros_(model.features[0].bias)
    return model
