"""Hash encoders: frozen, public embedding functions that every client applies to its samples.

FedCache relates samples by the cosine similarity of these embeddings ("hashes" in the paper).
Every client must use the same encoder (docs/methods/fedcache.md#hash-encoder). Four are
available, named by a string:

``pixels``              the standardised pixels, flattened (no weights needed; the built-in
                        stand-in for offline runs).
``projection[:D]``      the standardised pixels through a fixed random Gaussian projection to D
                        dimensions (default 64; seed 0, the same matrix on every client).
                        Cosine similarities are kept up to a small distortion, and a 784-pixel image hashes to 64
                        floats, which cuts the one-time upload 12x.
``mobilenet[:WEIGHTS]`` torchvision's MobileNetV3-Small trunk (features + average pool, 576-d),
                        the paper's encoder: inputs are expanded to 3 channels, resized to 224
                        and normalised with ImageNet statistics (Sec. 5.1.3 and the authors'
                        code). With
                        ImageNet weights from a file (``WEIGHTS``, a state_dict saved by
                        torch) it gives the paper's behaviour; without a file its weights are
                        random (seeded), which is only good for tests.
``onnx:PATH``           any ONNX model mapping a batch of inputs to a batch of vectors, run with
                        onnxruntime, which is how a device runs the encoder.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from edgefd import progress
from edgefd.algorithms.toolkit import shared_by_clients

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass
class HashEncoder:
    """A named, frozen batch function from inputs to float32 embeddings."""

    name: str
    encode_batch: Callable[[torch.Tensor], np.ndarray]
    batch_size: int = 256

    def __call__(self, x: torch.Tensor) -> np.ndarray:
        starts = range(0, len(x), self.batch_size)
        batches = progress.track(starts, f"hashing with the {self.name} encoder", unit="batch")
        parts = [self.encode_batch(x[i : i + self.batch_size]) for i in batches]
        if not parts:
            return np.zeros((0, 0), np.float32)
        out = np.concatenate(parts).astype(np.float32, copy=False)
        return out.reshape(len(x), -1)


def _pixels(x: torch.Tensor) -> np.ndarray:
    return x.reshape(len(x), -1).numpy()


PROJECTION_SEED = 0


def _projection_encoder(dim: str) -> HashEncoder:
    try:
        out_dim = int(dim or 64)
    except ValueError:
        raise ValueError(f"encoder projection:{dim}: the dimension must be an integer") from None
    if out_dim < 1:
        raise ValueError(f"encoder projection:{dim}: the dimension must be >= 1")
    matrices: dict[int, np.ndarray] = {}

    def encode(x: torch.Tensor) -> np.ndarray:
        pixels = _pixels(x)
        in_dim = pixels.shape[1]
        if in_dim not in matrices:  # drawn from the seed alone, so every client draws the same one
            rng = np.random.default_rng(PROJECTION_SEED)
            matrices[in_dim] = (rng.standard_normal((in_dim, out_dim)) / np.sqrt(out_dim)).astype(np.float32)
        return pixels @ matrices[in_dim]

    return HashEncoder(f"projection:{out_dim}", encode)


def mobilenet_trunk(weights: str | None = None, seed: int = 0) -> nn.Module:
    """MobileNetV3-Small without its classifier: [B, 3, H, W] -> [B, 576]."""
    from torchvision.models import mobilenet_v3_small

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = mobilenet_v3_small(weights=None)
    if weights is not None:
        path = Path(weights)
        if not path.is_file():
            raise FileNotFoundError(f"mobilenet encoder weights: no such file {path}")
        state = torch.load(path, map_location="cpu", weights_only=True)
        missing, unexpected = model.load_state_dict(state, strict=False)
        trunk_missing = [k for k in missing if not k.startswith("classifier.")]
        if trunk_missing:
            raise ValueError(f"mobilenet encoder weights {path}: missing trunk entries {trunk_missing[:3]}...")
    trunk = nn.Sequential(model.features, model.avgpool, nn.Flatten(1))
    return trunk.eval()


class MobileNetHash(nn.Module):
    """The whole mobilenet hash function as one module: [B, C, H, W] dataset inputs -> [B, 576].

    Inputs arrive standardised per dataset: grey images are expanded to 3 channels, resized to
    224, mapped to [0, 1] per image and normalised with ImageNet statistics before the trunk.
    One module, so that ``edgefd export-encoder`` writes exactly this function to ONNX."""

    mean: torch.Tensor  # buffers, registered in __init__
    std: torch.Tensor

    def __init__(self, weights: str | None = None, seed: int = 0) -> None:
        super().__init__()
        self.trunk = mobilenet_trunk(weights, seed)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1))
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        images = x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x
        images = nn.functional.interpolate(images, size=(224, 224), mode="bilinear", align_corners=False)
        low = images.amin(dim=(1, 2, 3), keepdim=True)
        high = images.amax(dim=(1, 2, 3), keepdim=True)
        images = (images - low) / (high - low).clamp(min=1e-6)
        return self.trunk((images - self.mean) / self.std)


def _mobilenet_encoder(weights: str | None) -> HashEncoder:
    """The hash function of `MobileNetHash`, run by onnxruntime: exported once per input shape (a
    few seconds, in a child process: `exported_in_a_child`), it hashes about 4x faster than eager
    torch on a CPU (3 against 13 ms an image on one core, 28x28 inputs), and gives the same
    embeddings (to float rounding)."""
    if weights is not None and not Path(weights).is_file():
        raise FileNotFoundError(f"mobilenet encoder weights: no such file {weights}")
    sessions: dict[tuple[int, ...], Callable[[np.ndarray], np.ndarray]] = {}

    def encode(x: torch.Tensor) -> np.ndarray:
        if x.dim() != 4:
            raise ValueError(f"mobilenet encoder: expected images [B, C, H, W], got shape {tuple(x.shape)}")
        shape = tuple(x.shape[1:])
        if shape not in sessions:  # built at the first batch: a run whose hashes are all cached never builds it
            sessions[shape] = onnxruntime_function(exported_in_a_child(weights, shape))
        return sessions[shape](x.numpy())

    return HashEncoder("mobilenet" if weights is None else f"mobilenet:{weights}", encode, batch_size=32)


def export_mobilenet_hash(weights: str | None, shape: Sequence[int], path: str) -> None:
    """Writes `MobileNetHash` (inputs of per-sample ``shape``, any batch) to ``path`` as ONNX."""
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer warnings
        torch.onnx.export(
            MobileNetHash(weights),
            (torch.zeros(2, *shape),),
            path,
            dynamo=False,
            input_names=["input"],
            output_names=["output"],
            dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
        )


def exported_in_a_child(weights: str | None, shape: tuple[int, ...]) -> bytes:
    """The ONNX file of `export_mobilenet_hash`, made by a child Python process. Exporting imports
    torchvision and torch's ONNX exporter, which would stay in this process for the rest of the run:
    building the session here took 254 MiB over `import torch`, from the file 47 MiB, and a cold
    FedCache run of the authors' demo setting peaked at 1,180 MiB with them, 1,096-1,111 without."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # this process's imports
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "encoder.onnx"
        code = "import sys; from edgefd.algorithms.fedcache import encoders as e; e._export_from_argv(sys.argv[1:])"
        command = [sys.executable, "-c", code, weights or "", str(path), *map(str, shape)]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not path.is_file():
            name = "mobilenet" if weights is None else f"mobilenet:{weights}"
            raise RuntimeError(
                f"encoder {name}: exporting it to ONNX failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
            )
        return path.read_bytes()


