"""Writes samples/: a picture of one test digit per bundled image dataset, as a person would have it
(dark ink on white paper, 0-255 pixels, larger than the model's input), for `edgefd predict` to try:

    python3 scripts/make_samples.py

Each file is named by its dataset and its true label; the test rows are fixed (digits' and
mnist5k's splits are), so the files come out the same every time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from edgefd.data import load_dataset

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
ROWS = {"digits": 0, "mnist5k": 0}
"""The test row each dataset's sample is drawn from."""
SIZE = 112
"""The sample's side in pixels: the model's input is smaller, so predict resizes it."""


def picture(dataset_name: str, row: int) -> tuple[Image.Image, int]:
    """Test row ``row`` as dark ink on white, 0-255, ``SIZE`` pixels a side; and its label."""
    dataset = load_dataset(dataset_name)
    x = dataset.test_x[row, 0].numpy() * dataset.std[0] + dataset.mean[0]  # raw / input_scale, in [0, 1]
    ink = np.clip(np.round(255 * (1.0 - x)), 0, 255).astype(np.uint8)
    return Image.fromarray(ink).resize((SIZE, SIZE), Image.NEAREST), int(dataset.test_y[row])


def main() -> None:
    SAMPLES.mkdir(exist_ok=True)
    for name, row in ROWS.items():
        image, label = picture(name, row)
        path = SAMPLES / f"{name}-{label}.png"
        image.save(path, optimize=True)
        print(f"{path.relative_to(SAMPLES.parent)}: test row {row} of {name}, label {label}")


if __name__ == "__main__":
    main()
