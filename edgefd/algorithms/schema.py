"""What a method's uplinks may hold, declared next to the method and checked by the runtime before
the server sees them.

The codec already refuses bytes that do not decode and floats that are not finite. What a payload
does *after* it decodes is the method's business, and a device with valid credentials, buggy or
hostile, can send a payload that decodes and still breaks the server: an array missing, a shape
that broadcasts, sample ids of another client, a count below zero, a logit of 1e30 (finite, and
beyond fp16 once it is averaged into the server's state). A server role therefore says, per
client, what each of its uplinks may be (:class:`MessageSchema`), and the one round loop checks
every uplink, hello and step request against it; a payload that does not fit is dropped with a
reason (:class:`UplinkRejected`), counted in the round's metrics, and the round goes on without it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from edgefd.protocol import HEADER_SIZE, Payload
from edgefd.protocol.codec import ARRAY_ENTRY
from edgefd.protocol.payload import MAX_STR_SCALAR_LEN

KNOWLEDGE_BOUND = 1e4
"""Largest magnitude a logit, probability table or feature may have. Softmax has saturated long
before it (a gap of 100 already gives e^-100), and fp16, a wire precision, ends at 65,504: knowledge
beyond it is corrupt, and averaged into the server's state it would make every later downlink
unencodable."""

WEIGHT_BOUND = 1e6
"""Largest magnitude a model weight may have (trained weights are within ~10^2)."""

COUNT_MAX = 2**31 - 1
"""Largest sample or label count a client may declare."""


class UplinkRejected(ValueError):
    """A payload that decoded but is not what the method accepts from this client. ``reason`` is a
    short tag the round's metrics count by (``missing-array``, ``shape``, ``foreign-ids``, ...)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


Axis = int | str | None
"""One axis of an :class:`ArraySpec`'s shape: a fixed length, any length (``None``), or a named length
(``"n"``) that every axis of that name in the message shares, and that an int scalar of that name
(a declared sample count) fixes where the message carries one."""


@dataclass(frozen=True)
class ArraySpec:
    """One array: accepted dtypes, shape (see :data:`Axis`), value range (inclusive, for numbers),
    optionally the only values allowed (``members``, sorted) and whether a value may repeat."""

    dtypes: tuple[str, ...]
    shape: tuple[Axis, ...]
    low: float | None = None
    high: float | None = None
    members: np.ndarray | None = field(default=None, compare=False)
    """Every value must be one of these (a client's own sample ids); a value outside is
    ``foreign-ids``."""
    unique: bool = False
    """No value twice (sample ids: a sample is sent once per message); a repeat is ``repeated-ids``."""
    optional: bool = False

    def check(self, name: str, array: np.ndarray) -> None:
        if array.dtype.name not in self.dtypes:
            raise UplinkRejected("dtype", f"array {name!r} is {array.dtype.name}, expected {' or '.join(self.dtypes)}")
        if len(array.shape) != len(self.shape) or any(
            isinstance(want, int) and got != want for got, want in zip(array.shape, self.shape)
        ):
            expected = "(" + ", ".join("*" if d is None else str(d) for d in self.shape) + ")"
            raise UplinkRejected("shape", f"array {name!r} has shape {array.shape}, expected {expected}")
        if array.size == 0 or array.dtype.kind not in "iuf":
            return
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            raise UplinkRejected("non-finite", f"array {name!r} holds NaN or Inf")
        if self.low is not None or self.high is not None:
            smallest, largest = array.min(), array.max()
            if (self.low is not None and smallest < self.low) or (self.high is not None and largest > self.high):
                raise UplinkRejected(
                    "out-of-range", f"array {name!r} spans [{smallest}, {largest}], allowed [{self.low}, {self.high}]"
                )
        if self.members is not None:
            owned = is_member(array, self.members)
            if not owned.all():
                outside = array[~owned].reshape(-1)[:3].tolist()
                raise UplinkRejected("foreign-ids", f"array {name!r} names values this client does not own: {outside}")
        if self.unique and array.size > 1:
            ordered = np.sort(array, axis=None)
            if (ordered[1:] == ordered[:-1]).any():
                raise UplinkRejected("repeated-ids", f"array {name!r} names a value twice")


