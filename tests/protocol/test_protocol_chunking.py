"""split() and Reassembler: order, duplicates, loss, inconsistency, memory bounds, eviction."""

import random
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from protocol_helpers import reseal_chunk

from edgefd.protocol import (
    CHUNK_HEADER_SIZE,
    FRAME_OVERHEAD,
    BudgetExhaustedError,
    ChecksumError,
    InconsistentChunkError,
    MagicError,
    MalformedError,
    OversizedError,
    Payload,
    Reassembler,
    ReassemblyBudget,
    TruncatedError,
    VersionError,
    chunk_count,
    chunked_size,
    decode,
    encode,
    iter_split,
    parse_chunk,
    split,
)


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def blob(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def mid(i):
    return i.to_bytes(16, "big")


# ----------------------------------------------------------------------------- split
def test_split_sizes_pinned():
    assert CHUNK_HEADER_SIZE == 48
    frames = split(blob(1000), 148, mid(1))  # 100 data bytes per frame
    assert len(frames) == 10 == chunk_count(1000, 148)
    assert all(len(f) == 148 for f in frames)
    assert sum(map(len, frames)) == 1480 == chunked_size(1000, 148)
    frames = split(blob(1001), 148, mid(1))
    assert len(frames) == 11 and len(frames[-1]) == 49
    assert chunked_size(1001, 148) == 1001 + 11 * 48


def test_split_header_fields():
    data = blob(250)
    frames = split(data, 148, mid(7))
    c = [parse_chunk(f) for f in frames]
    assert [x.index for x in c] == [0, 1, 2]
    assert {(x.message_id, x.count, x.total_len) for x in c} == {(mid(7), 3, 250)}
    assert b"".join(x.data for x in c) == data
    assert frames[0][:4] == b"EFC1" and struct.unpack_from("<HH", frames[0], 4) == (1, 0)


def test_small_and_empty_payloads_are_one_frame():
    data = encode(Payload("ack"))
    frames = split(data, 1 << 20)
    assert len(frames) == 1 and len(frames[0]) == len(data) + CHUNK_HEADER_SIZE
    assert Reassembler().feed(frames[0]) == data
    (empty,) = split(b"", 64)
    assert Reassembler().feed(empty) == b""


def test_split_arguments():
    with pytest.raises(ValueError, match="must be > 48"):
        split(b"abc", 48)
    with pytest.raises(TypeError):
        split(b"abc", 100.0)
    with pytest.raises(ValueError, match="message_id"):
        split(b"abc", 100, b"short")
    assert parse_chunk(split(b"abc", 100, 5)[0]).message_id == mid(5)
    a, b = split(b"abc", 100)[0], split(b"abc", 100)[0]
    assert parse_chunk(a).message_id != parse_chunk(b).message_id  # random ids


def test_iter_split_makes_the_frames_of_split_one_at_a_time():
    """The same frames as `split`, made as they are asked for (a sender holds a window of them, not
    the whole message again); bad arguments raise at the call, before any frame."""
    parts = [blob(700, 1), memoryview(blob(333, 2)), bytearray(blob(5, 3))]
    frames = iter_split(parts, 148, mid(7))
    assert not isinstance(frames, list) and next(frames) == split(parts, 148, mid(7))[0]
    assert [next(frames), *frames] == split(parts, 148, mid(7))[1:]
    with pytest.raises(ValueError, match="must be > 48"):
        iter_split(b"abc", 48)
    with pytest.raises(ValueError, match="message_id"):
        iter_split(b"abc", 100, b"short")


# ----------------------------------------------------------------------------- reassembly
@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 3000), chunk=st.integers(49, 700), seed=st.integers(0, 2**32 - 1))
def test_shuffled_and_duplicated_frames_reassemble_exactly_once(n, chunk, seed):
    data = blob(n, seed)
    frames = split(data, chunk, mid(seed))
    rng = random.Random(seed)
    stream = frames + [rng.choice(frames) for _ in range(len(frames) // 2 + 1)]
    rng.shuffle(stream)
    r = Reassembler()
    out = [x for x in (r.feed(f) for f in stream) if x is not None]
    assert out == [data]
    assert r.pending == 0 and r.buffered_bytes == 0
    assert r.stats.completed == 1 and r.stats.duplicates == len(stream) - len(frames)
    assert r.feed(frames[0]) is None  # late duplicate after completion


def test_end_to_end_payload_through_chunks():
    p = Payload(
        "weights",
        {f"l{i}": np.random.default_rng(i).standard_normal((64, 33)).astype(np.float32) for i in range(4)},
    )
    frames = split(encode(p), 1024)
    random.Random(0).shuffle(frames)
    r = Reassembler()
    got = [x for x in map(r.feed, frames) if x is not None]
    assert len(got) == 1 and decode(got[0]).same_as(p)


def test_interleaved_messages():
    datas = [blob(700 + i, i) for i in range(5)]
    streams = [split(d, 100, mid(i)) for i, d in enumerate(datas)]
    mixed = [f for group in zip(*streams) for f in group] + [f for s in streams for f in s[min(map(len, streams)) :]]
    random.Random(1).shuffle(mixed)
    r = Reassembler()
    got = {x for x in map(r.feed, mixed) if x is not None}
    assert got == set(datas)


def test_missing_frame_never_completes_and_times_out():
    clock = Clock()
    r = Reassembler(timeout=10.0, clock=clock)
    frames = split(blob(500), 148, mid(1))
    for f in frames[:2] + frames[3:]:
        assert r.feed(f) is None
    assert r.pending == 1 and r.buffered_bytes == 400 + 4 * FRAME_OVERHEAD  # data, and each held frame's cost
    clock.t = 10.0
    assert r.evict_stale() == 0  # not yet: strictly more than timeout
    clock.t = 10.5
    assert r.evict_stale() == 1
    assert r.pending == 0 and r.buffered_bytes == 0 and r.stats.evicted_stale == 1
    assert r.feed(frames[2]) is None  # the late frame cannot resurrect it
    assert r.pending == 0 and r.stats.dropped == 1


def test_activity_keeps_a_message_alive_and_feed_evicts_stale_ones():
    clock = Clock()
    r = Reassembler(timeout=10.0, clock=clock)
    a = split(blob(500, 1), 148, mid(1))
    b = split(blob(500, 2), 148, mid(2))
    r.feed(a[0])
    r.feed(b[0])
    for i, t in enumerate((8.0, 16.0), start=1):
        clock.t = t
        r.feed(a[i])  # a stays active; b goes stale during the second feed
    assert r.pending == 1 and r.stats.evicted_stale == 1
    assert r.feed(a[3]) is None
    assert r.feed(a[4]) == blob(500, 1)


# ----------------------------------------------------------------------------- bad frames
def test_frame_level_errors():
    frames = split(blob(300), 148, mid(3))
    r = Reassembler()
    with pytest.raises(TruncatedError, match="chunk header: expected 48 bytes, got 20"):
        r.feed(frames[0][:20])
    with pytest.raises(TruncatedError, match="chunk_len: header says 100 data bytes, got 99"):
        r.feed(frames[0][:-1])
    with pytest.raises(MalformedError, match=r"chunk_len: header says 100 data bytes, got 101 \(1 trailing bytes\)"):
        r.feed(frames[0] + b"x")
    bad = bytearray(frames[0])
    bad[60] ^= 1
    with pytest.raises(ChecksumError, match="chunk crc32"):
        r.feed(bytes(bad))
    with pytest.raises(MagicError, match="unchunked payload: pass it to decode"):
        r.feed(encode(Payload("ack")))
    with pytest.raises(MagicError, match="chunk magic"):
        r.feed(b"JUNK" + frames[0][4:])
    v2 = bytearray(frames[0])
    struct.pack_into("<H", v2, 4, 2)
    with pytest.raises(VersionError, match="chunk version"):
        r.feed(bytes(v2))
    assert r.stats.rejected == 7 and r.pending == 0


def field_patched(frame, fmt, offset, value):
    b = bytearray(frame)
    struct.pack_into(fmt, b, offset, value)
    return reseal_chunk(bytes(b))


@pytest.mark.parametrize(
    "fmt, off, value, words",
    [
        ("<I", 24, 3, "index: expected 0..2 (count=3), got 3"),  # index out of range
        ("<I", 28, 0, "count: expected >= 1, got 0"),
        ("<Q", 32, 50, "chunk_len: 100 exceeds total_len 50"),
        ("<I", 28, 400, "count: 400 frames cannot carry total_len 300"),
        ("<I", 28, 1, "single-frame message must carry total_len=300 bytes, got 100"),
    ],
)
def test_frame_consistency_errors(fmt, off, value, words):
    frame = split(blob(300), 148, mid(3))[0]
    with pytest.raises(MalformedError, match=words.replace("(", r"\(").replace(")", r"\)")):
        Reassembler().feed(field_patched(frame, fmt, off, value))


def test_empty_frame_in_nonempty_message():
    frame = split(blob(300), 148, mid(3))[0][:CHUNK_HEADER_SIZE]
    with pytest.raises(MalformedError, match="empty frame"):
        Reassembler().feed(reseal_chunk(frame, fix_len=True))


def test_inconsistent_frames_are_rejected_and_state_kept():
    data = blob(300)
    frames = split(data, 148, mid(4))
    r = Reassembler()
    assert r.feed(frames[0]) is None
    other_count = split(blob(300), 120, mid(4))[1]  # same id, 72 bytes a frame: count 5
    with pytest.raises(InconsistentChunkError, match="count=5 total_len=300, earlier frames said count=3"):
        r.feed(other_count)
    other_total = split(blob(290), 148, mid(4))[1]
    with pytest.raises(InconsistentChunkError, match="total_len=290"):
        r.feed(other_total)
    changed = split(blob(300, seed=9), 148, mid(4))[0]
    with pytest.raises(InconsistentChunkError, match="frame 0 received twice with different data"):
        r.feed(changed)
    assert r.stats.rejected == 3 and r.pending == 1
    assert r.feed(frames[1]) is None
    assert r.feed(frames[2]) == data


def test_frames_that_do_not_add_up_abandon_the_message():
    frames = split(blob(300), 148, mid(5))
    short_last = field_patched(frames[2][:-10], "<I", 40, 90)  # last frame 10 bytes short
    r = Reassembler()
    r.feed(frames[0])
    r.feed(frames[1])
    with pytest.raises(
        InconsistentChunkError, match="frames carry 290 bytes in all, total_len is 300; message abandoned"
    ):
        r.feed(short_last)
    assert r.pending == 0 and r.buffered_bytes == 0
    assert r.feed(frames[2]) is None and r.stats.dropped == 1
    # frames of 200 bytes claiming count=3 for 300 bytes: the second already overshoots
    first = field_patched(split(blob(300), 248, mid(6))[0], "<I", 28, 3)
    second = field_patched(first, "<I", 24, 1)
    assert r.feed(first) is None
    with pytest.raises(InconsistentChunkError, match="frames carry 400 bytes so far, total_len is 300"):
        r.feed(second)
    assert r.pending == 0


def test_corrupt_payload_inside_good_chunks_is_caught_by_decode():
    data = bytearray(encode(Payload("logits", {"z": np.ones((10, 10), np.float32)})))
    data[-3] ^= 0x40
    r = Reassembler()
    out = [x for x in map(r.feed, split(bytes(data), 100)) if x is not None]
    with pytest.raises(ChecksumError):
        decode(out[0])


# ----------------------------------------------------------------------------- memory bounds
def test_oversized_message_claim():
    r = Reassembler(max_total_bytes=10_000, max_message_bytes=1000)
    with pytest.raises(OversizedError, match="total_len: 1001 bytes exceeds max_message_bytes=1000"):
        r.feed(split(blob(1001), 148)[0])
    with pytest.raises(ValueError):
        Reassembler(max_total_bytes=100, max_message_bytes=200)


def test_max_messages_evicts_least_recently_active():
    r = Reassembler(max_messages=3)
    streams = [split(blob(300, i), 148, mid(i)) for i in range(5)]
    for s in streams:
        r.feed(s[0])
    assert r.pending == 3 and r.stats.evicted_capacity == 2
    for i in (0, 1):  # evicted: their frames are dropped, never a new half message
        for f in streams[i][1:]:
            assert r.feed(f) is None
    assert r.pending == 3 and r.stats.dropped == 4
    done = [x for i in (2, 3, 4) for x in map(r.feed, streams[i][1:]) if x is not None]
    assert done == [blob(300, i) for i in (2, 3, 4)]


def test_max_total_bytes_is_never_exceeded():
    limit = 3000  # two of the 600-byte messages below (6 frames: 600 + 6 * FRAME_OVERHEAD each)
    r = Reassembler(max_total_bytes=limit, max_messages=100)
    streams = [split(blob(600, i), 148, mid(i)) for i in range(6)]
    mixed = [f for group in zip(*streams) for f in group]
    done = []
    for f in mixed:
        out = r.feed(f)
        assert r.buffered_bytes <= limit
        if out is not None:
            done.append(out)
    assert r.stats.evicted_capacity > 0
    # progress is always possible: a message sent on its own completes even when the buffer is full
    lone = blob(900, 99)
    outs = [r.feed(f) for f in split(lone, 148, mid(99))]
    assert outs[-1] == lone and r.buffered_bytes <= limit


def test_remembered_ids_are_bounded():
    r = Reassembler(remember=3)
    for i in range(10):
        assert r.feed(split(b"x", 64, mid(i))[0]) == b"x"
    assert len(r._finished) == 3
    assert r.feed(split(b"x", 64, mid(9))[0]) is None  # still remembered
    assert r.feed(split(b"x", 64, mid(0))[0]) == b"x"  # forgotten long ago


def test_many_tiny_frames_count_their_overhead_and_cannot_exhaust_memory():
    """200,000 one-byte chunks of one message: each held frame costs its data plus FRAME_OVERHEAD,
    so the message is abandoned once its frames would pass the bound, long before the end."""
    limit = 1_000_000
    r = Reassembler(max_total_bytes=limit)
    frames = split(blob(200_000, 7), CHUNK_HEADER_SIZE + 1, mid(7))
    with pytest.raises(OversizedError, match="FRAME_OVERHEAD|per frame"):
        for frame in frames:
            r.feed(frame)
            assert r.buffered_bytes <= limit
    assert r.pending == 0 and r.buffered_bytes == 0  # abandoned, nothing held


def test_a_shared_budget_bounds_every_reassembler_using_it():
    budget = ReassemblyBudget(5_000)
    topics = [Reassembler(max_total_bytes=100_000, budget=budget) for _ in range(5)]
    refused = 0
    for i, r in enumerate(topics):  # five topics, each starting a 2,000-byte message
        try:
            for frame in split(blob(2_000, i), 148, mid(i))[:-1]:
                r.feed(frame)
        except OversizedError:
            refused += 1
        assert budget.used <= budget.max_bytes
    assert refused >= 3  # the budget held about two of them
    assert budget.used == sum(r.buffered_bytes for r in topics)
    for r in topics:  # releasing what they hold gives the budget back
        r.timeout = 1e-9
        r.evict_stale()
    assert budget.used == 0


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 700), min_size=0, max_size=4),
    precision=st.sampled_from(["fp32", "fp16", "int8"]),
    chunk_size=st.integers(CHUNK_HEADER_SIZE + 1, 2000),
)
def test_frames_cut_from_the_encoded_buffers_are_those_of_the_encoded_bytes(sizes, precision, chunk_size):
    """A sender cuts frames from encode_buffers (never holding the encoded message beside its
    frames): the frames must be the bytes' frames, exactly."""
    from edgefd.protocol import encode_buffers

    rng = np.random.default_rng(len(sizes) * 1000 + chunk_size)
    arrays = {f"a{i}": rng.standard_normal(n).astype(np.float32) for i, n in enumerate(sizes)}
    arrays["ids"] = np.arange(sum(sizes), dtype=np.int64)
    payload = Payload("logits", arrays, {"n": 7}).with_precision(precision, list(arrays)[:-1])
    buffers = encode_buffers(payload)
    assert b"".join(buffers) == encode(payload)
    assert split(buffers, chunk_size, message_id=5) == split(encode(payload), chunk_size, message_id=5)


