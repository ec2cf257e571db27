"""Chores every method shares, written once: matching knowledge to samples by stable id, averaging
model states, and what the clients of one process share."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from edgefd.algorithms.base import ServerContext
from edgefd.algorithms.params import check_choices
from edgefd.settings import setting
from edgefd.training import load_state_arrays


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

    def rows_of_known(self, ids: np.ndarray) -> np.ndarray:
        """Rows of ``ids`` known to be this index's (a message schema's ``members`` held them to
        it): `rows`' lookup without its checks, for a server's every step."""
        return self._order[np.searchsorted(self._sorted, ids)]

    def permutation(self, ids) -> np.ndarray:
        """Rows of ``ids`` when they must be exactly this index's ids, each once, in any order."""
        ids = np.asarray(ids).reshape(-1)
        if len(ids) != len(self.ids) or not np.array_equal(np.sort(ids), self._sorted):
            raise ValueError(f"expected the {len(self.ids)} ids of this index, each once; got {len(ids)} others")
        return self.rows(ids)


def average_states(states: list[dict[str, np.ndarray]], weights: list[float] | None = None) -> dict[str, np.ndarray]:
    """Per-entry mean of model states in float64, cast back to each entry's dtype (integer buffers,
    BatchNorm's batch counter, are rounded).

    With ``weights`` (sample counts: FedAvg, DFL) the sum of ``state * (w / total)``, FedAvg's
    arithmetic; without, the plain sum divided by the count (FedD2S's Eq. 11), which gives identical
    inputs back bit for bit. The two orders of rounding are kept as the methods always had them, so
    that their results do not move by a last bit."""
    if not states:
        raise ValueError("average_states: no states to average")
    if weights is not None and len(weights) != len(states):
        raise ValueError(f"average_states: {len(weights)} weights for {len(states)} states")
    total = float(sum(weights)) if weights is not None else float(len(states))
    if total <= 0:
        raise ValueError("average_states: weights sum to zero")
    out = {}
    for name, first in states[0].items():
        acc = np.zeros(np.shape(first), dtype=np.float64)
        if weights is None:
            for state in states:
                acc += np.asarray(state[name], dtype=np.float64)
            acc /= total
        else:
            for state, weight in zip(states, weights):
                acc += np.asarray(state[name], dtype=np.float64) * (float(weight) / total)
        dtype = np.asarray(first).dtype
        out[name] = np.rint(acc).astype(dtype) if np.issubdtype(dtype, np.integer) else acc.astype(dtype)
    return out


log = logging.getLogger(__name__)

AGGREGATORS = ("mean", "median", "trimmed")
"""How a server combines its clients' contributions: the (weighted) mean the papers use, or one of
two robust statistics that one poisoning client cannot drag far: the coordinate-wise median, and
the coordinate-wise mean after dropping the largest and smallest values (``trimmed``)."""

ROBUST_MINIMUM = 3
"""Fewest contributions a robust statistic combines. Of two, one honest and one poisoned, no
statistic can tell which is which (the median of two is their mean): a method holds such a
coordinate instead (keeps the last value, or gives no teacher) and says so in the round's metrics."""


WEIGHT_CAP = 2.0
"""Default of every method's ``weight_cap``: a client's weight in an average is at most this many
times the median of the other clients' declared sample counts. At 2, one device of three never
outweighs the other two together, even declaring the whole training set (3 times an honest share:
a cap of 3 would not hold it at all). Honest splits stay under it: on digits, over 40 seeds, no client
of an iid, shards or dominant split, nor of a Dirichlet split of 3 to 10 clients at alpha >= 0.5 (or
up to 20 at alpha >= 1), holds more than 1.84 times the others' median, so those runs are unchanged
bit for bit; at alpha 0.1 one client of 10 is held to it in 8% of the seeds (from at most 2.8x).
Quantity skew (``--partition quantity:ALPHA``) is what it is there to bound: set ``weight_cap=0`` to
study it with the papers' weights (docs/ROBUSTNESS.md#bounded-weights)."""


def one_architecture_model(context: ServerContext, arrays: dict[str, np.ndarray]) -> nn.Module:
    """A module of the clients' one architecture holding ``arrays`` (a global state, FedAvg's and
    DFL's), for the server to score; built aside from torch's global random stream, which the run's
    draws use."""
    with torch.random.fork_rng(devices=[]):
        model = context.build_model(next(iter(context.client_models.values())))
    load_state_arrays(model, arrays)
    return model


def weight_cap_setting() -> Any:
    """The ``weight_cap`` field of a method's params (each method whose server weights by a declared
    count has one)."""
    return setting(
        WEIGHT_CAP,
        "a client's weight in an average (its declared sample count) is at most this many times the median of "
        "the other clients' in that average, so one device cannot outweigh the rest by what it declares "
        "(docs/ROBUSTNESS.md#bounded-weights); 0 = unbounded, the paper's weights",
    )


