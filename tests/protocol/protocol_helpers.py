"""Byte-level helpers for the protocol tests: build frames field by field from the documented
layout (independently of the codec's own structs) and re-seal mutated bytes with a valid CRC so
the checks behind the CRC can be reached."""

from __future__ import annotations

import struct
import zlib

HEADER_SIZE = 27  # payload wire format version 2: "<4sHHBHIQI"
CRC_OFFSET = 23
BODY_LEN_OFFSET = 15
CHUNK_HEADER_SIZE = 48


def crc_payload(buf: bytes) -> int:
    """CRC of every byte but the crc32 field [23, 27)."""
    return zlib.crc32(buf[HEADER_SIZE:], zlib.crc32(buf[:CRC_OFFSET]))


def reseal(buf: bytes, *, fix_len: bool = False) -> bytes:
    """Rewrite the payload CRC (and body_len if ``fix_len``) so the bytes pass those two checks."""
    b = bytearray(buf)
    if len(b) < HEADER_SIZE:
        return bytes(b)
    if fix_len:
        struct.pack_into("<Q", b, BODY_LEN_OFFSET, len(b) - HEADER_SIZE)
    struct.pack_into("<I", b, CRC_OFFSET, crc_payload(bytes(b)))
    return bytes(b)


def reseal_chunk(frame: bytes, *, fix_len: bool = False) -> bytes:
    b = bytearray(frame)
    if len(b) < CHUNK_HEADER_SIZE:
        return bytes(b)
    if fix_len:
        struct.pack_into("<I", b, 40, len(b) - CHUNK_HEADER_SIZE)
    struct.pack_into("<I", b, 44, zlib.crc32(bytes(b[CHUNK_HEADER_SIZE:]), zlib.crc32(bytes(b[:44]))))
    return bytes(b)


def scalar_entry(name: bytes = b"s", typ: int = 1, value: bytes = struct.pack("<q", 5)) -> bytes:
    return struct.pack("<BB", len(name), typ) + name + value


def array_entry(
    name: bytes = b"x",
    dtype: int = 1,
    enc: int = 0,
    shape: tuple[int, ...] = (2, 3),
    offset: int = 0,
    length: int | None = None,
    rank: int | None = None,
    name_len: int | None = None,
) -> bytes:
    if length is None:
        n = 1
        for d in shape:
            n *= d
        length = n * {1: 4, 2: 2, 3: 8, 4: 1, 5: 1, 6: 4, 7: 8, 8: 1}[dtype]
    return (
        struct.pack(
            "<BBBBQQ",
            len(name) if name_len is None else name_len,
            dtype,
            enc,
            len(shape) if rank is None else rank,
            offset,
            length,
        )
        + name
        + struct.pack(f"<{len(shape)}I", *shape)
    )


def build(
    *,
    kind: bytes = b"logits",
    scalars: tuple[bytes, ...] = (),
    arrays: tuple[bytes, ...] = (array_entry(),),
    data: bytes = bytes(24),
    magic: bytes = b"EFD1",
    version: int = 2,
    flags: int = 0,
    kind_len: int | None = None,
    n_scalars: int | None = None,
    n_arrays: int | None = None,
    body_len: int | None = None,
) -> bytes:
    """A version-2 payload assembled field by field, CRC correct unless the caller breaks it after.
    A payload is content only: no sender, no round (those are its message's)."""
    body = kind + b"".join(scalars) + b"".join(arrays) + data
    header = struct.pack(
        "<4sHHBHIQ",
        magic,
        version,
        flags,
        len(kind) if kind_len is None else kind_len,
        len(scalars) if n_scalars is None else n_scalars,
        len(arrays) if n_arrays is None else n_arrays,
        len(body) if body_len is None else body_len,
    )
    assert len(header) == CRC_OFFSET
    return header + struct.pack("<I", zlib.crc32(body, zlib.crc32(header))) + body
