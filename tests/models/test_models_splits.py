"""FedICT extractor/predictor splits and FedD2S layer splits compose to the full forward."""

import copy

import pytest
import torch

from edgefd.models import LayeredCNN, SplitModel, build_model, list_models, model_entry

SPLIT_MODELS = [n for n in list_models() if model_entry(n).split]


def test_split_models_registered():
    assert {"fedict_c1", "fedict_c2", "fedict_c3", "fedict_c4", "fedict_c5"} <= set(SPLIT_MODELS)
    assert {"resnet8", "resnet16", "resnet20", "fedict_fc6", "fedict_fc7", "fedict_fc8"} <= set(SPLIT_MODELS)


@pytest.mark.parametrize("name", SPLIT_MODELS)
@pytest.mark.parametrize("c,size", [(1, 8), (1, 28), (3, 32)])
def test_extract_predict_composes_to_forward(name, c, size):
    torch.manual_seed(0)
    m = build_model(name, in_channels=c, num_classes=10, input_shape=(c, size, size))
    assert isinstance(m, SplitModel)
    m.eval()
    x = torch.randn(3, c, size, size)
    with torch.no_grad():
        h = m.extract(x)
        assert tuple(h.shape[1:]) == m.feature_shape
        assert torch.equal(m.predict(h), m(x))


@pytest.mark.parametrize("c,size", [(1, 8), (1, 28), (3, 32)])
def test_fedict_feature_shape_is_16_h_w(c, size):
    # docs/methods/fedict.md#client-and-server-models: all image clients share the extractor, H in R^{16 x H x W}
    for k in range(1, 6):
        m = build_model(f"fedict_c{k}", in_channels=c, num_classes=10, input_shape=(c, size, size))
        assert m.feature_shape == (16, size, size)


@pytest.mark.parametrize(
    "server,c,size", [("fedict_server", 1, 8), ("fedict_server_small", 1, 8), ("fedict_server_small", 3, 32)]
)
def test_fedict_server_consumes_client_features(server, c, size):
    torch.manual_seed(0)
    ks = (1, 3) if server == "fedict_server" else range(1, 6)
    clients = [build_model(f"fedict_c{k}", in_channels=c, num_classes=10, input_shape=(c, size, size)) for k in ks]
    s = build_model(server, in_channels=c, num_classes=10, input_shape=(c, size, size))
    assert s.input_feature_shape == clients[0].feature_shape
    x = torch.randn(2, c, size, size)
    for m in clients:
        h = m.extract(x)
        z = s(h)
        assert z.shape == (2, 10)
        # gradients reach the server only through the features (the client extractor is separate)
        z.sum().backward()
        assert all(p.grad is not None for p in s.parameters())
        s.zero_grad()


def test_fedict_c4_and_c5_compute_the_same_function():
    # docs/methods/fedict.md#client-and-server-models: resnet10_56 and resnet12_56 have the same forward
    # (dead layer2 not built)
    torch.manual_seed(1)
    a = build_model("fedict_c4", in_channels=3, num_classes=10, input_shape=(3, 32, 32))
    torch.manual_seed(1)
    b = build_model("fedict_c5", in_channels=3, num_classes=10, input_shape=(3, 32, 32))
    x = torch.randn(2, 3, 32, 32)
    assert torch.equal(a(x), b(x))


def test_tmd_server_consumes_tmd_features():
    clients = [build_model(f"fedict_fc{k}", in_channels=1, num_classes=5, input_shape=(40,)) for k in (6, 7, 8)]
    s = build_model("fedict_fc_server", in_channels=1, num_classes=5, input_shape=(40,))
    x = torch.randn(4, 40)
    for m in clients:
        assert m.feature_shape == (13,) == s.input_feature_shape
        assert s(m.extract(x)).shape == (4, 5)


# ---- FedD2S ---------------------------------------------------------------------------------------
FEDD2S = [
    ("fedd2s_m1", 3, 10, (3, 32, 32)),
    ("fedd2s_m2", 1, 62, (1, 28, 28)),
    ("fedd2s_m2", 3, 100, (3, 32, 32)),
    ("fedd2s_m1", 1, 10, (1, 8, 8)),
    ("fedd2s_m2", 1, 10, (1, 8, 8)),
]


