"""Every malformed input raises its specific ProtocolError subclass, naming the field.

Bytes are assembled field by field (protocol_helpers.build) with a correct CRC, so each check
behind the CRC is reached on purpose."""

import struct
import zlib

import numpy as np
import pytest
from protocol_helpers import CRC_OFFSET, array_entry, build, reseal, scalar_entry

from edgefd.protocol import (
    HEADER_SIZE,
    ChecksumError,
    MagicError,
    MalformedError,
    Message,
    OversizedError,
    Payload,
    ProtocolError,
    TruncatedError,
    UnsupportedVersionError,
    VersionError,
    decode,
    decode_message,
    encode,
    encode_message,
)

GOOD = Payload("logits", {"x": np.zeros((2, 3), np.float32)})


def test_builder_matches_encoder():
    assert build() == encode(GOOD)
    assert decode(build()).same_as(GOOD)


def test_hierarchy():
    for cls in (ChecksumError, MagicError, MalformedError, OversizedError, TruncatedError, VersionError):
        assert issubclass(cls, ProtocolError) and issubclass(cls, ValueError)
    assert issubclass(MagicError, MalformedError)


def raises(exc, data, *words, **kw):
    with pytest.raises(exc) as ei:
        decode(data, **kw)
    assert type(ei.value) is exc, f"{type(ei.value).__name__}: {ei.value}"
    for w in words:
        assert w in str(ei.value), f"{w!r} not in {str(ei.value)!r}"
    return ei.value


# ----------------------------------------------------------------------------- before the CRC
def test_bad_magic():
    e = raises(MagicError, b"EFX1" + build()[4:], "magic", "expected b'EFD1'", "got b'EFX1'")
    assert e.field == "magic"
    raises(MagicError, b"\x00", "magic")
    raises(MagicError, b"PK\x03\x04" + bytes(100), "magic")


@pytest.mark.parametrize("n", [0, 1, 3, 4, 20, HEADER_SIZE - 1])
def test_shorter_than_header(n):
    raises(TruncatedError, build()[:n], "header", f"expected {HEADER_SIZE} bytes", f"got {n}")


def test_version_and_flags():
    e = raises(VersionError, build(version=3), "version", "supports 2, got 3")
    assert e.field == "version"
    raises(VersionError, build(version=0), "got 0")
    raises(VersionError, build(version=1), "supports 2, got 1")


def v1_payload(kind: bytes = b"logits", sender: bytes = b"c1", rnd: int = 3) -> bytes:
    """A payload as an edgefd of wire version 1 sent it, built by hand from that layout: a 32-byte
    header "<4sHHiBBHIQI" with a round and a sender_len, and the sender after the kind."""
    body = kind + sender + array_entry() + bytes(24)
    fields = [b"EFD1", 1, 0, rnd, len(kind), len(sender), 0, 1, len(body)]
    crc = zlib.crc32(body, zlib.crc32(struct.pack("<4sHHiBBHIQ", *fields)))
    data = struct.pack("<4sHHiBBHIQI", *fields, crc) + body
    assert len(data) == 32 + len(body)
    return data


def v1_message(content: bytes, rnd: int = 3) -> bytes:
    """A message of wire version 1: the 14-byte "<4sBBiI" header (version 1, flags: has content),
    verb, sender, receiver and run as u8-length texts, then its (version-1) content."""
    texts = b"".join(bytes((len(t),)) + t for t in (b"train", b"c1", b"server", b"run"))
    return struct.pack("<4sBBiI", b"EFM1", 1, 1, rnd, 0) + texts + content


def test_version_1_payloads_and_messages_are_refused_naming_both_versions():
    e = raises(VersionError, v1_payload(), "version", "supports 2, got 1")
    assert e.field == "version"
    with pytest.raises(UnsupportedVersionError, match="protocol version 1: this edgefd speaks versions 2-3") as ei:
        decode_message(v1_message(v1_payload()))
    assert ei.value.field == "version" and (ei.value.version, ei.value.supported) == (1, (2, 3))
    # a current message around a version-1 payload: the content's own version is checked too
    message = Message("train", "server", "c1", 3, GOOD, run="run")
    data = encode_message(message)[: message.metadata_bytes] + v1_payload()
    with pytest.raises(VersionError, match="supports 2, got 1"):
        decode_message(data)
    e = raises(VersionError, build(flags=4), "flags", "0x0004")
    assert e.field == "flags"


