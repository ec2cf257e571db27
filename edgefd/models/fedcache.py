"""FedCache's client models: CIFAR-style ResNet-8 / 16 / 20 (docs/methods/fedcache.md#client-models).

Paper Tab. IV names them A^C_1 / A^C_2 / A^C_3 ("ResNet-small/medium/large", 76.2K / 171.2K /
266.1K with K = 1024); the authors' ``resnet_client.py`` builds them as BasicBlock ResNets with
[1,1,1] / [2,2,2] / [3,3,3] blocks, 16/32/64 planes, strides 1/2/2, no max-pool, conv1x1+BN
("option B") downsampling, global average pooling and Linear(64 -> C).

Exact counts for a 3x32x32 input and C = 10: 78,042 / 175,258 / 272,474.
With a 1-channel stem: 288 fewer (77,754 for ResNet-8). The count does not depend on H, W.

The models are ``SplitModel``s: ``extract`` is the stem (conv3x3 -> BN -> ReLU, the H x W x 16
"Feat. Shape" of Tab. IV used by the SLIA-FE baselines FedDKC / FedICT), ``predict`` is the rest.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from ._common import (
    BasicBlock,
    GlobalAvgPoolFlatten,
    SplitModel,
    conv3x3,
    image_shape,
    init_kaiming_fan_out,
    make_stage,
)

__all__ = ["CifarResNet", "build_resnet8", "build_resnet16", "build_resnet20"]


class CifarResNet(SplitModel):
    """CIFAR ResNet with BasicBlocks ``blocks`` per stage (6n+2 layers). Input any (C, H, W) with
    H, W >= 1; stages are H -> H/2 -> H/4 (ceil), e.g. 32 -> 16 -> 8, 28 -> 14 -> 7, 8 -> 4 -> 2."""

    def __init__(
        self, shape: tuple[int, int, int], num_classes: int, blocks: Sequence[int], widths: Sequence[int] = (16, 32, 64)
    ):
        w1, w2, w3 = (int(w) for w in widths)
        stem = nn.Sequential(conv3x3(shape[0], w1), nn.BatchNorm2d(w1), nn.ReLU(inplace=True))
        layer1, c = make_stage(BasicBlock, w1, w1, blocks[0], 1)
        layer2, c = make_stage(BasicBlock, c, w2, blocks[1], 2)
        layer3, c = make_stage(BasicBlock, c, w3, blocks[2], 2)
        predictor = nn.Sequential()
        predictor.add_module("layer1", layer1)
        predictor.add_module("layer2", layer2)
        predictor.add_module("layer3", layer3)
        predictor.add_module("pool", GlobalAvgPoolFlatten())
        predictor.add_module("fc", nn.Linear(c, num_classes))
        super().__init__(stem, predictor, (w1, shape[1], shape[2]))
        init_kaiming_fan_out(self)


def _build(name: str, blocks: Sequence[int]):
    def builder(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> CifarResNet:
        return CifarResNet(image_shape(name, in_channels, input_shape), num_classes, blocks)

    builder.__name__ = f"build_{name}"
    builder.__doc__ = f"FedCache {name}: CIFAR ResNet with {list(blocks)} BasicBlocks per stage."
    return builder


build_resnet8 = _build("resnet8", (1, 1, 1))
build_resnet16 = _build("resnet16", (2, 2, 2))
build_resnet20 = _build("resnet20", (3, 3, 3))
