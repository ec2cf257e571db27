"""The model zoo's catalogue: every architecture by name, with its builder, what it is, where it comes
from (the paper and table, or the method's page), the input it takes and the sizes it is tested at.
Data, one entry per model; `edgefd.models.registry` looks them up and builds them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from torch import nn

from . import dfl, fedcache, fedd2s, fedict, fedzkt, generic

#: input kinds: "image" (N,C,H,W), "vector" (anything, flattened), "sequence" (N,T,F),
#: "features" (N,16,H,W FedICT features / N,13 TMD features), "noise" (N,nz) -> image
KINDS = ("image", "vector", "sequence", "features", "noise")


@dataclass(frozen=True)
class ModelEntry:
    """One registered architecture."""

    name: str
    builder: Callable[..., nn.Module]
    description: str
    source: str  #: where the architecture comes from: the paper (table), the method's page, or "generic"
    kind: str = "image"
    #: square image sizes the model is meant for and tested at (None: not an image model)
    sizes: tuple[int, ...] = (8, 28, 32)
    #: building it allocates > ~10 M parameters (tests build it once only)
    heavy: bool = False
    #: the model exposes extract(x) / predict(features) (FedICT-style split)
    split: bool = False
    tags: tuple[str, ...] = field(default_factory=tuple)


def _e(name, builder, description, source, **kw) -> ModelEntry:
    return ModelEntry(name=name, builder=builder, description=description, source=source, **kw)


ENTRIES: tuple[ModelEntry, ...] = (
    # ---- generic --------------------------------------------------------------------------------
    _e(
        "mlp",
        generic.build_mlp,
        "MLP: flatten -> Linear(64) -> ReLU -> Linear(C); any input shape (4,810 params on 8x8, C=10)",
        "generic; docs/methods/dfl.md#small-scale-reproduction",
        kind="vector",
    ),
    _e(
        "cnn2",
        generic.build_cnn2,
        "small CNN: 2x [conv3x3-ReLU-maxpool2] (16, 32 ch) -> Linear(C); 8x8/28x28/32x32",
        "generic",
    ),
    _e(
        "cnn1d",
        generic.build_cnn1d,
        "1-D CNN for sensor windows (N,T,F): 2x Conv1d(k5)-ReLU (32, 64) -> mean over T -> Linear(C)",
        "generic",
        kind="sequence",
        sizes=(),
    ),
    # ---- FedCache ---------------------------------------------------------------------------------
    _e(
        "resnet8",
        fedcache.build_resnet8,
        "FedCache A^C_1 ResNet-8 (BasicBlock [1,1,1], 16/32/64); 78,042 params @3x32x32,C=10",
        "FedCache Table IV; docs/methods/fedcache.md#client-models",
        split=True,
    ),
    _e(
        "resnet16",
        fedcache.build_resnet16,
        "FedCache A^C_2 ResNet-16 (BasicBlock [2,2,2]); 175,258 params @3x32x32,C=10",
        "FedCache Table IV; docs/methods/fedcache.md#client-models",
        split=True,
    ),
    _e(
        "resnet20",
        fedcache.build_resnet20,
        "FedCache A^C_3 ResNet-20 (BasicBlock [3,3,3], conv shortcuts); 272,474 params @3x32x32,C=10",
        "FedCache Table IV; docs/methods/fedcache.md#client-models",
        split=True,
    ),
    # ---- FedICT -----------------------------------------------------------------------------------
    _e(
        "fedict_c1",
        fedict.build_fedict_client(1),
        "FedICT A^C_1: conv-BN-ReLU extractor (16ch) | GAP -> Linear; 634 params @3x32x32,C=10",
        "FedICT paper Table III; docs/methods/fedict.md#client-and-server-models",
        split=True,
    ),
    _e(
        "fedict_c2",
        fedict.build_fedict_client(2),
        "FedICT A^C_2: extractor | BasicBlock(16) -> GAP -> Linear; 5,306 params",
        "FedICT paper Table III; docs/methods/fedict.md#client-and-server-models",
        split=True,
    ),
    _e(
        "fedict_c3",
        fedict.build_fedict_client(3),
        "FedICT A^C_3: extractor | 2 Bottlenecks -> GAP -> Linear(64); 10,586 params",
        "FedICT paper Table III; docs/methods/fedict.md#client-and-server-models",
        split=True,
    ),
    _e(
        "fedict_c4",
        fedict.build_fedict_client(4),
        "FedICT A^C_4: extractor | 2 BasicBlocks(16) -> GAP -> Linear; 9,978 params",
        "FedICT paper Table III; docs/methods/fedict.md#client-and-server-models",
        split=True,
    ),
    _e(
        "fedict_c5",
        fedict.build_fedict_client(5),
        "FedICT A^C_5: same function as A^C_4 (code's dead layer2 dropped); 9,978 params",
        "FedICT paper Table III; docs/methods/fedict.md#client-and-server-models",
        split=True,
    ),
    _e(
        "fedict_server",
        fedict.build_fedict_server,
        "FedICT A^S_1 server on 16xHxW features: Bottleneck ResNet [6,6,6], no stem; 590,858 params",
        "FedICT paper Table III; docs/methods/fedict.md#client-and-server-models",
        kind="features",
    ),
    _e(
        "fedict_server_small",
        fedict.build_fedict_server_small,
        "FedICT scaled server on 16xHxW features: Bottleneck [1,1,1]; 127,178 params",
        "docs/methods/fedict.md#small-recipe",
        kind="features",
    ),
    _e(
        "fedict_fc6",
        fedict.build_fedict_fc(6),
        "FedICT TMD A^C_6 SUBSTITUTE: Linear(D->13)-ReLU | 13->16->C",
        "FedICT paper Table III; docs/methods/fedict.md#client-and-server-models",
        kind="vector",
        split=True,
    ),
    _e(
        "fedict_fc7",
        fedict.build_fedict_fc(7),
        "FedICT TMD A^C_7 SUBSTITUTE: Linear(D->13)-ReLU | 13->24->C",
        "FedICT paper Table III; docs/methods/fedict.md#client-and-server-models",
        kind="vector",
        split=True,
    ),
    _e(
        "fedict_fc8",
        fedict.build_fedict_fc(8),
        "FedICT TMD A^C_8 SUBSTITUTE: Linear(D->13)-ReLU | 13->48->C",
        "FedICT paper Table III; docs/methods/fedict.md#client-and-server-models",
        kind="vector",
        split=True,
    ),
    _e(
        "fedict_fc_server",
        fedict.build_fedict_fc_server,
        "FedICT TMD A^S_2 SUBSTITUTE on 13-d features: 13->64->64->C",
        "FedICT paper Table III; docs/methods/fedict.md#client-and-server-models",
        kind="features",
        sizes=(),
    ),
    # ---- DFL --------------------------------------------------------------------------------------
    _e(
        "dfl_cnn_mnist",
        dfl.build_dfl_cnn_mnist,
        "DFL MNIST CNN: conv5(20)-conv5(50) -> FC 50 -> C; 66,130 params @1x28x28,C=10",
        "docs/methods/dfl.md#model-sizes",
        sizes=(28, 32),
    ),
    _e(
        "dfl_cnn_cifar",
        dfl.build_dfl_cnn_cifar,
        "DFL CIFAR CNN (LeNet-5): conv5(6)-conv5(16) -> 120 -> 84 -> C; 62,006 params @3x32x32,C=10",
        "docs/methods/dfl.md#model-sizes",
        sizes=(28, 32),
    ),
    _e(
        "dfl_cnn_femnist",
        dfl.build_dfl_cnn_femnist,
        "DFL FEMNIST CNN: conv5(16)-conv5(32) -> FC 256 -> C; 160,510 params @1x28x28,C=62",
        "docs/methods/dfl.md#model-sizes",
        sizes=(28, 32),
    ),
    _e(
        "resnet20a",
        dfl.build_resnet20a,
        "CIFAR ResNet-20 (He et al.) with option-A shortcuts (DFL); 269,722 params @3x32x32,C=10",
        "docs/methods/dfl.md#model-sizes",
    ),
    _e(
        "mobilenet_v2",
        dfl.build_tv_mobilenet_v2,
        "torchvision MobileNetV2 (DFL), first conv adapted; 2,236,682 params @3ch,C=10",
        "docs/methods/dfl.md#model-sizes",
    ),
    _e(
        "vgg16",
        dfl.build_tv_vgg16,
        "torchvision VGG-16 (DFL), first conv adapted, needs >=32x32; 134,301,514 params @3ch,C=10 (heavy)",
        "docs/methods/dfl.md#model-sizes",
        sizes=(32,),
        heavy=True,
    ),
    # ---- FedD2S -----------------------------------------------------------------------------------
    _e(
        "fedd2s_m1",
        fedd2s.build_fedd2s_m1,
        "FedD2S M1 [C8,C16,C32,F32,F16,F(C)], layer-splittable; 23,146 params @3x32x32,C=10",
        "docs/methods/fedd2s.md#model-architecture",
    ),
    _e(
        "fedd2s_m2",
        fedd2s.build_fedd2s_m2,
        "FedD2S M2 [C16,C64,C128,F128,F32,F(C)], layer-splittable; 237,054 params @1x28x28,C=62",
        "docs/methods/fedd2s.md#model-architecture",
    ),
    # ---- FedZKT -----------------------------------------------------------------------------------
    _e(
        "shufflenetv2_x0_5",
        fedzkt.build_shufflenetv2(0.5),
        "FedZKT device A: ShuffleNetV2 net size 0.5 (kuangliu); 352,042 params @3x32x32",
        "FedZKT Table V",
    ),
    _e(
        "shufflenetv2_x1_0",
        fedzkt.build_shufflenetv2(1.0),
        "FedZKT device B: ShuffleNetV2 net size 1.0 (kuangliu); 1,263,854 params",
        "FedZKT Table V",
    ),
    _e(
        "mobilenetv2_x0_8",
        fedzkt.build_mobilenetv2(0.8),
        "FedZKT device C: MobileNetV2 (kuangliu) width x0.8; 1,563,050 params",
        "FedZKT Table V; docs/methods/fedzkt.md#mobilenetv2-width-multiplier",
    ),
    _e(
        "mobilenetv2_x0_6",
        fedzkt.build_mobilenetv2(0.6),
        "FedZKT device D: MobileNetV2 (kuangliu) width x0.6; 971,018 params",
        "FedZKT Table V; docs/methods/fedzkt.md#mobilenetv2-width-multiplier",
    ),
    _e(
        "mobilenetv2_x1_0",
        fedzkt.build_mobilenetv2(1.0),
        "kuangliu CIFAR MobileNetV2 x1.0 (FedZKT reference); 2,296,922 params",
        "docs/methods/fedzkt.md#mobilenetv2-width-multiplier",
    ),
    _e(
        "lenet",
        fedzkt.build_lenet,
        "FedZKT device E: LeNet (kuangliu), Glorot init; 62,006 params @3x32x32",
        "FedZKT Table V",
        sizes=(28, 32),
    ),
    _e(
        "zkt_s1_cnn",
        fedzkt.build_zkt_s1_cnn,
        "FedZKT MNIST device S1: McMahan CNN conv5(32)-conv5(64) -> 512; 1,663,370 params @1x28x28",
        "docs/methods/fedzkt.md#mnist-family-device-models",
    ),
    _e(
        "zkt_s2_fc",
        fedzkt.build_zkt_s2_fc,
        "FedZKT MNIST device S2: MLP D -> 200 -> 200 -> C; 199,210 params @1x28x28",
        "docs/methods/fedzkt.md#mnist-family-device-models",
        kind="vector",
    ),
    _e(
        "zkt_s3_lenet5",
        fedzkt.build_zkt_s3_lenet5,
        "FedZKT MNIST device S3: LeNet-5 (pad 2); 61,706 params @1x28x28",
        "docs/methods/fedzkt.md#mnist-family-device-models",
        sizes=(28, 32),
    ),
    _e(
        "zkt_s4_lenet3",
        fedzkt.build_zkt_s4_lenet3,
        "FedZKT MNIST device S4: 3x conv3x3 (8,16,32) -> 64 -> C; 25,034 params @1x28x28",
        "docs/methods/fedzkt.md#mnist-family-device-models",
    ),
    _e(
        "zkt_s5_lenet_wide",
        fedzkt.build_zkt_s5_lenet_wide,
        "FedZKT MNIST device S5: conv5(16)-conv5(32) -> 256 -> C; 220,874 params @1x28x28",
        "docs/methods/fedzkt.md#mnist-family-device-models",
        sizes=(28, 32),
    ),
    _e(
        "resnet18",
        fedzkt.build_resnet18,
        "FedZKT global model: ResNet-18 (kuangliu), adaptive pool; 11,173,962 params @3ch,C=10",
        "docs/methods/fedzkt.md#generator-and-global-model",
        heavy=True,
    ),
    _e(
        "zkt_generator",
        fedzkt.build_zkt_generator,
        "FedZKT generator (DFAD GeneratorA): noise (N,nz) -> (N,C,H,W), H,W % 4 == 0",
        "docs/methods/fedzkt.md#generator-and-global-model",
        kind="noise",
    ),
    _e(
        "zkt_generator_mlp",
        fedzkt.build_zkt_generator_mlp,
        "FedZKT small-recipe MLP generator: noise (N,32) -> (N,C,H,W)",
        "docs/methods/fedzkt.md#small-cpu-models",
        kind="noise",
    ),
    _e(
        "zkt_tiny_a",
        fedzkt.build_zkt_tiny_a,
        "FedZKT small-recipe device A: softmax regression",
        "docs/methods/fedzkt.md#small-cpu-models",
        kind="vector",
    ),
    _e(
        "zkt_tiny_b",
        fedzkt.build_zkt_tiny_b,
        "FedZKT small-recipe device B: MLP D -> 32 -> C",
        "docs/methods/fedzkt.md#small-cpu-models",
        kind="vector",
    ),
    _e(
        "zkt_tiny_c",
        fedzkt.build_zkt_tiny_c,
        "FedZKT small-recipe device C: MLP D -> 64 -> 64 -> C",
        "docs/methods/fedzkt.md#small-cpu-models",
        kind="vector",
    ),
    _e(
        "zkt_tiny_d",
        fedzkt.build_zkt_tiny_d,
        "FedZKT small-recipe device D: conv3x3(8)-pool -> Linear(C)",
        "docs/methods/fedzkt.md#small-cpu-models",
    ),
    _e(
        "zkt_tiny_e",
        fedzkt.build_zkt_tiny_e,
        "FedZKT small-recipe device E: conv3x3(16)-conv3x3(32)-pool -> 64 -> C",
        "docs/methods/fedzkt.md#small-cpu-models",
    ),
    _e(
        "zkt_tiny_global",
        fedzkt.build_zkt_tiny_global,
        "FedZKT small-recipe global: conv3x3(32)-conv3x3(64)-pool -> 128 -> C",
        "docs/methods/fedzkt.md#small-cpu-models",
    ),
)
