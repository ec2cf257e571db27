"""Chunking: split an encoded payload into frames no larger than a broker's limit, and put it back.

Every chunked message travels as one or more *chunk frames* (a payload smaller than the chunk size
is one frame; there is no unchunked fast path, so a receiver that expects frames only ever sees
frames). The frames' lengths are the bytes sent: use :func:`chunked_size` for accounting.

Chunk frame, version 1: a 48-byte header ``struct "<4sHH16sIIQII"`` then ``chunk_len`` data bytes.

====== ==== ====== ============ ==============================================================
offset size type   field        meaning
====== ==== ====== ============ ==============================================================
0      4    4s     magic        ``b"EFC1"``
4      2    u16    version      1
6      2    u16    flags        0 (any set bit: ``VersionError``)
8      16   16s    message_id   random per message; all frames of a message share it
24     4    u32    index        0 .. count-1
28     4    u32    count        number of frames of the message, >= 1
32     8    u64    total_len    length of the reassembled message
40     4    u32    chunk_len    data bytes in this frame (frame length = 48 + chunk_len)
44     4    u32    crc32        ``zlib.crc32`` of bytes [0, 44) followed by the data
====== ==== ====== ============ ==============================================================

The data of frame ``i`` is bytes ``[i * per, (i + 1) * per)`` of the message, ``per = chunk_size -
48``; reassembly concatenates by index and checks the total. Only frames with ``total_len == 0``
may be empty (then ``count == 1``). The reassembled bytes are an encoded payload whose own CRC
:func:`~edgefd.protocol.decode` checks.
"""

from __future__ import annotations

import os
import struct
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from .codec import DEFAULT_MAX_BYTES, _as_bytes_view, _check_magic
from .codec import MAGIC as PAYLOAD_MAGIC
from .errors import (
    BudgetExhaustedError,
    ChecksumError,
    InconsistentChunkError,
    MalformedError,
    OversizedError,
    ProtocolError,
    TruncatedError,
    VersionError,
)

__all__ = [
    "CHUNK_MAGIC",
    "CHUNK_VERSION",
    "CHUNK_HEADER",
    "CHUNK_HEADER_SIZE",
    "Chunk",
    "split",
    "iter_split",
    "parse_chunk",
    "chunk_count",
    "chunked_size",
    "new_message_id",
    "Reassembler",
    "ReassemblerStats",
    "ReassemblyBudget",
]

CHUNK_MAGIC = b"EFC1"
CHUNK_VERSION = 1
CHUNK_HEADER = struct.Struct("<4sHH16sIIQII")
CHUNK_HEADER_SIZE = CHUNK_HEADER.size  # 48
_CRC_OFFSET = 44
_U32_MAX = 2**32 - 1


# The functional form: the class form would make mypy reject the fields `index` and `count`, which
# shadow tuple's methods of those names (tuple.index/tuple.count are unused for a chunk).
Chunk = NamedTuple(  # noqa: UP014 (the class form: see above)
    "Chunk", [("message_id", bytes), ("index", int), ("count", int), ("total_len", int), ("data", bytes)]
)
Chunk.__doc__ = """One parsed and checked chunk frame."""


def new_message_id() -> bytes:
    """16 random bytes."""
    return os.urandom(16)


def _message_id(message_id: bytes | int | None) -> bytes:
    if message_id is None:
        return new_message_id()
    if isinstance(message_id, int) and not isinstance(message_id, bool):
        if not 0 <= message_id < 2**128:
            raise ValueError(f"message_id int must be in [0, 2**128), got {message_id}")
        return message_id.to_bytes(16, "big")
    if isinstance(message_id, (bytes, bytearray)) and len(message_id) == 16:
        return bytes(message_id)
    raise ValueError(f"message_id must be 16 bytes, an int or None, got {message_id!r}")


def _per_chunk(chunk_size: int) -> int:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise TypeError(f"chunk_size must be int, got {type(chunk_size).__name__}")
    if not CHUNK_HEADER_SIZE < chunk_size <= CHUNK_HEADER_SIZE + _U32_MAX:
        raise ValueError(
            f"chunk_size is the largest frame in bytes, header included: it must be > "
            f"{CHUNK_HEADER_SIZE}, got {chunk_size}"
        )
    return chunk_size - CHUNK_HEADER_SIZE


