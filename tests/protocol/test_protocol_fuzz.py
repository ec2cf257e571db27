"""Fuzz: random and mutated bytes at decode() and at the Reassembler. Only ProtocolError may come
out (a RuntimeWarning from numpy counts as a failure too), and whatever decodes is a valid payload."""

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_helpers import HEADER_SIZE, reseal, reseal_chunk

from edgefd.protocol import Payload, ProtocolError, Reassembler, decode, encode, split

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def corpus():
    rng = np.random.default_rng(0)
    f32 = rng.standard_normal((3, 5)).astype(np.float32)
    payloads = [
        Payload("ack"),
        Payload("logits", {"x": f32}),
        Payload(
            "knowledge",
            {"x": f32, "y": f32.astype(np.float64)},
            {"n": 3, "t": "é", "b": True, "f": 0.25},
            precision={"x": "int8", "y": "fp16"},
        ),
        Payload(
            "weights",
            {"w": rng.standard_normal((2, 2, 2)).astype(np.float64), "s": np.float32(1.5)},
            precision={"w": "fp32"},
        ),
        Payload(
            "hello",
            {
                "hist": np.arange(10, dtype=np.int64),
                "m": np.array([True, False]),
                "u": np.arange(4, dtype=np.uint8),
                "i": np.array([-3], np.int8),
                "i32": np.zeros((0, 4), np.int32),
                "h": np.ones(3, np.float16),
            },
        ),
        Payload("features", {"f": rng.standard_normal((2, 1, 3, 2)).astype(np.float16)}, precision={"f": "int8"}),
        Payload("metrics", {"nan": np.array([np.nan, np.inf], np.float32)}, {"loss": float("nan")}),
    ]
    return [encode(p) for p in payloads]


CORPUS = corpus()
INTERESTING = [
    0,
    1,
    2,
    7,
    8,
    31,
    32,
    33,
    63,
    64,
    65,
    127,
    128,
    255,
    256,
    65535,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**40,
    2**62,
    2**63 - 1,
    2**64 - 1,
]


@st.composite
def mutations(draw, base, header_fields):
    data = bytearray(draw(base))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "truncate", "extend", "splice", "overwrite", "int", "field"]))
        n = len(data)
        if op == "flip" and n:
            i = draw(st.integers(0, n - 1))
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del data[draw(st.integers(0, n)) :]
        elif op == "extend":
            data += draw(st.binary(min_size=1, max_size=40))
        elif op == "splice":
            i = draw(st.integers(0, n))
            j = draw(st.integers(i, n))
            data[i:j] = draw(st.binary(max_size=40))
        elif op == "overwrite" and n:
            i = draw(st.integers(0, n - 1))
            chunk = draw(st.binary(min_size=1, max_size=16))
            data[i : i + len(chunk)] = chunk
        elif op == "int" and n >= 8:  # plant a boundary integer anywhere (hits table fields)
            fmt = draw(st.sampled_from(["<B", "<H", "<I", "<Q", "<i", "<f"]))
            size = struct.calcsize(fmt)
            i = draw(st.integers(0, n - size))
            if fmt == "<f":
                v = draw(st.sampled_from([float("nan"), float("inf"), -1.0, 0.0, 1e38]))
            else:
                bits = 8 * size
                lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if fmt == "<i" else (0, 2**bits - 1)
                v = draw(st.sampled_from([x for x in INTERESTING if lo <= x <= hi] + [-1 if lo < 0 else hi]))
            struct.pack_into(fmt, data, i, v)
        elif op == "field":
            off, fmt = draw(st.sampled_from(header_fields))
            if off + struct.calcsize(fmt) <= n:
                bits = 8 * struct.calcsize(fmt)
                v = draw(
                    st.one_of(st.sampled_from([x for x in INTERESTING if x < 2**bits]), st.integers(0, 2**bits - 1))
                )
                struct.pack_into(fmt, data, off, v)
    return bytes(data), draw(st.sampled_from(["none", "crc", "crc+len"]))


