"""Writes samples/: one test input per bundled dataset, as a person would have it, for `edgefd
predict` to try:

    python3 scripts/make_samples.py

- digits, mnist5k: a picture of a digit (dark ink on white paper, 0-255 pixels, larger than the
  model's input);
- watch: a CSV of the smartwatch's raw readings (2 s at 50 Hz: 100 rows, one column per channel,
  in the units of seglearn's file), as a device logs them.

Each file is named by its dataset and its true label; the test rows are fixed (every bundled
dataset's split is), so the files come out the same every time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from edgefd.data import load_dataset

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
ROWS = {"digits": 0, "mnist5k": 0, "watch": 0}
"""The test row each dataset's sample is drawn from."""
WATCH_CHANNELS = ("accel_x", "accel_y", "accel_z", "gyro_x", "gyro_y", "gyro_z")
"""The header of the watch sample: seglearn's six channels, accelerometer then gyroscope."""
SIZE = 112
"""The sample's side in pixels: the model's input is smaller, so predict resizes it."""


def picture(dataset_name: str, row: int) -> tuple[Image.Image, int]:
    """Test row ``row`` as dark ink on white, 0-255, ``SIZE`` pixels a side; and its label."""
    dataset = load_dataset(dataset_name)
    x = dataset.test_x[row, 0].numpy() * dataset.std[0] + dataset.mean[0]  # raw / input_scale, in [0, 1]
    ink = np.clip(np.round(255 * (1.0 - x)), 0, 255).astype(np.uint8)
    return Image.fromarray(ink).resize((SIZE, SIZE), Image.NEAREST), int(dataset.test_y[row])


def readings(row: int) -> tuple[str, str]:
    """Test row ``row`` of watch as CSV text of raw readings (the normalisation undone); and its class name."""
    dataset = load_dataset("watch")
    raw = dataset.test_x[row].numpy().astype(np.float64) * np.array(dataset.std) + np.array(dataset.mean)
    lines = [",".join(WATCH_CHANNELS)] + [",".join(f"{value:.6g}" for value in step) for step in raw]
    assert dataset.class_names is not None
    return "\n".join(lines) + "\n", dataset.class_names[int(dataset.test_y[row])]


def main() -> None:
    SAMPLES.mkdir(exist_ok=True)
    for name, row in ROWS.items():
        if name == "watch":
            text, label = readings(row)
            path = SAMPLES / f"{name}-{label}.csv"
            path.write_text(text)
        else:
            image, number = picture(name, row)
            label = str(number)
            path = SAMPLES / f"{name}-{label}.png"
            image.save(path, optimize=True)
        print(f"{path.relative_to(SAMPLES.parent)}: test row {row} of {name}, label {label}")


if __name__ == "__main__":
    main()
