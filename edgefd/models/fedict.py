"""FedICT's client / server models (Table III and Sec. 5.1.2 of the FedICT paper;
docs/methods/fedict.md#client-and-server-models).

Image clients A^C_1..A^C_5 share the extractor W_e = conv3x3(C -> 16, no bias) -> BN -> ReLU,
giving features H of shape 16 x H x W; they differ in the predictor W_p (authors' code
``resnet2_56 .. resnet12_56``). The image server A^S_1 is the predictor-only
``ResNet(Bottleneck, [6,6,6])`` without stem, consuming those features.

Executed parameter counts for 3x32x32, C = 10, which are what the tests pin
(docs/methods/fedict.md#parameter-counts):

========  =====================================================  ========  ===========
name      predictor                                              params    paper Tab. III
========  =====================================================  ========  ===========
c1        GAP -> Linear(16 -> C)                                 634       0.7K
c2        BasicBlock(16,16) -> GAP -> Linear(16 -> C)            5,306     5.2K
c3        Bottleneck(16,16) -> Bottleneck(64,16) -> GAP -> FC64  10,586    10.5K
c4 / c5   BasicBlock(16,16) x 2 -> GAP -> Linear(16 -> C)        9,978     9.8K
server    Bottleneck [6,6,6], 16/32/64 planes, FC 256 -> C       590,858   588.2K
========  =====================================================  ========  ===========

The paper's Table III counts are *not* reproduced by the authors' code (0.5-9 % off), so the tests
do not assert them (docs/methods/fedict.md#parameter-counts). ``c4`` and ``c5`` compute the same
function (the code's dead ``layer2`` is not instantiated,
docs/methods/fedict.md#client-and-server-models).

``fedict_server_small`` is the scaled server of the small recipe
(docs/methods/fedict.md#small-recipe): Bottleneck [1,1,1] on the 16 x H x W features, 127,178
parameters for C = 10.

TMD sensor models A^C_6..A^C_8 / A^S_2: the paper gives only parameter counts (1109 / 1335 /
1877 / 2053) with a 13-d feature and C = 5, and no layer list. No natural fully connected
architecture with one shared input dimension reproduces all four counts (checked by brute force
over 1-2 hidden layers: every input width that fits one count needs unrelated hidden widths for the
others), so these are edgefd's *labelled substitutes*
(docs/methods/fedict.md#client-and-server-models): extractor Linear(D -> 13) -> ReLU; predictors
Linear(13 -> h) -> ReLU -> Linear(h -> C) with h = 16 / 24 / 48; server Linear(13 -> 64) -> ReLU ->
Linear(64 -> 64) -> ReLU -> Linear(64 -> C).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from ._common import (
    BasicBlock,
    Bottleneck,
    GlobalAvgPoolFlatten,
    SplitModel,
    conv3x3,
    flat_dim,
    image_shape,
    init_kaiming_fan_out,
    make_stage,
)

__all__ = [
    "FEATURE_CHANNELS",
    "TMD_FEATURE_DIM",
    "FedICTServer",
    "FeatureMLPServer",
    "build_fedict_client",
    "build_fedict_server",
    "build_fedict_server_small",
    "build_fedict_fc",
    "build_fedict_fc_server",
]

FEATURE_CHANNELS = 16
TMD_FEATURE_DIM = 13


def _extractor(in_channels: int) -> nn.Sequential:
    return nn.Sequential(
        conv3x3(in_channels, FEATURE_CHANNELS), nn.BatchNorm2d(FEATURE_CHANNELS), nn.ReLU(inplace=True)
    )


def _predictor(variant: int, num_classes: int) -> nn.Sequential:
    f = FEATURE_CHANNELS
    p = nn.Sequential()
    if variant == 1:
        width = f
    elif variant == 2:
        p.add_module("layer1", nn.Sequential(BasicBlock(f, f)))
        width = f
    elif variant == 3:
        p.add_module("layer1", nn.Sequential(Bottleneck(f, f), Bottleneck(f * 4, f)))
        width = f * 4
    elif variant in (4, 5):
        p.add_module("layer1", nn.Sequential(BasicBlock(f, f), BasicBlock(f, f)))
        width = f
    else:  # pragma: no cover - guarded by the registry
        raise ValueError(f"unknown FedICT client variant {variant}")
    p.add_module("pool", GlobalAvgPoolFlatten())
    p.add_module("fc", nn.Linear(width, num_classes))
    return p


def build_fedict_client(variant: int):
    def builder(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> SplitModel:
        shape = image_shape(f"fedict_c{variant}", in_channels, input_shape)
        model = SplitModel(
            _extractor(shape[0]), _predictor(variant, num_classes), (FEATURE_CHANNELS, shape[1], shape[2])
        )
        return init_kaiming_fan_out(model)

    builder.__name__ = f"build_fedict_c{variant}"
    builder.__doc__ = f"FedICT client A^C_{variant} (extractor conv-BN-ReLU to 16 x H x W, see module doc)."
    return builder


class FedICTServer(nn.Module):
    """Predictor-only Bottleneck ResNet on client features ``(N, 16, H, W)`` (no stem).

    ``blocks=(6,6,6)`` is A^S_1 (``resnet56_server``); stages 64 x H x W -> 128 x H/2 -> 256 x H/4,
    then GAP and Linear(256 -> C).
    """

    def __init__(self, feature_shape: tuple[int, int, int], num_classes: int, blocks: Sequence[int] = (6, 6, 6)):
        super().__init__()
        self.input_feature_shape = tuple(feature_shape)
        c = feature_shape[0]
        self.layer1, c = make_stage(Bottleneck, c, 16, blocks[0], 1)
        self.layer2, c = make_stage(Bottleneck, c, 32, blocks[1], 2)
        self.layer3, c = make_stage(Bottleneck, c, 64, blocks[2], 2)
        self.pool = GlobalAvgPoolFlatten()
        self.fc = nn.Linear(c, num_classes)
        init_kaiming_fan_out(self)

    def forward(self, features):
        return self.fc(self.pool(self.layer3(self.layer2(self.layer1(features)))))


def _server_feature_shape(
    name: str, in_channels: int, input_shape: Sequence[int], feature_channels: int
) -> tuple[int, int, int]:
    """The server is built from the *image* shape (C, H, W) or directly from the feature shape
    (16, H, W); either way it consumes 16 x H x W features."""
    shape = tuple(int(s) for s in input_shape)
    if len(shape) == 2:
        shape = (in_channels,) + shape
    if len(shape) != 3:
        raise ValueError(f"{name}: expected input_shape (C, H, W) or (H, W), got {shape}")
    return (int(feature_channels), shape[1], shape[2])


def build_fedict_server(
    *, in_channels: int, num_classes: int, input_shape: Sequence[int], feature_channels: int = FEATURE_CHANNELS
) -> FedICTServer:
    """A^S_1: ``resnet56_server``. Input: client features (N, 16, H, W); ``input_shape`` is the
    image (or feature) shape, only H and W are used."""
    return FedICTServer(
        _server_feature_shape("fedict_server", in_channels, input_shape, feature_channels), num_classes, (6, 6, 6)
    )


def build_fedict_server_small(
    *, in_channels: int, num_classes: int, input_shape: Sequence[int], feature_channels: int = FEATURE_CHANNELS
) -> FedICTServer:
    """Scaled server of the small recipe (docs/methods/fedict.md#small-recipe): Bottleneck [1,1,1],
    127,178 params (C=10)."""
    return FedICTServer(
        _server_feature_shape("fedict_server_small", in_channels, input_shape, feature_channels), num_classes, (1, 1, 1)
    )


# --------------------------------------------------------------------------------------------------
# TMD fully connected substitutes
# --------------------------------------------------------------------------------------------------
TMD_HIDDEN = {6: 16, 7: 24, 8: 48}


def build_fedict_fc(variant: int):
    hidden = TMD_HIDDEN[variant]

    def builder(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> SplitModel:
        d = flat_dim(input_shape)
        extractor = nn.Sequential(nn.Flatten(), nn.Linear(d, TMD_FEATURE_DIM), nn.ReLU(inplace=True))
        predictor = nn.Sequential(
            nn.Linear(TMD_FEATURE_DIM, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, num_classes)
        )
        return SplitModel(extractor, predictor, (TMD_FEATURE_DIM,))

    builder.__name__ = f"build_fedict_fc{variant}"
    builder.__doc__ = (
        f"FedICT TMD client A^C_{variant} SUBSTITUTE: Linear(D->13)-ReLU | Linear(13->{hidden})-ReLU-Linear(->C). "
        "The paper gives only a parameter count; see the module doc."
    )
    return builder


class FeatureMLPServer(nn.Module):
    """A^S_2 substitute: Linear(13 -> 64) -> ReLU -> Linear(64 -> 64) -> ReLU -> Linear(64 -> C)."""

    def __init__(self, num_classes: int, feature_dim: int = TMD_FEATURE_DIM, hidden: int = 64):
        super().__init__()
        self.input_feature_shape = (int(feature_dim),)
        self.net = nn.Sequential(
            nn.Linear(feature_dim, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, features):
        return self.net(features)


def build_fedict_fc_server(*, in_channels: int, num_classes: int, input_shape: Sequence[int]) -> FeatureMLPServer:
    """A^S_2 SUBSTITUTE; consumes the 13-d features of ``fedict_fc6/7/8`` (input_shape unused)."""
    return FeatureMLPServer(num_classes)