def test_a_sender_exhausts_only_its_own_share_of_a_budget():
    """Two senders, a share each: the first starts messages on two topics and finishes none; once
    its share is spent its frames are refused (BudgetExhaustedError, naming the share), and the
    second sender's message still completes. A whole budget smaller than the shares refuses too."""
    budget = ReassemblyBudget(10_000)
    first, second = budget.share(5_000), budget.share(5_000)
    hello, train = Reassembler(budget=first), Reassembler(budget=first)
    with pytest.raises(BudgetExhaustedError, match="this sender's share of the reassembly budget .5000 bytes."):
        for i, r in enumerate((hello, train, hello, train)):
            for frame in split(blob(2_000, i), 148, mid(i))[:-1]:
                r.feed(frame)
    assert first.used <= 5_000 and budget.used == first.used
    message = blob(3_000, 9)
    other = Reassembler(budget=second)
    assert [other.feed(frame) for frame in split(message, 548, mid(9))][-1] == message
    assert second.used == 0 and budget.used == first.used  # completed: its frames given back
    budget.max_bytes = first.used + 1_000  # smaller than the shares: the whole refuses now
    with pytest.raises(BudgetExhaustedError, match="the reassembly budget of every sender"):
        for frame in split(message, 548, mid(10)):
            other.feed(frame)
    for r in (hello, train):
        r.timeout = 1e-9
        r.evict_stale()
    assert first.used == budget.used == 0
