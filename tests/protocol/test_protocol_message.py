"""A message's metadata travels apart from its content: both round-trip, a message without content
is only its metadata, and bad metadata or bytes are refused with a ProtocolError that names them."""

import numpy as np
import pytest

from edgefd.protocol import (
    MagicError,
    MalformedError,
    Message,
    Payload,
    PayloadError,
    TruncatedError,
    VersionError,
    decode_message,
    encode,
    encode_message,
    split,
)
from edgefd.protocol.message import SERVER


def content() -> Payload:
    return Payload("knowledge", "client-3", 7, {"z": np.arange(12, dtype=np.float32).reshape(3, 4)}, {"n": 3})


def test_metadata_and_content_round_trip_and_are_counted_apart():
    message = Message("step", "client-3", SERVER, 7, content(), step=12, run="demo")
    data = encode_message(message)
    back = decode_message(data)
    assert (back.verb, back.sender, back.receiver, back.round, back.step, back.run, back.is_answer) == (
        "step",
        "client-3",
        SERVER,
        7,
        12,
        "demo",
        False,
    )
    assert back.content.same_as(message.content)
    assert message.content_bytes == len(encode(message.content))  # the method's bytes, as before
    assert len(data) == message.metadata_bytes + message.content_bytes


def test_an_answer_swaps_the_ends_and_keeps_verb_round_and_step():
    request = Message("step", "client-3", SERVER, 7, content(), step=4, run="demo")
    answer = decode_message(encode_message(request.answer(None)))
    assert (answer.sender, answer.receiver, answer.verb, answer.round, answer.step, answer.is_answer) == (
        SERVER,
        "client-3",
        "step",
        7,
        4,
        True,
    )
    assert answer.content is None and answer.content_bytes == 0
    assert len(encode_message(answer)) == answer.metadata_bytes < 60


@pytest.mark.parametrize(
    "fields, problem",
    [
        (dict(verb="Train"), "verb"),
        (dict(verb=""), "verb"),
        (dict(sender=""), "sender"),
        (dict(receiver="a\nb"), "receiver"),
        (dict(run="x" * 65), "run"),
        (dict(round=-2), "round"),
        (dict(round=True), "round"),
        (dict(step=-1), "step"),
        (dict(content=b"raw"), "content"),
    ],
)
def test_bad_metadata_is_refused_where_it_is_made(fields, problem):
    values = dict(verb="train", sender=SERVER, receiver="client-0", round=1, content=None)
    with pytest.raises(PayloadError, match=problem):
        Message(**{**values, **fields})


def test_bad_bytes_are_refused_naming_what_is_wrong():
    data = encode_message(Message("train", SERVER, "client-0", 1, content(), run="r"))
    with pytest.raises(MagicError, match="bare payload"):
        decode_message(encode(content()))
    with pytest.raises(MagicError, match="chunk frame"):
        decode_message(split(data, 64)[0])
    with pytest.raises(TruncatedError):
        decode_message(data[:20])
    with pytest.raises(VersionError):
        decode_message(data[:4] + b"\x02" + data[5:])
    with pytest.raises(VersionError, match="flags"):
        decode_message(data[:5] + b"\x80" + data[6:])
    with pytest.raises(MalformedError, match="after a message without content"):
        decode_message(encode_message(Message("train", SERVER, "client-0", 1)) + b"x")
    with pytest.raises(MalformedError, match="verb"):
        decode_message(data[:15] + b"T" + data[16:])  # the verb's first letter: 'train' -> 'Train'


def test_mutated_messages_raise_protocol_errors_only():
    from edgefd.protocol import ProtocolError

    rng = np.random.default_rng(0)
    data = encode_message(Message("train", "client-1", SERVER, 3, content(), run="r"))
    for _ in range(2000):
        mutated = bytearray(data)
        for _ in range(rng.integers(1, 4)):
            mutated[rng.integers(0, len(mutated))] = rng.integers(0, 256)
        if rng.random() < 0.3:
            mutated = mutated[: rng.integers(0, len(mutated))]
        try:
            decode_message(bytes(mutated))
        except ProtocolError:
            pass
