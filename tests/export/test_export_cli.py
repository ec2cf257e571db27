"""`edgefd export` on a real run (fp32 + int8 with sidecars) and `edgefd predict` without torch."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from edgefd import cli
from edgefd.data import load_dataset
from edgefd.export.checkpoint import list_checkpoints, load_checkpoint
from edgefd.export.onnx_export import onnx_session, run_onnx
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A 2-client FD run on digits (cnn2 and mlp), exported with --int8."""
    root = tmp_path_factory.mktemp("export")
    run(
        SimulationConfig(
            algo="fd",
            dataset="digits",
            clients=2,
            rounds=2,
            threads=1,
            models="cnn2,mlp",
            samples_per_client=300,
            out=str(root / "run"),
        ),
        progress=False,
    )
    assert cli.main(["export", str(root / "run"), "--out", str(root / "onnx"), "--int8"]) == 0
    return root


def test_each_client_gets_a_model_an_int8_copy_and_sidecars(exported):
    out = exported / "onnx"
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "client-0.int8.json",
        "client-0.int8.onnx",
        "client-0.json",
        "client-0.onnx",
        "client-1.int8.json",
        "client-1.int8.onnx",
        "client-1.json",
        "client-1.onnx",
    ]
    dataset = load_dataset("digits")
    for cid, path in list_checkpoints(exported / "run").items():
        checkpoint = load_checkpoint(path)
        meta = json.loads((out / f"{cid}.json").read_text())
        assert meta["architecture"] == checkpoint.model_name
        assert meta["classes"] == [str(c) for c in range(10)]
        assert meta["input"]["shape"] == ["batch", 1, 8, 8]
        assert meta["input"]["normalisation"]["mean"] == list(dataset.mean)
        test = torch.tensor(checkpoint.test_indices)
        x, y = dataset.test_x[test].numpy(), dataset.test_y[test].numpy()
        with torch.no_grad():
            expected = checkpoint.build_model()(torch.from_numpy(x)).numpy()
        fp32 = run_onnx(onnx_session(out / f"{cid}.onnx"), x)
        assert np.abs(fp32 - expected).max() <= 1e-4  # real inputs, the client's own test split
        assert meta["max_abs_diff_vs_torch"] == pytest.approx(float(np.abs(fp32 - expected).max()), abs=1e-6)
        assert meta["accuracy"]["onnx_fp32"] == pytest.approx((fp32.argmax(1) == y).mean())
        assert meta["accuracy"]["onnx_fp32"] == pytest.approx(checkpoint.accuracy)  # the run's own figure

        int8 = run_onnx(onnx_session(out / f"{cid}.int8.onnx"), x)
        q = meta["int8"]
        assert q["accuracy_int8"] == pytest.approx((int8.argmax(1) == y).mean())
        assert q["accuracy_change"] == pytest.approx(q["accuracy_int8"] - q["accuracy_fp32"])
        assert q["bytes_int8"] == (out / f"{cid}.int8.onnx").stat().st_size
        assert q["bytes_int8"] < q["bytes_fp32"]
        assert q["calibration_samples"] == 256
        assert abs(q["accuracy_change"]) < 0.15  # int8 of a small model is close, not identical
        assert json.loads((out / f"{cid}.int8.json").read_text())["quantised"] is True


