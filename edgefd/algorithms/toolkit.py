"""Chores every method shares, written once: matching knowledge to samples by stable id, and
averaging model states."""

from __future__ import annotations

import numpy as np


class SampleIndex:
    """Stable sample id -> row of the local arrays, built once (sorted ids + binary search).

    Knowledge is keyed by sample id, never by batch position: whoever receives per-sample
    knowledge finds its rows here, in any order the sender chose."""

    def __init__(self, ids) -> None:
        ids = np.asarray(ids).reshape(-1)
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"sample ids must be integers, got {ids.dtype}")
        ids = ids.astype(np.int64)
        self._order = np.argsort(ids, kind="stable")
        self._sorted = ids[self._order]
        if ids.size > 1 and bool((self._sorted[1:] == self._sorted[:-1]).any()):
            raise ValueError("sample ids must be unique")
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def rows(self, ids) -> np.ndarray:
        """Rows of ``ids`` (ValueError naming them if any is unknown)."""
        ids = np.asarray(ids).reshape(-1)
        if ids.size == 0:
            return np.zeros(0, dtype=np.int64)
        if not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"sample ids must be integers, got {ids.dtype}")
        n = len(self._sorted)
        if n == 0:
            raise ValueError(f"{ids.size} unknown sample id(s), e.g. {ids[:3].tolist()}")
        pos = np.minimum(np.searchsorted(self._sorted, ids), n - 1)
        found = self._sorted[pos] == ids
        if not found.all():
            bad = ids[~found]
            raise ValueError(f"{bad.size} unknown sample id(s), e.g. {bad[:3].tolist()}")
        return self._order[pos]

    def permutation(self, ids) -> np.ndarray:
        """Rows of ``ids`` when they must be exactly this index's ids, each once, in any order."""
        ids = np.asarray(ids).reshape(-1)
        if len(ids) != len(self.ids) or not np.array_equal(np.sort(ids), self._sorted):
            raise ValueError(f"expected the {len(self.ids)} ids of this index, each once; got {len(ids)} others")
        return self.rows(ids)


def average_states(states: list[dict[str, np.ndarray]], weights: list[float] | None = None) -> dict[str, np.ndarray]:
    """Per-entry mean of model states, weighted by ``weights`` (sample counts in FedAvg and DFL),
    unweighted without them (FedD2S's Eq. 11).

    A float64 sum of ``w * state``, divided by the total weight at the end: identical inputs
    give bit-identical outputs (float32 entries times integer weights add up exactly). Integer
    buffers (BatchNorm's batch counter) are rounded back to integers."""
    if not states:
        raise ValueError("average_states: no states to average")
    weights = [1.0] * len(states) if weights is None else [float(w) for w in weights]
    if len(weights) != len(states):
        raise ValueError(f"average_states: {len(weights)} weights for {len(states)} states")
    total = sum(weights)
    if total <= 0:
        raise ValueError("average_states: weights sum to zero")
    out = {}
    for name, first in states[0].items():
        acc = np.zeros(np.shape(first), dtype=np.float64)
        for state, weight in zip(states, weights):
            acc += np.asarray(state[name], dtype=np.float64) * weight
        acc /= total
        dtype = np.asarray(first).dtype
        out[name] = np.rint(acc).astype(dtype) if np.issubdtype(dtype, np.integer) else acc.astype(dtype)
    return out
