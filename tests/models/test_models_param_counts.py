"""Every parameter count a paper or a method page states, pinned to the exact integer (with where it is stated)."""

import pytest
import torch

from edgefd.models import build_model, count_bn_buffers, count_parameters

C32 = (3, 32, 32)
M28 = (1, 28, 28)
D8 = (1, 8, 8)

# (model, in_channels, num_classes, input_shape, exact trainable parameters, where it is stated)
PINNED = [
    # FedCache: ResNet-8/16/20 of the authors' resnet_client.py
    ("resnet8", 3, 10, C32, 78_042, "FedCache Table IV (76.2K); docs/methods/fedcache.md#client-models"),
    ("resnet16", 3, 10, C32, 175_258, "FedCache Table IV (171.2K); docs/methods/fedcache.md#client-models"),
    ("resnet20", 3, 10, C32, 272_474, "FedCache Table IV (266.1K); docs/methods/fedcache.md#client-models"),
    ("resnet8", 1, 10, D8, 77_754, "docs/methods/fedcache.md#client-models (1-channel stem, 8x8)"),
    ("resnet8", 3, 10, (3, 8, 8), 78_042, "docs/methods/fedcache.md#client-models (3-channel stem, 8x8)"),
    # FedICT: executed counts of the authors' code (Table III's 0.7K/5.2K/... are NOT asserted,
    # docs/methods/fedict.md#parameter-counts)
    ("fedict_c1", 3, 10, C32, 634, "FedICT Table III A^C_1 (resnet2_56)"),
    ("fedict_c2", 3, 10, C32, 5_306, "FedICT Table III A^C_2 (resnet4_56)"),
    ("fedict_c3", 3, 10, C32, 10_586, "FedICT Table III A^C_3 (resnet8_56)"),
    ("fedict_c4", 3, 10, C32, 9_978, "FedICT Table III A^C_4 (resnet10_56)"),
    ("fedict_c5", 3, 10, C32, 9_978, "FedICT Table III A^C_5 (resnet12_56, same forward as A^C_4)"),
    ("fedict_server", 3, 10, C32, 590_858, "FedICT Table III A^S_1 (resnet56_server), also FedCache's A^S"),
    ("fedict_c1", 1, 10, D8, 346, "docs/methods/fedict.md#small-recipe (A^C_1 analogue on 1x8x8, incl. extractor)"),
    ("fedict_server_small", 1, 10, D8, 127_178, "docs/methods/fedict.md#small-recipe (Bottleneck [1,1,1] on 16x8x8)"),
    # DFL: Table-IV-consistent CNNs
    ("dfl_cnn_mnist", 1, 10, M28, 66_130, "docs/methods/dfl.md#model-sizes CNN-MNIST"),
    ("dfl_cnn_cifar", 3, 10, C32, 62_006, "docs/methods/dfl.md#model-sizes CNN-CIFAR, Cn=10"),
    ("dfl_cnn_cifar", 3, 20, C32, 62_856, "docs/methods/dfl.md#model-sizes CNN-CIFAR, Cn=20 (CIFAR-100 coarse)"),
    ("dfl_cnn_femnist", 1, 62, M28, 160_510, "docs/methods/dfl.md#model-sizes CNN-FEMNIST"),
    ("dfl_cnn_mnist", 1, 62, M28, 68_782, "docs/methods/dfl.md#model-sizes (the text's 'MNIST CNN with 62 outputs')"),
    ("mlp", 1, 10, D8, 4_810, "docs/methods/dfl.md#small-scale-reproduction (MLP 64 -> 64 -> 10)"),
    ("resnet20a", 3, 10, C32, 269_722, "docs/methods/dfl.md#model-sizes ResNet-20 option A (~0.27 M)"),
    ("mobilenet_v2", 3, 10, C32, 2_236_682, "docs/methods/dfl.md#model-sizes torchvision MobileNetV2 (~2.24 M)"),
    # FedD2S: M1 / M2 with edgefd's block choices
    ("fedd2s_m1", 3, 10, C32, 23_146, "docs/methods/fedd2s.md#model-architecture M1 CIFAR-10"),
    ("fedd2s_m2", 1, 62, M28, 237_054, "docs/methods/fedd2s.md#model-architecture M2 FEMNIST"),
    ("fedd2s_m2", 3, 100, C32, 353_284, "docs/methods/fedd2s.md#model-architecture M2 CIFAR-100"),
    ("fedd2s_m1", 1, 10, D8, 7_642, "docs/methods/fedd2s.md#model-architecture M1-mini"),
    # FedZKT: CIFAR-10 devices (kuangliu), MNIST-family devices, global model
    ("shufflenetv2_x0_5", 3, 10, C32, 352_042, "Table V A; docs/methods/fedzkt.md#messages"),
    ("shufflenetv2_x1_0", 3, 10, C32, 1_263_854, "Table V B; docs/methods/fedzkt.md#messages"),
    ("mobilenetv2_x0_8", 3, 10, C32, 1_563_050, "Table V C; docs/methods/fedzkt.md#mobilenetv2-width-multiplier"),
    ("mobilenetv2_x0_6", 3, 10, C32, 971_018, "Table V D; docs/methods/fedzkt.md#mobilenetv2-width-multiplier"),
    ("lenet", 3, 10, C32, 62_006, "FedZKT Table V model E (kuangliu LeNet)"),
    ("mobilenetv2_x1_0", 3, 10, C32, 2_296_922, "docs/methods/fedzkt.md#mobilenetv2-width-multiplier"),
    ("zkt_s1_cnn", 1, 10, M28, 1_663_370, "docs/methods/fedzkt.md#mnist-family-device-models S1"),
    ("zkt_s2_fc", 1, 10, M28, 199_210, "docs/methods/fedzkt.md#mnist-family-device-models S2"),
    ("zkt_s3_lenet5", 1, 10, M28, 61_706, "docs/methods/fedzkt.md#mnist-family-device-models S3"),
    ("zkt_s4_lenet3", 1, 10, M28, 25_034, "docs/methods/fedzkt.md#mnist-family-device-models S4"),
    ("zkt_s5_lenet_wide", 1, 10, M28, 220_874, "docs/methods/fedzkt.md#mnist-family-device-models S5"),
    ("resnet18", 3, 10, C32, 11_173_962, "docs/methods/fedzkt.md#generator-and-global-model"),
]