def check_weight_cap(cap: float) -> None:
    if not (cap == 0 or cap >= 1):
        raise ValueError(f"param weight_cap: must be 0 (unbounded) or at least 1, got {cap}")


def capped_weights(declared: Sequence[float] | np.ndarray, cap: float) -> np.ndarray:
    """Each client's declared count (one per client, in the aggregate's order) as a weight: at most
    ``cap`` times the median of the *other* clients' positive counts (0: unbounded). The bound comes
    from the others alone, so a liar cannot raise it, and with three clients it is an honest
    client's count; a client whose others declare nothing (or who is alone) keeps its count.
    float64; a count under its bound is returned unchanged (an honest run's average does not move)."""
    counts = np.asarray(declared, dtype=np.float64)
    if cap == 0:
        return counts
    others = median_of_others(counts, counts > 0)
    return np.where(np.isnan(others), counts, np.minimum(counts, cap * others))


def median_of_others(values: np.ndarray, counted: np.ndarray) -> np.ndarray:
    """For each entry of ``values``, the median of the *other* entries where ``counted`` (NaN where
    there is none): a bound no client can raise itself (`capped_weights`; FedCache's bounded rows).
    One sort, each entry's median read off it with its own value taken out: a per-step bound in
    FedCache's exchange costs O(n log n) in the clients, not O(n^2)."""
    values = np.asarray(values, dtype=np.float64)
    counted = np.asarray(counted, dtype=np.bool_)
    pool = np.sort(values[counted])
    out = np.full(len(values), np.nan)
    if len(pool):
        out[~counted] = np.median(pool)  # its others are every counted entry
    if len(pool) > 1:
        own = np.searchsorted(pool, values[counted])  # an equal value's place: the same others either way
        n = len(pool) - 1

        def other(i: int) -> np.ndarray:
            """The i-th smallest of the others of each counted entry."""
            return np.where(i < own, pool[i], pool[i + 1])

        out[counted] = (other((n - 1) // 2) + other(n // 2)) / 2
    return out


UPDATE_CAP = 2.0
"""Default of FedAvg's and DFL's ``update_cap``: a client's update (its model minus the global model
it trained from) is at most this many times the median norm of the other clients' updates. A device
that sends weights at the schema's bound then moves the global model no further than twice an honest
step, so honest devices keep training from a model they can follow, and their next uplinks stay
within the schemas (unbounded, one such device of three pushed every honest uplink out of range from
the second round on). On a clean run it gave the same accuracy in every seed of the dfl-noniid
recipe, and cost 0.3 points with 3 clients of digits (docs/ROBUSTNESS.md#bounded-updates)."""


def update_cap_setting() -> Any:
    """The ``update_cap`` field of a method's params (FedAvg's and DFL's: the methods that average
    model weights)."""
    return setting(
        UPDATE_CAP,
        "a client's update (its model minus the global model it trained from) is scaled down to at most this many "
        "times the median norm of the other clients' updates before the server combines them, so one device cannot "
        "drag the global model further than the others move it (docs/ROBUSTNESS.md#bounded-updates); 0 = unbounded, "
        "the paper's average",
    )


def check_update_cap(cap: float) -> None:
    if not (cap == 0 or cap >= 1):
        raise ValueError(f"param update_cap: must be 0 (unbounded) or at least 1, got {cap}")


def bounded_updates(
    states: list[dict[str, np.ndarray]], reference: dict[str, np.ndarray], cap: float
) -> tuple[list[dict[str, np.ndarray]], int]:
    """The clients' model ``states`` with each floating-point update (state minus ``reference``, the
    global model they trained from) scaled down, if need be, to at most ``cap`` times the median
    L2 norm of the other clients' updates (`capped_weights`' rule: the bound comes from the others,
    so a client cannot raise its own); integer buffers are kept. Also how many were scaled down.
    ``cap`` 0, or a single client, returns the states unchanged. Any weighted mean of the results
    moves the reference by no more than the largest bound, whatever one client sent."""
    if cap == 0 or len(states) < 2:
        return states, 0
    floats = [name for name, array in reference.items() if np.asarray(array).dtype.kind == "f"]
    deltas = [
        {
            name: np.asarray(state[name], dtype=np.float64) - np.asarray(reference[name], dtype=np.float64)
            for name in floats
        }
        for state in states
    ]
    norms = np.array([np.sqrt(sum(float(np.square(d).sum()) for d in delta.values())) for delta in deltas])
    bounds = capped_weights(norms, cap)
    out: list[dict[str, np.ndarray]] = []
    for state, delta, norm, bound in zip(states, deltas, norms, bounds):
        if bound >= norm:
            out.append(state)
            continue
        scaled = dict(state)
        for name in floats:
            start = np.asarray(reference[name], dtype=np.float64)
            scaled[name] = (start + delta[name] * (bound / norm)).astype(np.asarray(state[name]).dtype)
        out.append(scaled)
    return out, int((bounds < norms).sum())


def sent_back(states: list[dict[str, np.ndarray]], reference: dict[str, np.ndarray]) -> np.ndarray:
    """Which clients sent ``reference`` (the global model they were sent) back unchanged in every
    floating-point entry: they trained nothing. FedAvg and DFL, under a weight bound, give such a
    model no weight, whatever sample count it declares (a free rider would otherwise dilute every
    honest step), and leave its count out of the others' bounds. None is marked where every client
    sent it back: the average is the reference then."""
    floats = [name for name, array in reference.items() if np.asarray(array).dtype.kind == "f"]

    def unchanged(state: dict[str, np.ndarray]) -> bool:
        return all(np.array_equal(np.asarray(state[name]), np.asarray(reference[name])) for name in floats)

    marked = np.array([unchanged(state) for state in states], dtype=np.bool_)
    return marked if not marked.all() else np.zeros_like(marked)


def sent_back_metric(marked: np.ndarray) -> dict[str, float]:
    """``updates_empty``, the round's count of clients that `sent_back` the model (nothing when none)."""
    count = int(np.asarray(marked).sum())
    return {"updates_empty": float(count)} if count else {}


def capped_label_counts(counts: Sequence[np.ndarray], cap: float) -> list[np.ndarray]:
    """Per-label counts (one array per client) as weights: a client whose total exceeds its
    `capped_weights` bound has every count scaled down to it (rounded down, int64), so its labels
    keep their proportions; the others are returned as they are. The bound is on a client's total,
    not label by label: honest non-IID clients hold dozens of times the others' count of a label."""
    totals = [int(np.asarray(c, dtype=np.int64).sum()) for c in counts]
    bounds = capped_weights(totals, cap)
    out = []
    for count, total, bound in zip(counts, totals, bounds):
        count = np.asarray(count, dtype=np.int64)
        out.append(count if bound >= total else np.floor(count * (bound / total)).astype(np.int64))
    return out


def capped_metric(declared: np.ndarray, weights: np.ndarray) -> dict[str, float]:
    """``weights_capped``, the round's count of clients held to their bound, for the round's server
    metrics (nothing when none was: an honest run's records stay as they were)."""
    capped = int((np.asarray(weights) < np.asarray(declared)).sum())
    return {"weights_capped": float(capped)} if capped else {}


def aggregator_setting(
    combined: str = "the clients' contributions", paper: str = "the paper's, sample-weighted", default: str = "mean"
) -> Any:
    """The ``aggregator`` field of a method's params: ``combined`` says what the server combines,
    ``paper`` what the mean is in its paper; ``default``: the median where it costs a clean run
    under a point (docs/ROBUSTNESS.md#what-each-option-costs-a-clean-run)."""
    return setting(
        default,
        f"how the server combines {combined}: mean ({paper}), or the coordinate-wise median or trimmed mean, "
        "unweighted, which one poisoning client cannot drag far",
        choices=AGGREGATORS,
    )


def trim_setting() -> Any:
    """The ``trim`` field that goes with ``aggregator``."""
    return setting(0.2, "aggregator=trimmed: fraction of clients dropped at each end of every coordinate")


@dataclass
class RobustAggregation:
    """The params of a method whose server may combine its clients robustly (FD, FedAvg): its params
    dataclass inherits these three."""

    aggregator: str = aggregator_setting()
    trim: float = trim_setting()
    weight_cap: float = weight_cap_setting()

    def __post_init__(self) -> None:
        check_choices(self)
        check_trim(self.trim)
        check_weight_cap(self.weight_cap)


def check_trim(trim: float) -> None:
    if not 0.0 <= trim < 0.5:
        raise ValueError(f"param trim: must be in [0, 0.5), got {trim}")


def robust_mean(values: np.ndarray, how: str, trim: float = 0.2) -> np.ndarray:
    """The coordinate-wise statistic ``how`` ("median" or "trimmed") over axis 0 of ``values`` (one
    row per client, at least `ROBUST_MINIMUM`), in float64. ``trimmed`` drops
    ``max(floor(trim * n), 1)`` values at each end of every coordinate."""
    values = np.asarray(values, dtype=np.float64)
    n = values.shape[0]
    if n < ROBUST_MINIMUM:
        raise ValueError(f"robust_mean: {n} contribution(s); a robust statistic needs at least {ROBUST_MINIMUM}")
    if how == "median":
        return np.median(values, axis=0)
    if how == "trimmed":
        cut = max(int(trim * n), 1)
        ordered = np.sort(values, axis=0)
        return ordered[cut : n - cut].mean(axis=0)
    raise ValueError(f"robust_mean: how must be 'median' or 'trimmed', got {how!r}")


def gather_robust(values: torch.Tensor, neighbours: torch.Tensor, how: str, trim: float = 0.2) -> torch.Tensor:
    """As the `gather_mean` kernel (the rows of ``values`` [M, C] named in each row of ``neighbours``
    [n, R], -1 for none), but each row's `robust_mean` over the rows it names; a row that names
    fewer than `ROBUST_MINIMUM` gives zeros, as a row that names none does in `gather_mean`.
    Plain torch: a robust run trades the kernel's speed for what one client can put into a row."""
    named = neighbours >= 0
    gathered = values[neighbours.clamp(min=0)].to(torch.float64)  # [n, R, C]
    gathered = torch.where(named[..., None], gathered, torch.full_like(gathered, float("nan")))
    ordered = gathered.sort(dim=1).values  # NaN (the missing) last
    count = named.sum(dim=1, keepdim=True)  # [n, 1]
    position = torch.arange(neighbours.shape[1], device=neighbours.device)[None, :]  # [1, R]
    if how == "median":  # the mean of the middle one or two of the `count` named values
        keep = (position == (count - 1) // 2) | (position == count // 2)
    elif how == "trimmed":
        cut = torch.clamp((trim * count).floor().long(), min=1)
        keep = (position >= cut) & (position < count - cut)
    else:
        raise ValueError(f"gather_robust: how must be 'median' or 'trimmed', got {how!r}")
    kept = torch.where(keep[..., None], ordered, torch.zeros_like(ordered)).sum(dim=1)
    combined = kept / keep.sum(dim=1, keepdim=True).clamp(min=1)
    enough = count >= ROBUST_MINIMUM
    return torch.where(enough, combined, torch.zeros_like(combined)).to(values.dtype)


def robust_rows(
    tables: list[np.ndarray], counts: list[np.ndarray], how: str, trim: float = 0.2
) -> tuple[np.ndarray, np.ndarray]:
    """Per-label tables combined row by row (FD's logits, DFL's soft targets): each row's
    `robust_mean` over the clients whose count of that label is above 0 (unweighted: a client
    cannot buy influence by declaring more samples), and whether at least `ROBUST_MINIMUM` clients
    held it. A row with fewer is zeros here; the method decides what stands in for it."""
    labels, width = np.asarray(tables[0]).shape
    rows_out = np.zeros((labels, width), dtype=np.float64)
    quorum = np.zeros(labels, dtype=np.bool_)
    for label in range(labels):
        rows = [table[label] for table, count in zip(tables, counts) if count[label] > 0]
        if len(rows) >= ROBUST_MINIMUM:
            rows_out[label] = robust_mean(np.stack(rows), how, trim)
            quorum[label] = True
    return rows_out, quorum


def too_few_to_combine(round: int, contributions: int, how: str) -> bool:
    """Whether a robust server received fewer than `ROBUST_MINIMUM` models this round (it keeps its
    global model then, and the log says so)."""
    if contributions >= ROBUST_MINIMUM:
        return False
    log.warning(
        "round %d: aggregator=%s needs %d uplinks, got %d: the global model is kept",
        round,
        how,
        ROBUST_MINIMUM,
        contributions,
    )
    return True


def robust_states(states: list[dict[str, np.ndarray]], how: str, trim: float = 0.2) -> dict[str, np.ndarray]:
    """Model states combined entry by entry with :func:`robust_mean` (cast back as `average_states`)."""
    if not states:
        raise ValueError("robust_states: no states to combine")
    out = {}
    for name, first in states[0].items():
        combined = robust_mean(np.stack([np.asarray(state[name]) for state in states]), how, trim)
        dtype = np.asarray(first).dtype
        out[name] = np.rint(combined).astype(dtype) if np.issubdtype(dtype, np.integer) else combined.astype(dtype)
    return out


_Shared = TypeVar("_Shared", bound=Callable[..., Any])
_SHARED_CACHES: list[Any] = []


def shared_by_clients(function: _Shared) -> _Shared:
    """``functools.lru_cache(maxsize=1)`` for something the clients of one process build once and
    share (FedCache's mobilenet encoder: an ONNX export and an onnxruntime session, ~100 MB): a
    simulation's clients reuse it, and :func:`release_shared` lets it go once each client of the
    process answered (from the method's ``ClientRole.done_sharing``)."""
    cached = functools.lru_cache(maxsize=1)(function)
    _SHARED_CACHES.append(cached)
    return cached  # type: ignore[return-value]  # lru_cache's wrapper calls like the function


def release_shared() -> None:
    """Forget what :func:`shared_by_clients` keeps (a later call builds it again)."""
    for cached in _SHARED_CACHES:
        cached.cache_clear()
