"""Hashes kept on disk by sample content, so that no run hashes a sample twice.

FedCache's hashes depend only on a sample and the encoder, and the paper's encoder (MobileNetV3-Small
at 224 x 224) costs seconds per thousand images on a CPU: minutes for Fashion-MNIST, at the start of
every run, arm and seed. A `HashCache` remembers every embedding it computed under one encoder,
keyed by a digest of the sample's bytes, and computes only what it has not seen. Different splits
of the same dataset share their samples, so after the first run every start-up finds all of them.

Layout: ``ROOT/<encoder key>/<shard>.keys.npy`` (sorted 16-byte BLAKE2b digests) and
``<shard>.hashes.npy`` (the matching rows, read through a memory map, so a lookup reads only the
rows it needs), each written once (to a temporary name, then renamed) and never changed. A run
that finds samples missing writes one new shard with them; two processes that do so at once write
two shards, which is harmless (a key found twice has the same row).
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

import numpy as np
import torch

from edgefd.algorithms.fedcache.encoders import HashEncoder
from edgefd.data.disk_cache import cache_base

FORMAT = "v1"
"""Bumped when the stored layout or an encoder's function changes: old shards are then not read."""


def default_root() -> Path:
    """``$EDGEFD_CACHE_DIR/hashes``, else ``~/.cache/edgefd/hashes``."""
    return cache_base() / "hashes"


def sample_keys(x: torch.Tensor) -> np.ndarray:
    """One 16-byte digest per sample of its dtype, shape and bytes (a fixed-width bytes array)."""
    rows = np.ascontiguousarray(x.numpy()).reshape(len(x), -1)
    header = f"{rows.dtype.str}{tuple(x.shape[1:])}".encode()
    return np.array([hashlib.blake2b(header + row.tobytes(), digest_size=16).digest() for row in rows], dtype="S16")


def encoder_key(encoder: HashEncoder) -> str:
    """A folder name for the encoder: its name, and for a file-backed encoder the file's digest (the
    same path may later hold other weights)."""
    kind, _, argument = encoder.name.partition(":")
    key = kind
    if argument:
        path = Path(argument)
        digest = hashlib.blake2b(path.read_bytes(), digest_size=8).hexdigest() if path.is_file() else argument
        key = f"{kind}-{digest}"
    return f"{FORMAT}-{key}"


class HashCache:
    """Embeddings under one encoder, on disk under ``root``."""

    def __init__(self, encoder: HashEncoder, root: str | os.PathLike | None = None) -> None:
        self.encoder = encoder
        self.folder = Path(root) if root is not None else default_root()
        self.folder = self.folder / encoder_key(encoder)
        self.computed = 0
        """Samples this cache had to hash (the rest were found on disk)."""

    def __call__(self, x: torch.Tensor) -> np.ndarray:
        """The encoder's hashes of ``x``, computing only the samples not stored yet (and storing them)."""
        keys = sample_keys(x)
        found = np.zeros(len(keys), dtype=bool)
        out: np.ndarray | None = None
        for keys_file in sorted(self.folder.glob("*.keys.npy")):
            stored = np.load(keys_file)  # sorted; 16 bytes a sample
            at = np.minimum(np.searchsorted(stored, keys), max(len(stored) - 1, 0))
            hit = ~found & (stored[at] == keys) if len(stored) else np.zeros_like(found)
            if not hit.any():
                continue
            rows = np.load(keys_file.with_name(keys_file.name.replace(".keys.", ".hashes.")), mmap_mode="r")
            if out is None:
                out = np.empty((len(keys), rows.shape[1]), dtype=np.float32)
            out[hit] = rows[at[hit]]  # reads only these rows from disk
            found |= hit
        missing = np.flatnonzero(~found)
        self.computed = len(missing)
        if len(missing):
            new_rows = self.encoder(x[torch.from_numpy(missing)])
            if out is None:
                out = np.empty((len(keys), new_rows.shape[1]), dtype=np.float32)
            out[missing] = new_rows
            self._store(keys[missing], new_rows)
        return out if out is not None else np.zeros((0, 0), np.float32)

    def _store(self, keys: np.ndarray, rows: np.ndarray) -> None:
        """One new shard: the rows first, then the keys (a shard counts once its keys file exists)."""
        unique, first = np.unique(keys, return_index=True)  # sorted; a sample may appear twice
        self.folder.mkdir(parents=True, exist_ok=True)
        name = uuid.uuid4().hex
        for suffix, array in (("hashes", np.ascontiguousarray(rows[first], dtype=np.float32)), ("keys", unique)):
            tmp = self.folder / f".{name}.{suffix}.tmp.npy"
            np.save(tmp, array)
            os.replace(tmp, self.folder / f"{name}.{suffix}.npy")
