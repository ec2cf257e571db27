"""A message's metadata travels apart from its content: both round-trip, a message without content
is only its metadata, and bad metadata or bytes are refused with a ProtocolError that names them."""

import struct

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
from edgefd.protocol.message import MESSAGE_VERSION, SERVER


def content() -> Payload:
    return Payload("knowledge", {"z": np.arange(12, dtype=np.float32).reshape(3, 4)}, {"n": 3})


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
        (dict(sender=""), "sender must be 1..64 bytes"),
        (dict(sender="s" * 65), "sender must be 1..64 bytes of UTF-8, got 65"),
        (dict(sender="é" * 33), "sender .* got 66"),  # 33 characters but 66 bytes
        (dict(sender="a\nb"), "sender .* control characters"),
        (dict(sender="a\x85b"), "sender .* control characters"),  # C1
        (dict(sender="\ud800"), "sender .* not encodable"),
        (dict(sender=7), "sender must be str"),
        (dict(receiver="a\nb"), "receiver"),
        (dict(run="x" * 65), "run"),
        (dict(round=-2), "round"),
        (dict(round=2**31), "round"),
        (dict(round=True), "round"),
        (dict(round=1.0), "round"),
        (dict(round="3"), "round"),
        (dict(step=-1), "step"),
        (dict(content=b"raw"), "content"),
    ],
)
def test_bad_metadata_is_refused_where_it_is_made(fields, problem):
    values = dict(verb="train", sender=SERVER, receiver="client-0", round=1, content=None)
    with pytest.raises(PayloadError, match=problem):
        Message(**{**values, **fields})


def test_metadata_limits_ok():
    for sender in ("s" * 64, "Raspberry-π-客户端", "é" * 32):
        message = Message("train", sender, SERVER, 0, content())
        assert decode_message(encode_message(message)).sender == sender
    for rnd in (-1, 0, 2**31 - 1):
        assert decode_message(encode_message(Message("train", SERVER, "c", rnd))).round == rnd


def message_bytes(
    *,
    verb: bytes = b"train",
    sender: bytes = b"client-0",
    receiver: bytes = b"server",
    run: bytes = b"",
    rnd: int = 1,
    step: int = 0,
) -> bytes:
    """A message without content assembled field by field from the documented layout: the sender
    and round that a version-1 payload carried are checked here, where they travel now."""
    head = struct.pack("<4sBBiI", b"EFM1", MESSAGE_VERSION, 0, rnd, step)
    return head + b"".join(bytes((len(t),)) + t for t in (verb, sender, receiver, run))


@pytest.mark.parametrize(
    "fields, words",
    [
        (dict(sender=b""), "sender must be 1..64 bytes of UTF-8, got 0"),
        (dict(sender=b"s" * 65), "sender must be 1..64 bytes of UTF-8, got 65"),
        (dict(sender="é".encode() * 33), "sender must be 1..64 bytes of UTF-8, got 66"),
        (dict(sender=b"c\xff"), "message sender: invalid UTF-8"),
        (dict(sender=b"c\n"), r"sender 'c\\n' contains control characters"),
        (dict(sender="c\x85".encode()), "contains control characters"),  # C1, two bytes of UTF-8
        (dict(receiver=b""), "receiver must be 1..64 bytes"),
        (dict(receiver=b"\xc3"), "message receiver: invalid UTF-8"),
        (dict(run=b"r\x7f"), "run .* contains control characters"),
        (dict(rnd=-2), r"round must be an int in \[-1, 2147483647\], got -2"),
        (dict(rnd=-(2**31)), "round .* got -2147483648"),
    ],
)
def test_bad_metadata_bytes_are_refused_naming_the_field(fields, words):
    assert decode_message(message_bytes()).sender == "client-0"  # the builder's own bytes are good
    with pytest.raises(MalformedError, match=words):
        decode_message(message_bytes(**fields))


def test_bad_bytes_are_refused_naming_what_is_wrong():
    data = encode_message(Message("train", SERVER, "client-0", 1, content(), run="r"))
    with pytest.raises(MagicError, match="bare payload"):
        decode_message(encode(content()))
    with pytest.raises(MagicError, match="chunk frame"):
        decode_message(split(data, 64)[0])
    with pytest.raises(TruncatedError):
        decode_message(data[:20])
    for version, side in ((0, "on the sender"), (1, "on the sender"), (4, "on this side"), (255, "on this side")):
        expected = f"protocol version {version}: this edgefd speaks versions 2-3; .* upgrade edgefd {side}"
        with pytest.raises(VersionError, match=expected):
            decode_message(data[:4] + bytes((version,)) + data[5:])
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
