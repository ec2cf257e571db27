"""FedZKT's device models, global model and generator (docs/methods/fedzkt.md).

CIFAR-10 devices (paper Table V, built after github.com/kuangliu/pytorch-cifar, CIFAR 32x32 variants):

==========================  ======================================  ==========  ===========
name                        model                                   params      BN buffers
==========================  ======================================  ==========  ===========
``shufflenetv2_x0_5``       A: ShuffleNetV2 net size 0.5            352,042     7,952
``shufflenetv2_x1_0``       B: ShuffleNetV2 net size 1.0            1,263,854   16,180
``mobilenetv2_x0_8``        C: MobileNetV2 width x0.8               1,563,050   28,720
``mobilenetv2_x0_6``        D: MobileNetV2 width x0.6               971,018     22,752
``lenet``                   E: LeNet (kuangliu)                     62,006      0
``mobilenetv2_x1_0``        reference: kuangliu MobileNetV2         2,296,922   35,088
==========================  ======================================  ==========  ===========

(3x32x32, C = 10; "BN buffers" = running mean + var floats, which travel with the weights.)
kuangliu's MobileNetV2 has no width multiplier: edgefd multiplies the stem and every
stage width by alpha with torchvision's ``_make_divisible(v, 8)`` and keeps the 1280-wide last conv
(docs/methods/fedzkt.md#mobilenetv2-width-multiplier).

MNIST-family devices (the paper only says "a CNN, a fully-connected model and three LeNet-like
models"; edgefd's concrete choice, docs/methods/fedzkt.md#mnist-family-device-models), 1x28x28, C = 10:
``zkt_s1_cnn`` 1,663,370; ``zkt_s2_fc`` 199,210; ``zkt_s3_lenet5`` 61,706; ``zkt_s4_lenet3`` 25,034;
``zkt_s5_lenet_wide`` 220,874.

Global model (unspecified in the paper): ``resnet18`` (kuangliu, 11,173,962 params for 3x32x32,
C = 10; any channel count, adaptive average pooling so 28x28 works).

Generator (unspecified): ``zkt_generator`` = DFAD/DFME "GeneratorA": Linear(nz -> 2ngf (H/4)(W/4))
-> BN -> up x2 -> conv3x3 -> BN -> LeakyReLU(0.2) -> up x2 -> conv3x3 -> BN -> LeakyReLU(0.2) ->
conv3x3(-> C) -> Tanh -> BN(C, affine=False). Maps noise ``(N, nz)`` to images of the dataset's
shape ``(N, C, H, W)`` (H, W divisible by 4). nz defaults: 256 for 32x32, 100 otherwise (DFAD's;
docs/methods/fedzkt.md#generator-and-global-model).

Small CPU models (8x8 digits, docs/methods/fedzkt.md#small-cpu-models): devices ``zkt_tiny_a`` ..
``zkt_tiny_e``, global ``zkt_tiny_global`` and the MLP generator ``zkt_generator_mlp`` (nz 32).

All FedZKT models use the paper's "Glorot" init (Alg. 1; docs/methods/fedzkt.md#initialisation): Xavier-uniform
weights, zero biases,
BN 1 / 0. The kuangliu heads' fixed ``avg_pool2d(4)`` is replaced by global average pooling (same
result on 32x32 inputs, and it lets the models run on 28x28 and 8x8).
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
    flat_dim,
    image_shape,
    init_xavier,
    make_stage,
)
from .dfl import lenet5_features
from .generic import MLP

__all__ = [
    "ShuffleNetV2",
    "MobileNetV2",
    "ResNet18",
    "GeneratorA",
    "GeneratorMLP",
    "make_divisible",
]


# --------------------------------------------------------------------------------------------------
# ShuffleNetV2 (kuangliu)
# --------------------------------------------------------------------------------------------------
def _channel_shuffle(x: torch.Tensor, groups: int = 2) -> torch.Tensor:
    n, c, h, w = x.shape
    return x.reshape(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)


class _ShuffleBasic(nn.Module):
    def __init__(self, channels: int, split_ratio: float = 0.5):
        super().__init__()
        self.split = int(channels * split_ratio)
        c = self.split
        self.conv1 = nn.Conv2d(c, c, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.conv3 = nn.Conv2d(c, c, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x[:, : self.split], x[:, self.split :]
        out = F.relu(self.bn1(self.conv1(x2)))
        out = self.bn2(self.conv2(out))
        out = F.relu(self.bn3(self.conv3(out)))
        return _channel_shuffle(torch.cat([x1, out], 1))


class _ShuffleDown(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        mid = out_channels // 2
        # left
        self.conv1 = nn.Conv2d(in_channels, in_channels, 3, stride=2, padding=1, groups=in_channels, bias=False)
        self.bn1 = nn.BatchNorm2d(in_channels)
        self.conv2 = nn.Conv2d(in_channels, mid, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        # right
        self.conv3 = nn.Conv2d(in_channels, mid, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(mid)
        self.conv4 = nn.Conv2d(mid, mid, 3, stride=2, padding=1, groups=mid, bias=False)
        self.bn4 = nn.BatchNorm2d(mid)
        self.conv5 = nn.Conv2d(mid, mid, 1, bias=False)
        self.bn5 = nn.BatchNorm2d(mid)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out1 = F.relu(self.bn2(self.conv2(self.bn1(self.conv1(x)))))
        out2 = F.relu(self.bn3(self.conv3(x)))
        out2 = F.relu(self.bn5(self.conv5(self.bn4(self.conv4(out2)))))
        return _channel_shuffle(torch.cat([out1, out2], 1))


SHUFFLENET_CONFIGS = {
    0.5: {"out_channels": (48, 96, 192, 1024), "num_blocks": (3, 7, 3)},
    1.0: {"out_channels": (116, 232, 464, 1024), "num_blocks": (3, 7, 3)},
    1.5: {"out_channels": (176, 352, 704, 1024), "num_blocks": (3, 7, 3)},
    2.0: {"out_channels": (224, 488, 976, 2048), "num_blocks": (3, 7, 3)},
}


class ShuffleNetV2(nn.Module):
    """Stem conv3x3(C -> 24) + BN + ReLU (no max-pool); 3 stages of DownBlock + n BasicBlocks;
    conv1x1 -> 1024 + BN + ReLU; global average pool; Linear(1024 -> num_classes)."""

    def __init__(self, in_channels: int, num_classes: int, net_size: float):
        super().__init__()
        cfg = SHUFFLENET_CONFIGS[net_size]
        out_channels, num_blocks = cfg["out_channels"], cfg["num_blocks"]
        self.conv1 = nn.Conv2d(in_channels, 24, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(24)
        c = 24
        stages = []
        for oc, nb in zip(out_channels[:3], num_blocks):
            stages.append(nn.Sequential(_ShuffleDown(c, oc), *[_ShuffleBasic(oc) for _ in range(nb)]))
            c = oc
        self.layer1, self.layer2, self.layer3 = stages
        self.conv2 = nn.Conv2d(c, out_channels[3], 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels[3])
        self.pool = GlobalAvgPoolFlatten()
        self.linear = nn.Linear(out_channels[3], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        out = F.relu(self.bn2(self.conv2(out)))
        return self.linear(self.pool(out))


# --------------------------------------------------------------------------------------------------
# MobileNetV2 (kuangliu, + width multiplier)
# --------------------------------------------------------------------------------------------------
def make_divisible(v: float, divisor: int = 8, min_value: int | None = None) -> int:
    """torchvision's ``_make_divisible``: round to a multiple of ``divisor``, never below 90 % of v."""
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class _InvertedResidual(nn.Module):
    def __init__(self, in_planes: int, out_planes: int, expansion: int, stride: int):
        super().__init__()
        self.stride = stride
        planes = expansion * in_planes
        self.conv1 = nn.Conv2d(in_planes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, groups=planes, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out_planes, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_planes)
        self.shortcut: nn.Module | None = None
        if stride == 1 and in_planes != out_planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, out_planes, 1, bias=False), nn.BatchNorm2d(out_planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.stride == 1:
            out = out + (x if self.shortcut is None else self.shortcut(x))
        return out


class MobileNetV2(nn.Module):
    """kuangliu's CIFAR MobileNetV2 (stem stride 1, second stage stride 1), widths scaled by
    ``width_mult`` with ``make_divisible(., 8)``; last conv 1280 wide; global average pool."""

    # (expansion, out_planes, num_blocks, stride)
    CFG = ((1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, in_channels: int, num_classes: int, width_mult: float = 1.0, last_channels: int = 1280):
        super().__init__()
        stem = make_divisible(32 * width_mult) if width_mult != 1.0 else 32
        self.conv1 = nn.Conv2d(in_channels, stem, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(stem)
        blocks = []
        c = stem
        for expansion, out, n, stride in self.CFG:
            out = make_divisible(out * width_mult) if width_mult != 1.0 else out
            for i in range(n):
                blocks.append(_InvertedResidual(c, out, expansion, stride if i == 0 else 1))
                c = out
        self.layers = nn.Sequential(*blocks)
        self.conv2 = nn.Conv2d(c, last_channels, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(last_channels)
        self.pool = GlobalAvgPoolFlatten()
        self.linear = nn.Linear(last_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layers(out)
        out = F.relu(self.bn2(self.conv2(out)))
        return self.linear(self.pool(out))


# --------------------------------------------------------------------------------------------------
# ResNet-18 (kuangliu), the global model
# --------------------------------------------------------------------------------------------------
class ResNet18(nn.Module):
    def __init__(self, in_channels: int, num_classes: int, blocks: Sequence[int] = (2, 2, 2, 2)):
        super().__init__()
        self.conv1 = conv3x3(in_channels, 64)
        self.bn1 = nn.BatchNorm2d(64)
        c = 64
        stages = []
        for planes, nb, stride in zip((64, 128, 256, 512), blocks, (1, 2, 2, 2)):
            stage, c = make_stage(BasicBlock, c, planes, nb, stride)
            stages.append(stage)
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.pool = GlobalAvgPoolFlatten()
        self.linear = nn.Linear(c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        return self.linear(self.pool(out))


# --------------------------------------------------------------------------------------------------
# Generators
# --------------------------------------------------------------------------------------------------
class GeneratorA(nn.Module):
    """DFAD/DFME GeneratorA: noise ``(N, nz)`` -> images ``(N, C, H, W)`` (H, W divisible by 4).

    The final ``BatchNorm2d(C, affine=False)`` makes outputs standardised per channel, like the
    normalised data the device models see. Keep it in train mode while training the generator.
    """

    def __init__(self, shape: tuple[int, int, int], nz: int = 100, ngf: int = 64):
        super().__init__()
        c, h, w = shape
        if h % 4 or w % 4:
            raise ValueError(f"zkt_generator needs H and W divisible by 4, got {shape}")
        self.nz = int(nz)
        self.output_shape = tuple(shape)
        self.init_hw = (h // 4, w // 4)
        self.l1 = nn.Linear(self.nz, 2 * ngf * self.init_hw[0] * self.init_hw[1])
        self.bn0 = nn.BatchNorm2d(2 * ngf)
        self.up1 = nn.Upsample(scale_factor=2, mode="nearest")
        self.block1 = nn.Sequential(
            nn.Conv2d(2 * ngf, 2 * ngf, 3, padding=1), nn.BatchNorm2d(2 * ngf), nn.LeakyReLU(0.2)
        )
        self.up2 = nn.Upsample(scale_factor=2, mode="nearest")
        self.block2 = nn.Sequential(
            nn.Conv2d(2 * ngf, ngf, 3, padding=1),
            nn.BatchNorm2d(ngf),
            nn.LeakyReLU(0.2),
            nn.Conv2d(ngf, c, 3, padding=1),
            nn.Tanh(),
            nn.BatchNorm2d(c, affine=False),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        out = self.l1(z.reshape(z.shape[0], -1))
        out = self.bn0(out.reshape(z.shape[0], -1, self.init_hw[0], self.init_hw[1]))
        out = self.block1(self.up1(out))
        return self.block2(self.up2(out))


class GeneratorMLP(nn.Module):
    """Small-recipe generator (docs/methods/fedzkt.md#small-cpu-models): Linear(nz -> 128)-BN-LeakyReLU(0.2) ->
    Linear(128 -> 256)-BN-LeakyReLU(0.2) -> Linear(256 -> C*H*W) -> reshape -> Tanh ->
    BatchNorm2d(C, affine=False)."""

    def __init__(self, shape: tuple[int, int, int], nz: int = 32, hidden: Sequence[int] = (128, 256)):
        super().__init__()
        self.nz = int(nz)
        self.output_shape = tuple(shape)
        layers: list[nn.Module] = []
        d = self.nz
        for hdim in hidden:
            layers += [nn.Linear(d, int(hdim)), nn.BatchNorm1d(int(hdim)), nn.LeakyReLU(0.2)]
            d = int(hdim)
        layers.append(nn.Linear(d, flat_dim(shape)))
        self.net = nn.Sequential(*layers)
        self.act = nn.Tanh()
        self.bn_out = nn.BatchNorm2d(shape[0], affine=False)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        out = self.net(z.reshape(z.shape[0], -1)).reshape(z.shape[0], *self.output_shape)
        return self.bn_out(self.act(out))


# --------------------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------------------
def _image(name, in_channels, input_shape):
    return image_shape(name, in_channels, input_shape)


def build_shufflenetv2(net_size: float):
    def builder(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> ShuffleNetV2:
        shape = _image(f"shufflenetv2_x{net_size}", in_channels, input_shape)
        return init_xavier(ShuffleNetV2(shape[0], num_classes, net_size))

    builder.__name__ = f"build_shufflenetv2_x{str(net_size).replace('.', '_')}"
    return builder


def build_mobilenetv2(width_mult: float):
    def builder(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> MobileNetV2:
        shape = _image(f"mobilenetv2_x{width_mult}", in_channels, input_shape)
        return init_xavier(MobileNetV2(shape[0], num_classes, width_mult))

    builder.__name__ = f"build_mobilenetv2_x{str(width_mult).replace('.', '_')}"
    return builder


def build_lenet(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> ConvClassifier:
    """kuangliu LeNet (device model E): 62,006 params on 3x32x32, C = 10."""
    shape = _image("lenet", in_channels, input_shape)
    return init_xavier(ConvClassifier("lenet", lenet5_features(shape[0]), shape, (120, 84), num_classes))


def build_zkt_s1_cnn(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> ConvClassifier:
    shape = _image("zkt_s1_cnn", in_channels, input_shape)
    features = nn.Sequential(
        nn.Conv2d(shape[0], 32, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(2),
    )  # fmt: skip
    return init_xavier(ConvClassifier("zkt_s1_cnn", features, shape, (512,), num_classes))


def build_zkt_s2_fc(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> MLP:
    shape = _image("zkt_s2_fc", in_channels, input_shape)
    return init_xavier(MLP(flat_dim(shape), num_classes, (200, 200)))


def build_zkt_s3_lenet5(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> ConvClassifier:
    shape = _image("zkt_s3_lenet5", in_channels, input_shape)
    return init_xavier(
        ConvClassifier("zkt_s3_lenet5", lenet5_features(shape[0], first_padding=2), shape, (120, 84), num_classes)
    )


def build_zkt_s4_lenet3(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> ConvClassifier:
    shape = _image("zkt_s4_lenet3", in_channels, input_shape)
    features = nn.Sequential(
        nn.Conv2d(shape[0], 8, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
    )  # fmt: skip
    return init_xavier(ConvClassifier("zkt_s4_lenet3", features, shape, (64,), num_classes))


def build_zkt_s5_lenet_wide(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> ConvClassifier:
    shape = _image("zkt_s5_lenet_wide", in_channels, input_shape)
    features = nn.Sequential(
        nn.Conv2d(shape[0], 16, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5), nn.ReLU(inplace=True), nn.MaxPool2d(2),
    )  # fmt: skip
    return init_xavier(ConvClassifier("zkt_s5_lenet_wide", features, shape, (256,), num_classes))


def build_resnet18(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> ResNet18:
    shape = _image("resnet18", in_channels, input_shape)
    return init_xavier(ResNet18(shape[0], num_classes))


def build_zkt_generator(
    *, in_channels: int, num_classes: int, input_shape: Sequence[int], nz: int | None = None, ngf: int = 64
) -> GeneratorA:
    """``num_classes`` is unused (the generator is unconditional)."""
    shape = _image("zkt_generator", in_channels, input_shape)
    if nz is None:
        nz = 256 if shape[1:] == (32, 32) else 100
    return init_xavier(GeneratorA(shape, nz=nz, ngf=ngf))


def build_zkt_generator_mlp(
    *, in_channels: int, num_classes: int, input_shape: Sequence[int], nz: int = 32
) -> GeneratorMLP:
    shape = _image("zkt_generator_mlp", in_channels, input_shape)
    return init_xavier(GeneratorMLP(shape, nz=nz))


# small CPU models (8x8 digits), device and global: docs/methods/fedzkt.md#small-cpu-models
def build_zkt_tiny_a(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> MLP:
    """Softmax regression: Linear(C*H*W -> classes)."""
    return init_xavier(MLP(flat_dim(_image("zkt_tiny_a", in_channels, input_shape)), num_classes, ()))


def build_zkt_tiny_b(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> MLP:
    """MLP D -> 32 -> classes."""
    return init_xavier(MLP(flat_dim(_image("zkt_tiny_b", in_channels, input_shape)), num_classes, (32,)))


def build_zkt_tiny_c(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> MLP:
    """MLP D -> 64 -> 64 -> classes."""
    return init_xavier(MLP(flat_dim(_image("zkt_tiny_c", in_channels, input_shape)), num_classes, (64, 64)))


def build_zkt_tiny_d(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> ConvClassifier:
    """conv3x3(C -> 8, p1)-ReLU-maxpool2 -> Linear(-> classes)."""
    shape = _image("zkt_tiny_d", in_channels, input_shape)
    features = nn.Sequential(nn.Conv2d(shape[0], 8, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2))
    return init_xavier(ConvClassifier("zkt_tiny_d", features, shape, (), num_classes))


def build_zkt_tiny_e(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> ConvClassifier:
    """conv3x3(C -> 16)-ReLU-conv3x3(16 -> 32)-ReLU-maxpool2 -> FC 64 -> classes."""
    shape = _image("zkt_tiny_e", in_channels, input_shape)
    features = nn.Sequential(
        nn.Conv2d(shape[0], 16, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
    )  # fmt: skip
    return init_xavier(ConvClassifier("zkt_tiny_e", features, shape, (64,), num_classes))


def build_zkt_tiny_global(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> ConvClassifier:
    """conv3x3(C -> 32)-ReLU-conv3x3(32 -> 64)-ReLU-maxpool2 -> FC 128 -> classes."""
    shape = _image("zkt_tiny_global", in_channels, input_shape)
    features = nn.Sequential(
        nn.Conv2d(shape[0], 32, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
    )  # fmt: skip
    return init_xavier(ConvClassifier("zkt_tiny_global", features, shape, (128,), num_classes))
