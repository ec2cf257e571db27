"""The in-process transport counts exactly the encoded bytes, content apart from metadata, and
hands over decoded copies."""

import numpy as np

from edgefd.protocol import Payload, encode, encode_message
from edgefd.protocol.message import SERVER, Message
from edgefd.runtime.transport import DOWN, UP, InProcessTransport


def test_counted_bytes_equal_encoded_lengths_and_copies_are_independent():
    transport = InProcessTransport()
    arrays = {"w": np.arange(12, dtype=np.float32).reshape(3, 4)}
    up = Payload("weights", arrays, {"samples": 7})
    down = Payload("knowledge", {"z": np.ones((2, 10), np.float32)}).with_precision("int8")
    request = Message("train", SERVER, "client-1", 3, down)
    got_down = transport.carry(request)
    got_up = transport.carry(request.answer(up))
    assert transport.ledger.total(UP, 3) == len(encode(up))  # the content: the method's bytes
    assert transport.ledger.total(DOWN, 3) == len(encode(down))
    metadata = sum(transport.ledger.metadata.values())
    assert metadata == len(encode_message(request)) - len(encode(down)) + len(encode_message(request.answer(up))) - len(
        encode(up)
    )
    assert 0 < metadata < 100
    np.testing.assert_array_equal(got_up.content.arrays["w"], arrays["w"])
    got_up.content.arrays["w"][0, 0] = 99  # the receiver's copy is its own
    assert arrays["w"][0, 0] == 0
    assert got_down.content.precision == {"z": "int8"}
    assert (got_down.verb, got_down.receiver, got_up.sender, got_up.is_answer) == (
        "train",
        "client-1",
        "client-1",
        True,
    )


def test_a_message_without_content_counts_no_content_and_an_evaluation_is_not_counted():
    transport = InProcessTransport()
    transport.carry(Message("hello", SERVER, "c", 0))
    scores = Payload("metrics", scalars={"accuracy": 0.5})
    transport.carry(Message("evaluate", "c", SERVER, 1, scores, is_answer=True))
    assert transport.ledger.total(UP) == 0 and transport.ledger.total(DOWN) == 0
    assert sum(transport.ledger.content.values()) == len(encode(scores))  # kept, under its verb


def test_a_message_larger_than_its_receiver_takes_is_refused_and_counted_where_a_server_counts_it():
    """A client's message over the limit never reaches the server, so it is not counted; the server's
    is counted as sent, as a deployed server counts it, though its client refuses it."""
    import pytest

    from edgefd.protocol import OversizedError

    transport = InProcessTransport()
    weights = Payload("weights", {"w": np.zeros(1000, np.float32)})
    down = Message("train", SERVER, "c", 1, weights)
    with pytest.raises(OversizedError, match="a train message of"):
        transport.carry(down, 1000)
    assert transport.ledger.total(DOWN, 1) == len(encode(weights))
    with pytest.raises(OversizedError):
        transport.carry(down.answer(weights), 1000)
    assert transport.ledger.total(UP, 1) == 0
    size = len(encode_message(down.answer(weights)))
    assert transport.carry(down.answer(weights), size).content.arrays["w"].shape == (1000,)
    assert transport.ledger.total(UP, 1) == len(encode(weights))
