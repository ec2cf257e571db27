"""Moving messages between roles, and counting the bytes.

The in-process transport of a simulation does what the MQTT transport does to a message: it
encodes it with the one codec, counts the encoded length, and hands the *decoded* copy to the
other side. So the bytes a simulation reports are the bytes a deployment sends (MQTT framing and
chunk headers are reported apart, by that transport), and no Python object is ever shared
between a client and the server.
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
    """Encode, count, decode: a wire without a network."""

    def __init__(self, ledger: ByteLedger | None = None, max_bytes: int | None = None) -> None:
        self.ledger = ledger if ledger is not None else ByteLedger()
        self.max_bytes = max_bytes

    def carry(self, message: Message, max_bytes: int | None = None) -> Message:
        """The message as its receiver decodes it. ``max_bytes``: the largest the receiver takes;
        a larger one raises OversizedError. The ledger counts what the server sends and what it
        takes, as a deployed server does: a server's message even when its receiver refuses it, a
        client's only when it is taken."""
        data = encode_message(message)
        from_server = message.sender == SERVER
        if from_server:
            self._count(message, len(data))
        largest = self.max_bytes if max_bytes is None else max_bytes
        if largest is not None and len(data) > largest:
            what = f"a {message.verb} message of {len(data)} bytes; at most {largest} taken"
            raise OversizedError(what, field="size")
        if not from_server:
            self._count(message, len(data))
        return decode_message(data, max_bytes=DEFAULT_MAX_BYTES if largest is None else largest)

    def _count(self, message: Message, size: int) -> None:
        metadata_bytes = message.metadata_bytes
        self.ledger.add(message, size - metadata_bytes, metadata_bytes)
