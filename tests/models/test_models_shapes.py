"""Forward shapes of every registered model, for 1- and 3-channel inputs at each supported size and
for several class counts."""

import pytest
import torch

from edgefd.models import build_model, count_parameters, list_models, model_entry

BATCH = 2
CLASS_COUNTS = (2, 10, 62)


def _image_cases():
    cases = []
    for name in list_models():
        e = model_entry(name)
        if e.heavy or e.kind not in ("image", "vector", "features", "noise"):
            continue
        for i, size in enumerate(e.sizes):
            for c in (1, 3):
                classes = CLASS_COUNTS[(i + c) % len(CLASS_COUNTS)]
                cases.append(pytest.param(name, c, size, classes, id=f"{name}-{c}x{size}x{size}-C{classes}"))
    return cases


def _input_for(name, model, c, size):
    kind = model_entry(name).kind
    if kind == "noise":
        return torch.randn(BATCH, model.nz)
    if kind == "features":
        return torch.randn(BATCH, *model.input_feature_shape)
    return torch.randn(BATCH, c, size, size)


# Models whose CPU forward at 28x28/32x32 costs ~0.1-1 s (depthwise convs, ResNet-56-size server):
# their shapes at every size are checked on the meta device (exact shape propagation, no compute),
# and their numerics by a real forward at the smallest size.
SLOW = {
    "shufflenetv2_x0_5",
    "shufflenetv2_x1_0",
    "mobilenetv2_x0_8",
    "mobilenetv2_x0_6",
    "mobilenetv2_x1_0",
    "mobilenet_v2",
    "fedict_server",
}


@pytest.mark.parametrize("name,c,size,classes", _image_cases())
def test_forward_shape(name, c, size, classes):
    torch.manual_seed(0)
    device = "meta" if name in SLOW else "cpu"
    with torch.device(device):
        model = build_model(name, in_channels=c, num_classes=classes, input_shape=(c, size, size))
        x = _input_for(name, model, c, size)
    if model_entry(name).kind != "noise":
        model.eval()
    with torch.no_grad():
        y = model(x)
    if model_entry(name).kind == "noise":
        assert y.shape == (BATCH, c, size, size)
    else:
        assert y.shape == (BATCH, classes)
    if device == "cpu":
        assert torch.isfinite(y).all()


@pytest.mark.parametrize("name", sorted(SLOW))
@pytest.mark.parametrize("c", [1, 3])
def test_slow_models_real_forward_small(name, c):
    size = min(model_entry(name).sizes)
    model = build_model(name, in_channels=c, num_classes=10, input_shape=(c, size, size)).eval()
    x = _input_for(name, model, c, size)
    with torch.no_grad():
        y = model(x)
    assert y.shape == (BATCH, 10) and torch.isfinite(y).all()


@pytest.mark.parametrize(
    "name", [n for n in list_models() if model_entry(n).kind == "image" and not model_entry(n).heavy]
)
@pytest.mark.parametrize("classes", [1, 5, 100])
def test_class_counts(name, classes):
    size = min(model_entry(name).sizes)
    model = build_model(name, in_channels=3, num_classes=classes, input_shape=(3, size, size)).eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, size, size)).shape == (1, classes)


def test_two_dim_input_shape_is_h_w():
    m = build_model("cnn2", in_channels=1, num_classes=10, input_shape=(28, 28))
    assert m(torch.randn(3, 1, 28, 28)).shape == (3, 10)


def test_rectangular_images():
    for name in ("resnet8", "cnn2", "fedd2s_m1", "dfl_cnn_cifar"):
        m = build_model(name, in_channels=3, num_classes=7, input_shape=(3, 32, 40))
        assert m(torch.randn(2, 3, 32, 40)).shape == (2, 7), name


@pytest.mark.parametrize("t,f", [(1, 3), (50, 6), (128, 9)])
@pytest.mark.parametrize("classes", [2, 5])
def test_sensor_models(t, f, classes):
    x = torch.randn(4, t, f)  # (N, T, F)
    for name in ("cnn1d", "mlp", "fedict_fc6", "fedict_fc7", "fedict_fc8"):
        m = build_model(name, in_channels=f, num_classes=classes, input_shape=(t, f))
        assert m(x).shape == (4, classes), name
    m = build_model("cnn1d", in_channels=1, num_classes=classes, input_shape=(t, f))
    assert m(x).shape == (4, classes)