@pytest.mark.parametrize("name,c,classes,shape", FEDD2S)
def test_fedd2s_layer_split_composes(name, c, classes, shape):
    torch.manual_seed(0)
    m = build_model(name, in_channels=c, num_classes=classes, input_shape=shape)
    assert isinstance(m, LayeredCNN)
    assert isinstance(m.layers, torch.nn.ModuleList)
    L = m.num_layers
    assert L == 6
    x = torch.randn(3, *shape)
    with torch.no_grad():
        full = m(x)
        assert full.shape == (3, classes)
        outs = m.forward_all(x)
        assert len(outs) == L and torch.equal(outs[-1], full)
        for l in range(0, L + 1):
            h = m.trunk(x, l)
            if l > 0:
                assert tuple(h.shape[1:]) == m.layer_output_shapes[l - 1]
                assert torch.equal(h, outs[l - 1])
            assert torch.equal(m.head(h, l), full)
            assert torch.equal(m.run_layers(m.run_layers(x, 0, l), l, L), full)
        # three-way splits
        for a, b in ((0, 0), (1, 3), (2, 2), (2, 5), (3, 6), (6, 6)):
            assert torch.equal(m.run_layers(m.run_layers(m.run_layers(x, 0, a), a, b), b, L), full)
    assert torch.equal(m.trunk(x, 0), x) and torch.equal(m.head(full, L), full)
    with pytest.raises(ValueError):
        m.run_layers(x, 3, 2)
    with pytest.raises(ValueError):
        m.run_layers(x, 0, L + 1)


def test_fedd2s_h3_is_the_c3_map():
    # docs/methods/fedd2s.md#layer-outputs: H_3 is the C3 map (flatten belongs to F1)
    m = build_model("fedd2s_m1", in_channels=3, num_classes=10, input_shape=(3, 32, 32))
    assert m.layer_output_shapes[:3] == ((8, 16, 16), (16, 8, 8), (32, 4, 4))
    assert m.trunk(torch.randn(2, 3, 32, 32), 3).shape == (2, 32, 4, 4)


def test_fedd2s_head_module_and_state_dict():
    torch.manual_seed(0)
    client = build_model("fedd2s_m1", in_channels=3, num_classes=10, input_shape=(3, 32, 32))
    glob = build_model("fedd2s_m1", in_channels=3, num_classes=10, input_shape=(3, 32, 32))
    l = 2
    # head module shares parameters
    head = glob.head_module(l)
    assert sum(p.numel() for p in head.parameters()) == glob.head_parameter_count(l) == 21_754
    assert next(head.parameters()) is next(glob.parts_parameters(l, 6))
    # S2C student: client trunk + frozen copy of the global head (Eq. 12,
    # docs/methods/fedd2s.md#head-weights-in-the-reply)
    frozen = copy.deepcopy(glob.head_module(l)).requires_grad_(False)
    x = torch.randn(4, 3, 32, 32)
    logits = frozen(client.trunk(x, l))
    assert logits.shape == (4, 10)
    logits.sum().backward()
    assert all(p.grad is not None for p in client.parts_parameters(0, l))
    assert all(p.grad is None for p in client.parts_parameters(l, 6))
    # shipping the head: state_dict subset loads into another model
    sd = glob.head_state_dict(l)
    assert sum(v.numel() for v in sd.values()) == 21_754
    assert all(int(k.split(".")[1]) >= l for k in sd)
    missing, unexpected = client.load_state_dict(sd, strict=False)
    assert not unexpected and all(int(k.split(".")[1]) < l for k in missing)
    with torch.no_grad():
        h = glob.trunk(x, l)
        assert torch.equal(client.head(h, l), glob.head(h, l))
    assert len(glob.head_state_dict(6)) == 0
    assert len(glob.trunk_module(2)) == 2
