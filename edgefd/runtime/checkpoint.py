"""Checkpoints of a running role, in a format that cannot run code when it is read.

A checkpoint is one flat file: a magic line, the length of a JSON header, the header (the format,
every array's dtype, shape and place, and everything else as one JSON tree), then the arrays' raw
bytes. Every array and tensor is stored as an array: a dtype (one that holds Python objects is
refused), a shape and bytes; nothing is unpickled. Nothing in the file names a callable to call: a
role is restored *into* a role the process has just built from the run's config
(:meth:`Checkpoint.restore`), attribute by attribute, so the file only supplies values.
Models are restored with ``load_state_dict``, optimisers with theirs, generators with their
states; an object the fresh role does not hold is made only of a class of an ``edgefd`` module
this process has already imported, with ``__new__`` and its attributes (no ``__init__``, no
``__setstate__``, no import). Callables (the model
factory, a partial, a bound method) and the objects passed as ``references`` (the dataset share,
which a process loads anyway) are not written: the fresh role's are kept. So a crafted checkpoint
can give a role wrong numbers, never make a process run its code.

The file is written to a temporary name, flushed to disk, renamed and the folder synced, so a
process killed at any instant leaves the previous checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import functools
import io
import json
import math
import os
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, BinaryIO

import numpy as np
import torch
from torch import nn

FORMAT = "edgefd-checkpoint/4"
"""Its number goes up when a checkpointed name or the file's layout changes: an older checkpoint
is then refused, never restored into the wrong attributes (3: a device's `stored_answers`,
FedCache's `KnowledgeCache.logits`; 4: one flat file instead of an ``.npz`` archive, whose zip
and ``.npy`` headers took half of the time of saving a small client, which a Ray actor does for
each of its clients every round)."""
MAGIC = b"edgefd checkpoint\n"
ALIGN = 64
"""The header and each array's bytes are padded to a multiple of this many bytes."""
_LENGTH_BYTES = 8
_MISSING = object()
_BIT_GENERATORS = {"PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937"}
_CALLABLES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, functools.partial, type)


class CheckpointError(ValueError):
    """A checkpoint that cannot be written or read back into this role (named in the message)."""