def test_vector_input():
    x = torch.randn(4, 40)
    for name in ("mlp", "fedict_fc6"):
        assert build_model(name, in_channels=1, num_classes=5, input_shape=(40,))(x).shape == (4, 5)


@pytest.mark.parametrize(
    "name,shape,nz",
    [
        ("zkt_generator", (3, 32, 32), 256),  # docs/methods/fedzkt.md#generator-and-global-model: nz 256 for CIFAR-10
        ("zkt_generator", (1, 28, 28), 100),  # nz 100 for 28x28 datasets
        ("zkt_generator", (1, 8, 8), 100),
        ("zkt_generator_mlp", (1, 8, 8), 32),  # docs/methods/fedzkt.md#small-cpu-models
        ("zkt_generator_mlp", (3, 32, 32), 32),
    ],
)
def test_generator_output_shape(name, shape, nz):
    g = build_model(name, in_channels=shape[0], num_classes=10, input_shape=shape)
    assert g.nz == nz
    z = torch.randn(16, nz)
    img = g(z)
    assert img.shape == (16, *shape)
    # final BN(affine=False) in train mode: per-channel standardised output
    assert torch.allclose(img.mean(dim=(0, 2, 3)), torch.zeros(shape[0]), atol=1e-5)


def test_generator_nz_option():
    g = build_model("zkt_generator", in_channels=1, num_classes=10, input_shape=(1, 28, 28), nz=64, ngf=16)
    assert g(torch.randn(4, 64)).shape == (4, 1, 28, 28)


@pytest.mark.parametrize(
    "name,c,size,classes",
    [
        ("resnet18", 1, 28, 10),
        ("resnet18", 3, 32, 100),
        ("resnet18", 1, 8, 10),
        ("vgg16", 1, 32, 10),
        ("vgg16", 3, 32, 20),
    ],
)
def test_heavy_model_shapes(name, c, size, classes):
    with torch.device("meta"):
        m = build_model(name, in_channels=c, num_classes=classes, input_shape=(c, size, size)).eval()
        assert m(torch.randn(2, c, size, size)).shape == (2, classes)


def test_heavy_models_real_forward():
    m = build_model("resnet18", in_channels=1, num_classes=10, input_shape=(1, 8, 8)).eval()
    with torch.no_grad():
        y = m(torch.randn(2, 1, 8, 8))
    assert y.shape == (2, 10) and torch.isfinite(y).all()
    with torch.device("meta"):
        v = build_model("vgg16", in_channels=3, num_classes=10, input_shape=(3, 32, 32))
    # docs/methods/dfl.md#model-sizes: torchvision vgg16(num_classes=10); Table IV cannot validate it
    assert count_parameters(v) == 134_301_514


@pytest.mark.parametrize(
    "name,shape",
    [
        ("dfl_cnn_mnist", (1, 8, 8)),  # two unpadded 5x5 convs need more than 8x8
        ("dfl_cnn_cifar", (3, 8, 8)),
        ("zkt_s5_lenet_wide", (1, 8, 8)),
        ("fedd2s_m1", (3, 4, 4)),
        ("vgg16", (3, 28, 28)),  # five max-pools need >= 32
        ("zkt_generator", (1, 30, 30)),  # H, W must be divisible by 4
    ],
)
def test_unsupported_input_sizes_raise(name, shape):
    with pytest.raises(ValueError):
        build_model(name, in_channels=shape[0], num_classes=10, input_shape=shape)


def test_channel_mismatch_raises():
    with pytest.raises(ValueError, match="channels"):
        build_model("resnet8", in_channels=3, num_classes=10, input_shape=(1, 32, 32))
    with pytest.raises(ValueError):
        build_model("cnn1d", in_channels=4, num_classes=5, input_shape=(50, 6))
    with pytest.raises(ValueError):
        build_model("resnet8", in_channels=3, num_classes=0, input_shape=(3, 32, 32))
    with pytest.raises(ValueError):
        build_model("resnet8", in_channels=3, num_classes=10, input_shape=(3, 0, 32))
