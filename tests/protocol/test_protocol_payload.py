"""Payload construction and validation (sender side: PayloadError, field named in the message)."""

import numpy as np
import pytest

from edgefd.protocol import Payload, PayloadError, ProtocolError, encode, encoded_size

X = np.zeros((2, 3), np.float32)


def make(**kw):
    args = dict(kind="logits", arrays={"x": X})
    args.update(kw)
    return Payload(**args)


def test_minimal_and_defaults():
    p = Payload("ack")
    assert p.arrays == {} and p.scalars == {} and p.precision == {}
    assert isinstance(PayloadError("x"), ProtocolError) and isinstance(PayloadError("x"), ValueError)


@pytest.mark.parametrize(
    "kind, words",
    [
        ("", "kind must be 1..32"),
        ("k" * 33, "kind must be 1..32"),
        ("Logits", "must match"),
        ("1logits", "must match"),
        ("log its", "must match"),
        ("lögits", "must match"),
        (b"logits", "kind must be str"),
    ],
)
def test_bad_kind(kind, words):
    with pytest.raises(PayloadError, match=words) as ei:
        make(kind=kind)
    assert ei.value.field == "kind"


def test_kind_limits_ok():
    make(kind="k" * 32)
    make(kind="fedict.logits-v2_x")


def test_a_payload_is_content_only():
    """Who sent it and in which round is its message's to say: a payload takes neither."""
    # the version-1 positional signature Payload(kind, sender, round, arrays): the sender lands in
    # `arrays`, and is refused there as a PayloadError that says what the signature is now
    with pytest.raises(PayloadError, match=r"arrays must be a dict, got str.*no sender or round") as ei:
        Payload("logits", "c1", 0, {"x": X})
    assert ei.value.field == "arrays"
    with pytest.raises(PayloadError, match="scalars must be a dict, got int"):
        Payload("logits", {"x": X}, 0)
    # the keywords are not fields at all
    for name, value in (("sender", "c1"), ("round", 0)):
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{name}'"):
            make(**{name: value})
    assert not hasattr(make(), "sender") and not hasattr(make(), "round")


@pytest.mark.parametrize(
    "arrays, words",
    [
        ({"": X}, "array name must be 1..64"),
        ({"n" * 65: X}, "array name must be 1..64"),
        ({3: X}, "array name must be str"),
        ({"x": [1.0, 2.0]}, "array 'x': must be numpy.ndarray, got list"),
        ({"x": np.zeros(3, np.complex64)}, "array 'x': dtype complex64 not supported"),
        ({"x": np.zeros(3, np.int16)}, "array 'x': dtype int16 not supported"),
        ({"x": np.zeros(3, object)}, "dtype object not supported"),
        ({"x": np.zeros((1,) * 9, np.float32)}, "array 'x': rank must be <= 8, got 9"),
    ],
)
def test_bad_arrays(arrays, words):
    with pytest.raises(PayloadError, match=words):
        make(arrays=arrays)


def test_numpy_scalar_array_becomes_rank0():
    p = make(arrays={"t": np.float32(2.5)})
    assert p.arrays["t"].shape == () and p.arrays["t"].dtype == np.float32


@pytest.mark.parametrize(
    "scalars, words",
    [
        ({"n": 2**63}, "scalar 'n': int 9223372036854775808 does not fit int64"),
        ({"n": [1]}, "scalar 'n': type must be bool, int, float or str, got list"),
        ({"n": None}, "got NoneType"),
        ({"s": "x" * 65536}, "scalar 's': string must be <= 65535 bytes"),
        ({"": 1}, "scalar name must be 1..64"),
    ],
)
def test_bad_scalars(scalars, words):
    with pytest.raises(PayloadError, match=words):
        make(scalars=scalars)


def test_scalars_normalised_to_python_types():
    p = make(scalars={"a": np.int32(3), "b": np.float32(0.5), "c": np.bool_(True), "d": -(2**63)})
    assert p.scalars == {"a": 3, "b": 0.5, "c": True, "d": -(2**63)}
    assert [type(v) for v in p.scalars.values()] == [int, float, bool, int]


@pytest.mark.parametrize(
    "arrays, precision, words",
    [
        ({"x": X}, {"y": "fp16"}, "precision given for unknown array 'y'"),
        ({"x": X}, {"x": "bf16"}, "array 'x': precision must be one of"),
        ({"i": np.zeros(3, np.int32)}, {"i": "int8"}, "array 'i': precision 'int8' applies to float arrays only"),
    ],
)
def test_bad_precision(arrays, precision, words):
    with pytest.raises(PayloadError, match=words):
        make(arrays=arrays, precision=precision)


def test_with_precision():
    p = make(arrays={"x": X, "y": X.astype(np.float64), "i": np.zeros(2, np.int64)})
    q = p.with_precision("int8")
    assert q.precision == {"x": "int8", "y": "int8"} and p.precision == {}
    r = q.with_precision("fp16", names=["y"])
    assert r.precision == {"x": "int8", "y": "fp16"}
    assert r.with_precision(None).precision == {}
    with pytest.raises(PayloadError, match="'i' is not a float array"):
        p.with_precision("fp16", names=["i"])
    with pytest.raises(PayloadError, match="unknown array 'z'"):
        p.with_precision("fp16", names=["z"])


def test_mutation_after_construction_is_caught_by_encode():
    p = make()
    p.kind = "NOT OK"
    with pytest.raises(PayloadError, match="kind"):
        encode(p)
    p = make()
    p.arrays["c"] = np.zeros(2, np.complex128)
    with pytest.raises(PayloadError, match="complex128"):
        encoded_size(p)


def test_dicts_are_copied():
    arrays = {"x": X}
    p = make(arrays=arrays)
    arrays["y"] = X
    assert list(p.arrays) == ["x"]


def test_array_bytes_and_encoded_size():
    p = make(arrays={"x": X, "y": np.zeros(5, np.int64)})
    assert p.array_bytes == 24 + 40
    assert encoded_size(p) == len(encode(p))


def test_same_as():
    p = make(scalars={"f": float("nan")})
    q = make(scalars={"f": float("nan")})
    assert p.same_as(q)
    assert not p.same_as(make(kind="knowledge", scalars={"f": float("nan")}))
    assert not p.same_as(make(arrays={"x": X + 1}))
    assert not p.same_as(make(arrays={"x": X.astype(np.float64)}))
    assert not make(scalars={"a": 1}).same_as(make(scalars={"a": True}))
