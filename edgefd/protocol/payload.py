"""The typed payload: a method's content, named numpy arrays plus small scalars, with a kind.

Who sent it, to whom and in which round is the :class:`~edgefd.protocol.message.Message`'s to say (its
metadata), never the content's: a payload is the same bytes whoever carries it, whenever.

A :class:`Payload` validates itself on construction (and again when encoded, in case it was
mutated), raising :class:`~edgefd.protocol.errors.PayloadError` with the offending field named.
The limits below are part of the wire format: the decoder enforces the same ones.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Union

import numpy as np

from .errors import PayloadError

__all__ = [
    "Payload",
    "Scalar",
    "DTYPE_CODES",
    "CODE_DTYPES",
    "FLOAT_DTYPES",
    "PRECISIONS",
    "NONFINITE_OK_KINDS",
    "finite_required",
    "MAX_KIND_LEN",
    "MAX_SENDER_LEN",
    "MAX_NAME_LEN",
    "MAX_RANK",
    "MAX_ARRAYS",
    "MAX_SCALARS",
    "MAX_STR_SCALAR_LEN",
    "MAX_ELEMENTS",
    "MAX_DIM",
    "ROUND_MIN",
    "ROUND_MAX",
]

Scalar = Union[bool, int, float, str]  # noqa: UP007 (a runtime alias, used in isinstance)

#: kind: 1..32 ASCII characters, lowercase letter first, then ``[a-z0-9_.-]``.
MAX_KIND_LEN = 32
_KIND_RE = re.compile(r"[a-z][a-z0-9_.\-]*\Z")
#: a message's sender, receiver and run name: 1..64 bytes of UTF-8, no control characters.
MAX_SENDER_LEN = 64
#: array and scalar names: 1..64 bytes of UTF-8, no control characters.
MAX_NAME_LEN = 64
#: the control characters refused in a message's names and a payload's array and scalar names: C0,
#: DEL and C1 (one search, not a loop per character).
_CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f]")
MAX_RANK = 8
#: one dimension is a u32 on the wire.
MAX_DIM = 2**32 - 1
#: product of the non-zero dimensions of one array (numpy refuses far larger shapes even when empty).
MAX_ELEMENTS = 2**40
MAX_ARRAYS = 65535
MAX_SCALARS = 65535
#: a string scalar: at most this many bytes of UTF-8 (u16 length on the wire).
MAX_STR_SCALAR_LEN = 65535
#: a message's round is an i32 on the wire; -1 means "not in a round" (config, status).
ROUND_MIN = -1
ROUND_MAX = 2**31 - 1
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1

#: wire dtype codes (the dtype the receiver gets back).
DTYPE_CODES: dict[np.dtype, int] = {
    np.dtype(np.float32): 1,
    np.dtype(np.float16): 2,
    np.dtype(np.float64): 3,
    np.dtype(np.int8): 4,
    np.dtype(np.uint8): 5,
    np.dtype(np.int32): 6,
    np.dtype(np.int64): 7,
    np.dtype(np.bool_): 8,
}
CODE_DTYPES: dict[int, np.dtype] = {code: dt for dt, code in DTYPE_CODES.items()}
FLOAT_DTYPES = frozenset({np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)})
#: per-array wire precisions a float array may ask for (absent = lossless, the array's own dtype).
PRECISIONS = ("fp32", "fp16", "int8")

#: Kinds whose payloads may carry NaN/Inf. Every other kind (logits, knowledge, weights, features,
#: and any kind a method invents) is rejected on decode if a float array or float scalar is not
#: finite. Default-deny on purpose: a new kind is protected without anyone remembering to add it.
#: ``decode(..., allow_nonfinite=True/False)`` overrides per call.
NONFINITE_OK_KINDS: frozenset[str] = frozenset({"metrics", "status"})


def finite_required(kind: str) -> bool:
    """True if payloads of ``kind`` must carry only finite floats (see :data:`NONFINITE_OK_KINDS`)."""
    return kind not in NONFINITE_OK_KINDS


# ---------------------------------------------------------------- shared checks (encode and decode)
# Each returns an error message or None, so the encoder can raise PayloadError and the decoder
# MalformedError with the same words.


def _kind_problem(kind: object) -> str | None:
    if not isinstance(kind, str):
        return f"kind must be str, got {type(kind).__name__}"
    if not 1 <= len(kind) <= MAX_KIND_LEN:
        return f"kind must be 1..{MAX_KIND_LEN} characters, got {len(kind)}"
    if not kind.isascii() or not _KIND_RE.match(kind):
        return f"kind {kind!r} must match [a-z][a-z0-9_.-]*"
    return None


def _text_problem(what: str, value: object, max_len: int) -> str | None:
    if not isinstance(value, str):
        return f"{what} must be str, got {type(value).__name__}"
    try:
        n = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return f"{what} {value!r} is not encodable as UTF-8"
    if not 1 <= n <= max_len:
        return f"{what} must be 1..{max_len} bytes of UTF-8, got {n}"
    if _CONTROL_RE.search(value):
        return f"{what} {value!r} contains control characters"
    return None


def _shape_problem(what: str, shape: tuple[int, ...]) -> str | None:
    if len(shape) > MAX_RANK:
        return f"{what}: rank must be <= {MAX_RANK}, got {len(shape)}"
    for d in shape:
        if d > MAX_DIM:
            return f"{what}: dimension must be <= {MAX_DIM}, got {d}"
    if math.prod(d for d in shape if d) > MAX_ELEMENTS:
        return f"{what}: shape {shape} exceeds {MAX_ELEMENTS} elements"
    return None


def _normalise_scalar(name: str, value: object) -> Scalar:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        v = int(value)
        if not _I64_MIN <= v <= _I64_MAX:
            raise PayloadError(f"scalar {name!r}: int {v} does not fit int64", field=name)
        return v
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, str):
        try:
            n = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise PayloadError(f"scalar {name!r}: string is not encodable as UTF-8", field=name) from None
        if n > MAX_STR_SCALAR_LEN:
            raise PayloadError(
                f"scalar {name!r}: string must be <= {MAX_STR_SCALAR_LEN} bytes of UTF-8, got {n}",
                field=name,
            )
        return value
    raise PayloadError(f"scalar {name!r}: type must be bool, int, float or str, got {type(value).__name__}", field=name)


@dataclass(eq=False)
class Payload:
    """The content of one message between a client and the server (a method's, or the runtime's).

    Construction validates every field (raising :class:`PayloadError`); the dicts are copied, the
    arrays are not. Compare payloads with :meth:`same_as`, not ``==``.
    """

    kind: str
    """Short ASCII name of what this is: "hello", "logits", "knowledge", "weights", "features",
    "ack", ... (1..32 chars, ``[a-z][a-z0-9_.-]*``). Decides the non-finite policy on decode."""
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    """Named arrays; dtypes float32/16/64, int8, uint8, int32, int64, bool; rank <= 8."""
    scalars: dict[str, Scalar] = field(default_factory=dict)
    """Small named values: bool, int (int64), float (float64) or str (<= 65535 bytes)."""
    precision: dict[str, str] = field(default_factory=dict)
    """Per-array wire precision for float arrays: "fp32", "fp16" or "int8" (symmetric, one float32
    scale per row = last axis). Absent means lossless (the array's own dtype). Decoding gives back
    the array's own dtype in every case; after decode this records the precision it travelled at."""

    def __post_init__(self) -> None:
        for what in ("arrays", "scalars", "precision"):
            value = getattr(self, what)
            try:
                setattr(self, what, dict(value))
            except (TypeError, ValueError):
                # e.g. the version-1 call Payload(kind, sender, round, arrays): "c1" lands in arrays
                raise PayloadError(
                    f"{what} must be a dict, got {type(value).__name__} (Payload(kind, arrays, scalars, "
                    "precision): a payload has no sender or round, those are its Message's)",
                    field=what,
                ) from None
        self.validate()

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Check every field; raises :class:`PayloadError`. Normalises numpy scalars in place."""
        problem = _kind_problem(self.kind)
        if problem:
            raise PayloadError(problem, field="kind")
        if not isinstance(self.arrays, dict) or not isinstance(self.scalars, dict):
            raise PayloadError("arrays and scalars must be dicts", field="arrays")
        if len(self.arrays) > MAX_ARRAYS:
            raise PayloadError(f"at most {MAX_ARRAYS} arrays, got {len(self.arrays)}", field="arrays")
        if len(self.scalars) > MAX_SCALARS:
            raise PayloadError(f"at most {MAX_SCALARS} scalars, got {len(self.scalars)}", field="scalars")
        for name, arr in self.arrays.items():
            problem = _text_problem("array name", name, MAX_NAME_LEN)
            if problem:
                raise PayloadError(problem, field="arrays")
            if isinstance(arr, np.generic):
                arr = self.arrays[name] = np.asarray(arr)
            if not isinstance(arr, np.ndarray):
                raise PayloadError(f"array {name!r}: must be numpy.ndarray, got {type(arr).__name__}", field=name)
            if np.dtype(arr.dtype.type) not in DTYPE_CODES or arr.dtype.fields is not None:
                allowed = ", ".join(str(d) for d in DTYPE_CODES)
                raise PayloadError(f"array {name!r}: dtype {arr.dtype} not supported ({allowed})", field=name)
            problem = _shape_problem(f"array {name!r}", tuple(arr.shape))
            if problem:
                raise PayloadError(problem, field=name)
        for name in list(self.scalars):
            problem = _text_problem("scalar name", name, MAX_NAME_LEN)
            if problem:
                raise PayloadError(problem, field="scalars")
            self.scalars[name] = _normalise_scalar(name, self.scalars[name])
        if not isinstance(self.precision, dict):
            raise PayloadError("precision must be a dict", field="precision")
        for name, prec in self.precision.items():
            if name not in self.arrays:
                raise PayloadError(f"precision given for unknown array {name!r}", field="precision")
            if prec not in PRECISIONS:
                raise PayloadError(f"array {name!r}: precision must be one of {PRECISIONS}, got {prec!r}", field=name)
            if np.dtype(self.arrays[name].dtype.type) not in FLOAT_DTYPES:
                raise PayloadError(
                    f"array {name!r}: precision {prec!r} applies to float arrays only, "
                    f"dtype is {self.arrays[name].dtype}",
                    field=name,
                )

    # ------------------------------------------------------------------ helpers
    def with_precision(self, precision: str | None, names: Iterable[str] | None = None) -> Payload:
        """A copy whose float arrays (all, or those in ``names``) travel at ``precision``
        ("fp32", "fp16", "int8", or None for lossless). Non-float arrays are left alone."""
        new = dict(self.precision)
        targets = self.arrays if names is None else list(names)
        for name in targets:
            if name not in self.arrays:
                raise PayloadError(f"with_precision: unknown array {name!r}", field="precision")
            if np.dtype(self.arrays[name].dtype.type) not in FLOAT_DTYPES:
                if names is None:
                    continue
                raise PayloadError(f"with_precision: array {name!r} is not a float array", field=name)
            if precision is None:
                new.pop(name, None)
            else:
                new[name] = precision
        return Payload(self.kind, self.arrays, self.scalars, new)

    @property
    def array_bytes(self) -> int:
        """Bytes of the arrays in memory (their own dtypes), not on the wire."""
        return sum(int(a.nbytes) for a in self.arrays.values())

    def same_as(self, other: Payload, *, rtol: float = 0.0, atol: float = 0.0) -> bool:
        """Field-by-field comparison (arrays: same names, dtypes, shapes; values within tolerance,
        NaNs equal). ``precision`` is not compared."""
        if not isinstance(other, Payload):
            return False
        if self.kind != other.kind:
            return False
        if list(self.arrays) != list(other.arrays) or set(self.scalars) != set(other.scalars):
            return False
        for name, a in self.scalars.items():
            b = other.scalars[name]
            if type(a) is not type(b):
                return False
            if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
                continue
            if a != b:
                return False
        for name, x in self.arrays.items():
            y = other.arrays[name]
            if np.dtype(x.dtype.type) != np.dtype(y.dtype.type) or x.shape != y.shape:
                return False
            if np.dtype(x.dtype.type) in FLOAT_DTYPES:
                if not np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True):
                    return False
            elif not np.array_equal(x, y):
                return False
        return True
