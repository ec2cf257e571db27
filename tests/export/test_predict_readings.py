"""`edgefd predict` on sensor readings as a device logs them: a CSV of raw values, one row per time
step and one column per channel (samples/watch-PEN.csv, which scripts/make_samples.py writes),
against a FedAvg model of the smartwatch windows."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgefd import cli
from edgefd.data import load_dataset
from edgefd.export.predict import PredictError, load_exported, read_input
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
WATCH_SAMPLE = SAMPLES / "watch-PEN.csv"


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """FedAvg's global model of watch (3 clients, IID, 10 rounds: about 80% on the test set)."""
    root = tmp_path_factory.mktemp("readings")
    config = SimulationConfig(
        algo="fedavg", dataset="watch", clients=3, rounds=10, partition="iid", threads=1, out=str(root / "run")
    )
    run(config, progress=False)
    assert cli.main(["export", str(root / "run")]) == 0
    return root / "run" / "onnx" / "client-0.onnx"


def predict(*args) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "edgefd.cli", "predict", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_the_shipped_watch_readings_are_labelled_right(model):
    """samples/watch-PEN.csv is test row 0 of watch in raw units with a header line: predict
    normalises it with the sidecar's statistics, stays in the training range, and says PEN."""
    done = predict(model, WATCH_SAMPLE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{WATCH_SAMPLE}[0]: PEN (PEN 0."), done.stdout
    assert "warning" not in done.stderr


def test_the_sample_is_the_test_row_in_raw_units(model):
    """Read back and normalised, the CSV is the dataset's test row 0 (to the six digits written)."""
    dataset = load_dataset("watch")
    x = read_input(WATCH_SAMPLE, load_exported(model))
    assert x.shape == (1, 100, 6)
    np.testing.assert_allclose(x[0], dataset.test_x[0].numpy(), atol=1e-4)
    assert dataset.class_names is not None and dataset.class_names[int(dataset.test_y[0])] == "PEN"


def test_a_header_is_optional_and_readings_in_other_units_are_warned_about(model, tmp_path):
    """Without its header line the CSV gives the same input; in m/s² instead of g (9.81 times
    larger) it reaches outside the training range and the warning suggests units."""
    exported = load_exported(model)
    lines = WATCH_SAMPLE.read_text().splitlines()
    (tmp_path / "bare.csv").write_text("\n".join(lines[1:]) + "\n")
    np.testing.assert_array_equal(read_input(tmp_path / "bare.csv", exported), read_input(WATCH_SAMPLE, exported))
    table = np.loadtxt(WATCH_SAMPLE, delimiter=",", skiprows=1)
    np.savetxt(tmp_path / "metres.csv", table * 9.81, delimiter=",")
    done = predict(model, tmp_path / "metres.csv")
    assert done.returncode == 0
    assert "outside the range the model was trained on" in done.stderr and "other units" in done.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,b\n1,2\n", "1 rows of 2 columns; the model takes 100 rows (time steps) of 6 columns (channels)"),
        ("1,2,3,4,5,6\n" * 99 + "1,2,x,4,5,6\n", "expected numbers separated by commas"),
        ("1,2,3,4,5,6\n" * 99 + "1,2,nan,4,5,6\n", "contains NaN or infinite values"),
        ("", "0 rows of 0 columns"),
    ],
)
def test_a_table_that_does_not_fit_gets_one_line_naming_it(model, tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(PredictError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_input(path, load_exported(model))
    done = predict(model, path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and str(path) in done.stderr


def test_a_csv_for_an_image_model_is_refused_with_its_input_shape(tmp_path):
    """An image model's input is (C, H, W), not a window of readings: the error says both."""
    root = tmp_path / "run"
    run(SimulationConfig(algo="local", dataset="digits", clients=2, rounds=1, threads=1, out=str(root)), progress=False)
    assert cli.main(["export", str(root)]) == 0
    done = predict(root / "onnx" / "client-0.onnx", WATCH_SAMPLE)
    assert done.returncode == 2
    assert "a .csv holds a window of readings (steps, channels); this model's input is (1, 8, 8)" in done.stderr
