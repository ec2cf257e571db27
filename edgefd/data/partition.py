"""Split a dataset across federated clients: IID, label skew, quantity skew, pathological, natural.

A scheme is a short string so that it fits on a command line and in a results file:

=================  =====================================================================================
``iid``            shuffle, then equal shares
``dirichlet:A``    label skew: each class is spread over clients by Dirichlet(A) proportions (FedML /
                   Hsu et al.); smaller A = more skew; resampled until every client has ``min_samples``
``shards:K``       pathological: every client holds exactly K classes, each class split evenly among
                   the clients holding it (the "#label K" split of NIID-Bench)
``quantity:A``     quantity skew: ``min_samples`` each plus a Dirichlet(A) share of the rest, labels IID
``natural``        one client per natural group (subject / writer) of the dataset
``dominant:F``     DFL's non-IID split: share F of each client's samples from one dominant label
                   (``client mod classes``), the rest evenly over the other labels (Table I of the DFL paper)
=================  =====================================================================================

Every client also gets a local test split whose label distribution follows its training split (see
:func:`draw_local_tests`), so personalised accuracy measures what the client is expected to see.
Everything is drawn from ``numpy.random.default_rng`` seeded by ``seed``: same seed, same splits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # a type only: splitting labels needs no torch
    from .dataset import Dataset

log = logging.getLogger(__name__)

SCHEMES = ("iid", "dirichlet", "shards", "quantity", "natural", "dominant")
MAX_RESAMPLES = 1000
"""How often a Dirichlet draw is repeated to give every client ``min_samples`` before giving up."""


@dataclass(frozen=True)
class ClientSplit:
    """One client's share of a dataset, as indices into the dataset's train and test arrays."""

    client_id: int
    """0-based client number."""
    train_indices: np.ndarray
    """Sorted int64 indices into ``train_x`` / ``train_y``."""
    test_indices: np.ndarray
    """Sorted int64 indices into ``test_x`` / ``test_y`` (the client's local test split)."""
    group: int | None = None
    """The natural group (subject / writer) this client is, for the ``natural`` scheme."""

    @property
    def num_train(self) -> int:
        return len(self.train_indices)

    @property
    def num_test(self) -> int:
        return len(self.test_indices)


@dataclass(frozen=True)
class PartitionConfig:
    """How to split a dataset over clients (see the module docstring for the schemes)."""

    num_clients: int = 10
    """Number of clients."""
    scheme: str = "dirichlet:0.5"
    """Scheme string: ``iid``, ``dirichlet:A``, ``shards:K``, ``quantity:A``, ``natural``, ``dominant:F``."""
    seed: int = 0
    """Seed of every random draw of the partition."""
    test_fraction: float | None = None
    """Local test size as a share of the client's train size; None spreads the whole test set over
    clients in proportion to their train sizes."""
    min_samples: int = 10
    """Fewest training samples a ``dirichlet`` / ``quantity`` client may get (capped at half the mean
    client size, so that small datasets stay feasible; at least 1)."""
    samples_per_client: int | None = None
    """Training samples per client for ``iid`` and ``dominant`` (default: train size // clients);
    with ``dirichlet`` and ``shards``, the most a client keeps: the split is drawn over the whole
    set, then a larger share is cut to a random subset of this size (its label mix is kept in
    expectation), which scales a recipe down without changing its skew."""

    def split(self, dataset: Dataset) -> list[ClientSplit]:
        """Partition ``dataset`` with this configuration."""
        return partition(
            dataset,
            self.num_clients,
            self.scheme,
            self.seed,
            test_fraction=self.test_fraction,
            min_samples=self.min_samples,
            samples_per_client=self.samples_per_client,
        )


@dataclass(frozen=True)
class Scheme:
    """A parsed scheme string."""

    kind: str
    """One of :data:`SCHEMES`."""
    param: float | None = None
    """Alpha, K or F; None for ``iid`` and ``natural``."""


def parse_scheme(text: str) -> Scheme:
    """Parse and validate ``"dirichlet:0.5"`` and friends; ValueError names what is wrong."""
    kind, _, arg = text.strip().lower().partition(":")
    if kind not in SCHEMES:
        raise ValueError(
            f"unknown partition scheme {text!r}; use one of: iid, dirichlet:ALPHA, shards:K, "
            f"quantity:ALPHA, natural, dominant:FRAC"
        )
    if kind in ("iid", "natural"):
        if arg:
            raise ValueError(f"scheme {kind!r} takes no parameter, got {text!r}")
        return Scheme(kind)
    if not arg:
        raise ValueError(
            f"scheme {kind!r} needs a parameter, e.g. {kind}:{ {'shards': 2, 'dominant': 0.8}.get(kind, 0.5) }"
        )
    try:
        value = float(arg)
    except ValueError:
        raise ValueError(f"scheme {text!r}: parameter {arg!r} is not a number") from None
    if kind in ("dirichlet", "quantity") and not (value > 0 and np.isfinite(value)):
        raise ValueError(f"scheme {text!r}: alpha must be > 0 and finite, got {arg}")
    if kind == "shards" and (value != int(value) or value < 1):
        raise ValueError(f"scheme {text!r}: K (classes per client) must be an integer >= 1, got {arg}")
    if kind == "dominant" and not 0 < value <= 1:
        raise ValueError(f"scheme {text!r}: the dominant share must be in (0, 1], got {arg}")
    return Scheme(kind, value)


def partition(
    dataset: Dataset,
    num_clients: int,
    scheme: str,
    seed: int = 0,
    *,
    test_fraction: float | None = None,
    min_samples: int = 10,
    samples_per_client: int | None = None,
) -> list[ClientSplit]:
    """Split ``dataset`` over ``num_clients`` clients; see :class:`PartitionConfig` for the options."""
    return partition_labels(
        dataset.train_y.numpy(),
        dataset.test_y.numpy(),
        num_clients,
        scheme,
        seed,
        num_classes=dataset.num_classes,
        train_groups=None if dataset.train_groups is None else dataset.train_groups.numpy(),
        test_groups=None if dataset.test_groups is None else dataset.test_groups.numpy(),
        test_fraction=test_fraction,
        min_samples=min_samples,
        samples_per_client=samples_per_client,
    )


def partition_labels(
    train_y: np.ndarray,
    test_y: np.ndarray,
    num_clients: int,
    scheme: str,
    seed: int = 0,
    *,
    num_classes: int | None = None,
    train_groups: np.ndarray | None = None,
    test_groups: np.ndarray | None = None,
    test_fraction: float | None = None,
    min_samples: int = 10,
    samples_per_client: int | None = None,
) -> list[ClientSplit]:
    """:func:`partition` on bare label arrays (what the partition actually needs)."""
    spec = parse_scheme(scheme)
    train_y = np.asarray(train_y, dtype=np.int64)
    test_y = np.asarray(test_y, dtype=np.int64)
    n = len(train_y)
    if isinstance(num_clients, bool) or int(num_clients) != num_clients or num_clients < 1:
        raise ValueError(f"num_clients must be an integer >= 1, got {num_clients!r}")
    if num_clients > n:
        raise ValueError(f"num_clients ({num_clients}) is larger than the number of training samples ({n})")
    if test_fraction is not None and not test_fraction > 0:
        raise ValueError(f"test_fraction must be > 0 (or None), got {test_fraction}")
    if min_samples < 0:
        raise ValueError(f"min_samples must be >= 0, got {min_samples}")
    if samples_per_client is not None:
        if spec.kind not in ("iid", "dominant", "dirichlet", "shards"):
            raise ValueError(
                f"samples_per_client applies to 'iid', 'dominant', 'dirichlet' and 'shards' only, not {spec.kind!r}"
            )
        if samples_per_client < 1 or samples_per_client * (num_clients if spec.kind == "iid" else 1) > n:
            raise ValueError(
                f"samples_per_client={samples_per_client} does not fit {n} training samples over {num_clients} clients"
            )
    classes = (
        int(num_classes) if num_classes is not None else int(max(train_y.max(initial=-1), test_y.max(initial=-1)) + 1)
    )

    train_rng, test_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    if spec.kind == "natural":
        return _natural(
            train_y, test_y, num_clients, train_groups, test_groups, train_rng, test_rng, classes, test_fraction
        )

    min_size = max(1, min(min_samples, n // (2 * num_clients)))
    param = spec.param
    if spec.kind == "iid":
        parts = _iid(n, num_clients, samples_per_client, train_rng)
    elif param is None:  # every scheme but iid and natural has a parameter
        raise TypeError(f"scheme {spec.kind!r} needs a parameter")
    elif spec.kind == "dirichlet":
        parts = _dirichlet(train_y, num_clients, float(param), min_size, train_rng)
    elif spec.kind == "quantity":
        parts = _quantity(n, num_clients, float(param), min_size, train_rng)
    elif spec.kind == "shards":
        parts = _shards(train_y, num_clients, int(param), train_rng)
    else:
        parts = _dominant(train_y, num_clients, float(param), samples_per_client or n // num_clients, train_rng)

    if samples_per_client is not None and spec.kind in ("dirichlet", "shards"):
        # The label skew is drawn over the whole set; each client then keeps a random subset.
        parts = [
            rng_part
            if len(rng_part) <= samples_per_client
            else train_rng.choice(rng_part, samples_per_client, replace=False)
            for rng_part in parts
        ]
    for k, part in enumerate(parts):
        if len(part) == 0:
            raise ValueError(f"client {k} got no training samples with {scheme!r}; use fewer clients")
    counts = np.stack([np.bincount(train_y[p], minlength=classes) for p in parts])
    tests = draw_local_tests(counts, test_y, test_rng, test_fraction)
    return [
        ClientSplit(k, np.sort(np.asarray(p, dtype=np.int64)), np.sort(t)) for k, (p, t) in enumerate(zip(parts, tests))
    ]


# --- the schemes (each returns one index array per client) -----------------------------------


def _iid(n: int, num_clients: int, per_client: int | None, rng: np.random.Generator) -> list[np.ndarray]:
    order = rng.permutation(n)
    if per_client is not None:
        order = order[: per_client * num_clients]
    return np.array_split(order, num_clients)


def _dirichlet(
    y: np.ndarray, num_clients: int, alpha: float, min_size: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """FedML's label-skew split: per class, Dirichlet(alpha) shares over the clients not yet above
    the mean size; the whole draw is repeated until every client has ``min_size`` samples."""
    n = len(y)
    by_class = [rng.permutation(np.flatnonzero(y == c)) for c in np.unique(y)]
    for _ in range(MAX_RESAMPLES):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        sizes = np.zeros(num_clients, dtype=np.int64)
        for idx in by_class:
            below_mean = sizes < n / num_clients
            shares = rng.dirichlet(np.full(num_clients, alpha)) * below_mean
            if shares.sum() <= 0:  # every open share underflowed (tiny alpha): split evenly among them
                shares = below_mean.astype(np.float64)
            shares = shares / shares.sum()
            cuts = (np.cumsum(shares) * len(idx)).astype(np.int64)[:-1]
            for k, piece in enumerate(np.split(idx, cuts)):
                parts[k].append(piece)
                sizes[k] += len(piece)
        if sizes.min() >= min_size:
            return [np.concatenate(p) for p in parts]
    raise ValueError(
        f"dirichlet:{alpha} could not give each of {num_clients} clients {min_size} samples in "
        f"{MAX_RESAMPLES} draws; use a larger alpha, fewer clients or a smaller min_samples"
    )


def _quantity(n: int, num_clients: int, alpha: float, min_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Each client gets ``min_size`` samples plus a Dirichlet(alpha) share of the rest; labels IID.

    (Redrawing until every plain Dirichlet share reaches the minimum, as NIID-Bench does, can loop
    for ever with many clients and a small alpha.)"""
    order = rng.permutation(n)
    spare = n - num_clients * min_size
    sizes = min_size + _round_to_total(rng.dirichlet(np.full(num_clients, alpha)) * spare, spare, rng)
    return np.split(order, np.cumsum(sizes)[:-1])


def _shards(y: np.ndarray, num_clients: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Client i holds the K classes at positions iK .. iK+K-1 (cyclically) of a seeded class order,
    so every class has the same number of holders (give or take one) and splits evenly among them.
    Classes nobody holds (clients x K < classes) are left out."""
    present = np.unique(y)
    if k > len(present):
        raise ValueError(f"shards:{k} asks for {k} classes per client but the data has {len(present)}")
    order = rng.permutation(present)
    held = [order[(i * k + np.arange(k)) % len(present)] for i in range(num_clients)]
    holders = {int(c): [i for i in range(num_clients) if c in held[i]] for c in present}
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, owners in holders.items():
        if owners:
            for owner, piece in zip(owners, np.array_split(rng.permutation(np.flatnonzero(y == c)), len(owners))):
                parts[owner].append(piece)
    return [np.concatenate(p) if p else np.zeros(0, dtype=np.int64) for p in parts]


def _dominant(
    y: np.ndarray, num_clients: int, frac: float, per_client: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """DFL's non-IID split (Table I of the DFL paper): client k's dominant label is ``k mod C``;
    ``round(F n)`` samples of it, the rest spread evenly over the other labels in cyclic order,
    remainders rotated across clients. Class pools refill with a fresh permutation when exhausted,
    which duplicates samples across clients (logged); never within a client."""
    present = np.unique(y)
    c = len(present)
    pools = {int(cls): _Pool(np.flatnonzero(y == cls), rng) for cls in present}
    parts = []
    for k in range(num_clients):
        d = k % c
        n_dom = per_client if c == 1 else int(round(frac * per_client))
        demand = {int(present[d]): n_dom}
        if c > 1:
            others = [(d + j) % c for j in range(1, c)]
            base, extra = divmod(per_client - n_dom, c - 1)
            offset = ((k // c) * extra) % (c - 1)
            bonus = {others[(offset + j) % (c - 1)] for j in range(extra)}
            demand.update({int(present[o]): base + (o in bonus) for o in others})
        for cls, m in demand.items():
            if m > len(pools[cls].indices):
                raise ValueError(
                    f"dominant:{frac}: client {k} needs {m} samples of class {cls} but it has only "
                    f"{len(pools[cls].indices)}; use fewer samples per client or a smaller share"
                )
        parts.append(np.concatenate([pools[cls].take(m) for cls, m in demand.items()]))
    reused = sum(p.reused for p in pools.values())
    if reused:
        log.warning(
            "dominant:%s: %d training samples are shared by two or more clients (class pools ran out)", frac, reused
        )
    return parts


def _natural(
    train_y: np.ndarray,
    test_y: np.ndarray,
    num_clients: int,
    train_groups: np.ndarray | None,
    test_groups: np.ndarray | None,
    train_rng: np.random.Generator,
    test_rng: np.random.Generator,
    classes: int,
    test_fraction: float | None,
) -> list[ClientSplit]:
    """One client per group. With fewer clients than groups, a seeded sample of the groups takes
    part (as LEAF samples users). A client's test split is its group's own test samples, unless
    the dataset has no test groups or ``test_fraction`` is given: then a label-matched draw."""
    if train_groups is None:
        raise ValueError("the 'natural' scheme needs a dataset with groups (subjects / writers), e.g. 'watch'")
    groups = np.unique(train_groups)
    if num_clients > len(groups):
        raise ValueError(f"natural: {num_clients} clients but the dataset has only {len(groups)} groups")
    chosen = groups if num_clients == len(groups) else np.sort(train_rng.choice(groups, num_clients, replace=False))
    parts = [np.flatnonzero(train_groups == g) for g in chosen]
    if test_groups is not None and test_fraction is None:
        tests = [np.flatnonzero(test_groups == g) for g in chosen]
    else:
        counts = np.stack([np.bincount(train_y[p], minlength=classes) for p in parts])
        tests = draw_local_tests(counts, test_y, test_rng, test_fraction)
    return [
        ClientSplit(k, p.astype(np.int64), np.sort(t).astype(np.int64), group=int(g))
        for k, (g, p, t) in enumerate(zip(chosen, parts, tests))
    ]


# --- local test splits ---------------------------------------------------------------------------


def draw_local_tests(
    train_counts: np.ndarray, test_y: np.ndarray, rng: np.random.Generator, test_fraction: float | None = None
) -> list[np.ndarray]:
    """Draw each client's test indices with the label distribution of its training split.

    Client k wants ``q[k, c] = s * train_counts[k, c]`` samples of class c. By default ``s`` is
    ``len(test_y) / total train samples`` (the test set is shared out in proportion to client
    sizes), lowered where needed so that no class is asked for more than the test set holds: the
    clients' test splits are then disjoint. With ``test_fraction`` given, ``s = test_fraction`` and
    a class the test set is too small for is reused (a fresh permutation: samples repeat across
    clients, and within one client only if it alone wants more than the class has). Per class the
    wants are rounded to integers that keep the class total. A class absent from the test set cannot
    be drawn: a client's test split then lacks it.
    """
    train_counts = np.asarray(train_counts, dtype=np.float64)
    supply = np.bincount(test_y, minlength=train_counts.shape[1])[: train_counts.shape[1]]
    if test_fraction is not None:
        scale = float(test_fraction)
    else:
        demand = train_counts.sum(axis=0)
        drawable = (demand > 0) & (supply > 0)
        scale = len(test_y) / max(train_counts.sum(), 1.0)
        if drawable.any():
            scale = min(scale, float(np.min(supply[drawable] / demand[drawable])))
    wants = train_counts * scale
    draws: list[list[np.ndarray]] = [[] for _ in range(len(train_counts))]
    for c in range(train_counts.shape[1]):
        pool = _Pool(np.flatnonzero(test_y == c), rng)
        if len(pool.indices) == 0:
            continue
        total = int(round(wants[:, c].sum()))
        if test_fraction is None:
            total = min(total, len(pool.indices))  # rounding must not force a repeat
        for k, m in enumerate(_round_to_total(wants[:, c], total, rng)):
            if m:
                draws[k].append(pool.take(int(m)))
    return [np.concatenate(d).astype(np.int64) if d else np.zeros(0, dtype=np.int64) for d in draws]


class _Pool:
    """A seeded stream over one class's indices: each index once per pass, then a fresh pass."""

    def __init__(self, indices: np.ndarray, rng: np.random.Generator) -> None:
        self.indices = indices
        self.rng = rng
        self.order = rng.permutation(indices)
        self.pos = 0
        self.taken = 0

    @property
    def reused(self) -> int:
        """How many handed-out indices had been handed out before (those after the first pass)."""
        return max(0, self.taken - len(self.indices))

    def take(self, m: int) -> np.ndarray:
        """``m`` indices, distinct when ``m <= len(indices)`` (else every index at least m // len times)."""
        size = len(self.indices)
        if m > size:
            full, rest = divmod(m, size)
            return np.concatenate([self.take(size) for _ in range(full)] + [self.take(rest)])
        self.taken += m
        out = self.order[self.pos : self.pos + m]
        self.pos += len(out)
        if len(out) < m:  # pass exhausted: start a new one, with what this call already got moved last
            fresh = self.rng.permutation(self.indices)
            mine = np.isin(fresh, out)
            self.order = np.concatenate([fresh[~mine], fresh[mine]])
            need = m - len(out)
            out = np.concatenate([out, self.order[:need]])
            self.pos = need
        return out


def _round_to_total(values: np.ndarray, total: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """Integers close to ``values`` (each the floor or the ceiling) that sum to ``total``: the
    largest remainders round up; equal remainders in a seeded random order (so that ties do not
    always favour the low client ids), or by position without ``rng``."""
    values = np.asarray(values, dtype=np.float64)
    if values.sum() > 0:
        values = values * (total / values.sum())
    floors = np.floor(values).astype(np.int64)
    short = total - int(floors.sum())
    if short > 0:
        remainders = np.round(values - floors, 9)  # so that float noise does not decide ties
        tie_break = rng.permutation(len(values)) if rng is not None else np.arange(len(values))
        order = np.lexsort((tie_break, -remainders))
        floors[order[:short]] += 1
    return floors


# --- summaries ----------------------------------------------------------------------------------


def label_counts(dataset: Dataset, splits: list[ClientSplit], split: str = "train") -> np.ndarray:
    """``[clients, classes]`` label counts of each client's ``"train"`` or ``"test"`` split."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    labels = (dataset.train_y if split == "train" else dataset.test_y).numpy()
    return np.stack(
        [
            np.bincount(labels[s.train_indices if split == "train" else s.test_indices], minlength=dataset.num_classes)
            for s in splits
        ]
    ).astype(np.int64)
