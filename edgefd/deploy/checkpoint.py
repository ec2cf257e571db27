"""Checkpoints of a running role: its whole state on disk, written atomically.

A role (any method's) is pickled as it is, except for the objects a process rebuilds from the
run's config anyway (the dataset share, the model factory): those are written as named
references and handed back on load, so a checkpoint holds what the role learnt, not its data.
torch Generators (not picklable) travel as their state. The file is written to a temporary name,
flushed to disk and renamed, so a process killed at any instant leaves the previous checkpoint or
the new one, never half of one.
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

import torch


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` so that readers see the old file or the new one, whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _generator_from_state(state: torch.Tensor) -> torch.Generator:
    generator = torch.Generator()
    generator.set_state(state)
    return generator


class _Pickler(pickle.Pickler):
    def __init__(self, handle, references: dict[str, Any]) -> None:
        super().__init__(handle, protocol=pickle.HIGHEST_PROTOCOL)
        self._names = {id(obj): name for name, obj in references.items()}

    def persistent_id(self, obj: Any) -> str | None:
        return self._names.get(id(obj))

    def reducer_override(self, obj: Any):
        if isinstance(obj, torch.Generator):
            return _generator_from_state, (obj.get_state(),)
        return NotImplemented


class _Unpickler(pickle.Unpickler):
    def __init__(self, handle, references: dict[str, Any]) -> None:
        super().__init__(handle)
        self._references = references

    def persistent_load(self, name: str) -> Any:
        if name not in self._references:
            raise pickle.UnpicklingError(f"checkpoint refers to {name!r}, which was not given back")
        return self._references[name]


def dumps(state: Any, references: dict[str, Any]) -> bytes:
    """Pickle `state`, writing each object of `references` (by identity) as its name."""
    buffer = io.BytesIO()
    _Pickler(buffer, references).dump(state)
    return buffer.getvalue()


def loads(data: bytes, references: dict[str, Any]) -> Any:
    return _Unpickler(io.BytesIO(data), references).load()


def save(path: str | os.PathLike, state: Any, references: dict[str, Any]) -> None:
    atomic_write(path, dumps(state, references))


def load(path: str | os.PathLike, references: dict[str, Any]) -> Any:
    try:
        return loads(Path(path).read_bytes(), references)
    except (ModuleNotFoundError, AttributeError) as error:  # a class this version moved or renamed
        raise ValueError(
            f"{path}: written by another version of edgefd ({error}); start the run afresh without --resume"
        ) from error
