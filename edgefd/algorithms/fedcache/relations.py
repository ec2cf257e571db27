"""FedCache's neighbour tables: for every registered sample, the ids of its R most cosine-similar
samples of the same label, itself excluded (paper Eq. 10-11; docs/methods/fedcache.md#self-exclusion,
docs/methods/fedcache.md#small-classes), searched exactly or with hnswlib, class by class; the
rows a client may contribute as neighbours (`neighbour_candidates`, its share bounded as a weight
is); and the tables stored on disk by what they were computed from (`RelationStore`).
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from edgefd import progress
from edgefd.algorithms.toolkit import capped_weights

KNN_METHODS = ("hnsw", "exact")


@dataclass
class RelationConfig:
    """How the neighbour table is built (defaults: the authors' code, docs/methods/fedcache.md#hnsw-settings)."""

    neighbours: int = 16
    """R: related samples per sample."""
    method: str = "hnsw"
    """"hnsw" (hnswlib, approximate, the paper's) or "exact" (matrix product + top-R)."""
    m: int = 64
    """hnswlib M (graph degree)."""
    ef_construction: int = 1000
    ef: int = 1000
    """hnswlib search breadth; raised to R + 1 when smaller."""
    threads: int = 2
    seed: int = 100
    exclude_same_owner: bool = False
    """Relate a sample only to samples of *other* clients (off in the paper's Eq. 10;
    docs/methods/fedcache.md#neighbours-from-the-same-client)."""

    def validate(self) -> None:
        if self.neighbours < 1:
            raise ValueError(f"neighbours: must be >= 1, got {self.neighbours}")
        if self.method not in KNN_METHODS:
            raise ValueError(f"knn method: expected one of {', '.join(KNN_METHODS)}, got {self.method!r}")
        if self.m < 2 or self.ef_construction < 1 or self.ef < 1:
            raise ValueError("hnsw parameters: M >= 2, ef_construction >= 1 and ef >= 1 are required")


def _normalised(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


EXACT_BLOCK_ELEMENTS = 2**24
"""The exact search compares a block of rows with every row of the class at once: at most this many
similarities (64 MB of float32, a few times that with the top-R selection's copies), whatever the
class's size. The table does not depend on it."""


def _exact_class(
    vectors: np.ndarray,
    r: int,
    owners: np.ndarray | None = None,
    block: int = 4096,
    allowed: np.ndarray | None = None,
) -> np.ndarray:
    """Top-r most cosine-similar other rows of each row; ties go to the smaller index.

    With ``owners``, rows of the query's own owner are never chosen; a row with fewer than r
    candidates of other owners gets -1 in the places left. With ``allowed`` (a mask), only those
    rows are ever chosen (every row still gets its neighbours)."""
    unit = torch.from_numpy(_normalised(vectors))
    n = len(unit)
    block = max(1, min(block, EXACT_BLOCK_ELEMENTS // max(n, 1)))
    out = np.empty((n, r), dtype=np.int64)
    for start in range(0, n, block):
        sims = (unit[start : start + block] @ unit.T).numpy()
        rows = np.arange(start, min(start + block, n))
        sims[rows - start, rows] = -np.inf  # never yourself
        if owners is not None:
            sims[owners[rows][:, None] == owners[None, :]] = -np.inf
        if allowed is not None:
            sims[:, ~allowed] = -np.inf
        # partial top-(r) by similarity, then an exact order: descending similarity, ascending id
        candidates = np.argpartition(-sims, r - 1, axis=1)[:, :r] if r < n else np.argsort(-sims, axis=1)[:, :r]
        cand_sims = np.take_along_axis(sims, candidates, axis=1)
        order = np.lexsort((candidates, -cand_sims), axis=1)
        chosen = np.take_along_axis(candidates, order, axis=1)
        if owners is not None or allowed is not None:
            chosen[np.take_along_axis(cand_sims, order, axis=1) == -np.inf] = -1
        out[start : start + len(rows)] = chosen
    return out


def _hnsw_class(
    vectors: np.ndarray,
    r: int,
    config: RelationConfig,
    owners: np.ndarray | None = None,
    candidates: np.ndarray | None = None,
) -> np.ndarray:
    """Approximate top-r, self dropped by id. With ``owners``, asks for enough extra hits to drop
    every row of the query's own owner (the largest owner's count), then drops them. With
    ``candidates`` (a mask), only those rows are in the index (every row is still a query)."""
    try:
        import hnswlib
    except ImportError:
        raise ModuleNotFoundError(
            "knn=hnsw needs hnswlib (a workstation extra): pip install 'edgefd[server]', "
            "or use exact search (--param knn=exact)"
        ) from None

    n, dim = vectors.shape
    indexed = np.arange(n) if candidates is None else np.flatnonzero(candidates)
    index = hnswlib.Index(space="cosine", dim=dim)
    index.init_index(
        max_elements=len(indexed), ef_construction=config.ef_construction, M=config.m, random_seed=config.seed
    )
    index.set_num_threads(1)  # one thread: the same graph every time (`build_relations` runs classes at once)
    index.add_items(vectors[indexed], indexed)
    k = min(len(indexed), r + 1)
    if owners is not None:
        k = min(len(indexed), r + 1 + int(np.unique(owners[indexed], return_counts=True)[1].max()))
    index.set_ef(max(config.ef, k))
    found, _ = index.knn_query(vectors, k=k)
    found = found.astype(np.int64)
    if owners is not None:
        own = owners[found] == owners[:, None]
        order = np.argsort(own, axis=1, kind="stable")  # other owners first, in similarity order
        kept = np.take_along_axis(found, order, axis=1)[:, :r]
        kept[np.take_along_axis(own, order, axis=1)[:, :r]] = -1
        return kept
    # Drop the query itself by id (not "the first hit": duplicates may share a hash;
    # docs/methods/fedcache.md#self-exclusion).
    # Stable-sort "is self" to the back, then keep the first r; a row that missed itself loses
    # its farthest hit instead.
    is_self = found == np.arange(n)[:, None]
    order = np.argsort(is_self, axis=1, kind="stable")
    return np.take_along_axis(found, order, axis=1)[:, :r]


def _rows(parts: list[np.ndarray], offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``rows`` (sorted) of the parts stacked, copying only those rows."""
    pieces = []
    for part, start, end in zip(parts, offsets[:-1], offsets[1:]):
        inside = rows[(rows >= start) & (rows < end)]
        if len(inside):
            pieces.append(part[inside - start])
    return np.concatenate(pieces) if pieces else np.zeros((0, parts[0].shape[1] if parts else 0), np.float32)


def build_relations(
    hashes: np.ndarray | list[np.ndarray],
    labels: np.ndarray,
    config: RelationConfig,
    owners: np.ndarray | None = None,
    candidates: np.ndarray | None = None,
) -> np.ndarray:
    """Neighbour table [N, R] (int64 row ids, -1 where a class has fewer than R + 1 members).

    ``hashes`` is one [N, D] array or its row blocks in order (one per client, as uploaded: the
    whole matrix is never copied, only one class's rows at a time). ``owners`` (one integer per
    row: which client holds it) is needed with ``config.exclude_same_owner``. ``candidates`` (a
    mask, one per row; None: all): the rows that may be a neighbour (`neighbour_candidates`); every
    row gets neighbours, and a class's R is then capped by its candidates."""
    config.validate()
    if config.exclude_same_owner:
        if owners is None or len(owners) != len(labels):
            raise ValueError("exclude_same_owner needs one owner per sample")
        owners = np.asarray(owners, dtype=np.int64)
    else:
        owners = None
    parts = [np.asarray(part, dtype=np.float32) for part in (hashes if isinstance(hashes, list) else [hashes])]
    labels = np.asarray(labels, dtype=np.int64)
    offsets = np.cumsum([0] + [len(part) for part in parts])
    if any(part.ndim != 2 or part.shape[1:] != parts[0].shape[1:] for part in parts) or offsets[-1] != len(labels):
        raise ValueError(f"hashes {[part.shape for part in parts]} and labels {labels.shape} do not match")
    if not all(np.isfinite(part).all() for part in parts):
        raise ValueError("hashes contain NaN or Inf")
    table = np.full((len(labels), config.neighbours), -1, dtype=np.int64)

    def search(label: int) -> tuple[np.ndarray, int, np.ndarray | None]:
        """One class's members, its R and their neighbours (as rows of the class), or None."""
        members = np.flatnonzero(labels == label)
        member_candidates = None if candidates is None or candidates[members].all() else candidates[members]
        found = len(members) if member_candidates is None else int(member_candidates.sum())
        # R_eff = n_c - 1 for small classes (docs/methods/fedcache.md#small-classes)
        r = min(config.neighbours, found - 1)
        if r <= 0:
            return members, r, None
        vectors = np.ascontiguousarray(_rows(parts, offsets, members))
        member_owners = None if owners is None else owners[members]
        if config.method == "exact":
            return members, r, _exact_class(vectors, r, member_owners, allowed=member_candidates)
        return members, r, _hnsw_class(vectors, r, config, member_owners, member_candidates)

    classes = np.unique(labels)
    # hnsw: `config.threads` classes at once, each index built by one thread (hnswlib releases the
    # GIL): as fast as one index built by several threads, whose graph depends on their timing
    workers = 1 if config.method == "exact" else max(1, min(config.threads, len(classes)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        found = pool.map(search, classes)
        description = f"relations ({config.method} search, per class)"
        for members, r, local in progress.track(found, description, total=len(classes), unit="class"):
            if local is not None:
                table[members, :r] = np.where(local >= 0, members[np.maximum(local, 0)], -1)
    return table


def neighbour_candidates(sizes: list[int], cap: float) -> np.ndarray | None:
    """Which rows may be another sample's neighbour, the clients' rows laid out one client after
    another (``sizes``): a client's share of the cache's neighbours is bounded as a weight in an
    average is (`capped_weights`: ``cap`` times the median of the other clients' sample counts), so
    of a client that registered more, only its first that many rows are anyone's neighbour (all of
    its rows still get teachers). None when no client registered more (every row may)."""
    bounds = capped_weights(sizes, cap)
    if all(bound >= size for bound, size in zip(bounds, sizes)):
        return None
    mask = np.zeros(sum(sizes), dtype=np.bool_)
    start = 0
    for size, bound in zip(sizes, bounds):
        mask[start : start + min(size, int(bound))] = True
        start += size
    return mask


RELATIONS_FORMAT = "v2"
"""Bumped when the stored table or `build_relations` changes: old tables are then not read."""


class RelationStore:
    """Neighbour tables on disk, keyed by everything they are computed from (the hashes, labels and
    owners, the search settings, the hnswlib version), so that a run whose server meets the same
    hashes again (another arm or seed on the same split, a rerun) loads the table instead of
    searching: with the authors' hnswlib settings that search is most of FedCache's start-up on
    Fashion-MNIST. Since v2 a fresh build gives the stored table bit for bit (each hnswlib index is
    built by one thread; v1's were built by several, and two fresh builds could differ in a few
    neighbours)."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.folder = Path(root)
        self.loaded = False
        """Whether the last `relations` call found its table on disk."""

    @staticmethod
    def key(
        hashes: list[np.ndarray],
        labels: np.ndarray,
        config: RelationConfig,
        owners: np.ndarray | None,
        candidates: np.ndarray | None = None,
    ) -> str:
        digest = hashlib.blake2b(digest_size=16)
        settings = {k: v for k, v in asdict(config).items() if k != "threads"}  # threads change no result
        digest.update(json.dumps([RELATIONS_FORMAT, settings, _hnswlib_version()], sort_keys=True).encode())
        digest.update(np.ascontiguousarray(labels, dtype=np.int64).tobytes())
        if config.exclude_same_owner and owners is not None:
            digest.update(np.ascontiguousarray(owners, dtype=np.int64).tobytes())
        if candidates is not None:  # none held back: the key (and the stored table) of before
            digest.update(b"candidates" + np.packbits(candidates).tobytes())
        for part in hashes:
            part = np.ascontiguousarray(part, dtype=np.float32)
            digest.update(str(part.shape).encode())
            digest.update(part.data.cast("B"))
        return digest.hexdigest()

    def relations(
        self,
        hashes: list[np.ndarray],
        labels: np.ndarray,
        config: RelationConfig,
        owners: np.ndarray | None,
        candidates: np.ndarray | None = None,
    ) -> np.ndarray:
        """`build_relations`' table, read from the store when it holds it, else built and stored."""
        path = self.folder / f"{self.key(hashes, labels, config, owners, candidates)}.npy"
        self.loaded = path.is_file()
        if self.loaded:
            table = np.load(path)
            if table.shape == (len(labels), config.neighbours):
                return table.astype(np.int64)
        table = build_relations(hashes, labels, config, owners, candidates)
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{uuid.uuid4().hex}.tmp.npy"
        np.save(tmp, table.astype(np.int32))  # row ids < 2**31: half the bytes on disk
        os.replace(tmp, path)
        self.loaded = False
        return table


def _hnswlib_version() -> str:
    try:
        from importlib.metadata import version

        return version("hnswlib")
    except Exception:  # not installed (exact search) or no metadata
        return "none"
