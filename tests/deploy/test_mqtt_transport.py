"""The MQTT transport against a real broker: chunked messages, duplicates, garbage, topics."""

import queue
import shutil
import subprocess
import threading
import time

import numpy as np
import pytest

from edgefd.deploy.broker import start_broker
from edgefd.deploy.mqtt_transport import (
    DEVICE_SEND_WINDOW,
    BrokerSettings,
    Inbox,
    Incoming,
    MqttEndpoint,
    Topics,
    encode_frames,
)
from edgefd.protocol import FRAME_OVERHEAD, Message, Payload, encode, encode_message, split

RUN = "t"


def up(verb: str, content: Payload, sender: str, round: int) -> Message:
    """``content`` as ``sender``'s message to the server in ``round``."""
    return Message(verb, sender, "server", round, content, run=RUN, is_answer=True)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with start_broker(workdir=tmp_path_factory.mktemp("broker")) as running:
        yield running


def endpoint(broker, name, chunk_size=1024, send_window=None):
    point = MqttEndpoint(BrokerSettings(broker.url), Topics(RUN), name, chunk_size=chunk_size, send_window=send_window)
    return point


def receive(point, timeout=5.0):
    return point.inbox.get(timeout=timeout)


def test_topics_parse_and_refuse():
    topics = Topics("run-1")
    assert topics.parse(topics.up("client-0", "train")) == ("up", "client-0", "train")
    assert topics.parse(topics.status("client-0")) == ("status", "client-0", "")
    for bad in ("edgefd/other/up/c/train", "edgefd/run-1/up/c/steal", "edgefd/run-1/sideways/c/train", "x"):
        with pytest.raises(ValueError):
            topics.parse(bad)
    with pytest.raises(ValueError):
        Topics("a/b")
    with pytest.raises(ValueError, match="mqtt://HOST:PORT"):
        BrokerSettings("http://localhost:1")


def test_large_payload_is_chunked_and_counted(broker):
    server, client = endpoint(broker, "server"), endpoint(broker, "client-0")
    server.subscribe(Topics(RUN).up("+", "train"))
    server.start(wait=5)
    client.start(wait=5)
    try:
        time.sleep(0.2)
        big = Payload("weights", {"w": np.arange(3000, dtype=np.float32)})
        sent = client.publish(Topics(RUN).up("client-0", "train"), up("train", big, "client-0", 1))
        got = receive(server)
        assert got.message.content.same_as(big) and (got.client_id, got.verb) == ("client-0", "train")
        sent_message = up("train", big, "client-0", 1)
        assert got.content_bytes == len(encode(big)) and got.nbytes == len(encode_message(sent_message))
        frames = encode_frames(sent_message, 1024)
        assert len(frames) > 10 and sent == sum(map(len, frames))
        deadline = time.monotonic() + 2
        while server.stats.received_bytes["up/train"] < sent and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.stats.received_bytes["up/train"] == sent
        assert client.stats.sent_messages["up/train"] == 1 and client.stats.sent_frames["up/train"] == len(frames)
    finally:
        client.stop()
        server.stop()


def test_a_large_message_goes_out_within_its_window(broker):
    """A message of many more frames than the send window arrives whole, and never more frames than
    the window awaited the broker's acknowledgement: paho holds each one until then, so frames
    made all at once would hold the whole message a second time (FedICT's 328 MB upload)."""
    server = endpoint(broker, "server")
    client = endpoint(broker, "client-0", chunk_size=2048, send_window=DEVICE_SEND_WINDOW)
    server.subscribe(Topics(RUN).up("+", "train"))
    server.start(wait=5)
    client.start(wait=5)
    awaited = []
    publish = client._client.publish

    def counting(*args, **kwargs):
        with client._lock:
            awaited.append(len(client._unacked))
        return publish(*args, **kwargs)

    client._client.publish = counting
    try:
        time.sleep(0.2)
        big = Payload("features", {"h": np.random.default_rng(0).standard_normal((200, 1000)).astype(np.float32)})
        message = up("train", big, "client-0", 1)
        sent = client.publish(Topics(RUN).up("client-0", "train"), message)
        frames = encode_frames(message, 2048)
        assert len(frames) > 2 * DEVICE_SEND_WINDOW and sent == sum(map(len, frames))
        assert client.stats.sent_frames["up/train"] == len(frames) == len(awaited)
        assert client.stats.sent_bytes["up/train"] == sent
        assert max(awaited) < DEVICE_SEND_WINDOW
        got = receive(server, timeout=20)
        assert got.message.content.same_as(big)
    finally:
        client.stop()
        server.stop()


