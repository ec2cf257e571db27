"""Each client's final personalised model, saved into a run folder so that it can be exported.

``edgefd simulate`` writes ``RUN_DIR/models/<client>.pt`` for every client, and each deployed client
(``edgefd client``) writes its own when the run ends, into ``--models-dir`` (``deploy-local``: the
run folder's ``models/``): the weights of the
model the run measured for that client (its own model, or the server-side global model for methods
whose deliverable lives there, e.g. FedAvg and DFL), the architecture name, everything needed to
rebuild it (input shape, channels, classes), the dataset's normalisation, the client's train and
test indices into the dataset, and the final accuracy the run reported.

The file holds only tensors, numbers, strings and lists, and is read with
``torch.load(weights_only=True)``: loading it never runs pickled code.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

FORMAT = "edgefd-client-model/1"
MODELS_DIR = "models"


@dataclass
class ClientCheckpoint:
    """One client's deliverable model and what it takes to use it."""

    client_id: str
    model_name: str
    """Zoo architecture (``edgefd.models.build_model`` name)."""
    in_channels: int
    num_classes: int
    input_shape: list[int]
    """One sample's shape without the batch dimension, e.g. ``[1, 28, 28]`` or ``[100, 6]``."""
    dataset: str
    data_root: str | None
    mean: list[float]
    """Normalisation the model expects: ``x = (raw / input_scale - mean) / std`` per channel."""
    std: list[float]
    input_scale: float
    class_names: list[str] | None
    accuracy: float | None
    """Final accuracy on the client's own test split, as the run reported it."""
    algo: str
    train_indices: list[int] = field(default_factory=list)
    """The client's training samples (indices into the dataset's train split): int8 calibration data."""
    test_indices: list[int] = field(default_factory=list)
    """The client's test split (indices into the dataset's test split)."""
    state: dict[str, torch.Tensor] = field(default_factory=dict)

    def build_model(self) -> nn.Module:
        """The architecture with these weights, in eval mode."""
        from edgefd.models import build_model

        model = build_model(
            self.model_name,
            in_channels=self.in_channels,
            num_classes=self.num_classes,
            input_shape=tuple(self.input_shape),
        )
        model.load_state_dict(self.state)
        return model.eval()

    def metadata(self) -> dict[str, Any]:
        """Everything but the weights and indices (JSON-ready)."""
        data = asdict(self)
        for heavy in ("state", "train_indices", "test_indices"):
            data.pop(heavy)
        return data


def save_checkpoint(checkpoint: ClientCheckpoint, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = asdict(checkpoint)
    data["state"] = {name: tensor.detach().cpu().clone() for name, tensor in checkpoint.state.items()}
    data["train_indices"] = torch.as_tensor(np.asarray(checkpoint.train_indices, dtype=np.int64))
    data["test_indices"] = torch.as_tensor(np.asarray(checkpoint.test_indices, dtype=np.int64))
    data["format"] = FORMAT
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(data, tmp)
    tmp.replace(path)
    return path


def load_checkpoint(path: str | Path) -> ClientCheckpoint:
    """Reads a file written by :func:`save_checkpoint` (``ValueError`` if it is not one)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"client model: no such file {path}")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a truncated or foreign file: say which one
        raise ValueError(f"{path}: not an edgefd client model ({error})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path}: not an edgefd client model (format {FORMAT!r} expected)")
    data.pop("format")
    data["train_indices"] = data["train_indices"].tolist()
    data["test_indices"] = data["test_indices"].tolist()
    return ClientCheckpoint(**data)


def list_checkpoints(run_dir: str | Path) -> dict[str, Path]:
    """``{client_id: path}`` of the models a run folder holds (``ValueError`` if none)."""
    folder = Path(run_dir) / MODELS_DIR
    files = sorted(folder.glob("*.pt")) if folder.is_dir() else []
    if not files:
        raise ValueError(f"{run_dir}: no client models in {folder}: {_where_the_models_are(Path(run_dir))}")
    return {file.stem: file for file in files}


def _where_the_models_are(run_dir: Path) -> str:
    """Why a run folder holds no models, and where they are."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        summary = None
    if not isinstance(summary, dict):
        return "the run has not finished (no summary.json), or this is not a run folder"
    deployment = summary.get("deployment")
    if isinstance(deployment, dict):
        clients = ", ".join(str(c) for c in deployment.get("clients", [])) or "its clients"
        return (
            f"this is an `edgefd server` run, whose models are on the devices ({clients}): each writes its own "
            "when the run ends, into `edgefd client --models-dir` (default: STATE_DIR/models). Copy them into "
            f"{run_dir / MODELS_DIR}/, or export on a device: `edgefd export STATE_DIR`"
        )
    return "runs made before models were saved have none; run it again"


def deliverable_model(client: Any, evaluation_state: Any = None) -> nn.Module:
    """The model a run measures for this client: its own, or ``evaluation_state`` (what the server
    sent it to evaluate: FedAvg's and DFL's global model) loaded into a copy."""
    from edgefd.training import load_state_arrays

    if evaluation_state is None:
        return client.model
    model = copy.deepcopy(client.model)
    load_state_arrays(model, evaluation_state.arrays)
    return model


def client_checkpoint(
    config: Any, dataset: Any, client_id: str, model_name: str, split: Any | None = None
) -> ClientCheckpoint:
    """A client's checkpoint without its weights and accuracy, from what its run knows: the config,
    the dataset's description and the client's split (None for a device's own data: no indices)."""
    from edgefd.models import in_channels_of

    return ClientCheckpoint(
        client_id=client_id,
        model_name=model_name,
        in_channels=in_channels_of(tuple(dataset.input_shape)),
        num_classes=int(dataset.num_classes),
        input_shape=[int(s) for s in dataset.input_shape],
        dataset=config.dataset,
        data_root=config.data_root,
        mean=[float(m) for m in dataset.mean],
        std=[float(s) for s in dataset.std],
        input_scale=float(dataset.input_scale),
        class_names=list(dataset.class_names) if dataset.class_names else None,
        accuracy=None,
        algo=config.algo,
        train_indices=[] if split is None else [int(i) for i in split.train_indices],
        test_indices=[] if split is None else [int(i) for i in split.test_indices],
    )


def save_run_models(sim: Any, final_accuracy: dict[str, float], out_dir: str | Path) -> list[Path]:
    """Writes ``out_dir/models/<client>.pt`` for every client of a finished simulation."""
    paths = []
    for cid, client in sim.final_clients().items():
        model = deliverable_model(client, sim.server.evaluation_state(cid))
        accuracy = final_accuracy.get(cid)
        checkpoint = client_checkpoint(sim.config, sim.dataset, cid, sim.model_names[cid], sim.splits[cid])
        checkpoint.accuracy = None if accuracy is None else float(accuracy)
        checkpoint.state = model.state_dict()
        paths.append(save_checkpoint(checkpoint, Path(out_dir) / MODELS_DIR / f"{cid}.pt"))
    return paths
