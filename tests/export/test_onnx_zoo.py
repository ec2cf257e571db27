"""Every architecture of the model zoo exports to one ONNX file that onnxruntime runs like torch.

Each model gets realistic activations first (BatchNorm statistics taken from a batch, as training
would leave them): freshly initialised deep nets otherwise output ~1e-12 everywhere and any
exporter would "match". Inputs: random batches of a size other than the export's (the batch axis
is dynamic) and, for image and vector models, real images (the bundled UCI digits, upsampled
to 28x28 for the models that need that size). Models run at their smallest supported size, which
keeps the whole file near 40 s.
"""

import os

import numpy as np
import pytest
import torch
from torch import nn

from edgefd.export.onnx_export import export_onnx, onnx_session, run_onnx, sample_shape
from edgefd.models import build_model, list_models, model_entry

TOLERANCE = 1e-4  # max abs difference of logits, fp32
HEAVY = os.environ.get("EDGEFD_TEST_HEAVY") == "1"


def _zoo_case(name):
    heavy = (
        model_entry(name).heavy and name != "resnet18"
    )  # resnet18 exports in ~1 s; vgg16 takes ~60 s (dynamo fallback), 537 MB
    marks = [pytest.mark.skipif(heavy and not HEAVY, reason="vgg16: ~60 s and a 537 MB file; set EDGEFD_TEST_HEAVY=1")]
    return pytest.param(name, marks=marks, id=name)


def _data_shape(name):
    entry = model_entry(name)
    if entry.kind == "sequence":
        return (20, 6), 6
    return (1, min(entry.sizes or (8,)), min(entry.sizes or (8,))), 1


def _with_realistic_statistics(model, shape):
    """BatchNorm running statistics from one random batch (momentum 1), then eval mode."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if norms:
        for m in norms:
            m.momentum = 1.0
        model.train()
        with torch.no_grad():
            model(torch.randn(64, *shape))
    return model.eval()


@pytest.fixture(scope="module")
def digits():
    from edgefd.data import load_dataset

    return load_dataset("digits").test_x[:16]


def _real_images(digits, shape):
    if len(shape) != 3 or shape[0] != 1:
        return None
    return nn.functional.interpolate(digits, size=shape[1:], mode="bilinear", align_corners=False).numpy()


@pytest.mark.parametrize("name", [_zoo_case(n) for n in list_models()])
def test_zoo_model_exports_and_matches_torch(name, tmp_path, digits):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data_shape, channels = _data_shape(name)
    model = build_model(name, in_channels=channels, num_classes=10, input_shape=data_shape)
    shape = sample_shape(model, name, data_shape)
    model = _with_realistic_statistics(model, shape)
    path = tmp_path / f"{name}.onnx"
    export_onnx(model, shape, path)
    assert not list(tmp_path.glob("*.data")), "weights must be inside the .onnx file"
    session = onnx_session(path)

    inputs = [torch.randn(5, *shape).numpy(), torch.randn(1, *shape).numpy()]
    real = _real_images(digits, shape)
    if real is not None and model_entry(name).kind in ("image", "vector"):
        inputs.append(real)
    for x in inputs:
        with torch.no_grad():
            expected = model(torch.from_numpy(x)).numpy()
        got = run_onnx(session, x)
        assert got.shape == expected.shape
        assert np.abs(expected).max() > 1e-3, "degenerate outputs would make the comparison empty"
        assert np.abs(got - expected).max() <= TOLERANCE, (
            f"{name}: max abs diff {np.abs(got - expected).max():.2e} (logits up to {np.abs(expected).max():.1f})"
        )


class _PoolsToSevenBySeven(nn.Module):
    """Adaptive pooling to 7x7 from a 2x2 map, as vgg16 does at 32x32: the TorchScript exporter
    cannot express it, so `auto` must fall back to the dynamo exporter."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, stride=4, padding=1)
        self.pool = nn.AdaptiveAvgPool2d((7, 7))
        self.fc = nn.Linear(4 * 49, 3)

    def forward(self, x):
        return self.fc(self.pool(self.conv(x)).flatten(1))


def test_auto_falls_back_to_dynamo_with_dynamic_batch_and_one_file(tmp_path):
    torch.manual_seed(0)
    model = _PoolsToSevenBySeven().eval()
    path = tmp_path / "pool.onnx"
    assert export_onnx(model, (1, 8, 8), path) == "dynamo"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pool.onnx"]
    session = onnx_session(path)
    for batch in (1, 7):
        x = torch.randn(batch, 1, 8, 8)
        with torch.no_grad():
            expected = model(x).numpy()
        assert np.abs(run_onnx(session, x.numpy()) - expected).max() <= TOLERANCE


def test_unknown_exporter_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="exporter"):
        export_onnx(nn.Linear(2, 2), (2,), tmp_path / "x.onnx", exporter="tflite")