def test_the_window_waits_only_while_connected_and_never_on_pahos_thread():
    """A publish waits for acknowledgements only with a window, only while connected (paho keeps
    what is published while disconnected), and never on paho's own thread, which reads the
    acknowledgements (an on-connect hook publishing after a reconnection would wait for ever)."""
    point = MqttEndpoint(BrokerSettings("mqtt://127.0.0.1:1"), Topics(RUN), "client-0", send_window=2)
    point._unacked.update({1, 2, 3})
    point._wait_for_window()  # not connected: no wait
    point.connected.set()
    point._network_thread = threading.get_ident()
    point._wait_for_window()  # paho's thread: no wait
    point._network_thread = None
    waiter = threading.Thread(target=point._wait_for_window)
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()  # three frames await acknowledgement, the window is two
    point._on_publish(None, None, 1, None, None)
    waiter.join(0.3)
    assert waiter.is_alive()  # two still do
    point._on_publish(None, None, 2, None, None)
    waiter.join(2)
    assert not waiter.is_alive()
    point._unacked.update({4, 5})
    waiter = threading.Thread(target=point._wait_for_window)
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()
    point.connected.clear()  # the connection is lost: paho keeps the rest for the reconnection
    waiter.join(2)
    assert not waiter.is_alive()
    unbounded = MqttEndpoint(BrokerSettings("mqtt://127.0.0.1:1"), Topics(RUN), "server")
    unbounded._unacked.update(range(1000))
    unbounded.connected.set()
    unbounded._wait_for_window()  # a server's endpoint never waits


def test_duplicates_out_of_order_and_garbage_are_handled(broker):
    """Frames published raw (as a stranger would): shuffled and repeated frames give one message;
    random bytes, truncated frames and NaN knowledge are rejected and counted, never raised."""
    server, stranger = endpoint(broker, "server"), endpoint(broker, "stranger")
    topic = Topics(RUN).up("client-1", "train")
    server.subscribe(f"edgefd/{RUN}/up/#")
    server.start(wait=5)
    stranger.start(wait=5)
    raw = stranger._client
    try:
        time.sleep(0.2)
        payload = Payload("knowledge", {"z": np.ones((50, 10), np.float32)})
        frames = split(encode_message(up("train", payload, "client-1", 2)), 400)
        order = list(reversed(frames)) + frames[:3]
        for frame in order:
            raw.publish(topic, frame, qos=1).wait_for_publish(2)
        assert receive(server).message.content.same_as(payload)
        nan = Payload("knowledge", {"z": np.full((2, 2), np.nan, np.float32)})
        garbage = [
            np.random.default_rng(0).bytes(300),
            split(encode_message(up("train", payload, "client-1", 2)), 400)[0][:30],
            split(encode_message(up("train", nan, "client-1", 2)), 4000)[0],
            b"EFC1" + b"\x00" * 60,
        ]
        for blob in garbage:
            raw.publish(topic, blob, qos=1).wait_for_publish(2)
        raw.publish("edgefd/t/up/client-1/unknown-verb", b"x", qos=1).wait_for_publish(2)
        deadline = time.monotonic() + 3
        while sum(server.stats.rejected.values()) < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sum(server.stats.rejected.values()) == 5
        assert server.stats.rejected["NonFiniteError"] == 1 and server.stats.rejected["topic"] == 1
        assert server.stats.duplicates == 3
        with pytest.raises(queue.Empty):
            server.inbox.get(timeout=0.2)
    finally:
        stranger.stop()
        server.stop()


@pytest.mark.skipif(shutil.which("mosquitto_pub") is None, reason="mosquitto-clients not installed")
def test_mosquitto_pub_garbage_is_rejected(broker):
    server = endpoint(broker, "server")
    server.subscribe(Topics(RUN).status("+"))
    server.start(wait=5)
    try:
        time.sleep(0.2)
        subprocess.run(
            [
                "mosquitto_pub",
                "-h",
                broker.host,
                "-p",
                str(broker.port),
                "-q",
                "1",
                "-t",
                Topics(RUN).status("client-2"),
                "-m",
                "offline",
            ],
            check=True,
            timeout=10,
        )
        deadline = time.monotonic() + 3
        while not server.stats.rejected and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.stats.rejected == {"MagicError": 1}
    finally:
        server.stop()