@pytest.mark.parametrize(
    "name,in_ch,classes,shape,expected,where", PINNED, ids=[f"{p[0]}-{p[1]}ch-{p[2]}c-{p[3][-1]}px" for p in PINNED]
)
def test_pinned_parameter_count(name, in_ch, classes, shape, expected, where):
    # counts do not depend on the values: build the > 1 M parameter models on the meta device
    device = "meta" if expected > 1_000_000 else "cpu"
    with torch.device(device):
        model = build_model(name, in_channels=in_ch, num_classes=classes, input_shape=shape)
    assert count_parameters(model) == expected, where


# Derived (stated nowhere) counts of the edgefd-chosen small models: regression guards.
DERIVED = [
    ("fedict_fc6", 1, 5, (40,), 842),
    ("fedict_fc7", 1, 5, (40,), 994),
    ("fedict_fc8", 1, 5, (40,), 1_450),
    ("fedict_fc_server", 1, 5, (40,), 5_381),
    ("zkt_generator", 3, 10, C32, 2_329_091),  # nz=256, ngf=64
    ("zkt_generator", 1, 10, M28, 856_065),  # nz=100, ngf=64
    ("zkt_generator_mlp", 1, 10, D8, 54_464),  # nz=32
    ("zkt_tiny_a", 1, 10, D8, 650),
    ("zkt_tiny_b", 1, 10, D8, 2_410),
    ("zkt_tiny_c", 1, 10, D8, 8_970),
    ("zkt_tiny_d", 1, 10, D8, 1_370),
    ("zkt_tiny_e", 1, 10, D8, 38_282),
    ("zkt_tiny_global", 1, 10, D8, 151_306),
    ("cnn2", 1, 10, D8, 6_090),
    ("cnn1d", 6, 5, (50, 6), 11_621),
]