def test_export_errors_are_clear(exported, tmp_path, capsys):
    assert cli.main(["export", str(exported / "run"), "--client", "client-9", "--out", str(tmp_path)]) == 2
    assert "client-9" in capsys.readouterr().err
    assert cli.main(["export", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "no client models" in capsys.readouterr().err


def test_export_of_a_server_run_says_which_devices_hold_the_models(tmp_path, capsys):
    """`edgefd server` trains no client model: the devices save theirs (`edgefd client --models-dir`)."""
    (tmp_path / "summary.json").write_text(json.dumps({"deployment": {"clients": ["client-0", "client-1"]}}))
    assert cli.main(["export", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    error = capsys.readouterr().err
    assert "edgefd server" in error and "client-0, client-1" in error and "--models-dir" in error, error


PREDICT_WITHOUT_TORCH = """
import json, sys
from edgefd.cli import main
code = main(sys.argv[1:])
assert 'torch' not in sys.modules, 'edgefd predict imported torch'
sys.exit(code)
"""


def _predict(*args):
    return subprocess.run(
        [sys.executable, "-c", PREDICT_WITHOUT_TORCH, "predict", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_predict_runs_without_torch_on_npy_and_images(exported, tmp_path):
    dataset = load_dataset("digits")
    batch = dataset.test_x[:5].numpy()
    np.save(tmp_path / "batch.npy", batch)
    np.save(tmp_path / "one.npy", batch[0])
    # an image file holds 0-255 pixels, as people have them (digits' own raw scale is 0..16): predict
    # brings them to the training data's scale and normalises them
    pixels = np.round((dataset.test_x[5, 0].numpy() * dataset.std[0] + dataset.mean[0]) * 255).astype(np.uint8)
    Image.fromarray(pixels).save(tmp_path / "digit.png")

    model = exported / "onnx" / "client-0.onnx"
    result = _predict(model, tmp_path / "batch.npy", tmp_path / "one.npy", tmp_path / "digit.png", "--json")
    assert result.returncode == 0, result.stderr
    predictions = json.loads(result.stdout)["predictions"]
    assert [p["file"].rsplit("/", 1)[1] for p in predictions] == ["batch.npy"] * 5 + ["one.npy", "digit.png"]
    logits = run_onnx(onnx_session(model), batch)
    assert [p["class"] for p in predictions[:5]] == logits.argmax(1).tolist()
    assert predictions[5]["class"] == predictions[0]["class"]
    assert "warning" not in result.stderr  # normalised inputs, and an image predict normalised
    as_read = ((pixels.astype(np.float32) / 255 - dataset.mean[0]) / dataset.std[0])[None, None]
    image_logits = run_onnx(onnx_session(model), as_read)
    assert predictions[6]["class"] == int(image_logits.argmax())
    np.testing.assert_allclose(
        predictions[6]["probabilities"], np.exp(image_logits[0]) / np.exp(image_logits[0]).sum(), rtol=1e-4, atol=1e-6
    )
    for p in predictions:
        assert sum(p["probabilities"]) == pytest.approx(1.0, abs=1e-6)
        assert p["probability"] == max(p["probabilities"])

    text = _predict(exported / "onnx" / "client-1.int8.onnx", tmp_path / "one.npy")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith(f"{tmp_path / 'one.npy'}[0]: ")


def test_predict_warns_once_per_file_outside_the_training_range(exported, tmp_path):
    sidecar = json.loads((exported / "onnx" / "client-0.json").read_text())
    recorded = sidecar["input"]["range"]
    client = load_checkpoint(list_checkpoints(exported / "run")["client-0"])
    train_x = load_dataset("digits").train_x[client.train_indices]
    assert (recorded["min"], recorded["max"]) == pytest.approx((float(train_x.min()), float(train_x.max())))

    dataset = load_dataset("digits")
    raw = np.round((dataset.test_x[:4].numpy() * dataset.std[0] + dataset.mean[0]) * dataset.input_scale)
    np.save(tmp_path / "raw.npy", raw.astype(np.float32))  # 0..16, as the digits are stored
    model = exported / "onnx" / "client-0.onnx"
    result = _predict(model, tmp_path / "raw.npy")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "raw.npy holds values in [0, 16]" in warnings[0]
    assert "outside the range the model was trained on" in warnings[0] and "pass --normalise" in warnings[0]
    assert len(result.stdout.splitlines()) == 4  # it still answers

    normalised = _predict(model, tmp_path / "raw.npy", "--normalise")
    assert normalised.returncode == 0 and "warning" not in normalised.stderr

    # an export made before the range was recorded: no range, no warning
    old = tmp_path / "old"
    old.mkdir()
    (old / "client-0.onnx").write_bytes(model.read_bytes())
    del sidecar["input"]["range"]
    (old / "client-0.json").write_text(json.dumps(sidecar))
    result = _predict(old / "client-0.onnx", tmp_path / "raw.npy")
    assert result.returncode == 0 and result.stderr == ""


def test_predict_rejects_bad_inputs_with_a_message(exported, tmp_path):
    np.save(tmp_path / "wrong.npy", np.zeros((3, 7), np.float32))
    result = _predict(exported / "onnx" / "client-0.onnx", tmp_path / "wrong.npy")
    assert result.returncode == 2 and "shape (3, 7)" in result.stderr
    result = _predict(exported / "onnx" / "client-0.onnx", tmp_path / "missing.npy")
    assert result.returncode == 2 and "no such file" in result.stderr
    (tmp_path / "lonely.onnx").write_bytes(b"")
    result = _predict(tmp_path / "lonely.onnx", tmp_path / "wrong.npy")
    assert result.returncode == 2 and "sidecar" in result.stderr