def atomic_write(path: str | os.PathLike, data: bytes | Callable[[BinaryIO], None], durable: bool = True) -> None:
    """Write `data` (bytes, or a function that writes to the open file) to `path` so that readers
    see the old file or the new one, whole. ``durable``: also when the machine loses power (the
    file and its folder synced to disk); without it, only when the process is killed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            if callable(data):
                data(handle)
            else:
                handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    if not durable:
        return
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)  # the rename itself survives a power cut
    finally:
        os.close(folder)


# ---------------------------------------------------------------------------------- writing


class _Writer:
    """Turns a state into a JSON tree plus arrays. Objects met twice are written once (``alias``)."""

    def __init__(self, references: dict[str, Any]) -> None:
        self.references = {id(obj): name for name, obj in references.items()}
        self.arrays: list[np.ndarray] = []
        self.seen: dict[int, int] = {}
        self.keep: list[Any] = []  # keeps every object seen alive, so that no id is reused meanwhile

    def array(self, value: np.ndarray) -> int:
        self.arrays.append(value if value.flags.c_contiguous else np.ascontiguousarray(value))
        return len(self.arrays) - 1

    def node(self, value: Any, where: str) -> Any:
        if id(value) in self.references:
            return {"$": "ref", "name": self.references[id(value)]}
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"$": "float", "v": repr(value)}
        if isinstance(value, _CALLABLES):
            return {"$": "skip"}  # rebuilt from the config; the fresh role's is kept
        if isinstance(value, slice):
            return {"$": "slice", "v": [value.start, value.stop, value.step]}
        if isinstance(value, np.generic):
            return {"$": "scalar", "i": self.array(np.asarray(value))}
        if id(value) in self.seen:
            return {"$": "alias", "n": self.seen[id(value)]}
        n = self.seen[id(value)] = len(self.seen)
        self.keep.append(value)
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                raise CheckpointError(f"{where}: an array of Python objects cannot be checkpointed")
            return {"$": "array", "n": n, "i": self.array(value)}
        if isinstance(value, torch.Tensor):
            return {"$": "tensor", "n": n, "i": self.array(value.detach().cpu().numpy()), "grad": value.requires_grad}
        if isinstance(value, nn.Module):
            state = {k: self.array(t.detach().cpu().numpy()) for k, t in value.state_dict().items()}
            return {"$": "module", "n": n, "state": state, "training": value.training}
        if isinstance(value, torch.optim.Optimizer):
            return {"$": "optimizer", "n": n, "state": self.node(value.state_dict(), f"{where}.state_dict()")}
        if isinstance(value, torch.Generator):
            return {"$": "torch_generator", "n": n, "i": self.array(value.get_state().numpy())}
        if isinstance(value, np.random.Generator):
            return {"$": "numpy_generator", "n": n, "state": self.node(value.bit_generator.state, where)}
        if isinstance(value, (list, tuple, set, frozenset)):
            kind = type(value).__name__ if type(value) in (list, tuple, set, frozenset) else "list"
            return {"$": kind, "n": n, "v": [self.node(v, f"{where}[{i}]") for i, v in enumerate(value)]}
        if isinstance(value, dict):
            keys = list(value)
            return {
                "$": "dict",
                "n": n,
                "k": [self.node(k, f"{where} key") for k in keys],
                "v": [self.node(value[k], f"{where}[{k!r}]") for k in keys],
            }
        cls = type(value)
        if (cls.__module__.startswith("edgefd.") or cls in _method_classes()) and hasattr(value, "__dict__"):
            attrs = {k: self.node(v, f"{where}.{k}") for k, v in vars(value).items()}
            return {"$": "object", "n": n, "class": f"{cls.__module__}:{cls.__qualname__}", "attrs": attrs}
        raise CheckpointError(f"{where}: a {cls.__module__}.{cls.__qualname__} cannot be checkpointed")


def write(file: IO[bytes], state: dict[str, Any], references: dict[str, Any]) -> None:
    """Write the checkpoint of `state` (a dict of named parts) to `file`; `references` are not
    written. The arrays go to the file one by one, never copied whole: a client's last answer is in
    its checkpoint, and FedICT's is 312 MB of features (5,000 CIFAR samples)."""
    writer = _Writer(references)
    tree = {key: writer.node(value, key) for key, value in state.items()}
    starts, end = [], 0
    for array in writer.arrays:
        starts.append(_aligned(end))
        end = starts[-1] + array.nbytes
    places = [[a.dtype.str, list(a.shape), start, a.nbytes] for a, start in zip(writer.arrays, starts)]
    header = json.dumps({"format": FORMAT, "arrays": places, "state": tree}).encode()
    head = MAGIC + len(header).to_bytes(_LENGTH_BYTES, "little") + header
    file.write(head + bytes(_aligned(len(head)) - len(head)))  # the arrays' bytes start aligned
    written = 0
    for array, start in zip(writer.arrays, starts):
        file.write(bytes(start - written))
        if array.nbytes:
            file.write(array.reshape(-1).view(np.uint8).data)  # the array's own bytes: no copy
        written = start + array.nbytes


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def _natural(value: Any) -> bool:
    """A whole number of at least 0 (a JSON true is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def dumps(state: dict[str, Any], references: dict[str, Any]) -> bytes:
    """The checkpoint of `state` as bytes (see `write`)."""
    buffer = io.BytesIO()
    write(buffer, state, references)
    return buffer.getvalue()


def save(path: str | os.PathLike, state: dict[str, Any], references: dict[str, Any], durable: bool = True) -> None:
    """The checkpoint of `state` into `path`, whole or not at all (``durable``: see `atomic_write`)."""
    atomic_write(path, lambda file: write(file, state, references), durable)


# ---------------------------------------------------------------------------------- reading


class Checkpoint:
    """A checkpoint read back: :meth:`value` for plain parts, :meth:`restore` for a role."""

    def __init__(self, data: bytes, references: dict[str, Any], name: str = "checkpoint") -> None:
        self.name = name
        header, body = self._header(data)
        if header.get("format") != FORMAT or not isinstance(header.get("state"), dict):
            raise CheckpointError(
                f"{name}: format {header.get('format')!r}, this edgefd reads {FORMAT!r}; "
                "start the run afresh without --resume"
            )
        self.arrays = self._arrays(header.get("arrays"), data, body)
        self.tree: dict[str, Any] = header["state"]
        self.references = references
        self.made: dict[int, Any] = {}

    def _header(self, data: bytes) -> tuple[dict[str, Any], int]:
        """The file's JSON header, and where the arrays' bytes begin."""
        if data.startswith(b"PK\x03\x04"):  # how every checkpoint before format 4 began (an .npz archive)
            raise CheckpointError(
                f"{self.name}: a checkpoint of an older edgefd (an .npz archive), this edgefd reads {FORMAT!r}; "
                "start the run afresh without --resume"
            )
        if not data.startswith(MAGIC):
            raise CheckpointError(f"{self.name}: not an edgefd checkpoint (no {MAGIC!r} at its start)")
        at = len(MAGIC) + _LENGTH_BYTES
        length = int.from_bytes(data[len(MAGIC) : at], "little")
        if at + length > len(data):
            raise CheckpointError(f"{self.name}: not an edgefd checkpoint (cut short: a header of {length} bytes)")
        try:
            header = json.loads(data[at : at + length])
        except (ValueError, UnicodeDecodeError) as error:
            raise CheckpointError(f"{self.name}: not an edgefd checkpoint ({error})") from None
        if not isinstance(header, dict):
            raise CheckpointError(f"{self.name}: not an edgefd checkpoint (its header is not a JSON object)")
        return header, _aligned(at + length)

    def _arrays(self, places: Any, data: bytes, body: int) -> list[np.ndarray]:
        """Each array of the file, read in place (a view of ``data``): a dtype that holds no Python
        object, a shape of whole numbers, and bytes inside the file, or a CheckpointError."""
        if not isinstance(places, list):
            raise CheckpointError(f"{self.name}: not an edgefd checkpoint (no list of arrays)")
        arrays = []
        for index, place in enumerate(places):
            try:
                descr, shape, start, size = place
                dtype = np.dtype(str(descr))
            except (TypeError, ValueError) as error:
                raise CheckpointError(f"{self.name}: array {index} is malformed ({error})") from None
            if dtype.hasobject:
                raise CheckpointError(f"{self.name}: array {index} holds Python objects, which are never read")
            valid = isinstance(shape, list) and all(_natural(n) for n in shape) and _natural(start)
            if not valid or size != math.prod(shape) * dtype.itemsize:
                raise CheckpointError(f"{self.name}: array {index} is malformed ({place!r})")
            if body + start + size > len(data):
                raise CheckpointError(f"{self.name}: array {index} lies past the file's end (cut short?)")
            try:
                arrays.append(np.frombuffer(data, dtype, math.prod(shape), body + start).reshape(shape))
            except ValueError as error:  # a dtype numpy cannot lay out in a buffer (one of no size)
                raise CheckpointError(f"{self.name}: array {index} is malformed ({error})") from None
        return arrays

    @classmethod
    def read(cls, path: str | os.PathLike, references: dict[str, Any]) -> Checkpoint:
        return cls(Path(path).read_bytes(), references, str(path))

    def value(self, key: str) -> Any:
        """A part made of plain values (numbers, text, lists, dicts, arrays)."""
        return self.restore(key, _MISSING)

    def restore(self, key: str, fresh: Any) -> Any:
        """Part ``key`` restored into ``fresh`` (an object built the same way as the one saved);
        returns it (``fresh`` itself when it is an object)."""
        if key not in self.tree:
            raise CheckpointError(f"{self.name}: holds no {key!r}")
        return self._restore(self.tree[key], fresh, key)

    # ------------------------------------------------------------------ internals
    def _array(self, node: dict[str, Any], where: str) -> np.ndarray:
        index = node.get("i")
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(self.arrays):
            raise CheckpointError(f"{self.name}: {where} names a missing array {index!r}")
        return self.arrays[index]

    def _remember(self, node: dict[str, Any], value: Any) -> Any:
        if "n" in node:
            self.made[int(node["n"])] = value
        return value

    def _restore(self, node: Any, fresh: Any, where: str, owner: tuple[Any, str] | None = None) -> Any:
        """``owner``: (object, attribute) when ``node`` is that object's attribute (a dict of models
        the object builds lazily asks it for each one, `rebuild_for_checkpoint`)."""
        if not isinstance(node, dict):
            if isinstance(node, list):
                raise CheckpointError(f"{self.name}: {where}: malformed")
            return node  # None, bool, int, float, str
        kind = node.get("$")
        if kind == "float":
            return float(node["v"])
        if kind == "ref":
            if node.get("name") not in self.references:
                raise CheckpointError(f"{self.name}: {where} refers to {node.get('name')!r}, which was not given back")
            return self.references[node["name"]]
        if kind == "skip":
            return None if fresh is _MISSING else fresh
        if kind == "alias":
            if node.get("n") not in self.made:
                raise CheckpointError(f"{self.name}: {where}: alias of nothing read yet")
            return self.made[node["n"]]
        if kind == "slice":
            start, stop, step = node["v"]
            return slice(start, stop, step)
        if kind == "scalar":
            return self._array(node, where)[()]
        if kind == "array":
            return self._remember(node, np.array(self._array(node, where)))
        if kind == "tensor":
            return self._remember(node, self._tensor(node, fresh, where))
        if kind == "module":
            return self._module(node, fresh, where)
        if kind == "optimizer":
            if not isinstance(fresh, torch.optim.Optimizer):
                raise CheckpointError(f"{self.name}: {where}: an optimiser the fresh role does not have")
            self._remember(node, fresh)
            fresh.load_state_dict(self._restore(node["state"], _MISSING, f"{where}.state_dict()"))
            return fresh
        if kind == "torch_generator":
            generator = fresh if isinstance(fresh, torch.Generator) else torch.Generator()
            generator.set_state(torch.from_numpy(np.array(self._array(node, where))))
            return self._remember(node, generator)
        if kind == "numpy_generator":
            return self._numpy_generator(node, fresh, where)
        if kind in ("list", "tuple", "set", "frozenset"):
            return self._sequence(kind, node, fresh, where)
        if kind == "dict":
            return self._dict(node, fresh, where, owner)
        if kind == "object":
            return self._object(node, fresh, where)
        raise CheckpointError(f"{self.name}: {where}: unknown node {kind!r}")

    def _tensor(self, node: dict[str, Any], fresh: Any, where: str) -> torch.Tensor:
        value = torch.from_numpy(np.array(self._array(node, where)))
        if isinstance(fresh, torch.Tensor) and fresh.shape == value.shape and fresh.dtype == value.dtype:
            with torch.no_grad():
                fresh.copy_(value)  # in place: whatever shares the fresh tensor sees the restored values
            return fresh
        return value.requires_grad_(bool(node.get("grad")))

    def _module(self, node: dict[str, Any], fresh: Any, where: str) -> nn.Module:
        if not isinstance(fresh, nn.Module):
            raise CheckpointError(f"{self.name}: {where}: a model the fresh role does not have")
        state = {k: torch.from_numpy(np.array(self._array({"i": i}, f"{where}.{k}"))) for k, i in node["state"].items()}
        try:
            fresh.load_state_dict(state)
        except RuntimeError as error:
            raise CheckpointError(f"{self.name}: {where}: another model than this run's ({error})") from None
        fresh.train(bool(node.get("training")))
        return self._remember(node, fresh)

    def _numpy_generator(self, node: dict[str, Any], fresh: Any, where: str) -> np.random.Generator:
        state = self._restore(node["state"], _MISSING, where)
        name = state.get("bit_generator") if isinstance(state, dict) else None
        if name not in _BIT_GENERATORS:
            raise CheckpointError(f"{self.name}: {where}: unknown bit generator {name!r}")
        generator = fresh if isinstance(fresh, np.random.Generator) else np.random.Generator(getattr(np.random, name)())
        generator.bit_generator.state = state
        return self._remember(node, generator)

    def _sequence(self, kind: str, node: dict[str, Any], fresh: Any, where: str) -> Any:
        children = node["v"]
        fresh_items = list(fresh) if isinstance(fresh, (list, tuple)) and len(fresh) == len(children) else None
        if kind == "list":
            out: list[Any] = self._remember(node, [])
            for i, child in enumerate(children):
                out.append(self._restore(child, fresh_items[i] if fresh_items else _MISSING, f"{where}[{i}]"))
            return out
        items = [
            self._restore(child, fresh_items[i] if fresh_items else _MISSING, f"{where}[{i}]")
            for i, child in enumerate(children)
        ]
        return self._remember(node, {"tuple": tuple, "set": set, "frozenset": frozenset}[kind](items))

    def _dict(self, node: dict[str, Any], fresh: Any, where: str, owner: tuple[Any, str] | None) -> dict[Any, Any]:
        out: dict[Any, Any] = self._remember(node, {})
        for key_node, value_node in zip(node["k"], node["v"]):
            key = self._restore(key_node, _MISSING, f"{where} key")
            before = fresh.get(key, _MISSING) if isinstance(fresh, dict) else _MISSING
            rebuild = getattr(owner[0], "rebuild_for_checkpoint", None) if owner else None
            if before is _MISSING and rebuild is not None and isinstance(value_node, dict):
                if value_node.get("$") == "module":
                    before = rebuild(owner[1], key)  # type: ignore[index]  # owner is set with rebuild
            out[key] = self._restore(value_node, before, f"{where}[{key!r}]")
        return out

    def _object(self, node: dict[str, Any], fresh: Any, where: str) -> Any:
        module_name, _, qualname = str(node.get("class")).partition(":")
        cls: Any = sys.modules.get(module_name) if qualname else None  # never imported here: importing runs it
        for part in qualname.split("."):
            cls = getattr(cls, part, None)
        if not isinstance(cls, type) or not (module_name.startswith("edgefd.") or cls in _method_classes()):
            raise CheckpointError(
                f"{self.name}: {where}: class {node.get('class')!r} is neither edgefd's nor a registered method's"
            )
        target = fresh if type(fresh) is cls else object.__new__(cls)
        self._remember(node, target)
        for attr, child in node["attrs"].items():
            before = vars(target).get(attr, _MISSING)
            if isinstance(child, dict) and child.get("$") == "optimizer" and before is None:
                before = self._lazy_optimizer(target, attr, where)
            if isinstance(child, dict) and child.get("$") in ("module", "optimizer") and before is _MISSING:
                continue  # a model the role makes lazily (an evaluation copy): it makes it again
            object.__setattr__(target, attr, self._restore(child, before, f"{where}.{attr}", (target, attr)))
        return target

    def _lazy_optimizer(self, owner: Any, attr: str, where: str) -> torch.optim.Optimizer:
        """An optimiser the fresh owner builds on first use (RoundOptimizer): built now, to load into."""
        build = getattr(owner, "for_round", None)
        if attr != "optimizer" or build is None:
            raise CheckpointError(f"{self.name}: {where}.{attr}: an optimiser the fresh role does not have")
        return build()


def _method_classes() -> set[type]:
    """The roles and params classes of every registered method: a method registered from outside
    edgefd (a plug-in, run by a process that imported it) is checkpointed like a built-in one."""
    from edgefd.algorithms.base import list_methods

    return {cls for spec in list_methods() for cls in (spec.client, spec.server, spec.params)}


def load(path: str | os.PathLike, references: dict[str, Any]) -> Checkpoint:
    """Read the checkpoint at `path` (:class:`CheckpointError` if it is not one of this edgefd)."""
    return Checkpoint.read(path, references)
