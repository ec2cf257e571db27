"""`edgefd predict`: run an exported model with onnxruntime alone (torch is never imported).

    edgefd predict exported/client-3.onnx digit.png sample.npy
    edgefd predict exported/client-3.int8.onnx batch.npy --json
    edgefd predict runs/watch/onnx/client-0.onnx readings.csv

The sidecar next to the model (``client-3.onnx`` -> ``client-3.json``, written by ``edgefd
export``) gives the input shape, the normalisation and the class names. Inputs:

``.npy``     one sample (the model's input shape) or a batch of them (leading axis), already
             normalised like the training data (what ``edgefd.data`` tensors hold); pass
             ``--normalise`` for raw values, which then get ``(raw / input_scale - mean) / std``.
``.png`` ... an image file (anything Pillow reads), as people have them: 0-255 pixels, converted
             to grey or RGB to match the model's channels, resized to its height and width, brought
             to the training data's scale (0-255 is the whole range of every dataset's raw values,
             digits' 0-16 included), inverted where a grey image's background is the opposite of the
             training images' (dark ink on white paper, for a model of white digits on black;
             ``--invert``), normalised with the sidecar's statistics.
``.csv``     sensor readings as a device logs them, for a model of windows (steps, channels): one
             row per time step, one column per channel, in the units it was trained on, an
             optional header line of names; normalised with the sidecar's statistics.

This is what an edge device runs: its dependencies are numpy, onnxruntime and (for images) Pillow.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".pgm", ".ppm"}
TABLE_SUFFIXES = {".csv"}


class PredictError(ValueError):
    """Bad model, sidecar or input file: the message names it."""


@dataclass
class ExportedModel:
    """An exported model and its sidecar, loaded for onnxruntime."""

    path: Path
    meta: dict[str, Any]
    session: Any

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.meta["input"]["shape"][1:])

    @property
    def classes(self) -> list[str]:
        return list(self.meta["classes"])

    def logits(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        return self.session.run([self.meta["output"]["name"]], {self.meta["input"]["name"]: x})[0]


def sidecar_path(model_path: Path) -> Path:
    return model_path.with_suffix(".json")


def load_exported(path: str | Path, threads: int = 1) -> ExportedModel:
    import onnxruntime as ort

    path = Path(path)
    if not path.is_file():
        raise PredictError(f"model: no such file {path}")
    meta_path = sidecar_path(path)
    if not meta_path.is_file():
        raise PredictError(f"{path}: its sidecar {meta_path.name} is missing (write both with `edgefd export`)")
    try:
        meta = json.loads(meta_path.read_text())
        meta["input"]["shape"], meta["input"]["name"], meta["output"]["name"], meta["classes"]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise PredictError(f"{meta_path}: not an edgefd sidecar ({error})") from None
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime raises its own exception types
        raise PredictError(f"{path}: onnxruntime cannot load it ({error})") from None
    return ExportedModel(path, meta, session)


def normalise(raw: np.ndarray, meta: dict[str, Any]) -> np.ndarray:
    """``(raw / input_scale - mean) / std`` with per-channel statistics on axis 1 (images) or the
    last axis (sensor windows / vectors), as the sidecar says."""
    norm = meta["input"]["normalisation"]
    x = raw.astype(np.float32) / np.float32(norm["input_scale"])
    mean = np.asarray(norm["mean"], np.float32)
    std = np.asarray(norm["std"], np.float32)
    shape: tuple[int, ...]
    if x.ndim == 4:  # (N, C, H, W)
        shape = (1, -1, 1, 1)
    else:
        shape = (1,) * (x.ndim - 1) + (-1,)
    if mean.size not in (1, x.shape[1] if x.ndim == 4 else x.shape[-1]):
        raise PredictError(f"normalisation: {mean.size} means for input of shape {x.shape[1:]}")
    return (x - mean.reshape(shape)) / std.reshape(shape)


def read_image(path: Path, sample_shape: tuple[int, ...]) -> np.ndarray:
    """An image file as a raw [1, C, H, W] float32 array (0..255) matching the model's input."""
    try:
        from PIL import Image
    except ImportError:
        raise PredictError("image inputs need Pillow (pip install pillow)") from None
    if len(sample_shape) != 3 or sample_shape[0] not in (1, 3):
        raise PredictError(f"{path}: the model's input {sample_shape} is not an image (C, H, W) with 1 or 3 channels")
    channels, height, width = sample_shape
    try:
        with Image.open(path) as opened:
            # Pillow defines Image.BILINEAR with setattr; Image.Resampling needs Pillow >= 9.1.
            bilinear = Image.BILINEAR  # type: ignore[attr-defined]  # set at runtime, absent from Pillow's types
            image = opened.convert("L" if channels == 1 else "RGB").resize((width, height), bilinear)
            pixels = np.asarray(image, dtype=np.float32)
    except OSError as error:
        raise PredictError(f"{path}: not a readable image ({error})") from None
    pixels = pixels[None] if channels == 1 else pixels.transpose(2, 0, 1)
    return pixels[None]