def _export_from_argv(argv: list[str]) -> None:
    """`exported_in_a_child`'s child: WEIGHTS (empty: random) PATH DIM..."""
    weights, path, *shape = argv
    export_mobilenet_hash(weights or None, [int(d) for d in shape], path)


def onnxruntime_function(model: bytes) -> Callable[[np.ndarray], np.ndarray]:
    """The ONNX ``model`` (an "input" of any batch, an "output") run by onnxruntime with torch's
    thread count."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])

    def run(batch: np.ndarray) -> np.ndarray:
        (out,) = session.run(None, {"input": np.ascontiguousarray(batch, dtype=np.float32)})
        return np.asarray(out, dtype=np.float32).reshape(len(batch), -1)

    return run


@shared_by_clients
def _shared_mobilenet_encoder(weights: str | None, stamp: int) -> HashEncoder:
    """One mobilenet encoder per process (``stamp``: the weights file's mtime, so a rewritten file
    is read again): the simulated clients of a run share its ONNX export and session (a deployed
    client lets it go after its hello: FedCacheClient.done_sharing)."""
    return _mobilenet_encoder(weights)


def _onnx_encoder(path: str) -> HashEncoder:
    import onnxruntime as ort

    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"onnx encoder: no such file {file}")
    session = ort.InferenceSession(str(file), providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name

    def encode(x: torch.Tensor) -> np.ndarray:
        (out,) = session.run(None, {input_name: x.numpy().astype(np.float32)})[:1]
        return np.asarray(out, dtype=np.float32).reshape(len(x), -1)

    # in batches of 32, as the mobilenet encoder: onnxruntime's arena keeps the largest batch's
    # activations, and at the default 256 a device's FedCache client peaked at 1.46 GB, not 0.9
    return HashEncoder(f"onnx:{path}", encode, batch_size=32)


def build_encoder(spec: str) -> HashEncoder:
    """``pixels`` | ``projection[:D]`` | ``mobilenet`` | ``mobilenet:WEIGHTS.pt`` | ``onnx:PATH``."""
    kind, _, arg = spec.partition(":")
    if kind == "pixels" and not arg:
        return HashEncoder("pixels", _pixels)
    if kind == "projection":
        return _projection_encoder(arg)
    if kind == "mobilenet":
        weights = arg or None
        stamp = Path(weights).stat().st_mtime_ns if weights and Path(weights).is_file() else 0
        return _shared_mobilenet_encoder(weights, stamp)
    if kind == "onnx" and arg:
        return _onnx_encoder(arg)
    raise ValueError(f"encoder {spec!r}: expected pixels, projection[:D], mobilenet[:WEIGHTS] or onnx:PATH")