def test_truncated_body():
    data = build()
    raises(TruncatedError, data[:-1], "body_len", f"says {len(data)} bytes in all, got {len(data) - 1}")
    raises(TruncatedError, data[:40], "body_len")


def test_trailing_bytes():
    data = build()
    raises(MalformedError, data + b"\x00", "body_len", "1 trailing bytes")


def test_oversized_buffer_and_oversized_claim():
    data = build()
    assert len(data) == 27 + 6 + (20 + 1 + 2 * 4) + 24 == 86  # header, "logits", the entry of x (2, 3), its data
    raises(OversizedError, data, "86 bytes exceeds max_bytes=85", max_bytes=85)
    huge = build(body_len=2**62)
    e = raises(OversizedError, huge, "body_len", "max_bytes")
    assert e.field == "body_len"
    # without a limit the claim is checked against the buffer, nothing is allocated from it
    raises(TruncatedError, huge, "body_len", max_bytes=None)
    raises(TruncatedError, build(body_len=2**64 - 1), max_bytes=None)


def test_checksum_mismatch():
    data = bytearray(build())
    data[-1] ^= 0x01
    raises(ChecksumError, bytes(data), "crc32", "header says 0x")
    data = bytearray(build())
    data[CRC_OFFSET] ^= 0xFF  # the stored CRC itself
    raises(ChecksumError, bytes(data), "crc32")
    data = bytearray(build())
    data[9] ^= 0x01  # the header's fields are covered by the CRC as well (here n_scalars)
    raises(ChecksumError, bytes(data), "crc32")


# ----------------------------------------------------------------------------- header fields
@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(kind=b""), ["kind_len", "expected 1..32, got 0"]),
        (dict(kind=b"k" * 33), ["kind_len", "got 33"]),
        (dict(n_arrays=70000), ["n_arrays", "expected <= 65535, got 70000"]),
        (dict(kind=b"Logits"), ["kind", "must match"]),
        (dict(kind=b"log\xffts"), ["kind", "not ASCII"]),
    ],
)
def test_header_fields(kw, words):
    raises(MalformedError, build(**kw), *words)


def test_kind_len_pointing_past_body():
    raises(MalformedError, build(kind=b"ack", arrays=(), data=b"", kind_len=10), "kind", "needs 10 bytes")


# ----------------------------------------------------------------------------- scalar table
@pytest.mark.parametrize(
    "entry, words",
    [
        (scalar_entry(typ=9), ["scalar 's'", "type code must be 1..4, got 9"]),
        (scalar_entry(typ=3, value=b"\x02"), ["scalar 's'", "bool byte must be 0 or 1, got 2"]),
        (scalar_entry(typ=4, value=struct.pack("<H", 2) + b"\xff\xfe"), ["scalar 's'", "invalid UTF-8"]),
        (scalar_entry(name=b""), ["scalar[0].name_len", "got 0"]),
        (scalar_entry(name=b"\xc3"), ["scalar[0].name", "invalid UTF-8"]),
        (scalar_entry(typ=1, value=b"\x00" * 4), ["scalar 's'", "needs 8 bytes"]),
    ],
)
def test_scalar_table(entry, words):
    raises(MalformedError, build(scalars=(entry,), arrays=(), data=b""), *words)


def test_duplicate_scalar():
    raises(
        MalformedError,
        build(scalars=(scalar_entry(), scalar_entry()), arrays=(), data=b""),
        "scalar[1].name",
        "duplicate name 's'",
    )


def test_scalar_count_past_body():
    raises(
        MalformedError, build(scalars=(scalar_entry(),), n_scalars=3, arrays=(), data=b""), "scalar[1]", "needs 2 bytes"
    )


