"""Round trips, precisions and their error bounds, exact byte arithmetic, non-finite policy."""

import math
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from edgefd.protocol import (
    HEADER_SIZE,
    NONFINITE_OK_KINDS,
    MagicError,
    NonFiniteError,
    OversizedError,
    Payload,
    PayloadError,
    codec,
    decode,
    dequantise_int8,
    encode,
    encoded_size,
    finite_required,
    quantise_int8,
    read_header,
    split,
)

ALL_DTYPES = [np.float32, np.float16, np.float64, np.int8, np.uint8, np.int32, np.int64, np.bool_]
FLOATS = [np.float32, np.float16, np.float64]
SHAPES = [(), (5,), (3, 4), (2, 3, 4), (2, 1, 3, 2)]  # ranks 0..4
EMPTY_SHAPES = [(0,), (3, 0), (0, 5), (2, 0, 3)]


def sample(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind == "f":
        return (rng.standard_normal(shape) * 3).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)


def roundtrip(p, **kw):
    data = encode(p)
    assert len(data) == encoded_size(p)
    return decode(data, **kw)


# ----------------------------------------------------------------------------- lossless
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES + EMPTY_SHAPES, ids=str)
def test_lossless_roundtrip_every_dtype_and_rank(dtype, shape):
    a = sample(dtype, shape)
    q = roundtrip(Payload("weights", {"a": a}))
    b = q.arrays["a"]
    assert b.dtype == np.dtype(dtype) and b.shape == a.shape
    assert np.array_equal(a, b)
    assert b.flags.writeable and b.flags.owndata or b.base is not None
    assert q.precision == {}


def test_extreme_integer_values_and_special_floats_survive():
    arrays = {
        "i64": np.array([np.iinfo(np.int64).min, -1, 0, np.iinfo(np.int64).max], np.int64),
        "i32": np.array([np.iinfo(np.int32).min, np.iinfo(np.int32).max], np.int32),
        "u8": np.array([0, 255], np.uint8),
        "i8": np.array([-128, 127], np.int8),
        "f": np.array([-0.0, np.finfo(np.float32).tiny, np.finfo(np.float32).max], np.float32),
        "special": np.array([np.nan, np.inf, -np.inf], np.float64),
    }
    q = roundtrip(Payload("metrics", arrays))  # metrics may carry NaN/Inf
    for k, a in arrays.items():
        np.testing.assert_array_equal(q.arrays[k], a)
    assert np.signbit(q.arrays["f"][0])


def test_non_contiguous_and_big_endian_inputs():
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    arrays = {
        "t": base.T,
        "s": base[::2, 1::3],
        "be": base.astype(">f4"),
        "bei": np.arange(5, dtype=">i8"),
    }
    q = roundtrip(Payload("features", arrays))
    for k, a in arrays.items():
        np.testing.assert_array_equal(q.arrays[k], a)
        assert q.arrays[k].dtype.isnative
    assert q.arrays["be"].dtype == np.float32


def test_decoded_arrays_do_not_alias_the_input_buffer():
    buf = bytearray(encode(Payload("weights", {"a": np.ones(8, np.float32), "b": np.ones(4, np.int8)})))
    q = decode(buf)
    buf[-20:] = bytes(20)
    assert q.arrays["a"].sum() == 8 and q.arrays["b"].sum() == 4
    q.arrays["a"][0] = 5.0  # writable


def test_accepts_bytes_bytearray_memoryview():
    data = encode(Payload("ack"))
    for d in (data, bytearray(data), memoryview(data)):
        assert decode(d).kind == "ack"
    with pytest.raises(TypeError):
        decode("not bytes")


def test_unicode_names_and_scalars():
    p = Payload(
        "knowledge",
        {"логиты": np.ones((2, 2), np.float32), "🙂": np.zeros(3, np.int32)},
        {
            "名前": "valeur-é-🙂",
            "count": 2**62,
            "neg": -(2**63),
            "lr": 1e-3,
            "zero": -0.0,
            "on": True,
            "off": False,
            "empty": "",
        },
    )
    q = roundtrip(p)
    assert q.same_as(p)
    assert q.scalars == p.scalars
    assert [type(v) for v in q.scalars.values()] == [type(v) for v in p.scalars.values()]
    assert list(q.arrays) == list(p.arrays)
    assert math.copysign(1.0, q.scalars["zero"]) == -1.0


