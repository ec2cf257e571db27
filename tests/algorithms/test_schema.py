"""The uplink schemas: what a payload that decoded must still be before a server sees it."""

import numpy as np
import pytest

from edgefd.algorithms import schema
from edgefd.algorithms.schema import ArraySpec, MessageSchema, ScalarSpec, UplinkRejected, check_payload, is_member
from edgefd.protocol import Payload, encode

C = 4
OWNED = np.array([3, 5, 8, 13], np.int64)
KNOWLEDGE = MessageSchema(
    "knowledge",
    {
        "ids": schema.sample_ids(OWNED, length=None),
        "logits": schema.knowledge((None, C)),
        "counts": schema.counts((C,)),
        "labels": ArraySpec(("int64",), (None,), 0, C - 1, optional=True),
    },
    {"samples": schema.samples(1), "note": ScalarSpec(str, optional=True)},
)


def honest(**changes):
    arrays = {
        "ids": OWNED[:2].copy(),
        "logits": np.array([[1.0, -2.0, 0.5, 3.0], [0.0, 0.0, 0.0, 0.0]], np.float32),
        "counts": np.array([1, 0, 1, 0], np.int64),
    }
    scalars = {"samples": 2}
    for name, value in changes.items():
        target = scalars if name in ("samples", "note", "extra") else arrays
        if value is None:
            target.pop(name)
        else:
            target[name] = value
    return Payload("knowledge", arrays, scalars)


def test_an_honest_payload_fits_and_optional_parts_may_come():
    check_payload(honest(), [KNOWLEDGE])
    check_payload(honest(labels=np.array([0, 3], np.int64), note="hi"), [KNOWLEDGE])


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        (dict(logits=None), "missing-array"),
        (dict(samples=None), "missing-scalar"),
        (dict(weights=np.zeros(2, np.float32)), "unexpected-array"),
        (dict(extra=1), "unexpected-scalar"),
        (dict(logits=np.zeros((2, C), np.float64)), "dtype"),
        (dict(logits=np.zeros((1, 1), np.float32)), "shape"),  # would broadcast
        (dict(logits=np.zeros((2, C, 1), np.float32)), "shape"),
        (dict(counts=np.zeros(C + 1, np.int64)), "shape"),
        (dict(logits=np.full((2, C), 1e30, np.float32)), "out-of-range"),
        (dict(logits=np.full((2, C), 70000.0, np.float32)), "out-of-range"),  # beyond fp16
        (dict(logits=np.array([[np.inf] * C] * 2, np.float32)), "non-finite"),
        (dict(counts=np.array([1, -5, 1, 0], np.int64)), "out-of-range"),
        (dict(ids=np.array([3, 4], np.int64)), "foreign-ids"),
        (dict(labels=np.array([0, C], np.int64)), "out-of-range"),
        (dict(samples=0), "out-of-range"),
        (dict(samples="many"), "scalar-type"),
        (dict(samples=2.0), "scalar-type"),
        (dict(samples=True), "scalar-type"),
        (dict(note=3), "scalar-type"),
    ],
)
def test_each_kind_of_tampering_is_refused_with_its_reason(changes, reason):
    with pytest.raises(UplinkRejected) as refused:
        check_payload(honest(**changes), [KNOWLEDGE])
    assert refused.value.reason == reason


def test_a_kind_the_client_does_not_send_is_refused():
    with pytest.raises(UplinkRejected, match="wrong-kind: .*'knowledge'"):
        check_payload(Payload("weights"), [KNOWLEDGE])
    with pytest.raises(UplinkRejected, match="sends nothing"):
        check_payload(honest(), [])


def test_float_scalars_accept_ints_but_not_nan_or_infinity():
    spec = ScalarSpec(float, 0.0, 1.0)
    spec.check("accuracy", 1)
    spec.check("accuracy", 0.5)
    for bad in (float("nan"), float("inf"), 1.5):
        with pytest.raises(UplinkRejected, match="out-of-range"):
            spec.check("accuracy", bad)


def test_a_model_state_must_match_names_shapes_and_dtypes():
    state = {"w": np.zeros((3, 2), np.float32), "bn.num_batches_tracked": np.array(7, np.int64)}
    weights = MessageSchema("weights", schema.model_state(state))
    check_payload(Payload("weights", state), [weights])
    bad = {**state, "w": np.full((3, 2), 2e6, np.float32)}
    with pytest.raises(UplinkRejected, match="out-of-range"):
        check_payload(Payload("weights", bad), [weights])
    with pytest.raises(UplinkRejected, match="shape"):
        check_payload(Payload("weights", {**state, "w": np.zeros((2, 3), np.float32)}), [weights])


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_the_message_bound_holds_every_payload_that_fits(precision):
    fixed = MessageSchema(
        "knowledge",
        {"logits": schema.knowledge((C, C)), "counts": schema.counts((C,)), "one": schema.knowledge((3, 1))},
        {"samples": schema.samples(1), "note": ScalarSpec(str, optional=True)},
    )
    payload = Payload(
        "knowledge",
        {
            "logits": np.ones((C, C), np.float32),
            "counts": np.ones(C, np.int64),
            "one": np.ones((3, 1), np.float32),
        },
        {"samples": 5, "note": "x" * 65535},
    ).with_precision(None if precision == "fp32" else precision, ["logits", "one"])
    check_payload(payload, [fixed])
    bound = schema.message_bound([fixed])
    assert len(encode(payload)) <= bound < len(encode(payload)) + 200


def test_a_message_with_an_open_size_has_no_bound():
    assert schema.message_bound([KNOWLEDGE]) is None  # ids and logits of any length
    assert schema.message_bound([]) is None


def test_counts_a_client_declared_first_cannot_change():
    declared = schema.DeclaredCounts()
    declared.check("c1", samples=40, counts=np.array([30, 10]))
    declared.check("c1", samples=40, counts=np.array([30, 10]))  # the same data: fine
    declared.check("c2", samples=5, counts=np.array([5, 0]))  # another client's own numbers
    with pytest.raises(UplinkRejected, match="counts-changed: samples"):
        declared.check("c1", samples=4000, counts=np.array([30, 10]))
    with pytest.raises(UplinkRejected, match="counts-changed: counts"):
        declared.check("c1", samples=40, counts=np.array([3000, 10]))


def test_is_member_agrees_with_isin():
    rng = np.random.default_rng(3)
    members = np.unique(rng.integers(0, 500, 200))
    values = rng.integers(-5, 510, (7, 9))
    np.testing.assert_array_equal(is_member(values, members), np.isin(values, members))
    assert not is_member(np.array([1, 2]), np.array([], np.int64)).any()


def test_named_axes_agree_with_each_other_and_with_the_scalar_of_their_name():
    rows = MessageSchema(
        "rows",
        {"ids": ArraySpec(("int64",), ("samples",), unique=True), "logits": schema.knowledge(("samples", C))},
        {"samples": schema.samples()},
    )

    def payload(ids, logits_rows, samples):
        arrays = {"ids": np.array(ids, np.int64), "logits": np.zeros((logits_rows, C), np.float32)}
        return Payload("rows", arrays, {"samples": samples})

    check_payload(payload([1, 2], 2, 2), [rows])
    for bad, reason in [
        (payload([1, 2], 3, 2), "shape"),  # a row of logits without an id
        (payload([1, 2], 2, 3), "shape"),  # more samples declared than sent
        (payload([1, 1], 2, 2), "repeated-ids"),
    ]:
        with pytest.raises(UplinkRejected) as refused:
            check_payload(bad, [rows])
        assert refused.value.reason == reason
    assert schema.message_bound([rows]) is None  # a named length is an open one