def is_member(values: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Which of ``values`` are in ``members`` (sorted), by binary search: a request of 8 ids against
    a client's 3,000 costs a few microseconds, where ``np.isin`` sorts both every time."""
    if len(members) == 0:
        return np.zeros(values.shape, bool)
    positions = np.minimum(np.searchsorted(members, values), len(members) - 1)
    return members[positions] == values


@dataclass(frozen=True)
class ScalarSpec:
    """One scalar: its type (``int``, ``float``, ``str`` or ``bool``) and range (inclusive)."""

    type: type
    low: float | None = None
    high: float | None = None
    optional: bool = False

    def check(self, name: str, value: object) -> None:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if self.type is float:
            fits = number
        elif self.type is int:
            fits = number and isinstance(value, int)
        else:
            fits = isinstance(value, self.type)
        if not fits:
            got, want = type(value).__name__, self.type.__name__
            raise UplinkRejected("scalar-type", f"scalar {name!r} is {got}, expected {want}")
        if number:
            assert isinstance(value, (int, float))
            too_low = self.low is not None and value < self.low
            too_high = self.high is not None and value > self.high
            if not math.isfinite(value) or too_low or too_high:
                raise UplinkRejected("out-of-range", f"scalar {name!r} = {value}, allowed [{self.low}, {self.high}]")


@dataclass(frozen=True)
class MessageSchema:
    """One kind of payload a client may send: exactly these arrays and scalars (optional ones may be
    absent; nothing else may be present)."""

    kind: str
    arrays: Mapping[str, ArraySpec] = field(default_factory=dict)
    scalars: Mapping[str, ScalarSpec] = field(default_factory=dict)

    def check(self, payload: Payload) -> None:
        _check_names("array", payload.arrays, self.arrays)
        _check_names("scalar", payload.scalars, self.scalars)
        for name, array in payload.arrays.items():
            self.arrays[name].check(name, array)
        for name, value in payload.scalars.items():
            self.scalars[name].check(name, value)
        self._check_lengths(payload)

    def _check_lengths(self, payload: Payload) -> None:
        """Every named axis agrees with the others of its name, and with the int scalar of its name."""
        lengths: dict[str, tuple[str, int]] = {}
        for name, value in payload.scalars.items():
            if isinstance(value, int) and not isinstance(value, bool):
                lengths[name] = (f"scalar {name!r}", value)
        for name, array in payload.arrays.items():
            for axis, want in enumerate(self.arrays[name].shape):
                if not isinstance(want, str):
                    continue
                got = array.shape[axis]
                where, length = lengths.setdefault(want, (f"array {name!r}", got))
                if got != length:
                    raise UplinkRejected("shape", f"array {name!r} has {want} = {got}, {where} says {length}")


def _check_names(
    what: str, present: Mapping[str, object], specs: Mapping[str, ArraySpec] | Mapping[str, ScalarSpec]
) -> None:
    missing = [name for name, spec in specs.items() if name not in present and not spec.optional]
    if missing:
        raise UplinkRejected(f"missing-{what}", f"no {what} {missing[0]!r}")
    unexpected = [name for name in present if name not in specs]
    if unexpected:
        raise UplinkRejected(f"unexpected-{what}", f"{what} {unexpected[0]!r} is not part of this message")


def check_payload(payload: Payload, schemas: Sequence[MessageSchema]) -> None:
    """``payload`` fits the schema of its kind among ``schemas`` (raises :class:`UplinkRejected`)."""
    for schema in schemas:
        if schema.kind == payload.kind:
            schema.check(payload)
            return
    if not schemas:
        raise UplinkRejected("wrong-kind", f"a payload of kind {payload.kind!r}; this client sends nothing here")
    expected = ", ".join(repr(s.kind) for s in schemas)
    raise UplinkRejected("wrong-kind", f"a payload of kind {payload.kind!r}; this client sends {expected}")


def knowledge(shape: tuple[Axis, ...], dtypes: tuple[str, ...] = ("float32",)) -> ArraySpec:
    """Logits, soft targets or features: finite and within ``KNOWLEDGE_BOUND``."""
    return ArraySpec(dtypes, shape, -KNOWLEDGE_BOUND, KNOWLEDGE_BOUND)


def counts(shape: tuple[Axis, ...], dtypes: tuple[str, ...] = ("int64",)) -> ArraySpec:
    """Per-label sample counts: whole numbers in [0, COUNT_MAX]."""
    return ArraySpec(dtypes, shape, 0, COUNT_MAX)


def sample_ids(owned: np.ndarray, dtypes: tuple[str, ...] = ("int32", "int64"), length: Axis = None) -> ArraySpec:
    """Sample ids, each one of ``owned`` (the client's own, as its hello declared them), none twice."""
    return ArraySpec(dtypes, (length,), members=np.unique(np.asarray(owned)), unique=True)


def labels(num_classes: int, dtypes: tuple[str, ...] = ("uint8", "int32", "int64"), length: Axis = None) -> ArraySpec:
    """Class labels in [0, num_classes)."""
    return ArraySpec(dtypes, (length,), 0, num_classes - 1)


def model_state(state: Mapping[str, np.ndarray]) -> dict[str, ArraySpec]:
    """A model's weights: exactly these names, dtypes and shapes; floats within ``WEIGHT_BOUND``,
    integer buffers (BatchNorm's batch counter) at least 0."""
    specs = {}
    for name, array in state.items():
        if array.dtype.kind == "f":
            specs[name] = ArraySpec((array.dtype.name,), tuple(array.shape), -WEIGHT_BOUND, WEIGHT_BOUND)
        else:
            specs[name] = ArraySpec((array.dtype.name,), tuple(array.shape), 0, None)
    return specs


def samples(low: int = 0) -> ScalarSpec:
    """A sample count the client declares."""
    return ScalarSpec(int, low, COUNT_MAX)


def message_bound(schemas: Sequence[MessageSchema]) -> int | None:
    """An upper bound on the encoded size of any payload that fits one of ``schemas`` (None when a
    size is open: an axis of unknown length, or none of them), so that a receiver can refuse a
    bigger message before it buffers it: FD's uplink is bounded by a few hundred bytes, not by
    --max-message-bytes. Counts the codec's header, the kind, every
    scalar at its largest, and every array at its widest dtype plus int8's per-row scales."""
    if not schemas:
        return None
    bounds = []
    for message in schemas:
        size = HEADER_SIZE + len(message.kind)
        for name, scalar in message.scalars.items():
            size += 2 + len(name.encode()) + (2 + MAX_STR_SCALAR_LEN if scalar.type is str else 8)
        for name, array in message.arrays.items():
            fixed = [d for d in array.shape if isinstance(d, int)]
            if len(fixed) < len(array.shape):
                return None
            elements = math.prod(fixed)
            widest = max(np.dtype(dtype).itemsize for dtype in array.dtypes)
            rows = elements // fixed[-1] if fixed and fixed[-1] else 1
            size += ARRAY_ENTRY.size + len(name.encode()) + 4 * len(array.shape) + elements * widest + 4 * rows
        bounds.append(size)
    return max(bounds)


class DeclaredCounts:
    """What each client first declared about its data (its sample number, its label counts). A
    client's data does not change during a run, so a later uplink that declares other numbers is
    refused (``counts-changed``): a client cannot raise its weight in an average once it has joined.
    (A client that lies from its first uplink on is what the robust aggregators are for.)"""

    def __init__(self) -> None:
        self.first: dict[str, dict[str, np.ndarray]] = {}

    def check(self, client_id: str, **declared: object) -> None:
        values = {name: np.array(value) for name, value in declared.items()}
        first = self.first.setdefault(client_id, values)
        for name, value in values.items():
            if not np.array_equal(first[name], value):
                raise UplinkRejected("counts-changed", f"{name} is not what this client declared first")