def test_order_of_arrays_and_scalars_is_kept():
    names = [f"a{i}" for i in range(20)][::-1]
    p = Payload("features", {n: np.zeros(1, np.float32) for n in names}, {n: 1 for n in names})
    q = roundtrip(p)
    assert list(q.arrays) == names and list(q.scalars) == names


def test_many_arrays():
    p = Payload("weights", {f"layer{i}.w": np.full((3,), i, np.float32) for i in range(600)})
    q = roundtrip(p)
    assert q.same_as(p)


# ----------------------------------------------------------------------------- precisions
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("prec", ["fp32", "fp16", "int8"])
@pytest.mark.parametrize("shape", SHAPES + EMPTY_SHAPES, ids=str)
def test_precision_roundtrip_keeps_dtype_and_shape(dtype, prec, shape):
    a = sample(dtype, shape, seed=1)
    p = Payload("logits", {"a": a}, precision={"a": prec})
    q = roundtrip(p)
    b = q.arrays["a"]
    assert b.dtype == np.dtype(dtype) and b.shape == a.shape
    wire_lossless = prec == "fp32" and dtype != np.float64 or prec == "fp16" and dtype == np.float16
    if wire_lossless:
        assert np.array_equal(a, b) and q.precision == {}
    else:
        assert q.precision == {"a": prec}
    if prec == "fp16" and dtype != np.float16:
        np.testing.assert_array_equal(b, a.astype(np.float16).astype(dtype))
    if prec == "fp32" and dtype == np.float64:
        np.testing.assert_array_equal(b, a.astype(np.float32).astype(np.float64))
    if prec == "int8" and a.size:
        check_int8_bound(a, b)


def check_int8_bound(a, b):
    """|x - x_hat| <= scale / 2 per row (+ float rounding), scale = max|row| / 127."""
    rows, cols = (1, 1) if a.ndim == 0 else (math.prod(a.shape[:-1]), a.shape[-1])
    x = np.asarray(a, np.float64).reshape(rows, cols)
    y = np.asarray(b, np.float64).reshape(rows, cols)
    scale = np.abs(x).max(axis=1, initial=0.0) / 127.0
    # The scale travels as float32: below float32's smallest subnormal (rows of max|x| < 127 * 1.4e-45)
    # it rounds to a multiple of that, so the bound holds up to one such step.
    slack = 1e-6 * np.abs(x).max(axis=1, initial=0.0) + float(np.finfo(np.float32).smallest_subnormal)
    if a.dtype == np.float16:  # the decoded values are rounded to float16 again
        slack = slack + np.abs(x).max(axis=1, initial=0.0) * 2.0**-11
    err = np.abs(x - y).max(axis=1, initial=0.0)
    assert np.all(err <= scale / 2 + slack), (err, scale)


@settings(max_examples=150, deadline=None)
@given(
    hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6),
        elements=st.floats(-(2.0**100), 2.0**100, width=32, allow_subnormal=False),
    )
)
def test_int8_error_bound_property(a):
    q = roundtrip(Payload("logits", {"a": a}, precision={"a": "int8"}))
    check_int8_bound(a, q.arrays["a"])


@settings(max_examples=150, deadline=None)
@given(
    hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6),
        elements=st.floats(-60000, 60000, width=32),
    )
)
def test_fp16_error_bound_property(a):
    b = roundtrip(Payload("logits", {"a": a}, precision={"a": "fp16"})).arrays["a"]
    # half precision: 11 significant bits -> relative error <= 2**-11 for normals,
    # absolute error <= 2**-25 (half the smallest subnormal spacing) below the normal range
    bound = np.maximum(np.abs(a) * 2.0**-11, 2.0**-25)
    assert np.all(np.abs(a.astype(np.float64) - b) <= bound)


