"""Moving messages between roles in this process, and the ledger that counts a run's bytes.

The in-process transport of a simulation does what the MQTT transport does to a message: it
encodes it with the one codec and hands the *decoded* copy to the other side, so no Python object
is ever shared between a client and the server. The loop counts, once, what it sends and takes
(:class:`ByteLedger`): the encoded contents, so the bytes a simulation reports are the bytes a
deployment sends (MQTT framing and chunk headers are reported apart, by that transport).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from edgefd.protocol import DEFAULT_MAX_BYTES, OversizedError, decode_message, encode_message
from edgefd.protocol.message import SERVER, Message
from edgefd.runtime.verbs import verb

UP = "up"
DOWN = "down"


@dataclass
class ByteLedger:
    """Bytes per (round, direction, client, verb), as encoded on the wire.

    ``content`` counts the contents' encodings: the method's communication, what a round's
    ``bytes_up`` and ``bytes_down`` report (the verbs the table marks as counted: not the
    evaluation). ``metadata`` counts what each message adds around its content (verb, sender,
    receiver, round, step: `Message.metadata_bytes`), for every verb."""

    content: dict[tuple[int, str, str, str], int] = field(default_factory=lambda: defaultdict(int))
    metadata: dict[tuple[int, str, str, str], int] = field(default_factory=lambda: defaultdict(int))
    messages: dict[tuple[int, str, str, str], int] = field(default_factory=lambda: defaultdict(int))

    def count(self, message: Message) -> None:
        """Count ``message``, sent or taken by the server."""
        self.add(message, message.content_bytes, message.metadata_bytes)

    def add(self, message: Message, content_bytes: int, metadata_bytes: int) -> None:
        client = message.receiver if message.sender == SERVER else message.sender
        key = (message.round, DOWN if message.sender == SERVER else UP, client, message.verb)
        self.content[key] += content_bytes
        self.metadata[key] += metadata_bytes
        self.messages[key] += 1

    def total(self, direction: str, round: int | None = None, client: str | None = None) -> int:
        """Counted content bytes in ``direction`` (in ``round``, or the whole run; of ``client``, or
        every client)."""
        return sum(
            n
            for (r, d, c, name), n in self.content.items()
            if d == direction
            and (round is None or r == round)
            and (client is None or c == client)
            and verb(name).counted
        )


class InProcessTransport:
    """Encode, decode: a wire without a network."""

    def __init__(self, max_bytes: int | None = None) -> None:
        self.max_bytes = max_bytes

    def carry(self, message: Message, max_bytes: int | None = None) -> Message:
        """The message as its receiver decodes it. ``max_bytes``: the largest the receiver takes;
        a larger one raises OversizedError."""
        data = encode_message(message)
        largest = self.max_bytes if max_bytes is None else max_bytes
        if largest is not None and len(data) > largest:
            what = f"a {message.verb} message of {len(data)} bytes; at most {largest} taken"
            raise OversizedError(what, field="size")
        return decode_message(data, max_bytes=DEFAULT_MAX_BYTES if largest is None else largest)
