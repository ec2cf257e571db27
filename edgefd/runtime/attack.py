"""Poisoning clients, for robustness experiments: a client that trains honestly, then replaces what it
sends with values chosen to hurt, all within what the server's schemas admit (so the server has to
withstand them, not refuse them).

The attack touches every floating-point array of a client's training messages (its uplinks and its
step requests), and nothing else: not its hello (what it declares about its data), not its sample
ids or counts, not its evaluation scores. It knows nothing of a method's maths: an array named as
an entry of the client's model state (weights) is bounded by ``WEIGHT_BOUND``, any other float
array (logits, soft targets, features) by ``KNOWLEDGE_BOUND``, as the schemas bound them.

    scaled          every value times `SCALE`, clipped into the bound
    flipped         every value negated (logits: the likeliest class becomes the least likely)
    max-in-bounds   every value at the bound, with the sign opposite to the honest value's

The first ``--attackers`` clients (in client-id order) attack; the others are honest. A simulation
and a deployment poison alike: the setting is part of the run's config, which reaches every device
(`edgefd deploy-local --attack ...`, or `edgefd server --attack ...` with real devices).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edgefd.algorithms.schema import KNOWLEDGE_BOUND, WEIGHT_BOUND
from edgefd.protocol import Payload

ATTACKS = ("none", "scaled", "flipped", "max-in-bounds")
"""The choices of ``--attack`` ("none": every client honest)."""

SCALE = 100.0
"""The ``scaled`` attack's factor."""

INSIDE = 0.999
"""Fraction of a bound that the attacks reach: inside it after any rounding on the wire."""


@dataclass(frozen=True)
class Poisoning:
    """What one attacking client does to its training messages."""

    attack: str
    weights: frozenset[str]
    """The names of its model's state entries (bounded by ``WEIGHT_BOUND``)."""

    def __post_init__(self) -> None:
        if self.attack not in ATTACKS or self.attack == "none":
            raise ValueError(f"attack: must be one of {', '.join(ATTACKS[1:])}, got {self.attack!r}")

    def apply(self, content: Payload | None) -> Payload | None:
        if content is None:
            return None
        arrays = dict(content.arrays)
        for name, array in arrays.items():
            if array.dtype.kind == "f" and array.size:
                bound = INSIDE * (WEIGHT_BOUND if name in self.weights else KNOWLEDGE_BOUND)
                arrays[name] = self._poison(array.astype(np.float64), bound).astype(array.dtype)
        return Payload(content.kind, arrays, content.scalars, content.precision)

    def _poison(self, values: np.ndarray, bound: float) -> np.ndarray:
        if self.attack == "scaled":
            return np.clip(values * SCALE, -bound, bound)
        if self.attack == "flipped":
            return -values
        return np.where(values >= 0, -bound, bound)  # max-in-bounds


def attackers(client_ids: Sequence[str], attack: str, count: int) -> list[str]:
    """The clients that attack: the first ``count`` in id order (none when ``attack`` is "none")."""
    if attack == "none":
        return []
    if not 0 < count <= len(client_ids):
        raise ValueError(f"attackers: must be in [1, {len(client_ids)}] (the run's clients), got {count}")
    return sorted(client_ids)[:count]