# version, flags, kind_len, n_scalars, n_arrays, body_len (the version-2 header, protocol_helpers.build)
PAYLOAD_FIELDS = [(4, "<H"), (6, "<H"), (8, "<B"), (9, "<H"), (11, "<I"), (15, "<Q")]
CHUNK_FIELDS = [(4, "<H"), (6, "<H"), (24, "<I"), (28, "<I"), (32, "<Q"), (40, "<I")]


def check_decode(data):
    try:
        p = decode(data, max_bytes=1 << 20)
    except ProtocolError:
        return None
    # anything accepted is a well-formed payload that survives a second, lossless trip
    assert isinstance(p, Payload)
    again = decode(encode(p.with_precision(None)), allow_nonfinite=True, max_bytes=None)
    assert again.same_as(p)
    encode(p)  # and can be re-encoded at the precisions it arrived with
    return p


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes(data):
    check_decode(data)


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes_behind_a_valid_magic(rest):
    check_decode(b"EFD1" + rest)
    check_decode(reseal(b"EFD1\x02\x00\x00\x00" + rest, fix_len=True))  # version 2, no flags


@FUZZ
@given(mutations(st.sampled_from(CORPUS), PAYLOAD_FIELDS))
def test_mutated_encodings(case):
    data, seal = case
    if seal != "none":
        data = reseal(data, fix_len=seal == "crc+len")
    check_decode(data)


@st.composite
def body_mutations(draw):
    """Header left alone, body mutated, then length and CRC made right: reaches the table checks."""
    data = bytearray(draw(st.sampled_from(CORPUS)))
    for _ in range(draw(st.integers(1, 3))):
        n = len(data)
        if n <= HEADER_SIZE + 8:
            break
        i = draw(st.integers(HEADER_SIZE, n - 8))
        op = draw(st.sampled_from(["flip", "int", "splice"]))
        if op == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "int":
            fmt = draw(st.sampled_from(["<B", "<I", "<Q", "<f"]))
            if fmt == "<f":
                v = draw(st.sampled_from([float("nan"), float("inf"), -1.0, 0.0]))
            else:
                v = draw(st.sampled_from([x for x in INTERESTING if x < 2 ** (8 * struct.calcsize(fmt))]))
            struct.pack_into(fmt, data, i, v)
        else:
            data[i : i + draw(st.integers(0, 8))] = draw(st.binary(max_size=8))
    return reseal(bytes(data), fix_len=True)


@FUZZ
@given(body_mutations())
def test_mutated_bodies_with_valid_crc(data):
    check_decode(data)


# ----------------------------------------------------------------------------- reassembler
FRAMES = [f for i, d in enumerate(CORPUS) for f in split(d, 64 + 16 * i, i)]


@st.composite
def frame_streams(draw):
    stream = []
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["valid", "mutated", "random"]))
        if kind == "valid":
            stream.append(draw(st.sampled_from(FRAMES)))
        elif kind == "mutated":
            data, seal = draw(mutations(st.sampled_from(FRAMES), CHUNK_FIELDS))
            if seal != "none":
                data = reseal_chunk(data, fix_len=seal == "crc+len")
            stream.append(data)
        else:
            stream.append(draw(st.one_of(st.binary(max_size=120), st.binary(max_size=120).map(lambda b: b"EFC1" + b))))
    return stream


@FUZZ
@given(frame_streams(), st.integers(1, 4), st.integers(0, 600), st.floats(0, 5))
def test_reassembler_only_raises_protocol_errors(stream, max_messages, max_total, step):
    t = [0.0]
    r = Reassembler(max_messages=max_messages, max_total_bytes=max_total, timeout=3.0, clock=lambda: t[0], remember=8)
    for frame in stream:
        t[0] += step
        try:
            out = r.feed(frame)
        except ProtocolError:
            out = None
        assert r.pending <= max_messages
        assert 0 <= r.buffered_bytes <= max_total
        assert r.buffered_bytes == sum(p.cost for p in r._partial.values())
        if out is not None:
            check_decode(out)


@settings(max_examples=100, deadline=None)
@given(st.permutations(list(range(len(FRAMES)))))
def test_all_valid_frames_in_any_order_give_back_every_payload(order):
    r = Reassembler()
    got = [x for x in (r.feed(FRAMES[i]) for i in order) if x is not None]
    assert sorted(got) == sorted(CORPUS)