def read_table(path: Path, sample_shape: tuple[int, ...]) -> np.ndarray:
    """A CSV of raw readings (one row per time step, one column per channel, an optional header
    line) as a raw [1, steps, channels] float32 array, for a model whose input is such a window."""
    if len(sample_shape) != 2:
        raise PredictError(
            f"{path}: a .csv holds a window of readings (steps, channels); this model's input is {sample_shape}"
        )
    try:
        cells = [row for row in csv.reader(path.read_text(encoding="utf-8").splitlines()) if "".join(row).strip()]
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise PredictError(f"{path}: not a readable CSV file ({error})") from None
    if cells:
        try:
            [float(cell) for cell in cells[0]]
        except ValueError:
            cells = cells[1:]  # a header line of channel names
    try:
        rows = [[float(cell) for cell in line] for line in cells]
    except ValueError as error:
        raise PredictError(f"{path}: expected numbers separated by commas ({error})") from None
    if {len(row) for row in rows} != {sample_shape[1]} or len(rows) != sample_shape[0]:
        widths = sorted({len(row) for row in rows})
        raise PredictError(
            f"{path}: {len(rows)} rows of {', '.join(map(str, widths)) or 0} columns; the model takes "
            f"{sample_shape[0]} rows (time steps) of {sample_shape[1]} columns (channels)"
        )
    table = np.asarray(rows, dtype=np.float32)
    if not np.isfinite(table).all():
        raise PredictError(f"{path}: contains NaN or infinite values")
    return table[None]


INVERT_CHOICES = ("auto", "yes", "no")
"""``--invert``: a grey image's background against the training images' (auto), or always, or never."""


def image_input(pixels: np.ndarray, meta: dict[str, Any], invert: str = "auto") -> tuple[np.ndarray, bool]:
    """An image's 0-255 ``pixels`` [1, C, H, W] as the model's input, and whether it was inverted.
    Over 255 they are on [0, 1], where every dataset's raw values over its ``input_scale`` lie; a
    grey image is inverted (``invert`` auto) when its background, the mean of its border pixels, is
    on the other side of one half from the training images' mean (the sidecar's, which their
    backgrounds dominate), then normalised as the training inputs were."""
    norm = meta["input"]["normalisation"]
    unit = pixels.astype(np.float32) / np.float32(255.0)
    inverted = invert == "yes"
    if invert == "auto" and unit.shape[1] == 1:
        border = np.concatenate([unit[0, 0, 0], unit[0, 0, -1], unit[0, 0, :, 0], unit[0, 0, :, -1]])
        inverted = (float(border.mean()) > 0.5) != (float(np.mean(norm["mean"])) > 0.5)
    if inverted:
        unit = 1.0 - unit
    return normalise(unit * np.float32(norm["input_scale"]), meta), inverted


def read_input(path: str | Path, model: ExportedModel, raw_npy: bool = False, invert: str = "auto") -> np.ndarray:
    """One input file as a normalised float32 batch of the model's input shape (an image that was
    inverted to match the training images says so on stderr)."""
    path = Path(path)
    if not path.is_file():
        raise PredictError(f"input: no such file {path}")
    shape = model.sample_shape
    if path.suffix.lower() == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as error:
            raise PredictError(f"{path}: not a numpy .npy array ({error})") from None
        if not np.issubdtype(array.dtype, np.number):
            raise PredictError(f"{path}: expected numbers, got dtype {array.dtype}")
        if tuple(array.shape) == shape:
            array = array[None]
        if tuple(array.shape[1:]) != shape:
            raise PredictError(
                f"{path}: shape {tuple(array.shape)} is neither {shape} nor (N, {', '.join(map(str, shape))})"
            )
        if not np.isfinite(array).all():
            raise PredictError(f"{path}: contains NaN or infinite values")
        return normalise(array, model.meta) if raw_npy else array.astype(np.float32)
    if path.suffix.lower() in IMAGE_SUFFIXES:
        x, inverted = image_input(read_image(path, shape), model.meta, invert)
        if inverted and invert == "auto":
            print(
                f"edgefd predict: {path}: its background is the opposite of the training images', so it is "
                "inverted (--invert no keeps it as it is)",
                file=sys.stderr,
            )
        return x
    if path.suffix.lower() in TABLE_SUFFIXES:
        return normalise(read_table(path, shape), model.meta)
    raise PredictError(f"{path}: unknown input type {path.suffix!r} (expected .npy, .csv or an image file)")


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=1, keepdims=True)


