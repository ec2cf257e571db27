"""The ledger counts exactly the encoded bytes, content apart from metadata; the in-process
transport hands over decoded copies and refuses what its receiver does not take."""

import numpy as np
import pytest

from edgefd.protocol import OversizedError, Payload, encode, encode_message
from edgefd.protocol.message import SERVER, Message
from edgefd.runtime.transport import DOWN, UP, ByteLedger, InProcessTransport


def test_counted_bytes_equal_encoded_lengths():
    ledger = ByteLedger()
    up = Payload("weights", {"w": np.arange(12, dtype=np.float32).reshape(3, 4)}, {"samples": 7})
    down = Payload("knowledge", {"z": np.ones((2, 10), np.float32)}).with_precision("int8")
    request = Message("train", SERVER, "client-1", 3, down)
    answer = InProcessTransport().carry(request.answer(up))  # counted as the server takes it: decoded
    ledger.count(request)
    ledger.count(answer)
    assert ledger.total(UP, 3) == len(encode(up))  # the content: the method's bytes
    assert ledger.total(DOWN, 3) == len(encode(down))
    assert ledger.total(UP, 3, "client-1") == len(encode(up)) and ledger.total(UP, 3, "client-2") == 0
    metadata = sum(ledger.metadata.values())
    assert metadata == len(encode_message(request)) - len(encode(down)) + len(encode_message(answer)) - len(encode(up))
    assert 0 < metadata < 100


def test_a_message_without_content_counts_no_content_and_an_evaluation_is_not_counted():
    ledger = ByteLedger()
    ledger.count(Message("hello", SERVER, "c", 0))
    scores = Payload("metrics", scalars={"accuracy": 0.5})
    ledger.count(Message("evaluate", "c", SERVER, 1, scores, is_answer=True))
    assert ledger.total(UP) == 0 and ledger.total(DOWN) == 0
    assert sum(ledger.content.values()) == len(encode(scores))  # kept, under its verb


def test_the_receiver_gets_a_decoded_copy():
    arrays = {"w": np.arange(12, dtype=np.float32).reshape(3, 4)}
    down = Payload("knowledge", {"z": np.ones((2, 10), np.float32)}).with_precision("int8")
    request = Message("train", SERVER, "client-1", 3, down)
    transport = InProcessTransport()
    got_down = transport.carry(request)
    got_up = transport.carry(request.answer(Payload("weights", arrays)))
    np.testing.assert_array_equal(got_up.content.arrays["w"], arrays["w"])
    got_up.content.arrays["w"][0, 0] = 99  # the receiver's copy is its own
    assert arrays["w"][0, 0] == 0
    assert got_down.content.precision == {"z": "int8"}
    assert (got_down.verb, got_down.receiver) == ("train", "client-1")
    assert (got_up.sender, got_up.is_answer) == ("client-1", True)


def test_a_message_larger_than_its_receiver_takes_is_refused():
    transport = InProcessTransport()
    weights = Payload("weights", {"w": np.zeros(1000, np.float32)})
    down = Message("train", SERVER, "c", 1, weights)
    with pytest.raises(OversizedError, match="a train message of"):
        transport.carry(down, 1000)
    size = len(encode_message(down.answer(weights)))
    with pytest.raises(OversizedError):
        transport.carry(down.answer(weights), size - 1)
    assert transport.carry(down.answer(weights), size).content.arrays["w"].shape == (1000,)
