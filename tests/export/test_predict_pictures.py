"""`edgefd predict` on pictures as people have them: 0-255 pixels, dark ink on white, larger than the
model's input (samples/, which scripts/make_samples.py writes), against a FedAvg model of digits."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from edgefd import cli
from edgefd.data import load_dataset
from edgefd.export.predict import image_input, load_exported, read_image
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """FedAvg's global model of digits (3 clients, IID, 10 rounds: about 93% on the test set), exported
    where `edgefd export` puts it without --out."""
    root = tmp_path_factory.mktemp("pictures")
    config = SimulationConfig(
        algo="fedavg", dataset="digits", clients=3, rounds=10, partition="iid", threads=1, out=str(root / "run")
    )
    run(config, progress=False)
    assert cli.main(["export", str(root / "run")]) == 0  # into the run's folder: run/onnx
    return root / "run" / "onnx" / "client-0.onnx"


def predict(*args) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "edgefd.cli", "predict", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_the_shipped_digit_picture_is_labelled_right(model):
    """samples/digits-1.png: test row 0 of digits, dark on white, 112 pixels a side. predict inverts
    it (and says so); read as it is, white paper for a model of white ink on black, it was wrong."""
    done = predict(model, SAMPLES / "digits-1.png")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{SAMPLES / 'digits-1.png'}[0]: 1 (1 0.")
    assert "so it is inverted (--invert no keeps it as it is)" in done.stderr
    assert "warning" not in done.stderr  # within the training range
    kept = predict(model, SAMPLES / "digits-1.png", "--invert", "no")
    assert kept.returncode == 0 and "inverted" not in kept.stderr
    assert not kept.stdout.startswith(f"{SAMPLES / 'digits-1.png'}[0]: 1 ")


def test_a_pictures_pixels_reach_the_training_range_not_sixteen_times_past_it(model, tmp_path):
    """A 0-255 picture of a digit (white on black, as the training data) is brought to digits' 0-16
    scale: its inputs lie within the range the export recorded. Before, 255 was read on digits'
    0-16 scale, and the inputs reached 41.6 against a training range of [-0.81, 1.85]."""
    dataset = load_dataset("digits")
    unit = dataset.test_x[7, 0].numpy() * dataset.std[0] + dataset.mean[0]
    Image.fromarray(np.round(unit * 255).astype(np.uint8)).resize((64, 64), Image.NEAREST).save(tmp_path / "d.png")
    exported = load_exported(model)
    x, inverted = image_input(read_image(tmp_path / "d.png", exported.sample_shape), exported.meta)
    recorded = exported.meta["input"]["range"]
    assert not inverted  # its background is the training images' (dark)
    assert recorded["min"] - 0.1 <= float(x.min()) and float(x.max()) <= recorded["max"] + 0.1, (x.min(), x.max())
    done = predict(model, tmp_path / "d.png")
    assert done.returncode == 0 and "warning" not in done.stderr and "inverted" not in done.stderr, done.stderr
    assert done.stdout.startswith(f"{tmp_path / 'd.png'}[0]: {int(dataset.test_y[7])} "), done.stdout


def test_every_bundled_image_dataset_has_a_sample_that_reads_as_its_test_row():
    """The samples are their datasets' test rows: read back (resized, inverted), each is within a few
    grey levels of the row, and its name carries the row's label."""
    for path in sorted(SAMPLES.glob("*.png")):
        name, label = path.stem.rsplit("-", 1)
        dataset = load_dataset(name)
        row = 0
        assert int(dataset.test_y[row]) == int(label)
        meta = {"input": {"normalisation": {"input_scale": 1.0, "mean": [0.0], "std": [1.0]}}}
        x, inverted = image_input(read_image(path, tuple(dataset.test_x.shape[1:])), meta)
        unit = dataset.test_x[row, 0].numpy() * dataset.std[0] + dataset.mean[0]
        assert inverted and np.abs(x[0, 0] - unit).mean() < 0.1, path
    assert {p.stem.rsplit("-", 1)[0] for p in SAMPLES.glob("*.png")} == {"digits", "mnist5k"}


def test_every_bundled_dataset_ships_a_sample():
    """digits and mnist5k as pictures, watch as a CSV of readings (tests/export/test_predict_readings.py)."""
    bundled = {"digits", "mnist5k", "watch"}
    assert {p.stem.rsplit("-", 1)[0] for p in SAMPLES.iterdir() if p.suffix in (".png", ".csv")} == bundled
