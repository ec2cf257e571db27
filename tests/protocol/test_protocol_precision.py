"""The run's wire precision on a payload's knowledge (`at_precision`, applied by the runtime)."""

import numpy as np

from edgefd.protocol import Payload, at_precision, decode, encode


def knowledge_and_more() -> Payload:
    arrays = {
        "logits": np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4),
        "weights": np.ones((2, 2), np.float32),
        "ids": np.arange(3, dtype=np.int64),
    }
    return Payload("knowledge", arrays)


def test_fp32_leaves_the_payload_as_it_is():
    payload = knowledge_and_more()
    assert at_precision(payload, "fp32", ["logits"]) is payload


def test_only_the_knowledge_named_travels_lossy_and_absent_names_are_skipped():
    sent = at_precision(knowledge_and_more(), "int8", ["logits", "features"])  # no features in this one
    assert sent.precision == {"logits": "int8"}
    received = decode(encode(sent))
    assert received.arrays["logits"].dtype == np.float32 and received.precision == {"logits": "int8"}
    np.testing.assert_array_equal(received.arrays["weights"], np.ones((2, 2), np.float32))  # lossless


def test_without_names_every_float_array_travels_at_the_precision():
    assert at_precision(knowledge_and_more(), "fp16").precision == {"logits": "fp16", "weights": "fp16"}
