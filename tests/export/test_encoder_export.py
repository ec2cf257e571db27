"""`edgefd export-encoder`: the ONNX hash encoder gives the torch mobilenet encoder's embeddings."""

import json

import numpy as np
import torch
from torch import nn
from torchvision.models import mobilenet_v3_small

from edgefd import cli
from edgefd.algorithms.fedcache.encoders import build_encoder


def _weights_with_live_activations(path):
    """A MobileNetV3-Small state_dict whose BatchNorm statistics come from a batch: at plain
    initialisation its 576-d output is ~1e-8 everywhere, which would make any comparison empty."""
    torch.manual_seed(0)
    net = mobilenet_v3_small(weights=None)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = 1.0
    net.train()
    with torch.no_grad():
        net(torch.rand(4, 3, 224, 224))
    torch.save(net.state_dict(), path)


def test_onnx_encoder_matches_the_torch_encoder(tmp_path):
    weights, out = tmp_path / "mnv3.pt", tmp_path / "encoder.onnx"
    _weights_with_live_activations(weights)
    assert cli.main(["export-encoder", "--weights", str(weights), "--input-shape", "1,28,28", "--out", str(out)]) == 0
    assert json.loads(out.with_suffix(".json").read_text())["input"]["shape"] == ["batch", 1, 28, 28]
    x = torch.randn(6, 1, 28, 28)
    expected = build_encoder(f"mobilenet:{weights}")(x)
    got = build_encoder(f"onnx:{out}")(x)
    assert got.shape == expected.shape == (6, 576)
    scale = np.abs(expected).max()
    assert scale > 1.0
    # float32 through ~50 layers with activations in the hundreds: relative agreement ~1e-5
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * scale)
    cosine = (got * expected).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosine.min() > 1 - 1e-6  # FedCache compares hashes by cosine


def test_encoder_needs_an_image_shape(tmp_path, capsys):
    assert cli.main(["export-encoder", "--input-shape", "100,6", "--out", str(tmp_path / "e.onnx")]) == 2
    assert "(C, H, W)" in capsys.readouterr().err
