"""A message of a run: who sends what to whom, in which round and step, apart from what it carries.

Every channel moves :class:`Message` s (the in-process one of a simulation, MQTT, ...). The
metadata is the runtime's address of the message; the content is a method's :class:`Payload`, or
nothing. A method builds only content; the runtime builds every message, in one place per side
(``edgefd.runtime.verbs.ClientApp`` on a client, ``edgefd.runtime.loop`` on the server). Who sent
the content, to whom and in which round is said here alone: a payload carries none of it.

Wire layout, little-endian: a fixed header, four short texts, then the content's own encoding
(:func:`edgefd.protocol.encode`, with its own header and checksum) when there is content::

    offset size field
    0      4    magic  b"EFM1"
    4      1    version: the protocol version (below), read before anything after the magic
    5      1    flags: bit 0 the message carries content, bit 1 it answers a request
    6      4    round (i32, -1: not in a round)
    10     4    step (u32; 0: not a step of an exchange during training)
    14     ...  verb, sender, receiver, run: each a u8 length and that many bytes of UTF-8
    ...         the content (encoded payload), to the end of the buffer

What a round's bytes count is the content's encoding (``content_bytes``): the method's
communication, the same number whatever carries it. The metadata (14 bytes and the four texts,
``metadata_bytes``) is the runtime's, counted apart.

Protocol versions. The magic and the version byte come first in every version, past and future;
everything after them is that version's. This release reads and writes :data:`MESSAGE_VERSIONS`
(its own, :data:`MESSAGE_VERSION`, and the one before), so that a fleet upgrades one machine at a
time: each side writes to a peer in a version the peer speaks (a deployment's negotiation is in
``edgefd.deploy``), and a message of any other version is refused with an
:class:`UnsupportedVersionError` that names both sides' versions and which side to upgrade.

- 2: the content is a version-2 payload, which has no sender or round.
- 3: the layout of 2. What is new is the negotiation: a deployment's config names the versions its
  server speaks, and a device writes the newest both speak (a device of version 2 reads the config
  as before and is written to in version 2).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, replace

from .codec import DEFAULT_MAX_BYTES, _as_bytes_view, _check_magic, decode, encode_buffers, encoded_size
from .errors import (
    MalformedError,
    OversizedError,
    PayloadError,
    TruncatedError,
    UnsupportedVersionError,
    VersionError,
    versions_text,
)
from .payload import MAX_SENDER_LEN, ROUND_MAX, ROUND_MIN, Payload, _text_problem

__all__ = [
    "MESSAGE_MAGIC",
    "MESSAGE_VERSION",
    "MESSAGE_VERSIONS",
    "SERVER",
    "Message",
    "decode_message",
    "encode_message",
    "encode_message_buffers",
    "message_version",
]

MESSAGE_MAGIC = b"EFM1"
MESSAGE_VERSION = 3
"""The protocol version this release writes unless its peer speaks only an older one."""
MESSAGE_VERSIONS = (2, 3)
"""Every protocol version this release reads and writes, oldest first: its own and the one before."""
SERVER = "server"
"""The sender of every server message and the receiver of every client message."""
_FIXED = struct.Struct("<4sBBiI")
_HAS_CONTENT = 1
_IS_ANSWER = 2
_VERB_RE = re.compile(r"[a-z][a-z0-9_]{0,31}\Z")
_PLAIN_NAME_RE = re.compile(rf"[\x20-\x7e]{{1,{MAX_SENDER_LEN}}}\Z")
"""A sender, receiver or run name of printable ASCII that fits: the common case, checked in one match."""
MAX_STEP = 2**32 - 1


@dataclass(frozen=True)
class Message:
    """One message: metadata (verb, sender, receiver, round, step, run, whether it answers a
    request) and content (a method's payload, or None). An answer keeps its request's verb,
    round and step, so that together with the sender they name the request it answers."""

    verb: str
    sender: str
    receiver: str
    round: int
    content: Payload | None = None
    step: int = 0
    run: str = ""
    is_answer: bool = False

    def __post_init__(self) -> None:
        problem = _metadata_problem(self)
        if problem:
            raise PayloadError(problem, field="message")

    def answer(self, content: Payload | None) -> Message:
        """This request's answer, from its receiver back to its sender."""
        return replace(self, sender=self.receiver, receiver=self.sender, content=content, is_answer=True)

    @property
    def content_bytes(self) -> int:
        """Length of the content's encoding: what a round's byte counts add up."""
        return 0 if self.content is None else encoded_size(self.content)

    @property
    def metadata_bytes(self) -> int:
        texts = (self.verb, self.sender, self.receiver, self.run)
        return _FIXED.size + sum(1 + (len(t) if t.isascii() else len(t.encode())) for t in texts)


def _metadata_problem(message: Message) -> str | None:
    if not isinstance(message.verb, str) or not _VERB_RE.match(message.verb):
        return f"verb {message.verb!r} must match [a-z][a-z0-9_]{{0,31}}"
    for what in ("sender", "receiver", "run"):
        value = getattr(message, what)
        if (what == "run" and value == "") or (type(value) is str and _PLAIN_NAME_RE.match(value)):
            continue
        problem = _text_problem(what, value, MAX_SENDER_LEN)  # says what is wrong, or takes other UTF-8
        if problem:
            return problem
    if (
        isinstance(message.round, bool)
        or not isinstance(message.round, int)
        or not ROUND_MIN <= message.round <= ROUND_MAX
    ):
        return f"round must be an int in [{ROUND_MIN}, {ROUND_MAX}], got {message.round!r}"
    if isinstance(message.step, bool) or not isinstance(message.step, int) or not 0 <= message.step <= MAX_STEP:
        return f"step must be an int in [0, {MAX_STEP}], got {message.step!r}"
    if message.content is not None and not isinstance(message.content, Payload):
        return f"content must be a Payload or None, got {type(message.content).__name__}"
    return None


def encode_message_buffers(message: Message, version: int = MESSAGE_VERSION) -> list:
    """The encoded message as a list of buffers (the content's arrays are not copied): join them,
    or cut them into chunk frames (:func:`edgefd.protocol.split`). ``version``: the protocol
    version to write, one of :data:`MESSAGE_VERSIONS` (the peer's, where it speaks an older one)."""
    if version not in MESSAGE_VERSIONS:
        raise ValueError(f"protocol version {version}: this edgefd writes {versions_text(MESSAGE_VERSIONS)}")
    flags = (_HAS_CONTENT if message.content is not None else 0) | (_IS_ANSWER if message.is_answer else 0)
    head = bytearray(_FIXED.pack(MESSAGE_MAGIC, version, flags, message.round, message.step))
    for text in (message.verb, message.sender, message.receiver, message.run):
        raw = text.encode()
        head += bytes((len(raw),)) + raw
    return [bytes(head)] + ([] if message.content is None else encode_buffers(message.content))


def encode_message(message: Message, version: int = MESSAGE_VERSION) -> bytes:
    return b"".join(encode_message_buffers(message, version))


def message_version(data: bytes | bytearray | memoryview) -> int:
    """The protocol version of an encoded message, read from the bytes every version begins with
    (the magic and the version byte), before anything else is parsed."""
    mv = _as_bytes_view(data)
    _check_magic(mv, MESSAGE_MAGIC, "message", {b"EFD1": "a bare payload, not a message", b"EFC1": "a chunk frame"})
    if len(mv) < len(MESSAGE_MAGIC) + 1:
        raise TruncatedError(f"message header: the buffer ends at byte {len(mv)}, before the version", field="version")
    return mv[len(MESSAGE_MAGIC)]


def decode_message(
    data: bytes | bytearray | memoryview,
    *,
    max_bytes: int | None = DEFAULT_MAX_BYTES,
    allow_nonfinite: bool | None = None,
    versions: tuple[int, ...] = MESSAGE_VERSIONS,
) -> Message:
    """Parse and check one encoded message (its content with :func:`edgefd.protocol.decode`) of
    one of ``versions``. Raises a :class:`ProtocolError` subclass for anything wrong
    (:class:`UnsupportedVersionError` for another version)."""
    mv = _as_bytes_view(data)
    if max_bytes is not None and len(mv) > max_bytes:
        raise OversizedError(f"message: {len(mv)} bytes exceeds max_bytes={max_bytes}", field="size")
    version = message_version(mv)
    if version not in versions:
        raise UnsupportedVersionError(version, versions)
    if len(mv) < _FIXED.size:
        raise TruncatedError(f"message header: expected {_FIXED.size} bytes, got {len(mv)}", field="header")
    _, version, flags, round, step = _FIXED.unpack_from(mv, 0)
    if flags & ~(_HAS_CONTENT | _IS_ANSWER):
        raise VersionError(f"message flags: unknown bits 0x{flags:02x}", field="flags")
    pos = _FIXED.size
    texts = []
    for what in ("verb", "sender", "receiver", "run"):
        if pos >= len(mv):
            raise TruncatedError(f"message {what}: the buffer ends at byte {pos}", field=what)
        n = mv[pos]
        if pos + 1 + n > len(mv):
            raise TruncatedError(f"message {what}: {n} bytes claimed, {len(mv) - pos - 1} left", field=what)
        try:
            texts.append(bytes(mv[pos + 1 : pos + 1 + n]).decode("utf-8"))
        except UnicodeDecodeError as e:
            raise MalformedError(f"message {what}: invalid UTF-8 ({e.reason})", field=what) from None
        pos += 1 + n
    verb, sender, receiver, run = texts
    content = None
    if flags & _HAS_CONTENT:
        content = decode(mv[pos:], max_bytes=None, allow_nonfinite=allow_nonfinite)
    elif pos != len(mv):
        raise MalformedError(f"message: {len(mv) - pos} bytes after a message without content", field="size")
    try:
        return Message(verb, sender, receiver, round, content, step, run, bool(flags & _IS_ANSWER))
    except PayloadError as error:
        raise MalformedError(str(error), field="message") from None
