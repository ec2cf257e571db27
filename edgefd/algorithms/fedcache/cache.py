"""FedCache's knowledge cache: per-sample logits on the server, related by hash similarity.

The server keeps, for every registered training sample of every client, one row of the latest
logits it uploaded (zeros at first, paper Eq. 9) and, built once from the clients' hashes, the
ids of its R most cosine-similar samples *of the same label*, itself excluded (Eq. 10-11;
docs/methods/fedcache.md#self-exclusion,
docs/methods/fedcache.md#small-classes). A client's knowledge is the mean of its neighbours' cached rows
(Eq. 12, 16, 17), computed with the `gather_mean` kernel over the whole neighbour table at once.
A sample that a client declared and never uploaded logits for, though it trained, is nobody's
teacher (`KnowledgeCache.close_round`; docs/methods/fedcache.md#samples-never-uploaded). A
client's rows teach at most ``clip`` times the others' typical norm (`KnowledgeCache.bounds`;
docs/methods/fedcache.md#bounded-rows).

Rows are laid out client after client in registration order, so one client's rows are a slice
and a round's lookups copy nothing but the answer.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

import numpy as np
import torch

from edgefd import kernels
from edgefd.algorithms.fedcache.relations import RelationConfig, RelationStore, build_relations, neighbour_candidates
from edgefd.algorithms.toolkit import AGGREGATORS, WEIGHT_CAP, SampleIndex, gather_robust, median_of_others


class KnowledgeCache:
    """Registered samples, their neighbour table and their latest logits."""

    def __init__(
        self,
        num_classes: int,
        *,
        mask_unfilled: bool = False,
        max_ensemble: int = 0,
        aggregator: str = "mean",
        trim: float = 0.2,
        weight_cap: float = WEIGHT_CAP,
        clip: float = 0.0,
    ) -> None:
        """``mask_unfilled``: average only neighbours that have uploaded logits at least once
        (docs/methods/fedcache.md#cache-initialisation; the paper's Eq. 9 counts the zero rows too).
        ``max_ensemble``: average only the first this many neighbours (0: all R; the authors' code
        at the paper's time used min(R, C), docs/methods/fedcache.md#effective-r).
        ``aggregator``: how a teacher combines its neighbours' logits, "mean" (Eq. 17, the
        `gather_mean` kernel) or a robust statistic (`gather_robust`:
        docs/methods/fedcache.md#robust-teachers). ``weight_cap``: how many of a client's samples
        may be neighbours, in times the median of the other clients' sample counts
        (`neighbour_candidates`; 0: all). ``clip``: a client's rows teach scaled down to at most this
        many times the median norm of the other clients' rows (`bounds`; 0: as uploaded)."""
        if max_ensemble < 0:
            raise ValueError(f"max_ensemble: must be >= 0, got {max_ensemble}")
        if aggregator not in AGGREGATORS:
            raise ValueError(f"aggregator: must be one of {', '.join(AGGREGATORS)}, got {aggregator!r}")
        self.combine: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = (
            kernels.gather_mean if aggregator == "mean" else functools.partial(gather_robust, how=aggregator, trim=trim)
        )
        self.num_classes = num_classes
        self.mask_unfilled = mask_unfilled
        self.max_ensemble = max_ensemble
        self.weight_cap = weight_cap
        self.clip = clip
        self.held_back = 0
        """Registered rows that are nobody's neighbour (`neighbour_candidates`), set by `build`."""
        self._hashes: list[np.ndarray] = []
        self._labels: list[np.ndarray] = []
        self.slices: dict[str, slice] = {}
        self._ids: dict[str, np.ndarray] = {}
        self._index: dict[str, SampleIndex] = {}
        self.labels = np.zeros(0, np.int64)
        self.neighbours = np.zeros((0, 0), np.int64)
        self.owners = np.zeros(0, np.int64)
        self.logits = torch.zeros((0, num_classes))
        """The latest logits of every sample, a row each (zeros until its client first uploads them)."""
        self.filled = torch.zeros(0, dtype=torch.bool)
        self.typical_norm = np.zeros(0)
        """Each client's median row norm over the rows it has uploaded (NaN before its first), in
        registration order: what the other clients' rows are bounded by (`bounds`)."""
        self.uploaders: set[str] = set()
        """Clients that uploaded logits in a round now over (`close_round`): of their rows, only
        those they uploaded teach."""
        self.silent = 0
        """Rows that taught nobody at the last `close_round` (0: no teacher is masked for them)."""
        self.size = 0

    def register(self, client_id: str, sample_ids: np.ndarray, labels: np.ndarray, hashes: np.ndarray) -> None:
        """Adds one client's samples (before `build`)."""
        if client_id in self.slices:
            raise ValueError(f"client {client_id!r} registered twice")
        sample_ids = np.asarray(sample_ids, dtype=np.int64)
        labels = np.asarray(labels, dtype=np.int64)
        n = len(sample_ids)
        if len(labels) != n or len(hashes) != n:
            raise ValueError(f"client {client_id!r}: {n} ids, {len(labels)} labels, {len(hashes)} hashes")
        if n and (labels.min() < 0 or labels.max() >= self.num_classes):
            raise ValueError(f"client {client_id!r}: labels outside [0, {self.num_classes})")
        if len(np.unique(sample_ids)) != n:
            raise ValueError(f"client {client_id!r}: repeated sample ids")
        if self._hashes and hashes.shape[1:] != self._hashes[0].shape[1:]:
            raise ValueError(
                f"client {client_id!r}: hash size {hashes.shape[1:]} differs from the others' "
                f"{self._hashes[0].shape[1:]} (all clients must use the same encoder)"
            )
        self.slices[client_id] = slice(self.size, self.size + n)
        self._ids[client_id] = sample_ids
        self._index[client_id] = SampleIndex(sample_ids)
        self._hashes.append(np.asarray(hashes, dtype=np.float32))
        self._labels.append(labels)
        self.size += n

    def build(self, config: RelationConfig, store: RelationStore | None = None) -> None:
        """Builds the neighbour table from every registered hash (or reads it from ``store``); the
        hashes are then freed."""
        hashes = self._hashes  # row blocks: build_relations copies one class at a time
        self.labels = np.concatenate(self._labels) if self._labels else np.zeros(0, np.int64)
        owners = np.zeros(self.size, np.int64)
        for number, part in enumerate(self.slices.values()):
            owners[part] = number
        self.owners = owners
        candidates = neighbour_candidates([len(part) for part in hashes], self.weight_cap)
        self.held_back = 0 if candidates is None else int((~candidates).sum())
        if store is None:
            self.neighbours = build_relations(hashes, self.labels, config, owners, candidates)
        else:
            self.neighbours = store.relations(hashes, self.labels, config, owners, candidates)
        if self.max_ensemble:
            self.neighbours = np.ascontiguousarray(self.neighbours[:, : self.max_ensemble])
        self.logits = torch.zeros((self.size, self.num_classes))
        self.filled = torch.zeros(self.size, dtype=torch.bool)
        self.typical_norm = np.full(len(self.slices), np.nan)
        self._hashes = []
        self._labels = []

    def cross_client_fraction(self) -> float:
        """Fraction of the neighbour links that point at another client's sample, a sanity check:
        knowledge only travels between clients through these links."""
        named = self.neighbours >= 0
        if not named.any():
            return 0.0
        other = self.owners[np.maximum(self.neighbours, 0)] != self.owners[:, None]
        return float((other & named).sum() / named.sum())

    def sample_ids(self, client_id: str) -> np.ndarray:
        """The client's sample ids in registration order (the order `fetch` answers in)."""
        return self._ids[client_id]

    def rows(self, client_id: str, sample_ids: np.ndarray) -> np.ndarray:
        """Cache rows of this registered client's samples, by stable sample id (any order; every id
        one it registered: the server's message schemas refuse others before they get here)."""
        return self.slices[client_id].start + self._index[client_id].rows_of_known(sample_ids)

    def fetch(self, client_id: str) -> torch.Tensor:
        """Mean of the cached neighbours' logits for each of the client's samples, in
        registration order (Eq. 12, 16, 17)."""
        return self.combine(self.teaching_logits(), self._table(self.neighbours[self.slices[client_id]]))

    def fetch_all(self) -> torch.Tensor:
        """The same for every registered sample (one kernel call: a whole round's lookups)."""
        return self.combine(self.teaching_logits(), self._table(self.neighbours))

    def bounds(self) -> np.ndarray:
        """Each client's bound on the norm of a row it teaches with, in registration order: ``clip``
        times the median of the other clients' typical row norms (their rows' median). The bound
        comes from the others alone, so a client cannot raise its own, and with three clients it
        lies between the two others' typical norms. NaN where no other client has uploaded yet:
        such rows teach as the zero rows of Eq. 9, which every row is until it is uploaded."""
        if len(getattr(self, "typical_norm", ())) != len(self.slices):  # a checkpoint of an older checkout
            self.typical_norm = np.full(len(self.slices), np.nan)
            self._measure(range(len(self.slices)))
        return self.clip * median_of_others(self.typical_norm, ~np.isnan(self.typical_norm))

    def teaching_logits(self, rows: np.ndarray | None = None, logits: torch.Tensor | None = None) -> torch.Tensor:
        """The cached logits of ``rows`` (all rows when None), or the given ``logits`` for those rows,
        as they teach: each scaled down to its client's bound (`bounds`; as uploaded with
        ``clip=0``)."""
        if logits is None:
            logits = self.logits if rows is None else self.logits[torch.from_numpy(rows)]
        if not self.clip:
            return logits
        owners = self.owners if rows is None else self.owners[rows]
        bound = torch.from_numpy(self.bounds()[owners]).to(logits.dtype)
        norms = logits.norm(dim=1)
        scale = torch.where(norms > bound, bound / norms.clamp(min=torch.finfo(logits.dtype).tiny), 1.0)
        scale = torch.where(torch.isnan(bound), 0.0, scale)  # no other client has uploaded: not a teacher yet
        return logits * scale[:, None]

    def clipped_rows(self) -> int:
        """Rows that uploaded logits above their client's bound (they teach scaled down)."""
        if not self.clip:
            return 0
        bound = torch.from_numpy(self.bounds()[self.owners]).to(self.logits.dtype)
        return int((self.filled & (self.logits.norm(dim=1) > bound)).sum())

    def _table(self, neighbours: np.ndarray) -> torch.Tensor:
        table = torch.from_numpy(neighbours)
        teaching = self._teaching(table.clamp(min=0))
        return table if teaching is None else torch.where(teaching, table, -1)

    def _teaching(self, rows: torch.Tensor) -> torch.Tensor | None:
        """Whether each of ``rows`` (row ids) may be a teacher, or None when every row may: with
        ``mask_unfilled`` the rows uploaded at least once, else all but the silent ones (`close_round`)."""
        if self.mask_unfilled:
            return self.filled[rows]
        if not self.silent:
            return None
        return self.filled[rows] | ~self._owner_uploaded(rows.numpy())

    def _owner_uploaded(self, rows: np.ndarray) -> torch.Tensor:
        """Whether the client of each of ``rows`` is one of the `uploaders`."""
        numbers = [number for number, client in enumerate(self.slices) if client in self.uploaders]
        return torch.from_numpy(np.isin(self.owners[rows], numbers))

    def close_round(self, clients: Iterable[str]) -> dict[str, int]:
        """``clients`` uploaded logits in the round now over: from now on, of their rows, only those
        they have uploaded teach (a row uploaded later teaches from then on). A client uploads the
        logits of every sample it trains on, each round (Alg. 1 l. 9-10), so what stays silent is
        what a hello declared and its client never trained on: an invented sample teaches nobody.
        Until its client's first round is over a row is the zero row of Eq. 9, as every row not
        uploaded yet. Returns the silent rows of each of ``clients`` that has any."""
        clients = set(clients)
        self.uploaders |= clients
        silent = ~self.filled & self._owner_uploaded(np.arange(self.size))
        self.silent = int(silent.sum())
        return {client: n for client in sorted(clients) if (n := int(silent[self.slices[client]].sum()))}

    def exchange(self, rows: np.ndarray, logits: np.ndarray) -> torch.Tensor:
        """One message of the faithful protocol (Alg. 2 lines 10-14, sequential): for
        each row in message order, the mean of its neighbours' cached logits, then its own logits
        written in. A row's teacher therefore sees the logits of the rows before it in the message.

        Vectorised: the rows' neighbours are gathered into a small table with the message's
        logits appended, and a neighbour written earlier in the message points at its new logits.

        ``rows`` are distinct, with a row of ``num_classes`` logits each: a client's request is held
        to that by the server's schema (`FedCacheServer.request_schemas`)."""
        rows = np.asarray(rows, dtype=np.int64)
        logits = np.asarray(logits, dtype=np.float32)
        if len(rows) == 0:
            return torch.zeros((0, self.num_classes))
        neighbours = self.neighbours[rows]  # [n, R], -1 = none
        order = np.argsort(rows)
        at = np.minimum(np.searchsorted(rows[order], neighbours), len(rows) - 1)
        in_message = (neighbours >= 0) & (rows[order][at] == neighbours)
        position = np.where(in_message, order[at], -1)  # where in the message, or -1
        earlier = in_message & (position < np.arange(len(rows))[:, None])
        named, local = np.unique(neighbours[neighbours >= 0], return_inverse=True)
        table = np.full(neighbours.shape, -1, np.int64)
        table[neighbours >= 0] = local
        table = np.where(earlier, len(named) + position, table)
        values = torch.cat([self.teaching_logits(named), self.teaching_logits(rows, torch.from_numpy(logits))])
        index = torch.from_numpy(table)
        teaching = self._teaching(torch.from_numpy(named))
        if teaching is not None:  # the message's own rows are uploaded now: they teach
            teaching = torch.cat([teaching, torch.ones(len(rows), dtype=torch.bool)])
            index = torch.where(teaching[index.clamp(min=0)] & (index >= 0), index, -1)
        teachers = self.combine(values, index)
        self.update(rows, logits)
        return teachers

    def update(self, rows: np.ndarray, logits: np.ndarray) -> None:
        """Overwrites those rows with the new logits (Eq. 13)."""
        logits = np.asarray(logits, dtype=np.float32)
        assert logits.shape == (len(rows), self.num_classes), "a row of logits per row (the schemas')"
        index = torch.from_numpy(np.asarray(rows, dtype=np.int64))
        self.logits[index] = torch.from_numpy(logits)
        self.filled[index] = True
        if self.clip:
            self._measure(np.unique(self.owners[np.asarray(rows, dtype=np.int64)]))

    def _measure(self, numbers: Iterable[int]) -> None:
        """Sets the `typical_norm` of these clients (by registration number) from their uploaded rows."""
        parts = list(self.slices.values())
        for number in numbers:
            uploaded = self.logits[parts[number]][self.filled[parts[number]]]
            if len(uploaded):
                self.typical_norm[number] = float(uploaded.norm(dim=1).median())
