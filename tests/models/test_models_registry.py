"""Registry API: list/describe/build, assign_models, determinism, no device calls, ONNX export."""

import io
import pathlib
import re
import warnings

import pytest
import torch

import edgefd.models as models
from edgefd.models import (
    DEFAULT_HETERO,
    assign_models,
    build_model,
    count_parameters,
    describe_models,
    list_models,
    model_entry,
)


def test_list_and_describe():
    names = list_models()
    assert names == sorted(names) and len(names) == len(set(names))
    for required in (
        "mlp", "cnn2", "cnn1d",
        "resnet8", "resnet16", "resnet20",
        "fedict_c1", "fedict_c5", "fedict_server", "fedict_fc6", "fedict_fc_server",
        "dfl_cnn_mnist", "dfl_cnn_cifar", "dfl_cnn_femnist",
        "fedd2s_m1", "fedd2s_m2",
        "shufflenetv2_x0_5", "mobilenetv2_x0_8", "lenet", "resnet18", "zkt_generator",
    ):  # fmt: skip
        assert required in names
    desc = describe_models()
    assert list(desc) == names
    for name, line in desc.items():
        assert line and "\n" not in line, name


def test_unknown_name_lists_known_ones():
    with pytest.raises(ValueError, match="resnet8") as exc:
        build_model("resnet9", in_channels=3, num_classes=10, input_shape=(3, 32, 32))
    assert "resnet9" in str(exc.value)
    with pytest.raises(ValueError):
        model_entry("nope")


def test_unknown_option_raises_type_error():
    with pytest.raises(TypeError):
        build_model("resnet8", in_channels=3, num_classes=10, input_shape=(3, 32, 32), bogus=1)


def test_options_are_forwarded():
    m = build_model("mlp", in_channels=1, num_classes=10, input_shape=(1, 8, 8), hidden=(32, 16))
    assert count_parameters(m) == 64 * 32 + 32 + 32 * 16 + 16 + 16 * 10 + 10
    assert m.model_name == "mlp"


def test_deterministic_given_seed():
    for name, shape in (
        ("resnet8", (3, 8, 8)),
        ("shufflenetv2_x0_5", (3, 8, 8)),
        ("fedd2s_m1", (1, 8, 8)),
        ("zkt_generator", (1, 8, 8)),
    ):
        torch.manual_seed(123)
        a = build_model(name, in_channels=shape[0], num_classes=10, input_shape=shape)
        torch.manual_seed(123)
        b = build_model(name, in_channels=shape[0], num_classes=10, input_shape=shape)
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys()
        assert all(torch.equal(sa[k], sb[k]) for k in sa), name
        torch.manual_seed(124)
        c = build_model(name, in_channels=shape[0], num_classes=10, input_shape=shape)
        assert not all(torch.equal(sa[k], c.state_dict()[k]) for k in sa), name


def test_models_live_on_cpu_and_source_has_no_device_calls():
    m = build_model("resnet8", in_channels=3, num_classes=10, input_shape=(3, 32, 32))
    assert all(p.device.type == "cpu" for p in m.parameters())
    src_dir = pathlib.Path(models.__file__).parent
    for path in src_dir.glob("*.py"):
        text = path.read_text()
        assert not re.search(r"\.cuda\(|(?<![.\w])eval\(|(?<![.\w])exec\(", text), path.name


# ---- assign_models ---------------------------------------------------------------------------------
def test_assign_homo():
    assert assign_models("homo", 4, default="fedict_c1") == ["fedict_c1"] * 4
    assert assign_models("HOMO", 2, default="resnet8") == ["resnet8", "resnet8"]
    # sensible defaults from the data shape when no default is given
    assert assign_models("homo", 2, input_shape=(1, 28, 28)) == ["cnn2", "cnn2"]
    assert assign_models("homo", 1, input_shape=(50, 6)) == ["cnn1d"]
    assert assign_models("homo", 1, input_shape=(40,)) == ["mlp"]