def test_int8_details():
    a = np.array([[0, 0, 0], [1, -2, 0.5], [-127, 3, 127]], np.float32)
    scales, q = quantise_int8(a)
    np.testing.assert_allclose(scales, [0, 2 / 127, 1], rtol=1e-7)
    assert q[0].tolist() == [0, 0, 0]
    assert q[1].tolist() == [64, -127, 32]  # 1/(2/127)=63.5 -> 64 (round half to even)
    assert q[2].tolist() == [-127, 3, 127]
    d = dequantise_int8(scales, q)
    assert d.dtype == np.float32 and d[0].tolist() == [0, 0, 0]
    np.testing.assert_array_equal(d[2], a[2])  # integer-valued row with max 127: exact
    # the whole int8 row is one scale: a rank-0 / rank-1 array is one row
    s0, q0 = quantise_int8(np.float32(-3.0))
    assert s0.shape == (1,) and q0.tolist() == [[-127]]


def test_int8_nonfinite_row_travels_as_nan_and_is_rejected_where_forbidden():
    a = np.array([[1, 2, 3], [1, np.inf, 3], [4, 5, 6]], np.float32)
    scales, q = quantise_int8(a)
    assert np.isnan(scales[1]) and not q[1].any()
    data = encode(Payload("logits", {"a": a}, precision={"a": "int8"}))
    with pytest.raises(NonFiniteError, match="array 'a': 3 non-finite"):
        decode(data)
    b = decode(data, allow_nonfinite=True).arrays["a"]
    assert np.isnan(b[1]).all() and np.isfinite(b[[0, 2]]).all()


@pytest.mark.parametrize(
    "dtype, prec, value",
    [
        (np.float32, "fp16", 70000.0),
        (np.float64, "fp16", -1e6),
        (np.float64, "fp32", 1e39),
        (np.float64, "int8", 1e300),
    ],
)
def test_finite_values_that_overflow_the_wire_precision_raise_at_encode(dtype, prec, value):
    p = Payload("logits", {"w": np.array([1.0, value], dtype)}, precision={"w": prec})
    with pytest.raises(PayloadError, match=f"array 'w'.*{prec if prec != 'int8' else 'scale'}"):
        encode(p)


def test_fp16_keeps_inf_and_nan_faithfully_for_allowed_kinds():
    a = np.array([np.inf, -np.inf, np.nan, 1.0], np.float32)
    b = roundtrip(Payload("metrics", {"a": a}, precision={"a": "fp16"})).arrays["a"]
    np.testing.assert_array_equal(b, a)


def test_wire_size_per_precision():
    a = np.zeros((10, 100), np.float32)
    raw = len(encode(Payload("logits", {"a": a})))
    fp16 = len(encode(Payload("logits", {"a": a}, precision={"a": "fp16"})))
    int8 = len(encode(Payload("logits", {"a": a}, precision={"a": "int8"})))
    assert raw - fp16 == 2000
    assert raw - int8 == 4000 - (1000 + 40)


# ----------------------------------------------------------------------------- byte arithmetic
def pinned_payload(precision=None):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    return Payload(
        "logits",
        {"x": x},
        {"n": 5, "tag": "ab", "ok": True, "lr": 0.5},
        precision={"x": precision} if precision else {},
    )


def test_exact_byte_length_by_hand():
    p = pinned_payload()
    header = 4 + 2 + 2 + 1 + 2 + 4 + 8 + 4  # magic, version, flags, kind_len, n_scalars, n_arrays, body_len, crc32
    assert header == 27 == HEADER_SIZE  # version 2: no sender_len, no round
    kind = len("logits")  # 6, and no sender after it
    scalars = (
        (2 + 1 + 8)  # "n": name_len,type + name + i64
        + (2 + 3 + 2 + 2)  # "tag": + u16 length + "ab"
        + (2 + 2 + 1)  # "ok": + one byte
        + (2 + 2 + 8)  # "lr": + f64
    )
    assert scalars == 37
    table = 20 + 1 + 2 * 4  # fixed entry + name "x" + two u32 dims
    data = 2 * 3 * 4
    assert header + kind + scalars + table + data == 123
    data_bytes = encode(p)
    assert len(data_bytes) == 123 == encoded_size(p)
    h = read_header(data_bytes)
    assert (h.version, h.flags, h.kind_len, h.n_scalars, h.n_arrays) == (2, 0, 6, 4, 1)
    assert h.body_len == 123 - 27
    assert data_bytes[27:33] == b"logits"
    assert data_bytes[-24:] == p.arrays["x"].tobytes()
    # other precisions: fp16 halves the data, int8 = 2 row scales (f32) + 6 int8
    assert len(encode(pinned_payload("fp16"))) == 123 - 24 + 12 == 111
    assert len(encode(pinned_payload("int8"))) == 123 - 24 + (2 * 4 + 6) == 113