def test_embedded_amqtt_broker_carries_chunked_payloads(tmp_path):
    pytest.importorskip("amqtt")
    with start_broker(kind="amqtt", workdir=tmp_path) as running:
        assert running.kind == "amqtt"
        server, client = endpoint(running, "server"), endpoint(running, "client-0")
        server.subscribe(Topics(RUN).up("+", "hello"))
        server.start(wait=10)
        client.start(wait=10)
        try:
            time.sleep(0.3)
            payload = Payload("hello", {"h": np.arange(700, dtype=np.int64)})
            client.publish(Topics(RUN).up("client-0", "hello"), up("hello", payload, "client-0", 0))
            assert receive(server, 10).message.content.same_as(payload)
        finally:
            client.stop()
            server.stop()


def test_a_repeated_status_frame_is_taken_every_time(broker):
    """A client's last will is one fixed frame: each death must reach the server, not be dropped
    as a duplicate of the previous one."""
    from edgefd.deploy import control

    server, stranger = endpoint(broker, "server"), endpoint(broker, "stranger")
    server.subscribe(Topics(RUN).status("+"))
    server.start(wait=5)
    stranger.start(wait=5)
    try:
        time.sleep(0.2)
        will = encode_frames(control.status_message("client-3", control.OFFLINE, RUN), 4096)[0]
        online = encode_frames(control.status_message("client-3", control.ONLINE, RUN), 4096)[0]
        for frame in (will, online, will):
            stranger._client.publish(Topics(RUN).status("client-3"), frame, qos=1).wait_for_publish(2)
        states = [control.state_of(receive(server).message) for _ in range(3)]
        assert states == ["offline", "online", "offline"]
    finally:
        stranger.stop()
        server.stop()


def test_each_peer_is_written_in_its_version_and_other_versions_are_refused_in_one_line(broker, caplog):
    """The server writes a device it has not heard from in the oldest version it speaks, which a
    device of the previous release (protocol 2) reads; in another version that device refuses the
    message, and the server refuses a version older or newer than its own, each in a line naming
    both sides' versions and the side to upgrade."""
    caplog.set_level("WARNING", logger="edgefd.deploy.mqtt_transport")
    topics = Topics(RUN)
    server, device = endpoint(broker, "server"), endpoint(broker, "client-0")
    device.versions = (2,)  # the previous release's
    server.subscribe(topics.up("+", "train"))
    device.subscribe(topics.down("client-0", "+"))
    server.start(wait=5)
    device.start(wait=5)
    request = Message("train", "server", "client-0", 1, Payload("weights", {"w": np.ones(4, np.float32)}), run=RUN)
    try:
        time.sleep(0.2)
        server.publish(topics.down("client-0", "train"), request)
        assert receive(device).version == 2
        server.write_to("client-0", 3)
        server.publish(topics.down("client-0", "train"), request)
        for version, sender in ((1, "client-0"), (4, "client-1")):  # one line per topic and reason
            data = bytearray(encode_message(up("train", Payload("logits", {"z": np.zeros(3, np.float32)}), sender, 1)))
            data[4] = version
            device._client.publish(topics.up(sender, "train"), split(bytes(data), 4096)[0], qos=1)
        deadline = time.monotonic() + 10
        while (
            time.monotonic() < deadline
            and sum(point.stats.rejected["UnsupportedVersionError"] for point in (server, device)) < 3
        ):
            time.sleep(0.05)
    finally:
        device.stop()
        server.stop()
    lines = [record.getMessage() for record in caplog.records]
    newer, older = (
        "the sender runs a newer edgefd: upgrade edgefd on this side",
        "the sender runs an older edgefd: upgrade edgefd on the sender",
    )
    said = {
        f"down/client-0/train: UnsupportedVersionError: protocol version 3: this edgefd speaks version 2; {newer}",
        f"up/client-0/train: UnsupportedVersionError: protocol version 1: this edgefd speaks versions 2-3; {older}",
        f"up/client-1/train: UnsupportedVersionError: protocol version 4: this edgefd speaks versions 2-3; {newer}",
    }
    assert all(sum(text in line for line in lines) == 1 for text in said), lines
    assert server.take_refused() == {(cid, "train", "UnsupportedVersionError"): 1 for cid in ("client-0", "client-1")}