@pytest.mark.parametrize("name,in_ch,classes,shape,expected", DERIVED, ids=[f"{d[0]}-{d[3]}" for d in DERIVED])
def test_derived_parameter_count(name, in_ch, classes, shape, expected):
    model = build_model(name, in_channels=in_ch, num_classes=classes, input_shape=shape)
    assert count_parameters(model) == expected


def test_one_channel_stem_differs_only_in_first_conv():
    # docs/methods/fedcache.md#client-models: 78,042 with a 3-channel stem, 77,754 with 1 channel (3x3x16 x 2 = 288)
    m3 = build_model("resnet8", in_channels=3, num_classes=10, input_shape=(3, 8, 8))
    m1 = build_model("resnet8", in_channels=1, num_classes=10, input_shape=(1, 8, 8))
    assert count_parameters(m3) - count_parameters(m1) == 288


def test_fedcache_bn_parameter_counts():
    # BatchNorm parameters of ResNet-8/16/20: 672 / 1,120 / 1,568 (MTFL's private-BN filtering)
    from torch import nn

    for name, expected in (("resnet8", 672), ("resnet16", 1_120), ("resnet20", 1_568)):
        m = build_model(name, in_channels=3, num_classes=10, input_shape=C32)
        bn = sum(p.numel() for mod in m.modules() if isinstance(mod, nn.BatchNorm2d) for p in mod.parameters())
        assert bn == expected, name


def test_fedcache_fedavg_bytes():
    # FedAvg with ResNet-8 = 624,336 B per client per round (2 * P * 4; docs/methods/fedavg.md#messages)
    m = build_model("resnet8", in_channels=3, num_classes=10, input_shape=C32)
    assert 2 * count_parameters(m) * 4 == 624_336


@pytest.mark.parametrize(
    "name,params,buffers,one_direction_bytes",
    [
        # docs/methods/fedzkt.md#messages: P_k, R_k and (P_k + R_k) * 4 bytes
        ("shufflenetv2_x0_5", 352_042, 7_952, 1_439_976),
        ("shufflenetv2_x1_0", 1_263_854, 16_180, 5_120_136),
        ("mobilenetv2_x0_8", 1_563_050, 28_720, 6_367_080),
        ("mobilenetv2_x0_6", 971_018, 22_752, 3_975_080),
        ("lenet", 62_006, 0, 248_024),
        ("mobilenetv2_x1_0", 2_296_922, 35_088, None),
    ],
)
def test_fedzkt_cifar_devices_bytes(name, params, buffers, one_direction_bytes):
    with torch.device("meta"):
        m = build_model(name, in_channels=3, num_classes=10, input_shape=C32)
    assert count_parameters(m) == params
    assert count_bn_buffers(m) == buffers
    if one_direction_bytes is not None:
        assert (count_parameters(m) + count_bn_buffers(m)) * 4 == one_direction_bytes


def test_fedzkt_mnist_devices_bytes():
    # docs/methods/fedzkt.md#messages: 6,653,480 / 796,840 / 246,824 / 100,136 / 883,496 B; 17,361,552 B per direction
    # for K = 10 devices (S1..S5 twice)
    expected = {
        "zkt_s1_cnn": 6_653_480,
        "zkt_s2_fc": 796_840,
        "zkt_s3_lenet5": 246_824,
        "zkt_s4_lenet3": 100_136,
        "zkt_s5_lenet_wide": 883_496,
    }
    total = 0
    for name, b in expected.items():
        m = build_model(name, in_channels=1, num_classes=10, input_shape=M28)
        assert count_bn_buffers(m) == 0
        assert count_parameters(m) * 4 == b
        total += 2 * b
    assert total == 17_361_552


