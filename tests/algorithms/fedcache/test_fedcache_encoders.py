"""Hash encoders: the stand-in, MobileNetV3-Small (weights from a file) and any ONNX file."""

import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from edgefd.algorithms.fedcache.encoders import MobileNetHash, build_encoder, mobilenet_trunk


def test_pixels_encoder_flattens():
    x = torch.randn(5, 1, 8, 8)
    out = build_encoder("pixels")(x)
    assert out.shape == (5, 64) and out.dtype == np.float32
    np.testing.assert_array_equal(out, x.reshape(5, -1).numpy())


def test_projection_is_the_same_on_every_client_and_keeps_cosine_similarity():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 1, 28, 28, generator=g)
    first, second = build_encoder("projection")(x[:100]), build_encoder("projection:64")(x[100:])
    both = build_encoder("projection")(x)  # a fresh encoder (another client) draws the same matrix
    assert first.shape == (100, 64) and first.dtype == np.float32
    np.testing.assert_allclose(np.concatenate([first, second]), both, rtol=1e-5, atol=1e-5)

    def cosine(v):
        v = v / np.linalg.norm(v, axis=1, keepdims=True)
        return v @ v.T

    pixels = x.reshape(200, -1).numpy()
    pixels = pixels + pixels[:1]  # correlated images, so that similarities spread out
    distortion = np.abs(cosine(build_encoder("projection")(torch.from_numpy(pixels))) - cosine(pixels))
    assert np.median(distortion) < 0.1  # Johnson-Lindenstrauss: about 1/sqrt(64) per pair


def test_mobilenet_encoder_gives_576_d_and_loads_weights_from_a_file(tmp_path):
    x = torch.randn(3, 1, 28, 28)
    random_weights = build_encoder("mobilenet")(x)
    assert random_weights.shape == (3, 576)
    from torchvision.models import mobilenet_v3_small

    torch.manual_seed(123)
    saved = mobilenet_v3_small(weights=None)
    path = tmp_path / "mnv3.pt"
    torch.save(saved.state_dict(), path)
    loaded = build_encoder(f"mobilenet:{path}")(x)
    assert loaded.shape == (3, 576)
    assert not np.allclose(loaded, random_weights)  # the file's weights are in use
    trunk = mobilenet_trunk(str(path))
    for a, b in zip(trunk.state_dict().values(), nn.Sequential(saved.features).state_dict().values()):
        torch.testing.assert_close(a, b)
    with pytest.raises(FileNotFoundError, match="no such file"):
        build_encoder(f"mobilenet:{tmp_path / 'missing.pt'}")


@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32)])
def test_the_mobilenet_encoder_runs_mobilenet_hash_through_onnxruntime(shape):
    """The same function as the torch module (to float rounding), batch by batch of any size."""
    x = torch.randn(37, *shape)
    with torch.no_grad():
        expected = MobileNetHash()(x).numpy()
    got = build_encoder("mobilenet")(x)
    scale = np.abs(expected).max()  # random weights give tiny embeddings (~1e-8): compare relative
    np.testing.assert_allclose(got / scale, expected / scale, atol=1e-4)
    cos = (got * expected).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1))
    assert cos.min() > 0.9999


def test_the_mobilenet_encoder_leaves_the_exporter_out_of_this_process(tmp_path):
    """Exporting imports torchvision and torch's ONNX exporter (about 200 MiB a simulation would
    keep for the rest of its run): a child process exports, this one only runs the file. A broken
    weights file fails in the child, with its error."""
    script = (
        "import sys, torch; from edgefd.algorithms.fedcache.encoders import build_encoder; "
        "out = build_encoder('mobilenet')(torch.randn(2, 1, 8, 8)); "
        "print(out.shape, sorted(m for m in ('torchvision', 'torch.onnx', 'onnx') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[-2] == "(2, 576) []", done.stderr[-2000:]
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"not a state dict")
    with pytest.raises(RuntimeError, match="encoder mobilenet:.*broken.pt: exporting it to ONNX failed"):
        build_encoder(f"mobilenet:{broken}")(torch.randn(2, 1, 8, 8))


def test_onnx_encoder_matches_torch(tmp_path):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten()).eval()
    path = tmp_path / "enc.onnx"
    torch.onnx.export(
        net,
        (torch.randn(2, 1, 8, 8),),
        str(path),
        input_names=["x"],
        output_names=["h"],
        dynamo=False,
        dynamic_axes={"x": {0: "batch"}, "h": {0: "batch"}},
    )
    x = torch.randn(7, 1, 8, 8)
    out = build_encoder(f"onnx:{path}")(x)
    np.testing.assert_allclose(out, net(x).detach().numpy(), atol=1e-5)


def test_unknown_encoder_is_a_clear_error():
    with pytest.raises(ValueError, match="expected pixels, projection"):
        build_encoder("sift")
    with pytest.raises(ValueError, match="must be an integer"):
        build_encoder("projection:wide")