def test_memory_attacks_are_bounded_before_decoding(broker):
    """A stranger's 50,000 one-byte chunks of one message (with each frame's overhead, three times
    the budget), a message above the topic's limit, and messages on topics the receiver does not
    take: every byte held counts against the shared reassembly budget (with each frame's overhead),
    nothing is decoded that the topic does not allow, and a valid message still gets through
    afterwards."""
    budget = 2_000_000

    def limit(direction, client_id, verb):
        if client_id != "client-1":
            return None  # not in this run: refused on the topic alone
        return 1_000 if verb == "evaluate" else 5_000_000

    server = MqttEndpoint(
        BrokerSettings(broker.url), Topics(RUN), "server-mem", limit=limit, reassembly_budget_bytes=budget
    )
    stranger = endpoint(broker, "stranger-mem")
    server.subscribe(f"edgefd/{RUN}/up/#")
    server.start(wait=5)
    stranger.start(wait=5)
    raw, topics = stranger._client, Topics(RUN)
    peak = [0]
    try:
        time.sleep(0.2)
        tiny = split(np.random.default_rng(3).bytes(50_000), 48 + 1)  # 1 data byte a frame (48-byte header)
        assert len(tiny) == 50_000 and len(tiny) * (1 + FRAME_OVERHEAD) > 3 * budget
        for i, frame in enumerate(tiny):
            raw.publish(topics.up("client-1", "train"), frame, qos=0)
            if i % 1000 == 0:
                peak[0] = max(peak[0], server.budget.used)
                time.sleep(0.002)  # let the broker and the receiver keep up (QoS 0)
        too_big = encode_message(up("evaluate", Payload("metrics", {"pad": np.zeros(2_000, np.uint8)}), "client-1", 1))
        raw.publish(topics.up("client-1", "evaluate"), split(too_big, 4096)[0], qos=1).wait_for_publish(2)
        raw.publish(topics.up("client-9", "train"), split(too_big, 4096)[0], qos=1).wait_for_publish(2)
        good = Payload("knowledge", {"z": np.ones((10, 10), np.float32)})
        for frame in split(encode_message(up("train", good, "client-1", 3)), 400):
            raw.publish(topics.up("client-1", "train"), frame, qos=1).wait_for_publish(2)
        assert receive(server, timeout=30).message.content.same_as(good)
        assert peak[0] <= budget and server.budget.used <= budget
        rejected = server.stats.rejected
        assert rejected["reassembly-budget"] >= 1  # the tiny-chunk message
        assert rejected["OversizedError"] >= 1  # the eval answer above 1,000 B
        assert rejected["unexpected-topic"] == 1
        assert server.budget.used == 0  # the attack's frames were let go when its message was abandoned
    finally:
        stranger.stop()
        server.stop()


def test_the_inbox_refuses_what_would_pass_its_byte_bound():
    inbox = Inbox(max_bytes=1_000)
    message = Incoming("up", "client-1", "train", up("train", Payload("k"), "client-1", 1), nbytes=600)
    assert inbox.offer(message) and inbox.bytes == 600
    assert not inbox.offer(message)  # 1,200 would pass the bound
    assert inbox.get_nowait() is message and inbox.bytes == 0
    huge = Incoming("up", "client-1", "train", up("train", Payload("k"), "client-1", 1), nbytes=5_000)
    assert inbox.offer(huge)  # an empty inbox takes anything the topic allowed