def test_golden_bytes_from_the_documented_layout():
    """Rebuild a small message from the docstring table with plain struct calls."""
    p = Payload("ack", {"m": np.array([1, 0], np.bool_)}, {"k": 7})
    body = (
        b"ack"  # kind, then straight to the scalar table: no sender
        + struct.pack("<BB", 1, 1)
        + b"k"
        + struct.pack("<q", 7)
        + struct.pack("<BBBBQQ", 1, 8, 0, 1, 0, 2)
        + b"m"
        + struct.pack("<I", 2)
        + b"\x01\x00"
    )
    prefix = b"EFD1" + struct.pack("<HHBHIQ", 2, 0, 3, 1, 1, len(body))  # version 2, flags, kind_len, counts
    expected = prefix + struct.pack("<I", zlib.crc32(body, zlib.crc32(prefix))) + body
    assert encode(p) == expected
    assert HEADER_SIZE == len(prefix) + 4 == 27
    assert len(expected) == 27 + 3 + (2 + 1 + 8) + (20 + 1 + 4) + 2 == 68  # header, kind, "k", "m" entry, data


# ----------------------------------------------------------------------------- policies
def test_nonfinite_policy():
    assert finite_required("logits") and finite_required("weights") and finite_required("my-new-kind")
    assert not finite_required("metrics") and "metrics" in NONFINITE_OK_KINDS
    a = np.array([1.0, np.nan], np.float32)
    for kind in ("logits", "knowledge", "weights", "features", "hello"):
        data = encode(Payload(kind, {"z": a}))
        with pytest.raises(
            NonFiniteError, match=rf"array 'z': 1 non-finite value\(s\) \(first at index \(1,\).*kind '{kind}'"
        ):
            decode(data)
        assert np.isnan(decode(data, allow_nonfinite=True).arrays["z"][1])
    data = encode(Payload("metrics", {"z": a}))
    assert np.isnan(decode(data).arrays["z"][1])
    with pytest.raises(NonFiniteError):
        decode(data, allow_nonfinite=False)
    # float scalars too
    data = encode(Payload("logits", {}, {"loss": float("inf")}))
    with pytest.raises(NonFiniteError, match="scalar 'loss': inf"):
        decode(data)
    # integer arrays are never checked
    decode(encode(Payload("logits", {"i": np.array([-1], np.int64)})))


def test_max_bytes():
    data = encode(pinned_payload())
    assert decode(data, max_bytes=len(data)).kind == "logits"
    with pytest.raises(OversizedError, match="123 bytes exceeds max_bytes=122"):
        decode(data, max_bytes=122)
    decode(data, max_bytes=None)


def test_chunk_frame_fed_to_decode_gets_a_hint():
    frame = split(encode(pinned_payload()), 1024)[0]
    with pytest.raises(MagicError, match="chunk frame"):
        decode(frame)


# ----------------------------------------------------------------------------- random payloads
DTYPE_ST = st.sampled_from(ALL_DTYPES)


@st.composite
def payloads(draw):
    n = draw(st.integers(0, 4))
    names = draw(
        st.lists(
            st.text(min_size=1, max_size=8).filter(
                lambda s: (
                    len(s.encode("utf-8", "surrogatepass")) <= 64
                    and not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or 0xD800 <= ord(c) < 0xE000 for c in s)
                )
            ),
            min_size=n,
            max_size=n,
            unique=True,
        )
    )
    arrays, precision = {}, {}
    for name in names:
        dt = np.dtype(draw(DTYPE_ST))
        shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4))
        elements = st.floats(-1e4, 1e4, width=16 if dt == np.float16 else 32) if dt.kind == "f" else None
        arrays[name] = draw(hnp.arrays(dt, shape, elements=elements))
        if dt.kind == "f":
            prec = draw(st.sampled_from([None, "fp32", "fp16", "int8"]))
            if prec:
                precision[name] = prec
    scalars = draw(
        st.dictionaries(
            st.sampled_from(["a", "b", "ç", "epoch", "loss"]),
            st.one_of(
                st.booleans(),
                st.integers(-(2**63), 2**63 - 1),
                st.floats(allow_nan=False, allow_infinity=False),
                st.text(max_size=10).filter(lambda s: not any(0xD800 <= ord(c) < 0xE000 for c in s)),
            ),
            max_size=3,
        )
    )
    return Payload("knowledge", arrays, scalars, precision)