RANGE_MARGIN = 0.1
"""How far past the recorded training range (as a fraction of its width) an input may reach before
`predict` warns. The warning is for inputs on another scale (raw 0-255 pixels are 100 times the
width of normalised ones), not for a test sample a little brighter than any one client's training set."""


def range_warning(path: str | Path, x: np.ndarray, meta: dict[str, Any], raw_npy: bool = False) -> str | None:
    """One line when the input ``x`` (as fed to the model) reaches outside the range of the training
    inputs recorded at export: the model then answers confidently about data it never saw, typically
    raw values without --normalise. None within the range, or for a sidecar without one (an export
    made before the range was recorded, or without the client's data)."""
    recorded = meta["input"].get("range")
    if recorded is None or x.size == 0:
        return None
    low, high = float(recorded["min"]), float(recorded["max"])
    margin = RANGE_MARGIN * (high - low)
    seen_low, seen_high = float(x.min()), float(x.max())
    if low - margin <= seen_low and seen_high <= high + margin:
        return None
    if Path(path).suffix.lower() in IMAGE_SUFFIXES:
        hint = "an image unlike the training images?"
    elif Path(path).suffix.lower() in TABLE_SUFFIXES:
        hint = "readings in other units, or channels in another order?"
    elif raw_npy:
        hint = "already normalised? then leave out --normalise"
    else:
        hint = "raw values? then pass --normalise"
    return (
        f"edgefd predict: warning: {path} holds values in [{seen_low:.4g}, {seen_high:.4g}], outside the range "
        f"the model was trained on, [{low:.4g}, {high:.4g}]: its answers may be confidently wrong ({hint})"
    )


def predict_files(
    model: ExportedModel, paths: list[str], raw_npy: bool = False, invert: str = "auto"
) -> list[dict[str, Any]]:
    """One record per sample: file, index in the file, predicted class, probabilities. A file whose
    values fall outside the training range gets one warning line on stderr (:func:`range_warning`)."""
    results = []
    for path in paths:
        x = read_input(path, model, raw_npy, invert)
        if warning := range_warning(path, x, model.meta, raw_npy and Path(path).suffix.lower() == ".npy"):
            print(warning, file=sys.stderr)
        probabilities = softmax(model.logits(x).astype(np.float64))
        for index, row in enumerate(probabilities):
            best = int(row.argmax())
            results.append(
                {
                    "file": str(path),
                    "index": index,
                    "class": best,
                    "label": model.classes[best],
                    "probability": float(row[best]),
                    "probabilities": [float(p) for p in row],
                }
            )
    return results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model",
        metavar="MODEL.onnx",
        help="a model written by `edgefd export` (fp32 or .int8.onnx), with its .json sidecar beside it",
    )
    parser.add_argument(
        "inputs",
        metavar="INPUT",
        nargs="+",
        help="one or more files: .npy arrays holding one sample or a batch (N, ...) shaped like the model's "
        "input, already normalised (see --normalise), or image files (.png, .jpg, ...; needs Pillow) of 0-255 "
        "pixels, converted, resized, brought to the training data's scale and normalised to fit (see --invert), "
        "or .csv files of raw sensor readings (one row per time step, one column per channel; normalised)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document (classes, and per sample the file, index, label and all probabilities) "
        "instead of one line per sample",
    )
    parser.add_argument(
        "--normalise",
        action="store_true",
        help=".npy inputs hold raw values (e.g. 0-255 pixels): normalise them with the sidecar's statistics "
        "first (image files are always normalised)",
    )
    parser.add_argument(
        "--invert",
        choices=INVERT_CHOICES,
        default="auto",
        help="grey image files: invert them (dark ink on white paper, for a model of white digits on black) "
        "when their background is the opposite of the training images' (auto, said on stderr), always (yes) "
        "or never (no) (default: %(default)s)",
    )
    parser.add_argument(
        "--top",
        type=int,
        metavar="K",
        default=3,
        help="classes (with probabilities) shown per sample in the text output; not used with --json "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        metavar="N",
        default=1,
        help="onnxruntime intra-op threads (default: %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        model = load_exported(args.model, args.threads)
        results = predict_files(model, args.inputs, args.normalise, args.invert)
    except PredictError as error:
        print(f"edgefd predict: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"model": str(model.path), "classes": model.classes, "predictions": results}, indent=2))
        return 0
    for record in results:
        order = np.argsort(record["probabilities"])[::-1][: max(1, args.top)]
        top = ", ".join(f"{model.classes[c]} {record['probabilities'][c]:.3f}" for c in order)
        print(f"{record['file']}[{record['index']}]: {record['label']} ({top})")
    return 0