def chunk_count(nbytes: int, chunk_size: int) -> int:
    """Number of frames :func:`split` makes of ``nbytes`` bytes (at least 1)."""
    per = _per_chunk(chunk_size)
    return max(1, -(-nbytes // per))


def chunked_size(nbytes: int, chunk_size: int) -> int:
    """Total bytes of the frames :func:`split` makes of ``nbytes`` bytes (what the wire carries)."""
    return nbytes + CHUNK_HEADER_SIZE * chunk_count(nbytes, chunk_size)


def split(
    data: bytes | bytearray | memoryview | list, chunk_size: int, message_id: bytes | int | None = None
) -> list[bytes]:
    """Cut ``data`` into frames of at most ``chunk_size`` bytes each, *header included* (so
    ``chunk_size`` can be a broker's message limit). ``data`` may also be a list of buffers, cut as
    their concatenation without making it (:func:`~edgefd.protocol.encode_buffers`' output).
    ``message_id``: 16 bytes, an int < 2**128, or None for a random one. Always returns at least
    one frame."""
    return list(iter_split(data, chunk_size, message_id))


def iter_split(
    data: bytes | bytearray | memoryview | list, chunk_size: int, message_id: bytes | int | None = None
) -> Iterator[bytes]:
    """:func:`split`'s frames, each made when it is asked for: a sender that lets go of each frame
    once it is sent holds a few frames, not the whole message a second time. ``data`` must not
    change until the last frame is made. Bad arguments raise here, before any frame."""
    views = [_as_bytes_view(part) for part in (data if isinstance(data, list) else [data])]
    per = _per_chunk(chunk_size)
    total = sum(len(view) for view in views)
    count = chunk_count(total, chunk_size)
    if count > _U32_MAX:
        raise ValueError(f"{total} bytes at chunk_size={chunk_size} need {count} frames (> 2**32-1)")
    return _frames(views, per, count, total, _message_id(message_id))


def _frames(views: list[memoryview], per: int, count: int, total: int, mid: bytes) -> Iterator[bytes]:
    part, offset = 0, 0  # where the next frame's data starts: views[part][offset:]
    for i in range(count):
        pieces, size = [], min(per, total - i * per)
        while size > 0:
            take = views[part][offset : offset + size]
            pieces.append(take)
            size -= len(take)
            offset += len(take)
            if offset == len(views[part]):
                part, offset = part + 1, 0
        length = sum(len(piece) for piece in pieces)
        prefix = CHUNK_HEADER.pack(CHUNK_MAGIC, CHUNK_VERSION, 0, mid, i, count, total, length, 0)[:_CRC_OFFSET]
        crc = zlib.crc32(prefix)
        for piece in pieces:
            crc = zlib.crc32(piece, crc)
        yield b"".join([prefix, struct.pack("<I", crc), *pieces])


def parse_chunk(frame: bytes | bytearray | memoryview, *, max_message_bytes: int | None = None) -> Chunk:
    """Check one frame on its own (magic, version, lengths, CRC, index/count/total consistency)."""
    mv = _as_bytes_view(frame)
    _check_magic(mv, CHUNK_MAGIC, "chunk", {PAYLOAD_MAGIC: "this is an unchunked payload: pass it to decode()"})
    if len(mv) < CHUNK_HEADER_SIZE:
        raise TruncatedError(f"chunk header: expected {CHUNK_HEADER_SIZE} bytes, got {len(mv)}", field="header")
    _, version, flags, mid, index, count, total, clen, crc = CHUNK_HEADER.unpack_from(mv, 0)
    if version != CHUNK_VERSION:
        raise VersionError(f"chunk version: this decoder supports {CHUNK_VERSION}, got {version}", field="version")
    if flags != 0:
        raise VersionError(f"chunk flags: version {CHUNK_VERSION} defines no flags, got 0x{flags:04x}", field="flags")
    have = len(mv) - CHUNK_HEADER_SIZE
    if have < clen:
        raise TruncatedError(f"chunk_len: header says {clen} data bytes, got {have}", field="chunk_len")
    if have > clen:
        raise MalformedError(
            f"chunk_len: header says {clen} data bytes, got {have} ({have - clen} trailing bytes)",
            field="chunk_len",
        )
    got = zlib.crc32(mv[CHUNK_HEADER_SIZE:], zlib.crc32(mv[:_CRC_OFFSET]))
    if got != crc:
        raise ChecksumError(f"chunk crc32: header says 0x{crc:08x}, computed 0x{got:08x}", field="crc32")
    if count < 1:
        raise MalformedError(f"count: expected >= 1, got {count}", field="count")
    if index >= count:
        raise MalformedError(f"index: expected 0..{count - 1} (count={count}), got {index}", field="index")
    if max_message_bytes is not None and total > max_message_bytes:
        raise OversizedError(
            f"total_len: {total} bytes exceeds max_message_bytes={max_message_bytes}", field="total_len"
        )
    if clen > total:
        raise MalformedError(f"chunk_len: {clen} exceeds total_len {total}", field="chunk_len")
    if count > max(1, total):
        raise MalformedError(f"count: {count} frames cannot carry total_len {total}", field="count")
    if clen == 0 and total != 0:
        raise MalformedError(f"chunk_len: empty frame in a message of {total} bytes", field="chunk_len")
    if count == 1 and clen != total:
        raise MalformedError(
            f"chunk_len: a single-frame message must carry total_len={total} bytes, got {clen}",
            field="chunk_len",
        )
    return Chunk(bytes(mid), index, count, total, bytes(mv[CHUNK_HEADER_SIZE:]))


@dataclass
class ReassemblerStats:
    """Counters of a :class:`Reassembler` (monotonic)."""

    completed: int = 0
    """Messages returned whole."""
    duplicates: int = 0
    """Frames ignored as exact repeats (or repeats of an already completed message)."""
    rejected: int = 0
    """Frames that raised a ProtocolError."""
    dropped: int = 0
    """Frames ignored because their message had been evicted or abandoned."""
    evicted_stale: int = 0
    """Partial messages dropped after ``timeout`` seconds without a new frame."""
    evicted_capacity: int = 0
    """Partial messages dropped (least recently active first) to respect the memory bounds."""


FRAME_OVERHEAD = 128
"""Bytes a held frame costs beyond its data (the bytes object and its dict entry), counted against
the memory bounds: 200,000 one-byte chunks cost 25 MB, not 200 kB."""


class ReassemblyBudget:
    """Bytes of held frames (data plus ``FRAME_OVERHEAD`` each) shared by several reassemblers: one
    per topic, one budget per process, so that many topics cannot add up to unbounded memory.

    A budget can be carved into *shares* (:meth:`share`), one per sender: a frame then takes room
    from its sender's share and from the whole budget. One pool for every sender would let a single
    sender that starts messages and never finishes them hold all of it, and every other sender's
    multi-frame message would be refused until those partial messages went; with shares, a sender
    can exhaust only its own. A receiver sizes the whole budget so that every share fits at once
    (then no sender's share waits on another's), or smaller where memory matters more than that."""

    def __init__(self, max_bytes: int, *, parent: ReassemblyBudget | None = None) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        """May be changed while in use (a receiver resizes its budget as it learns what its senders
        may send): room already taken stays taken, and no more is given until it fits."""
        self.parent = parent
        self.used = 0
        self._lock = threading.Lock()

    def share(self, max_bytes: int) -> ReassemblyBudget:
        """A sender's share: at most ``max_bytes`` of it, and only while the whole budget has room."""
        return ReassemblyBudget(max_bytes, parent=self)

    def take(self, n: int) -> bool:
        """Reserve ``n`` bytes if they fit (in this budget and in every budget it is a share of)."""
        with self._lock:
            if self.used + n > self.max_bytes:
                return False
            if self.parent is not None and not self.parent.take(n):
                return False
            self.used += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self.used -= n
            if self.parent is not None:
                self.parent.give(n)


def _full(budget: ReassemblyBudget, cost: int) -> str:
    """Which budget refused ``cost`` more bytes, for the error: a sender's share, or the whole."""
    whole = budget.parent
    if whole is None or budget.used + cost > budget.max_bytes:
        what = "the reassembly budget" if whole is None else "this sender's share of the reassembly budget"
        return f"{what} ({budget.max_bytes} bytes)"
    return f"the reassembly budget of every sender ({whole.max_bytes} bytes)"


@dataclass
class _Partial:
    count: int
    total: int
    last_seen: float
    chunks: dict[int, bytes] = field(default_factory=dict)
    nbytes: int = 0
    """Data bytes held."""
    cost: int = 0
    """What they count against the bounds: data plus ``FRAME_OVERHEAD`` per frame."""


class Reassembler:
    """Collects chunk frames (any order, duplicates allowed) and returns each message once, whole.

    Memory is bounded: at most ``max_messages`` partial messages and ``max_total_bytes`` of
    buffered frames (their data plus ``FRAME_OVERHEAD`` each); a message may claim at most
    ``max_message_bytes``. With a shared ``budget`` the frames of every reassembler using it count
    against it too (a sender's share: see :class:`ReassemblyBudget`): a frame that does not fit once
    this reassembler has evicted its own other partial messages is refused
    (``BudgetExhaustedError``). When a bound would be
    passed, the least recently active *other* partial messages are evicted (counted in
    ``stats.evicted_capacity``), so progress is always possible. A partial message that receives no
    frame for ``timeout`` seconds of ``clock()`` is evicted (``stats.evicted_stale``). The ids of the
    last ``remember`` finished messages (completed or evicted) are kept, so late duplicates are
    ignored rather than starting a message that can never complete. Thread-safe.
    """

    def __init__(
        self,
        *,
        max_messages: int = 64,
        max_total_bytes: int = DEFAULT_MAX_BYTES,
        max_message_bytes: int | None = None,
        timeout: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        remember: int = 4096,
        budget: ReassemblyBudget | None = None,
    ) -> None:
        if max_message_bytes is None:
            max_message_bytes = max_total_bytes
        if max_messages < 1 or max_total_bytes < 0 or remember < 0 or timeout <= 0:
            raise ValueError("max_messages >= 1, max_total_bytes >= 0, remember >= 0, timeout > 0")
        if not 0 <= max_message_bytes <= max_total_bytes:
            raise ValueError(f"max_message_bytes ({max_message_bytes}) must be <= max_total_bytes ({max_total_bytes})")
        self.max_messages = max_messages
        self.max_total_bytes = max_total_bytes
        self.max_message_bytes = max_message_bytes
        self.timeout = timeout
        self.clock = clock
        self.remember = remember
        self.budget = budget
        self.stats = ReassemblerStats()
        self._partial: OrderedDict[bytes, _Partial] = OrderedDict()  # least recently active first
        self._finished: OrderedDict[bytes, bool] = OrderedDict()  # id -> completed (True) / evicted
        self._bytes = 0
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ introspection
    @property
    def pending(self) -> int:
        """Number of partial messages held."""
        return len(self._partial)

    @property
    def buffered_bytes(self) -> int:
        """Bytes held for partial messages (frame data plus ``FRAME_OVERHEAD`` per frame)."""
        return self._bytes

    # ------------------------------------------------------------------ main entry
    def feed(self, frame: bytes | bytearray | memoryview) -> bytes | None:
        """Take one frame. Returns the whole message when this frame completes it, else None.

        Raises a :class:`ProtocolError` subclass for a bad frame (the reassembler's state is left as
        it was, except that a message proven unable to complete is abandoned).
        """
        with self._lock:
            now = self.clock()
            self._evict_stale(now)
            try:
                return self._feed(frame, now)
            except ProtocolError:
                self.stats.rejected += 1
                raise

    def evict_stale(self) -> int:
        """Drop partial messages idle for more than ``timeout``; returns how many were dropped."""
        with self._lock:
            return self._evict_stale(self.clock())

    # ------------------------------------------------------------------ internals
    def _feed(self, frame: bytes | bytearray | memoryview, now: float) -> bytes | None:
        c = parse_chunk(frame, max_message_bytes=self.max_message_bytes)
        mid = c.message_id
        if mid in self._finished:
            if self._finished[mid]:
                self.stats.duplicates += 1
            else:
                self.stats.dropped += 1
            return None
        p = self._partial.get(mid)
        if p is None:
            if c.count == 1:
                self._finish(mid, completed=True)
                self.stats.completed += 1
                return c.data
            while len(self._partial) >= self.max_messages:
                self._evict_oldest(exclude=None)
            p = self._partial[mid] = _Partial(c.count, c.total_len, now)
        else:
            if (p.count, p.total) != (c.count, c.total_len):
                raise InconsistentChunkError(
                    f"message {mid.hex()}: frame {c.index} says count={c.count} "
                    f"total_len={c.total_len}, earlier frames said count={p.count} total_len={p.total}",
                    field="count" if p.count != c.count else "total_len",
                )
            old = p.chunks.get(c.index)
            if old is not None:
                if old == c.data:
                    self.stats.duplicates += 1
                    p.last_seen = now
                    self._partial.move_to_end(mid)
                    return None
                raise InconsistentChunkError(
                    f"message {mid.hex()}: frame {c.index} received twice with different data",
                    field="index",
                )
        size = p.nbytes + len(c.data)
        last = len(p.chunks) + 1 == p.count
        if size > p.total or (last and size != p.total):
            self._abandon(mid)
            raise InconsistentChunkError(
                f"message {mid.hex()}: frames carry {size} bytes"
                f"{' in all' if last else ' so far'}, total_len is {p.total}; message abandoned",
                field="total_len",
            )
        cost = len(c.data) + FRAME_OVERHEAD
        while self._bytes + cost > self.max_total_bytes and len(self._partial) > 1:
            self._evict_oldest(exclude=mid)
        if self._bytes + cost > self.max_total_bytes:
            self._abandon(mid)
            raise OversizedError(
                f"message {mid.hex()}: its frames would hold more than {self.max_total_bytes} bytes "
                f"({FRAME_OVERHEAD} per frame beyond the data); message abandoned",
                field="count",
            )
        while self.budget is not None and not self.budget.take(cost):
            if len(self._partial) <= 1:
                full = _full(self.budget, cost)  # before this message's frames are given back
                self._abandon(mid)
                raise BudgetExhaustedError(
                    f"message {mid.hex()}: {full} is exhausted; message abandoned", field="count"
                )
            self._evict_oldest(exclude=mid)
        p.chunks[c.index] = c.data
        p.nbytes = size
        p.cost += cost
        p.last_seen = now
        self._bytes += cost
        self._partial.move_to_end(mid)
        if not last:
            return None
        out = b"".join(p.chunks[i] for i in range(p.count))
        self._drop(mid, completed=True)
        self.stats.completed += 1
        return out

    def _finish(self, mid: bytes, *, completed: bool) -> None:
        if self.remember == 0:
            return
        self._finished[mid] = completed
        self._finished.move_to_end(mid)
        while len(self._finished) > self.remember:
            self._finished.popitem(last=False)

    def _drop(self, mid: bytes, *, completed: bool) -> None:
        p = self._partial.pop(mid)
        self._bytes -= p.cost
        if self.budget is not None:
            self.budget.give(p.cost)
        self._finish(mid, completed=completed)

    def _abandon(self, mid: bytes) -> None:
        self._drop(mid, completed=False)

    def _evict_oldest(self, exclude: bytes | None) -> None:
        for mid in self._partial:
            if mid != exclude:
                self._drop(mid, completed=False)
                self.stats.evicted_capacity += 1
                return
        raise AssertionError("nothing to evict")  # bounds are checked so this cannot happen

    def _evict_stale(self, now: float) -> int:
        n = 0
        while self._partial:
            mid, p = next(iter(self._partial.items()))
            if now - p.last_seen <= self.timeout:
                break
            self._drop(mid, completed=False)
            n += 1
        self.stats.evicted_stale += n
        return n
