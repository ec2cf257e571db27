"""The one binary codec: ``encode(payload) -> bytes`` and ``decode(data) -> Payload``.

The bytes ``encode`` returns are the bytes that are sent and counted; nothing is added around them
(chunking, when a transport needs it, is :mod:`edgefd.protocol.chunking`, and its frames are what
is counted then).

Wire format, version 2
======================

A payload is content only: who sent it, to whom and in which round is its message's metadata
(:mod:`edgefd.protocol.message`). Version 1 also carried a sender and a round; a version-1 payload
is refused with a ``VersionError`` that names both versions.

All integers are little-endian and unsigned unless marked ``i``; ``struct`` formats are given
so a decoder in another language can be written from this table alone.

Fixed header: 27 bytes, ``struct "<4sHHBHIQI"``

====== ==== ====== ============ ==============================================================
offset size type   field        meaning
====== ==== ====== ============ ==============================================================
0      4    4s     magic        ``b"EFD1"``
4      2    u16    version      2
6      2    u16    flags        0; version 2 defines no flag (any set bit: ``VersionError``)
8      1    u8     kind_len     1..32
9      2    u16    n_scalars    number of scalar table entries
11     4    u32    n_arrays     number of array table entries, <= 65535
15     8    u64    body_len     bytes after the header; the payload is exactly 27 + body_len
23     4    u32    crc32        ``zlib.crc32`` of bytes [0, 23) followed by bytes [27, end):
                                every byte of the payload except this field
====== ==== ====== ============ ==============================================================

Body, back to back with no padding:

1. ``kind``: kind_len bytes of ASCII, ``[a-z][a-z0-9_.-]*``.
2. Scalar table, n_scalars entries, each:

   ====== ======= ==================================================================
   size   type    field
   ====== ======= ==================================================================
   1      u8      name_len (1..64)
   1      u8      type: 1 = int64, 2 = float64, 3 = bool, 4 = string
   n      bytes   name, UTF-8, unique among scalars
   8/8/1  i64/f64 value for int64 / float64 / bool (one byte, 0 or 1)
   2 + m  u16     for string: byte length m (<= 65535), then m bytes of UTF-8
   ====== ======= ==================================================================

3. Array table, n_arrays entries, each ``struct "<BBBBQQ"`` (20 bytes), then name, then dims:

   ====== ======= ==================================================================
   offset type    field
   ====== ======= ==================================================================
   0      u8      name_len (1..64)
   1      u8      dtype code of the decoded array: 1 float32, 2 float16, 3 float64,
                  4 int8, 5 uint8, 6 int32, 7 int64, 8 bool
   2      u8      encoding code (below)
   3      u8      rank (0..8)
   4      u64     data_offset, from the start of the data region
   12     u64     data_len in bytes
   20     bytes   name (name_len bytes UTF-8, unique among arrays)
   20+n   u32     rank dims, C order; product of the non-zero dims <= 2**40
   ====== ======= ==================================================================

4. Data region: every array's data in table order, contiguous: the first data_offset is 0, each
   next one is the previous offset + data_len, and the last array ends at the end of the body.

Encodings (``N`` = number of elements, 1 for rank 0; ``R`` = rows = product of all dims but the
last, 1 for rank 0; a row is the last axis):

==== ====== ====================================== =========================================
code name   data_len / layout                      allowed for dtype
==== ====== ====================================== =========================================
0    raw    N * itemsize, the dtype's own bytes    all (bool: one byte per element, 0 or 1)
1    fp16   N * 2, IEEE binary16                   float32, float64
2    fp32   N * 4, IEEE binary32                   float64
3    int8   R * 4 float32 scales, then N int8      float16, float32, float64
==== ====== ====================================== =========================================

The int8 encoding is symmetric per-row quantisation: ``scale = max|row| / 127`` (float32), ``q =
round(x / scale)`` clipped to [-127, 127], decoded value ``q * scale`` (0 for a zero row, whose scale
is 0). A row holding NaN or Inf travels with scale NaN and decodes to all-NaN; a negative or infinite
scale is malformed. Whatever the encoding, the decoded array has the table's dtype.

Decoding checks, in this order, and raises (all subclasses of :class:`ProtocolError`):
``OversizedError`` (buffer above ``max_bytes``), ``MagicError``, ``TruncatedError`` (shorter than the
header), ``VersionError`` (version or flags), ``OversizedError`` (claimed size above ``max_bytes``),
``TruncatedError`` / ``MalformedError`` (buffer shorter / longer than 27 + body_len),
``ChecksumError``, then ``MalformedError`` for any header field or body content out of its rules, then
``NonFiniteError`` if the kind forbids NaN/Inf (see :data:`NONFINITE_OK_KINDS`). Sizes claimed by
the header or table are compared with the buffer before anything is allocated from them.

One module over 500 lines, a seventh of them the table above: the wire format stays in one place, its
specification beside the encoder and the decoder that are its two readings (the decoder checks in
the order the table gives).
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from .errors import (
    ChecksumError,
    MagicError,
    MalformedError,
    NonFiniteError,
    OversizedError,
    PayloadError,
    TruncatedError,
    VersionError,
)
from .payload import (
    CODE_DTYPES,
    DTYPE_CODES,
    FLOAT_DTYPES,
    MAX_ARRAYS,
    MAX_KIND_LEN,
    MAX_NAME_LEN,
    MAX_RANK,
    Payload,
    Scalar,
    _kind_problem,
    _shape_problem,
    _text_problem,
    finite_required,
)

__all__ = [
    "MAGIC",
    "VERSION",
    "HEADER",
    "HEADER_SIZE",
    "ARRAY_ENTRY",
    "DEFAULT_MAX_BYTES",
    "ENC_RAW",
    "ENC_FP16",
    "ENC_FP32",
    "ENC_INT8",
    "Header",
    "encode",
    "decode",
    "encoded_size",
    "read_header",
    "quantise_int8",
    "dequantise_int8",
]

MAGIC = b"EFD1"
VERSION = 2
HEADER = struct.Struct("<4sHHBHIQI")
HEADER_SIZE = HEADER.size  # 27
_CRC_OFFSET = HEADER_SIZE - 4
ARRAY_ENTRY = struct.Struct("<BBBBQQ")  # 20 bytes, followed by name and rank * u32 dims
_SCALAR_ENTRY = struct.Struct("<BB")
_U16 = struct.Struct("<H")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
#: decode() refuses buffers above this many bytes unless told otherwise.
DEFAULT_MAX_BYTES = 256 * 1024 * 1024

ENC_RAW, ENC_FP16, ENC_FP32, ENC_INT8 = 0, 1, 2, 3
_ENC_NAMES = {ENC_RAW: None, ENC_FP16: "fp16", ENC_FP32: "fp32", ENC_INT8: "int8"}
_SC_INT, _SC_FLOAT, _SC_BOOL, _SC_STR = 1, 2, 3, 4
_F16, _F32, _F64_DT = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
#: encodings other than raw that a dtype may use (canonical: never a wire type as wide as the dtype)
_ALLOWED_ENC = {_F16: {ENC_INT8}, _F32: {ENC_FP16, ENC_INT8}, _F64_DT: {ENC_FP16, ENC_FP32, ENC_INT8}}


class Header(NamedTuple):
    """The fixed header fields, as read by :func:`read_header`."""

    magic: bytes
    version: int
    flags: int
    kind_len: int
    n_scalars: int
    n_arrays: int
    body_len: int
    crc32: int


# ====================================================================== helpers shared by both ends
def _base(dt: np.dtype) -> np.dtype:
    return np.dtype(dt.type)


def _rows_cols(shape: tuple[int, ...]) -> tuple[int, int]:
    if not shape:
        return 1, 1
    return math.prod(shape[:-1]), shape[-1]


def _encoding_for(dt: np.dtype, prec: str | None) -> int:
    if prec is None:
        return ENC_RAW
    if prec == "int8":
        return ENC_INT8
    if prec == "fp16":
        return ENC_RAW if dt == _F16 else ENC_FP16
    # "fp32"
    return ENC_FP32 if dt == _F64_DT else ENC_RAW


def _data_len(dt: np.dtype, enc: int, shape: tuple[int, ...]) -> int:
    n = math.prod(shape)
    if enc == ENC_RAW:
        return n * dt.itemsize
    if enc == ENC_FP16:
        return 2 * n
    if enc == ENC_FP32:
        return 4 * n
    rows, _ = _rows_cols(shape)
    return 4 * rows + n


QUANTISE_BLOCK_ELEMENTS = 1 << 20
"""Elements quantised at a time: the float64 arithmetic's temporaries stay a few MB where the
whole array's would be several times its size (FedICT's 312 MB of features needed 3 GB)."""


def quantise_int8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-row int8 quantisation (row = last axis; a rank-0 array is one row).

    Returns ``(scales, q)``: float32 scales of shape ``(R,)`` and int8 ``q`` of shape ``(R, C)``.
    ``scale = max|row| / 127``; zero rows get scale 0; rows holding NaN/Inf get scale NaN and q 0.
    Raises :class:`PayloadError` if a finite row's scale overflows float32. Rows are independent,
    so they are quantised a block at a time (see ``QUANTISE_BLOCK_ELEMENTS``).
    """
    rows, cols = _rows_cols(tuple(x.shape))
    matrix = np.asarray(x).reshape(rows, cols)
    scales = np.empty(rows, dtype=np.float32)
    q = np.zeros((rows, cols), dtype=np.int8)
    step = max(1, QUANTISE_BLOCK_ELEMENTS // max(cols, 1))
    for start in range(0, rows, step):
        block = slice(start, start + step)
        scales[block] = _quantise_rows(matrix[block], q[block])
    return scales, q


def _quantise_rows(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """`quantise_int8` of the rows ``x`` (R, C): writes ``q`` and returns the scales."""
    rows, cols = x.shape
    xf = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        finite = np.isfinite(xf).all(axis=1) if cols else np.ones(rows, dtype=bool)
        amax = np.abs(xf).max(axis=1) if cols else np.zeros(rows)
        scales = (amax / 127.0).astype(np.float32)
    if np.any(finite & ~np.isfinite(scales)):
        raise PayloadError("int8 scale overflows float32 (|x| > 4.3e40)")
    scales[~finite] = np.nan
    ok = finite & (scales > 0)
    if ok.any():
        s = scales[ok].astype(np.float64)[:, None]
        q[ok] = np.clip(np.rint(xf[ok] / s), -127, 127).astype(np.int8)
    return scales


def _overflows(x: np.ndarray, narrowed: np.ndarray) -> tuple[int, float]:
    """How many finite values of ``x`` are infinite in ``narrowed`` (``x`` in a narrower float
    type, the same shape), and the largest ``|x|`` among them (0 if none). A block of rows at a
    time, as :func:`quantise_int8`: the whole array's masks at once made 128 MiB of float32 cost
    129 MiB more to encode as fp16, not 68 (FedICT's features are 312 MB)."""
    rows, cols = _rows_cols(tuple(x.shape))
    wide, narrow = np.asarray(x).reshape(rows, cols), narrowed.reshape(rows, cols)
    step = max(1, QUANTISE_BLOCK_ELEMENTS // max(cols, 1))
    count, biggest = 0, 0.0
    for start in range(0, rows, step):
        block = slice(start, start + step)
        with np.errstate(all="ignore"):
            over = np.isinf(narrow[block]) & np.isfinite(wide[block])
        if over.any():
            count += int(over.sum())
            biggest = max(biggest, float(np.max(np.abs(np.asarray(wide[block], dtype=np.float64)[over]))))
    return count, biggest


def dequantise_int8(scales: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``q * scale`` per row, float32, shape ``(R, C)`` (inverse of :func:`quantise_int8`)."""
    with np.errstate(all="ignore"):
        return q.astype(np.float32) * scales.astype(np.float32)[:, None]


# ====================================================================== encode
def _plan(payload: Payload) -> list[tuple[bytes, np.ndarray, np.dtype, int, int]]:
    """(name bytes, array, base dtype, encoding, data_len) per array, in order."""
    plan = []
    for name, arr in payload.arrays.items():
        dt = _base(arr.dtype)
        enc = _encoding_for(dt, payload.precision.get(name))
        plan.append((name.encode("utf-8"), arr, dt, enc, _data_len(dt, enc, tuple(arr.shape))))
    return plan


def _scalar_bytes(name: str, value: Scalar) -> bytes:
    nb = name.encode("utf-8")
    if isinstance(value, bool):
        return _SCALAR_ENTRY.pack(len(nb), _SC_BOOL) + nb + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return _SCALAR_ENTRY.pack(len(nb), _SC_INT) + nb + _I64.pack(value)
    if isinstance(value, float):
        return _SCALAR_ENTRY.pack(len(nb), _SC_FLOAT) + nb + _F64.pack(value)
    sb = value.encode("utf-8")
    return _SCALAR_ENTRY.pack(len(nb), _SC_STR) + nb + _U16.pack(len(sb)) + sb


def _scalar_size(name: str, value: Scalar) -> int:
    n = 2 + len(name.encode("utf-8"))
    if isinstance(value, bool):
        return n + 1
    if isinstance(value, (int, float)):
        return n + 8
    return n + 2 + len(value.encode("utf-8"))


def encoded_size(payload: Payload) -> int:
    """Exact ``len(encode(payload))``, computed from the layout without encoding the data."""
    payload.validate()
    size = HEADER_SIZE + len(payload.kind)
    size += sum(_scalar_size(k, v) for k, v in payload.scalars.items())
    for nb, arr, _dt, _enc, dlen in _plan(payload):
        size += ARRAY_ENTRY.size + len(nb) + 4 * arr.ndim + dlen
    return size


def _wire_data(name: str, arr: np.ndarray, dt: np.dtype, enc: int) -> list:
    """Little-endian contiguous buffers for one array's data region."""
    if enc == ENC_RAW:
        wire = np.dtype(np.uint8) if dt == np.dtype(np.bool_) else dt.newbyteorder("<")
        a = np.ascontiguousarray(arr, dtype=wire)
        return [a.reshape(-1).view(np.uint8)]
    if enc in (ENC_FP16, ENC_FP32):
        wire_dt = np.dtype("<f2") if enc == ENC_FP16 else np.dtype("<f4")
        with np.errstate(all="ignore"):
            a = np.ascontiguousarray(arr, dtype=wire_dt)
        overflows, biggest = _overflows(arr, a)
        if overflows:
            label = _ENC_NAMES[enc]
            raise PayloadError(
                f"array {name!r}: {overflows} finite values overflow {label} "
                f"(largest |x| = {biggest:g}); use a wider precision",
                field=name,
            )
        return [a.reshape(-1).view(np.uint8)]
    try:
        scales, q = quantise_int8(arr)
    except PayloadError as e:
        raise PayloadError(f"array {name!r}: {e}", field=name) from None
    return [scales.astype("<f4").view(np.uint8), q.reshape(-1).view(np.uint8)]


def encode(payload: Payload) -> bytes:
    """Serialise ``payload`` (validated first; raises :class:`PayloadError`). See the module doc."""
    return b"".join(encode_buffers(payload))


def encode_buffers(payload: Payload) -> list:
    """:func:`encode` as a list of buffers whose concatenation is its bytes, without that
    concatenation: the arrays' data are views of the arrays where their dtype is the wire's, so a
    sender that cuts the message into frames (:func:`~edgefd.protocol.split`) never holds the
    encoded message whole beside its frames (a 328 MB upload would need 656 MB)."""
    if not isinstance(payload, Payload):
        raise TypeError(f"encode() takes a Payload, got {type(payload).__name__}")
    payload.validate()
    kind_b = payload.kind.encode("ascii")
    parts: list = [kind_b]
    parts.extend(_scalar_bytes(k, v) for k, v in payload.scalars.items())
    plan = _plan(payload)
    offset = 0
    for nb, arr, dt, enc, dlen in plan:
        parts.append(ARRAY_ENTRY.pack(len(nb), DTYPE_CODES[dt], enc, arr.ndim, offset, dlen))
        parts.append(nb)
        parts.append(struct.pack(f"<{arr.ndim}I", *arr.shape))
        offset += dlen
    for nb, arr, dt, enc, _dlen in plan:
        parts.extend(_wire_data(nb.decode("utf-8"), arr, dt, enc))
    body_len = sum(memoryview(p).nbytes for p in parts)
    prefix = HEADER.pack(
        MAGIC,
        VERSION,
        0,
        len(kind_b),
        len(payload.scalars),
        len(payload.arrays),
        body_len,
        0,
    )[:_CRC_OFFSET]
    crc = zlib.crc32(prefix)
    for p in parts:
        crc = zlib.crc32(p, crc)
    return [prefix + struct.pack("<I", crc), *parts]


# ====================================================================== decode
def _as_bytes_view(data: object) -> memoryview:
    try:
        mv = memoryview(data)  # type: ignore[arg-type]  # any object: a non-buffer raises TypeError here
    except TypeError:
        raise TypeError(f"expected a bytes-like object, got {type(data).__name__}") from None
    if mv.ndim != 1 or mv.itemsize != 1 or mv.format not in ("B", "b", "c"):
        mv = mv.cast("B")  # raises TypeError for non-contiguous buffers
    return mv


def _check_magic(mv: memoryview, magic: bytes, what: str, other: dict[bytes, str]) -> None:
    head = bytes(mv[: len(magic)])
    if head != magic[: len(head)]:
        hint = ""
        for m, advice in other.items():
            if head == m:
                hint = f" ({advice})"
        raise MagicError(f"{what} magic: expected {magic!r}, got {head!r}{hint}", field="magic")


def read_header(data: bytes | bytearray | memoryview) -> Header:
    """Parse and check the fixed header only (magic, length, version, flags): cheap routing by
    kind without decoding the body. The CRC is *not* checked here."""
    mv = _as_bytes_view(data)
    _check_magic(mv, MAGIC, "payload", {b"EFC1": "this is a chunk frame: feed it to a Reassembler"})
    if len(mv) < HEADER_SIZE:
        raise TruncatedError(f"header: expected {HEADER_SIZE} bytes, got {len(mv)}", field="header")
    h = Header(*HEADER.unpack_from(mv, 0))
    if h.version != VERSION:
        raise VersionError(f"version: this decoder supports {VERSION}, got {h.version}", field="version")
    if h.flags != 0:
        raise VersionError(f"flags: version {VERSION} defines no flags, got 0x{h.flags:04x}", field="flags")
    return h


class _Cursor:
    """Reads forward through the body; running past its end is a MalformedError."""

    def __init__(self, mv: memoryview, pos: int, end: int) -> None:
        self.mv, self.pos, self.end = mv, pos, end

    def take(self, n: int, what: str) -> memoryview:
        if n > self.end - self.pos:
            raise MalformedError(
                f"{what}: needs {n} bytes at body offset {self.pos - HEADER_SIZE}, "
                f"only {self.end - self.pos} left in the body",
                field=what,
            )
        out = self.mv[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, st: struct.Struct, what: str) -> tuple:
        return st.unpack(self.take(st.size, what))


def _text(raw: memoryview, what: str, max_len: int) -> str:
    try:
        s = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedError(f"{what}: invalid UTF-8 ({e.reason} at byte {e.start})", field=what) from None
    problem = _text_problem(what, s, max_len)
    if problem:
        raise MalformedError(problem, field=what)
    return s


def decode(
    data: bytes | bytearray | memoryview,
    *,
    max_bytes: int | None = DEFAULT_MAX_BYTES,
    allow_nonfinite: bool | None = None,
) -> Payload:
    """Parse and check one encoded payload; the arrays returned are owned, writable, native-endian.

    ``max_bytes``: refuse messages above this size (None: no limit).
    ``allow_nonfinite``: None follows the kind (:func:`finite_required`); True/False overrides.
    Raises a :class:`ProtocolError` subclass for anything wrong, :class:`TypeError` if ``data`` is
    not bytes-like.
    """
    mv = _as_bytes_view(data)
    n = len(mv)
    if max_bytes is not None and n > max_bytes:
        raise OversizedError(f"payload: {n} bytes exceeds max_bytes={max_bytes}", field="size")
    h = read_header(mv)
    total = HEADER_SIZE + h.body_len
    if max_bytes is not None and total > max_bytes:
        raise OversizedError(
            f"body_len: header claims {total} bytes in all, above max_bytes={max_bytes}",
            field="body_len",
        )
    if n < total:
        raise TruncatedError(f"body_len: header says {total} bytes in all, got {n}", field="body_len")
    if n > total:
        raise MalformedError(
            f"body_len: header says {total} bytes in all, got {n} ({n - total} trailing bytes)",
            field="body_len",
        )
    crc = zlib.crc32(mv[HEADER_SIZE:], zlib.crc32(mv[:_CRC_OFFSET]))
    if crc != h.crc32:
        raise ChecksumError(f"crc32: header says 0x{h.crc32:08x}, computed 0x{crc:08x}", field="crc32")

    # ---- header fields whose range the CRC cannot vouch for
    if not 1 <= h.kind_len <= MAX_KIND_LEN:
        raise MalformedError(f"kind_len: expected 1..{MAX_KIND_LEN}, got {h.kind_len}", field="kind_len")
    if h.n_arrays > MAX_ARRAYS:
        raise MalformedError(f"n_arrays: expected <= {MAX_ARRAYS}, got {h.n_arrays}", field="n_arrays")

    cur = _Cursor(mv, HEADER_SIZE, total)
    kind_raw = bytes(cur.take(h.kind_len, "kind"))
    try:
        kind = kind_raw.decode("ascii")
    except UnicodeDecodeError:
        raise MalformedError(f"kind: not ASCII: {kind_raw!r}", field="kind") from None
    problem = _kind_problem(kind)
    if problem:
        raise MalformedError(problem, field="kind")

    scalars: dict[str, Scalar] = {}
    for i in range(h.n_scalars):
        name_len, typ = cur.unpack(_SCALAR_ENTRY, f"scalar[{i}]")
        if not 1 <= name_len <= MAX_NAME_LEN:
            raise MalformedError(f"scalar[{i}].name_len: expected 1..{MAX_NAME_LEN}, got {name_len}", field="scalars")
        name = _text(cur.take(name_len, f"scalar[{i}].name"), f"scalar[{i}].name", MAX_NAME_LEN)
        if name in scalars:
            raise MalformedError(f"scalar[{i}].name: duplicate name {name!r}", field="scalars")
        what = f"scalar {name!r}"
        if typ == _SC_INT:
            value: Scalar = cur.unpack(_I64, what)[0]
        elif typ == _SC_FLOAT:
            value = cur.unpack(_F64, what)[0]
        elif typ == _SC_BOOL:
            b = cur.take(1, what)[0]
            if b > 1:
                raise MalformedError(f"{what}: bool byte must be 0 or 1, got {b}", field=name)
            value = bool(b)
        elif typ == _SC_STR:
            (slen,) = cur.unpack(_U16, what)
            raw = bytes(cur.take(slen, what))
            try:
                value = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise MalformedError(f"{what}: invalid UTF-8 ({e.reason})", field=name) from None
        else:
            raise MalformedError(f"{what}: type code must be 1..4, got {typ}", field=name)
        scalars[name] = value

    table = []
    names: set[str] = set()
    expected_offset = 0
    for i in range(h.n_arrays):
        name_len, dcode, enc, rank, off, dlen = cur.unpack(ARRAY_ENTRY, f"array[{i}]")
        if not 1 <= name_len <= MAX_NAME_LEN:
            raise MalformedError(f"array[{i}].name_len: expected 1..{MAX_NAME_LEN}, got {name_len}", field="arrays")
        name = _text(cur.take(name_len, f"array[{i}].name"), f"array[{i}].name", MAX_NAME_LEN)
        if name in names:
            raise MalformedError(f"array[{i}].name: duplicate name {name!r}", field="arrays")
        names.add(name)
        what = f"array {name!r}"
        if dcode not in CODE_DTYPES:
            raise MalformedError(f"{what}: dtype code must be 1..8, got {dcode}", field=name)
        dt = CODE_DTYPES[dcode]
        if enc != ENC_RAW and enc not in _ALLOWED_ENC.get(dt, ()):
            raise MalformedError(
                f"{what}: encoding code {enc} not allowed for dtype {dt} "
                f"(allowed: {sorted({ENC_RAW} | _ALLOWED_ENC.get(dt, set()))})",
                field=name,
            )
        if rank > MAX_RANK:
            raise MalformedError(f"{what}: rank must be <= {MAX_RANK}, got {rank}", field=name)
        shape = struct.unpack(f"<{rank}I", cur.take(4 * rank, f"{what} dims"))
        problem = _shape_problem(what, shape)
        if problem:
            raise MalformedError(problem, field=name)
        want = _data_len(dt, enc, shape)
        if dlen != want:
            raise MalformedError(
                f"{what}: data_len expected {want} for shape {shape} {dt} encoding {enc}, got {dlen}",
                field=name,
            )
        if off != expected_offset:
            raise MalformedError(f"{what}: data_offset expected {expected_offset}, got {off}", field=name)
        expected_offset += dlen
        table.append((name, dt, enc, shape, dlen))

    data_start = cur.pos
    region = total - data_start
    if expected_offset != region:
        raise MalformedError(
            f"data region: array table accounts for {expected_offset} bytes, body holds {region}",
            field="data",
        )

    arrays: dict[str, np.ndarray] = {}
    precision: dict[str, str] = {}
    pos = data_start
    for name, dt, enc, shape, dlen in table:
        arrays[name] = _decode_array(mv, pos, name, dt, enc, shape)
        enc_name = _ENC_NAMES[enc]
        if enc_name:
            precision[name] = enc_name
        pos += dlen

    forbid = finite_required(kind) if allow_nonfinite is None else not allow_nonfinite
    if forbid:
        _check_finite(kind, arrays, scalars)
    try:
        return Payload(kind, arrays, scalars, precision)
    except PayloadError as e:  # defensive: every rule is checked above already
        raise MalformedError(str(e), field=e.field) from None


def _decode_array(mv: memoryview, pos: int, name: str, dt: np.dtype, enc: int, shape: tuple[int, ...]) -> np.ndarray:
    n = math.prod(shape)
    if enc == ENC_RAW:
        if dt == np.dtype(np.bool_):
            raw = np.frombuffer(mv, dtype=np.uint8, count=n, offset=pos)
            if n and raw.max() > 1:
                raise MalformedError(f"array {name!r}: bool bytes must be 0 or 1, found {int(raw.max())}", field=name)
            return raw.astype(np.bool_).reshape(shape)
        raw = np.frombuffer(mv, dtype=dt.newbyteorder("<"), count=n, offset=pos)
        return raw.astype(dt, copy=True).reshape(shape)
    if enc in (ENC_FP16, ENC_FP32):
        wire = np.dtype("<f2") if enc == ENC_FP16 else np.dtype("<f4")
        raw = np.frombuffer(mv, dtype=wire, count=n, offset=pos)
        return raw.astype(dt).reshape(shape)
    rows, cols = _rows_cols(shape)
    scales = np.frombuffer(mv, dtype="<f4", count=rows, offset=pos)
    bad = (scales < 0) | np.isinf(scales)
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise MalformedError(
            f"array {name!r}: int8 scale of row {r} must be >= 0 and finite (or NaN), got {float(scales[r])}",
            field=name,
        )
    q = np.frombuffer(mv, dtype=np.int8, count=n, offset=pos + 4 * rows).reshape(rows, cols)
    out = dequantise_int8(scales, q)
    with np.errstate(all="ignore"):
        return out.astype(dt, copy=False).reshape(shape)


def _check_finite(kind: str, arrays: dict[str, np.ndarray], scalars: Mapping[str, object]) -> None:
    for name, arr in arrays.items():
        if _base(arr.dtype) in FLOAT_DTYPES and arr.size:
            finite = np.isfinite(arr)
            if not finite.all():
                bad = arr.size - int(np.count_nonzero(finite))
                first = np.unravel_index(int(np.flatnonzero(~finite.reshape(-1))[0]), arr.shape)
                raise NonFiniteError(
                    f"array {name!r}: {bad} non-finite value(s) (first at index "
                    f"{tuple(int(i) for i in first)}: {arr[first]}); kind {kind!r} forbids NaN/Inf",
                    field=name,
                )
    for name, value in scalars.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise NonFiniteError(f"scalar {name!r}: {value}; kind {kind!r} forbids NaN/Inf", field=name)