def test_dfl_table_iv_bytes():
    # docs/methods/dfl.md#model-sizes: 4P = 264,520 / 248,024 / 251,424 / 642,040 bytes
    cases = [
        ("dfl_cnn_mnist", 1, 10, M28, 264_520),
        ("dfl_cnn_cifar", 3, 10, C32, 248_024),
        ("dfl_cnn_cifar", 3, 20, C32, 251_424),
        ("dfl_cnn_femnist", 1, 62, M28, 642_040),
    ]
    for name, c, k, s, b in cases:
        assert 4 * count_parameters(build_model(name, in_channels=c, num_classes=k, input_shape=s)) == b
    # docs/methods/dfl.md#messages: MLP payload 19,240 B of weights
    assert 4 * count_parameters(build_model("mlp", in_channels=1, num_classes=10, input_shape=D8)) == 19_240


def test_fedd2s_init_bytes():
    # docs/methods/fedd2s.md#model-architecture: 4 * P_total = 92,584 / 948,216 / 1,413,136 B
    for name, c, k, s, b in (
        ("fedd2s_m1", 3, 10, C32, 92_584),
        ("fedd2s_m2", 1, 62, M28, 948_216),
        ("fedd2s_m2", 3, 100, C32, 1_413_136),
    ):
        assert 4 * count_parameters(build_model(name, in_channels=c, num_classes=k, input_shape=s)) == b


@pytest.mark.parametrize(
    "name,in_ch,classes,shape,per_layer,p_head",
    [
        # docs/methods/fedd2s.md#model-architecture (per-layer params) and
        # docs/methods/fedd2s.md#messages (P_head(l), l = 6..2)
        ("fedd2s_m1", 3, 10, C32, [224, 1_168, 4_640, 16_416, 528, 170], [0, 170, 698, 17_114, 21_754]),
        ("fedd2s_m2", 1, 62, M28, [160, 9_280, 73_856, 147_584, 4_128, 2_046], [0, 2_046, 6_174, 153_758, 227_614]),
        ("fedd2s_m2", 3, 100, C32, [448, 9_280, 73_856, 262_272, 4_128, 3_300], [0, 3_300, 7_428, 269_700, 343_556]),
        ("fedd2s_m1", 1, 10, D8, [80, 1_168, 4_640, 1_056, 528, 170], None),  # M1-mini
    ],
)
def test_fedd2s_layer_and_head_counts(name, in_ch, classes, shape, per_layer, p_head):
    m = build_model(name, in_channels=in_ch, num_classes=classes, input_shape=shape)
    assert m.layer_parameter_counts() == per_layer
    if p_head is not None:
        assert [m.head_parameter_count(l) for l in (6, 5, 4, 3, 2)] == p_head


@pytest.mark.parametrize(
    "name,in_ch,classes,shape,dims",
    [
        # docs/methods/fedd2s.md#model-architecture H_l sizes d_l (and d_L = C)
        ("fedd2s_m1", 3, 10, C32, [2048, 1024, 512, 32, 16, 10]),
        ("fedd2s_m2", 1, 62, M28, [3136, 3136, 1152, 128, 32, 62]),
        ("fedd2s_m2", 3, 100, C32, [4096, 4096, 2048, 128, 32, 100]),
        ("fedd2s_m1", 1, 10, D8, [128, 64, 32, 32, 16, 10]),  # M1-mini
    ],
)
def test_fedd2s_layer_dims(name, in_ch, classes, shape, dims):
    m = build_model(name, in_channels=in_ch, num_classes=classes, input_shape=shape)
    assert m.layer_dims() == dims


def test_fedd2s_uplink_bytes_per_sample():
    # docs/methods/fedd2s.md#communication-cost: per-sample uplink s_f*(d_1 + d_l) + s_y for M1 CIFAR-10, l = 6..2
    m = build_model("fedd2s_m1", in_channels=3, num_classes=10, input_shape=C32)
    d = m.layer_dims()
    got = [4 * (d[0] + d[l - 1]) + 1 for l in (6, 5, 4, 3, 2)]
    assert got == [8_233, 8_257, 8_321, 10_241, 12_289]