# ----------------------------------------------------------------------------- array table
@pytest.mark.parametrize(
    "entry, data, words",
    [
        (array_entry(dtype=9, length=24), bytes(24), ["array 'x'", "dtype code must be 1..8, got 9"]),
        (array_entry(enc=7), bytes(24), ["array 'x'", "encoding code 7 not allowed for dtype float32"]),
        (array_entry(enc=2), bytes(24), ["encoding code 2 not allowed for dtype float32"]),  # fp32 is raw for float32
        (array_entry(dtype=6, enc=3, length=8 + 6), bytes(14), ["encoding code 3 not allowed for dtype int32"]),
        (array_entry(shape=(1,) * 9, length=4), bytes(4), ["array 'x'", "rank must be <= 8, got 9"]),
        (array_entry(length=20), bytes(20), ["array 'x'", "data_len expected 24", "got 20"]),
        (array_entry(offset=4), bytes(28), ["array 'x'", "data_offset expected 0, got 4"]),
        (array_entry(name=b"", length=24), bytes(24), ["array[0].name_len", "expected 1..64, got 0"]),
        (array_entry(name=b"x\xff"), bytes(24), ["array[0].name", "invalid UTF-8"]),
        (array_entry(shape=(0, 2**31, 2**31), length=0), b"", ["array 'x'", "exceeds 1099511627776 elements"]),
        (array_entry(dtype=8, shape=(3,)), b"\x00\x01\x02", ["array 'x'", "bool bytes must be 0 or 1, found 2"]),
        (array_entry(shape=(2, 3)), bytes(20), ["data region", "accounts for 24 bytes, body holds 20"]),
        (array_entry(shape=(2, 3)), bytes(30), ["data region", "accounts for 24 bytes, body holds 30"]),
        (array_entry(name_len=9), bytes(24), ["array[0]", "name"]),
    ],
)
def test_array_table(entry, data, words):
    raises(MalformedError, build(arrays=(entry,), data=data), *words)


def test_int8_scales():
    neg = struct.pack("<2f", 1.0, -1.0) + bytes(6)
    raises(
        MalformedError,
        build(arrays=(array_entry(enc=3, length=14),), data=neg),
        "array 'x'",
        "int8 scale of row 1",
        "got -1.0",
    )
    inf = struct.pack("<2f", float("inf"), 1.0) + bytes(6)
    raises(MalformedError, build(arrays=(array_entry(enc=3, length=14),), data=inf), "int8 scale of row 0")


def test_overlap_and_gap_between_arrays():
    a = array_entry(name=b"a", shape=(2,), offset=0, length=8)
    overlap = array_entry(name=b"b", shape=(2,), offset=4, length=8)
    raises(MalformedError, build(arrays=(a, overlap), data=bytes(12)), "array 'b'", "data_offset expected 8, got 4")
    gap = array_entry(name=b"b", shape=(2,), offset=12, length=8)
    raises(MalformedError, build(arrays=(a, gap), data=bytes(20)), "array 'b'", "data_offset expected 8, got 12")
    dup = array_entry(name=b"a", shape=(2,), offset=8, length=8)
    raises(MalformedError, build(arrays=(a, dup), data=bytes(16)), "array[1].name", "duplicate name 'a'")


def test_array_count_past_body():
    raises(MalformedError, build(n_arrays=2), "array[1]")
    raises(MalformedError, build(n_arrays=65535, arrays=(), data=b""), "array[0]", "needs 20 bytes")


def test_table_claims_are_not_allocated():
    # a table claiming a huge array inside a tiny buffer is refused by arithmetic, not by MemoryError
    entry = array_entry(shape=(2**32 - 1, 2**8), length=(2**32 - 1) * 2**8 * 4)
    raises(MalformedError, build(arrays=(entry,), data=b""), "data region", max_bytes=None)


def test_reseal_helper_reaches_semantic_checks():
    data = bytearray(encode(GOOD))
    data[HEADER_SIZE] = ord("L")  # kind 'logits' -> 'Logits', CRC fixed afterwards
    raises(MalformedError, reseal(bytes(data)), "kind")
