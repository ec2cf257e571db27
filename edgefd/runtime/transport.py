"""Moving payloads between roles, and counting the bytes.

The in-process transport of a simulation does what the MQTT transport does to a payload: it
encodes it with the one codec, counts the encoded length, and hands the *decoded* copy to the
other side. So the bytes a simulation reports are the bytes a deployment sends (MQTT framing and
chunk headers are reported apart, by that transport), and no Python object is ever shared
between a client and the server.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import overload

from edgefd.protocol import Payload, decode, encode

UP = "up"
DOWN = "down"


@dataclass
class ByteLedger:
    """Bytes per (round, direction, client), as encoded on the wire."""

    entries: dict[tuple[int, str, str], int] = field(default_factory=lambda: defaultdict(int))
    messages: dict[tuple[int, str, str], int] = field(default_factory=lambda: defaultdict(int))

    def add(self, round: int, direction: str, client_id: str, nbytes: int) -> None:
        self.entries[(round, direction, client_id)] += nbytes
        self.messages[(round, direction, client_id)] += 1

    def total(self, direction: str, round: int | None = None) -> int:
        return sum(n for (r, d, _), n in self.entries.items() if d == direction and (round is None or r == round))

    def per_client(self, direction: str) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for (_, d, client), n in self.entries.items():
            if d == direction:
                out[client] += n
        return dict(out)


class InProcessTransport:
    """Encode, count, decode: a wire without a network."""

    def __init__(self, ledger: ByteLedger | None = None, max_bytes: int | None = None) -> None:
        self.ledger = ledger if ledger is not None else ByteLedger()
        self.max_bytes = max_bytes

    def _carry(self, payload: Payload, round: int, direction: str, client_id: str) -> Payload:
        data = encode(payload)
        self.ledger.add(round, direction, client_id, len(data))
        return decode(data) if self.max_bytes is None else decode(data, max_bytes=self.max_bytes)

    # A payload comes out as a payload, None as None (the overloads tell the type checker).
    @overload
    def upload(self, payload: Payload, round: int, client_id: str) -> Payload: ...
    @overload
    def upload(self, payload: None, round: int, client_id: str) -> None: ...
    def upload(self, payload: Payload | None, round: int, client_id: str) -> Payload | None:
        return None if payload is None else self._carry(payload, round, UP, client_id)

    @overload
    def download(self, payload: Payload, round: int, client_id: str) -> Payload: ...
    @overload
    def download(self, payload: None, round: int, client_id: str) -> None: ...
    def download(self, payload: Payload | None, round: int, client_id: str) -> Payload | None:
        return None if payload is None else self._carry(payload, round, DOWN, client_id)