def test_assign_hetero_round_robin():
    assert DEFAULT_HETERO == ("resnet8", "resnet16", "resnet20")
    assert assign_models("hetero", 7) == [
        "resnet8",
        "resnet16",
        "resnet20",
        "resnet8",
        "resnet16",
        "resnet20",
        "resnet8",
    ]
    got = assign_models("hetero", 6, hetero=[f"fedict_c{k}" for k in range(1, 6)])
    assert got == ["fedict_c1", "fedict_c2", "fedict_c3", "fedict_c4", "fedict_c5", "fedict_c1"]
    assert assign_models("hetero", 3, input_shape=(50, 6)) == ["mlp", "cnn1d", "mlp"]


def test_assign_comma_list_round_robin():
    spec = "shufflenetv2_x0_5, shufflenetv2_x1_0,mobilenetv2_x0_8,mobilenetv2_x0_6,lenet"
    got = assign_models(spec, 10)
    # FedZKT's Table III: devices 1-10 use A, B, C, D, E, A, B, C, D, E
    assert got == ["shufflenetv2_x0_5", "shufflenetv2_x1_0", "mobilenetv2_x0_8", "mobilenetv2_x0_6", "lenet"] * 2
    assert assign_models("cnn2", 3) == ["cnn2"] * 3
    assert assign_models("resnet8,resnet20", 1) == ["resnet8"]
    # every assigned name builds
    for n in set(got):
        build_model(n, in_channels=3, num_classes=10, input_shape=(3, 32, 32))


@pytest.mark.parametrize(
    "spec,n,kw",
    [
        ("resnet8,resnet99", 3, {}),
        ("", 3, {}),
        ("resnet8,,resnet16", 3, {}),
        ("homo", 2, {"default": "nonexistent"}),
        ("hetero", 2, {"hetero": ["resnet8", "bad"]}),
        ("hetero", 2, {"hetero": []}),
        ("resnet8", 0, {}),
        ("resnet8", -1, {}),
        ("resnet8", 2.5, {}),
    ],
)
def test_assign_errors(spec, n, kw):
    with pytest.raises(ValueError):
        assign_models(spec, n, **kw)


def test_assign_error_lists_known_names():
    with pytest.raises(ValueError) as exc:
        assign_models("resnet8,foo", 2)
    msg = str(exc.value)
    assert "foo" in msg and "resnet16" in msg and "fedd2s_m1" in msg


# ---- ONNX export smoke test -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name,shape,in_ch",
    [
        ("resnet8", (3, 32, 32), 3),
        ("fedd2s_m1", (1, 8, 8), 1),
        ("cnn1d", (20, 6), 6),
        ("zkt_generator_mlp", (1, 8, 8), 1),
        ("resnet20a", (1, 8, 8), 1),
    ],
)
def test_onnx_export_matches_torch(name, shape, in_ch):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    torch.manual_seed(0)
    m = build_model(name, in_channels=in_ch, num_classes=10, input_shape=shape).eval()
    x = torch.randn(2, m.nz) if hasattr(m, "nz") else torch.randn(2, *shape)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (x,), buf, dynamo=False, input_names=["x"], output_names=["y"])
    sess = ort.InferenceSession(buf.getvalue())
    (y,) = sess.run(None, {"x": x.numpy()})
    with torch.no_grad():
        ref = m(x).numpy()
    assert y.shape == ref.shape
    assert abs(y - ref).max() < 1e-4


def test_onnx_export_fedd2s_all_layer_outputs():
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    m = build_model("fedd2s_m1", in_channels=3, num_classes=10, input_shape=(3, 32, 32)).eval()
    x = torch.randn(2, 3, 32, 32)
    buf = io.BytesIO()
    names = [f"H{l}" for l in range(1, 7)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m.as_multi_output(), (x,), buf, dynamo=False, input_names=["x"], output_names=names)
    sess = ort.InferenceSession(buf.getvalue())
    outs = sess.run(names, {"x": x.numpy()})
    with torch.no_grad():
        refs = m.forward_all(x)
    for got, ref, shape in zip(outs, refs, m.layer_output_shapes):
        assert got.shape == (2, *shape)
        assert abs(got - ref.numpy()).max() < 1e-4
