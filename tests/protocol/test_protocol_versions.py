"""Every protocol version this release speaks, held to the bytes its own release wrote.

The fixtures are recordings (`wire_fixture.py`): messages-v2.json was written by the last release
that spoke only version 2. This release must read those bytes as the same messages and write them
again byte for byte when it speaks to a version-2 peer: that is what lets a fleet upgrade one
machine at a time."""

import json
from dataclasses import replace

import pytest
from wire_fixture import FIXTURES, messages

from edgefd.protocol import (
    MESSAGE_VERSION,
    MESSAGE_VERSIONS,
    Message,
    UnsupportedVersionError,
    decode_message,
    encode_message,
    message_version,
)


def recorded(version: int) -> dict[str, bytes]:
    document = json.loads((FIXTURES / f"messages-v{version}.json").read_text())
    assert document["version"] == version
    return {name: bytes.fromhex(text) for name, text in document["messages"].items()}


def same_message(a: Message, b: Message) -> bool:
    if (a.content is None) != (b.content is None):
        return False
    contents_agree = a.content is None or a.content.same_as(b.content)
    return contents_agree and replace(a, content=None) == replace(b, content=None)


def test_this_release_speaks_its_version_and_the_one_before():
    assert MESSAGE_VERSIONS == (MESSAGE_VERSION - 1, MESSAGE_VERSION)
    assert sorted(int(path.stem.split("-v")[1]) for path in FIXTURES.glob("messages-v*.json"))[-2:] == list(
        MESSAGE_VERSIONS
    ), "record the current version's messages (wire_fixture.py) beside the previous one's"


@pytest.mark.parametrize("version", MESSAGE_VERSIONS)
def test_a_recorded_release_is_read_and_written_byte_for_byte(version):
    built = messages()
    for name, data in recorded(version).items():
        assert message_version(data) == version
        assert encode_message(built[name], version) == data, name
        # fp16 and int8 arrays come back at their wire precision: compare with this release's own
        assert same_message(decode_message(data), decode_message(encode_message(built[name]))), name


def test_version_3_keeps_the_layout_of_version_2():
    """What version 3 changes is the negotiation, not the bytes: only the version byte differs."""
    for name, old in recorded(2).items():
        new = recorded(3)[name]
        assert old[:4] + old[5:] == new[:4] + new[5:] and (old[4], new[4]) == (2, 3), name


def test_a_side_refuses_versions_it_does_not_speak_saying_which_side_to_upgrade():
    train = encode_message(messages()["train-answer"])
    as_v2 = encode_message(messages()["train-answer"], 2)
    with pytest.raises(
        UnsupportedVersionError,
        match="protocol version 3: this edgefd speaks version 2; .* upgrade edgefd on this side",
    ):
        decode_message(train, versions=(2,))  # a side that speaks only 2 (the previous release) hears 3
    assert decode_message(as_v2, versions=(2,)).round == 2
    future = train[:4] + bytes((MESSAGE_VERSION + 1,)) + train[5:]
    with pytest.raises(UnsupportedVersionError, match="upgrade edgefd on this side") as error:
        decode_message(future)
    assert (error.value.version, error.value.supported) == (MESSAGE_VERSION + 1, MESSAGE_VERSIONS)
    with pytest.raises(ValueError, match="this edgefd writes versions 2-3"):
        encode_message(messages()["stop"], 1)


def test_the_version_is_read_from_the_first_five_bytes_alone():
    assert message_version(b"EFM1\x07") == 7
    with pytest.raises(ValueError, match="before the version"):
        message_version(b"EFM1")