@settings(max_examples=200, deadline=None)
@given(payloads())
# a row whose int8 scale is below float32's smallest subnormal (found by hypothesis once)
@example(Payload("knowledge", {"0": np.array(1e-45, np.float32)}, {}, {"0": "int8"}))
def test_random_payload_roundtrip(p):
    data = encode(p)
    assert len(data) == encoded_size(p)
    q = decode(data)
    assert (q.kind, q.scalars) == (p.kind, p.scalars)
    for name, a in p.arrays.items():
        b = q.arrays[name]
        assert b.dtype == a.dtype and b.shape == a.shape
        prec = p.precision.get(name)
        if prec is None or (prec == "fp32" and a.dtype != np.float64) or (prec == "fp16" and a.dtype == np.float16):
            assert np.array_equal(a, b)
        elif prec == "int8" and a.size:
            check_int8_bound(a, b)
    # what was decoded re-encodes, and a lossless second trip changes nothing
    assert decode(encode(q.with_precision(None))).same_as(q)
    assert len(encode(q)) == len(data)


def test_fp16_overflow_is_checked_a_block_of_rows_at_a_time(monkeypatch):
    """The overflow check counts every overflowing value and the largest of them over all the
    blocks, and holds a block's masks at a time."""
    monkeypatch.setattr(codec, "QUANTISE_BLOCK_ELEMENTS", 30)  # blocks of 3 rows of 10
    x = np.ones((10, 10), np.float32)
    x[1, 2], x[7, 9], x[8, 0], x[4, 4] = 7e4, -9e4, np.inf, np.nan
    with pytest.raises(PayloadError, match=r"array 'h': 2 finite values overflow fp16 \(largest \|x\| = 90000\)"):
        encode(Payload("metrics", {"h": x}, precision={"h": "fp16"}))
    x[1, 2] = x[7, 9] = 6e4
    back = decode(encode(Payload("metrics", {"h": x}, precision={"h": "fp16"}))).arrays["h"]
    assert np.array_equal(back, x.astype(np.float16).astype(np.float32), equal_nan=True)

    probe = """
import resource
import numpy as np
from edgefd.protocol import Payload, encode_buffers
x = np.ones((2048, 16384), np.float32)  # 128 MiB
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
buffers = encode_buffers(Payload("features", {"h": x}, precision={"h": "fp16"}))
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert float(done.stdout) < 80  # MB: the 64 MiB of fp16 and a block's masks (the whole array's: 129)


def test_int8_quantisation_works_a_block_of_rows_at_a_time():
    """Rows are independent: quantised in blocks, the result is the whole array's, bit for bit, and
    the float64 temporaries stay small (FedICT's 312 MB of features needed 1.9 GB more at once)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((700, 5000)).astype(np.float32) * 100
    x[3], x[8, 2], x[11, 4] = 0.0, np.nan, np.inf
    scales, q = codec.quantise_int8(x)
    per_row = [codec.quantise_int8(row) for row in x]
    assert np.array_equal(scales, np.concatenate([s for s, _ in per_row]), equal_nan=True)
    assert np.array_equal(q, np.concatenate([r for _, r in per_row]))
    assert 700 * 5000 > codec.QUANTISE_BLOCK_ELEMENTS  # more than one block

    probe = """
import resource
import numpy as np
from edgefd.protocol import codec
x = np.ones((2048, 16384), np.float32)  # 128 MiB
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
codec.quantise_int8(x)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert float(done.stdout) < 96  # MB: the 32 MiB of int8 and a few blocks (the whole array at once: ~770)