def test_a_flood_of_rejections_is_counted_in_full_and_logged_sparingly(monkeypatch, caplog):
    """200,000 bad frames must not become 200,000 log lines: writing them stalled a server's intake
    for a minute, and every honest uplink of that round came too late."""
    from edgefd.deploy import mqtt_transport

    clock = [1000.0]
    monkeypatch.setattr(mqtt_transport.time, "monotonic", lambda: clock[0])
    point = MqttEndpoint(BrokerSettings("mqtt://127.0.0.1:1"), Topics(RUN), "server")
    topic = Topics(RUN).up("client-2", "train")
    with caplog.at_level("WARNING", logger="edgefd.deploy.mqtt_transport"):
        for _ in range(1000):
            point.reject("OversizedError", topic, "too big", nbytes=10)
        point.reject("shape", topic, "another reason is its own line")
        clock[0] += mqtt_transport.REJECTION_LOG_SECONDS
        point.reject("OversizedError", topic, "too big")
    assert point.stats.rejected == {"OversizedError": 1001, "shape": 1}
    assert point.stats.rejected_bytes == 10_000
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert "another reason" in lines[1]
    assert lines[2].endswith("(999 more like it since the last line)")


class Frame:
    """What paho hands `_on_message`: a topic, a payload, a retain flag."""

    def __init__(self, topic: str, payload: bytes) -> None:
        self.topic, self.payload, self.retain = topic, payload, False


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_sender_that_never_finishes_its_messages_exhausts_only_its_own_share():
    """client-1 starts messages on two of its topics and finishes none: once its share is spent,
    its frames are refused (counted against it, as "reassembly-budget"), and client-2's message of
    many frames still reassembles. The whole budget is the sum of the shares."""
    point = MqttEndpoint(BrokerSettings("mqtt://127.0.0.1:1"), Topics(RUN), "server", max_message_bytes=100_000)
    point.size_budget({"client-1": 50_000, "client-2": 50_000})
    assert point.budget.max_bytes == 100_000
    topics = Topics(RUN)
    for verb in ("hello", "train"):  # every frame but the last, of 30 kB messages
        for frame in split(np.random.default_rng(1).bytes(30_000), 1024)[:-1]:
            point._on_message(None, None, Frame(topics.up("client-1", verb), frame))
    assert point._shares["client-1"].used <= 50_000
    good = Payload("knowledge", {"z": np.ones((40, 100), np.float32)})
    for frame in split(encode_message(up("train", good, "client-2", 3)), 1024):  # 16 kB in 17 frames
        point._on_message(None, None, Frame(topics.up("client-2", "train"), frame))
    assert point.inbox.get_nowait().message.content.same_as(good)
    refused = point.take_refused()
    assert refused[("client-1", "train", "reassembly-budget")] >= 1
    assert not any(cid == "client-2" for cid, _, _ in refused)
    assert point.take_refused() == {}  # taken: counted afresh from here
    assert point.stats.rejected["reassembly-budget"] == sum(refused.values())


def test_unfinished_messages_are_let_go_on_a_timer_without_another_frame_on_their_topic():
    """A sender that starts a message and goes: its frames are let go once they are older than the
    reassembly timeout, at the next sweep (a frame on any topic, or the runtime's loop calling
    `evict_stale`), not when (if ever) its own topic gets another frame."""
    clock = Clock()
    point = MqttEndpoint(
        BrokerSettings("mqtt://127.0.0.1:1"), Topics(RUN), "server", reassembly_timeout=30.0, clock=clock
    )
    topics = Topics(RUN)
    for frame in split(np.random.default_rng(2).bytes(5_000), 1024)[:-1]:
        point._on_message(None, None, Frame(topics.up("client-1", "hello"), frame))
    held = point.budget.used
    assert held > 4_000 and point._shares["client-1"].used == held
    clock.t = 29.0
    assert point.evict_stale() == 0 and point.budget.used == held  # not yet stale
    clock.t = 31.0
    assert point.evict_stale() == 1 and point.budget.used == 0  # stale: let go, its share given back
    for frame in split(np.random.default_rng(3).bytes(5_000), 1024)[:-1]:
        point._on_message(None, None, Frame(topics.up("client-1", "step"), frame))
    assert point.budget.used > 4_000
    clock.t = 62.0  # another client's frame sweeps every topic
    lone = encode_message(up("evaluate", Payload("metrics", scalars={"accuracy": 0.5}), "client-2", 1))
    point._on_message(None, None, Frame(topics.up("client-2", "evaluate"), split(lone, 4096)[0]))
    assert point.budget.used == 0 and point.inbox.qsize() == 1
    clock.t = 62.5
    assert point.evict_stale() == 0  # swept less than SWEEP_SECONDS ago: not again yet
