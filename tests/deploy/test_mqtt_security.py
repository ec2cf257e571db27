"""The shipped broker configuration (server/mosquitto), on a real Mosquitto: TLS, passwords, client
ids bound to usernames, the run-scoped ACL, and the packet-size limit.

The broker is installed as server/README.md says (tests/deploy/shipped_broker.py): its own CA and
server certificate, a password file made with `mosquitto_passwd`, server/mosquitto/edgefd.conf as
shipped (paths and the listener's port replaced) included by Debian's stock mosquitto.conf, and
server/mosquitto/acl (its @RUN@ filled in, and a read-everything `observer` added so that a test
can see what the broker lets through).
"""

import socket
import ssl
import time

import numpy as np
import paho.mqtt.client as mqtt
import pytest
from shipped_broker import RUN_PLACEHOLDER, SERVER_DIR, start_installed

from edgefd.deploy.broker import mosquitto_path, start_broker
from edgefd.deploy.mqtt_transport import (
    DEFAULT_CHUNK_SIZE,
    BrokerSettings,
    MqttEndpoint,
    Topics,
    encode_frames,
    up_verbs,
)
from edgefd.protocol import Message, Payload

PASSWORDS = {
    "edgefd-server": "server-secret",
    "client-0": "zero-secret",
    "client-1": "one-secret",
    "observer": "observer-secret",
}
RUN = "sec"
NOT_AUTHORIZED = 0x87
LISTENER_OPTIONS = {
    "use_username_as_clientid",
    "certfile",
    "keyfile",
    "cafile",
    "capath",
    "tls_version",
    "require_certificate",
    "use_identity_as_username",
    "use_subject_as_username",
    "max_connections",
    "mount_point",
    "protocol",
    "bind_interface",
    "socket_domain",
    "max_qos",
    "max_topic_alias",
}
"""Mosquitto options that belong to the listener they follow (mosquitto.conf(5), "Listeners")."""


def message(content: Payload, sender: str, round: int = 1, verb: str = "train") -> Message:
    """``content`` as its sender's message of the run: a client's to the server, the server's to client-1."""
    receiver = "client-1" if sender == "server" else "server"
    return Message(verb, sender, receiver, round, content, run=RUN)


def shipped_settings() -> list[tuple[str, str]]:
    """(option, value) of server/mosquitto/edgefd.conf, in order."""
    lines = (SERVER_DIR / "edgefd.conf").read_text().splitlines()
    return [tuple((line.split(None, 1) + [""])[:2]) for line in lines if line.strip() and not line.startswith("#")]


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory):
    observer = "\n# test only: sees whatever the broker lets through\nuser observer\ntopic read #\n"
    with start_installed(tmp_path_factory.mktemp("secure"), [RUN], PASSWORDS, observer) as running:
        yield running


def settings(broker, user, password=None, **kwargs):
    return BrokerSettings(
        broker.url,
        username=user,
        password=PASSWORDS.get(user) if password is None else password,
        ca_cert=broker.ca,
        **kwargs,
    )


def endpoint(broker, user, subscribe=(), password=None):
    point = MqttEndpoint(settings(broker, user, password), Topics(RUN), f"test-{user}")
    for topic in subscribe:
        point.subscribe(topic)
    return point


def raw_client(broker, user, client_id=None, protocol=mqtt.MQTTv5):
    """A bare paho client (MQTT 5 by default: the broker's refusals come back as reason codes)."""
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id or f"raw-{user}", protocol=protocol)
    client.username_pw_set(user, PASSWORDS[user])
    client.tls_set(ca_certs=broker.ca, cert_reqs=ssl.CERT_REQUIRED)
    return client


def wait_until(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_tls_and_password_are_required(secure_broker):
    topics = Topics(RUN)
    server = endpoint(secure_broker, "edgefd-server", [f"{topics.root}/up/+/+"])
    client = endpoint(secure_broker, "client-0")
    server.start(wait=10)
    client.start(wait=10)
    try:
        time.sleep(0.2)
        payload = Payload("knowledge", {"z": np.ones((3, 10), np.float32)})
        client.publish(topics.up("client-0", "train"), message(payload, "client-0"))
        assert server.inbox.get(timeout=5).message.content.same_as(payload)
    finally:
        client.stop()
        server.stop()
    # each failure names its cause (docs/DEPLOYMENT.md#when-it-cannot-connect)
    with pytest.raises(ConnectionError, match=r"the broker refused the connection \(Not authorized"):
        endpoint(secure_broker, "client-0", password="wrong").start(wait=3)
    plain = MqttEndpoint(
        BrokerSettings(secure_broker.url.replace("mqtts", "mqtt"), username="client-0", password=PASSWORDS["client-0"]),
        topics,
        "plain",
    )
    with pytest.raises(ConnectionError, match=r"accepted the connection but never answered \(a TLS listener"):
        plain.start(wait=3)
    untrusted = MqttEndpoint(
        BrokerSettings(secure_broker.url, username="client-0", password=PASSWORDS["client-0"]), topics, "untrusted"
    )  # the system CAs do not know the test CA
    with pytest.raises(ConnectionError, match=r"the TLS handshake with .* failed \(CERTIFICATE_VERIFY_FAILED\)"):
        untrusted.start(wait=3)


def test_acl_confines_a_client_to_its_own_topics(secure_broker):
    topics = Topics(RUN)
    server = endpoint(secure_broker, "edgefd-server", [f"{topics.root}/up/+/+", f"{topics.root}/status/+"])
    victim = endpoint(secure_broker, "client-1", [f"{topics.root}/down/client-1/+"])
    server.start(wait=10)
    victim.start(wait=10)
    attacker = raw_client(secure_broker, "client-0")
    results, delivered = {}, []
    attacker.on_message = lambda c, u, message: delivered.append(message.topic)
    attacker.on_subscribe = lambda c, u, mid, codes, props: results.setdefault(mid, [int(code.value) for code in codes])
    attacker.on_publish = lambda c, u, mid, code, props: results.setdefault(mid, int(code.value))
    attacker.connect(secure_broker.host, secure_broker.port)
    attacker.loop_start()
    try:
        time.sleep(0.3)
        forged = Payload("knowledge", {"z": np.ones((3, 10), np.float32)})
        frame = encode_frames(message(forged, "client-1"), 4096)[0]
        _, sub_other = attacker.subscribe(topics.down("client-1", "train"), qos=1)
        _, sub_own = attacker.subscribe(topics.down("client-0", "train"), qos=1)
        pub_other = attacker.publish(topics.up("client-1", "train"), frame, qos=1)
        pub_status = attacker.publish(topics.status("client-1"), frame, qos=1)
        pub_down = attacker.publish(topics.down("client-1", "train"), frame, qos=1)
        pub_own = attacker.publish(
            topics.up("client-0", "train"),
            encode_frames(message(Payload("knowledge", forged.arrays), "client-0"), 4096)[0],
            qos=1,
        )
        deadline = time.monotonic() + 5
        wanted = [sub_other, sub_own, pub_other.mid, pub_status.mid, pub_down.mid, pub_own.mid]
        while not all(m in results for m in wanted) and time.monotonic() < deadline:
            time.sleep(0.05)
        not_authorized = 0x87
        assert results[pub_other.mid] == results[pub_status.mid] == results[pub_down.mid] == not_authorized
        assert results[pub_own.mid] == 0
        own = server.inbox.get(timeout=5)
        assert (own.client_id, own.message.sender) == ("client-0", "client-0")
        # Mosquitto 2.0 grants a subscription it may not serve (SUBACK 1) and then withholds every
        # message on it: the server's downlinks reach client-1 and client-0's own topic only.
        assert results[sub_other] == [1] and results[sub_own] == [1]
        downlink = Payload("knowledge", {"z": np.zeros((3, 10), np.float32)})
        server.publish(topics.down("client-1", "train"), message(downlink, "server"))
        server.publish(topics.down("client-0", "train"), message(downlink, "server"))
        assert victim.inbox.get(timeout=5).message.content.same_as(downlink)
        deadline = time.monotonic() + 3
        while not delivered and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        assert delivered == [topics.down("client-0", "train")]
        assert server.inbox.empty() and victim.inbox.empty()  # nothing forged got through
    finally:
        attacker.loop_stop()
        attacker.disconnect()
        victim.stop()
        server.stop()


# ---------------------------------------------------------------------- the shipped files themselves
def test_listener_options_follow_the_listener_line():
    """Mosquitto 2.0 gives an option that belongs to a listener, written before any `listener`,
    to an extra default listener on port 1883 (plain MQTT). The test broker runs the shipped file
    with its listener line in place, so this guards the order the test cannot see."""
    names = [name for name, _ in shipped_settings()]
    listener = names.index("listener")
    assert names.count("listener") == 1
    assert not LISTENER_OPTIONS & set(names[:listener]), "a listener option before `listener 8883`"
    values = dict(shipped_settings())
    assert values["use_username_as_clientid"] == "true" and values["allow_anonymous"] == "false"
    payload, packet = int(values["message_size_limit"]), int(values["max_packet_size"])
    # A default-size chunk frame (header included) fits with room to raise --chunk-size 4x, and a
    # packet of the largest payload plus a topic and MQTT's headers fits max_packet_size.
    assert payload >= 4 * DEFAULT_CHUNK_SIZE and packet >= payload + 1024
    assert int(values["memory_limit"]) >= 64 * packet
    assert int(values["max_queued_messages"]) >= 16000  # the server session queues one message per device at once
    # One client's backlog (a device that stops reading) cannot fill the broker's memory, and its
    # queue still holds many of the largest frames.
    assert 64 * packet <= int(values["max_queued_bytes"]) <= int(values["memory_limit"]) // 4


def test_the_acl_is_run_scoped():
    rules = [line.split() for line in (SERVER_DIR / "acl").read_text().splitlines() if line and line[0] != "#"]
    root = f"edgefd/{RUN_PLACEHOLDER}"
    assert all(rule[2].startswith(f"{root}/") for rule in rules if rule[0] in ("topic", "pattern"))
    # A device: exactly the uplink verbs edgefd sends (no '#', no verbs of its own invention), its
    # status, its downlinks.
    assert {(r[1], r[2]) for r in rules if r[0] == "pattern"} == {
        *(("write", f"{root}/up/%u/{verb}") for verb in up_verbs()),
        ("write", f"{root}/status/%u"),
        ("read", f"{root}/down/%u/+"),
    }
    # The server: its run's uplinks and statuses (and their retained messages, which it clears),
    # and its downlinks.
    assert rules[: rules.index(["user", "edgefd-server"]) + 6][-5:] == [
        ["topic", "read", f"{root}/up/#"],
        ["topic", "read", f"{root}/status/#"],
        ["topic", "write", f"{root}/down/#"],
        ["topic", "write", f"{root}/up/#"],
        ["topic", "write", f"{root}/status/#"],
    ]


# ---------------------------------------------------------------------- a device against the broker
def connect(broker, user, client_id):
    """A paho client speaking MQTT 3.1.1 (as edgefd does), connected in the background; the list
    gets the CONNACK's reason code."""
    client = raw_client(broker, user, client_id=client_id, protocol=mqtt.MQTTv311)
    codes: list[int] = []
    client.on_connect = lambda c, u, flags, code, props: codes.append(int(code.value))
    client.connect(broker.host, broker.port)
    client.loop_start()
    return client, codes


def test_a_device_cannot_take_over_the_servers_or_another_devices_session(secure_broker):
    """Client ids are predictable (the runtime's own, taken here from the real objects); a device
    that connects with one of them gets its own session (its username) and nobody is disconnected."""
    from edgefd.deploy.client_runtime import ClientRuntime, ClientSettings
    from edgefd.deploy.mqtt_channel import DeploymentSettings, MqttChannel
    from edgefd.runtime.config import SimulationConfig

    topics = Topics(RUN)
    channel = MqttChannel(
        SimulationConfig(clients=2),
        DeploymentSettings(run=RUN, broker=settings(secure_broker, "edgefd-server")),
        ["client-0", "client-1"],
        topics,
    )
    device = ClientRuntime(ClientSettings(RUN, "client-1", settings(secure_broker, "client-1")))
    server, victim = channel.endpoint, device.endpoint
    server.start(wait=10)
    victim.start(wait=10)
    try:
        for target in (server, victim):
            client_id = target._client._client_id.decode()
            assert client_id in (f"edgefd-server-{RUN}", f"edgefd-{RUN}-client-1")
            attacker, connected = connect(secure_broker, "client-0", client_id)
            try:
                assert wait_until(lambda codes=connected: bool(codes), 5) and connected == [0]  # let in: it is client-0
                time.sleep(1.0)  # paho would have reconnected a taken-over victim within 0.2-2 s
                assert server.stats.connects == victim.stats.connects == 1
                assert server.connected.is_set() and victim.connected.is_set()
                # Both ways still work, and what the attacker sends is filed under client-0.
                up = Payload("knowledge", {"z": np.ones((2, 10), np.float32)})
                victim.publish(topics.up("client-1", "train"), message(up, "client-1"))
                assert server.inbox.get(timeout=5).message.content.same_as(up)
                down = Payload("knowledge", {"z": np.zeros((2, 10), np.float32)})
                server.publish(topics.down("client-1", "train"), message(down, "server"))
                assert victim.inbox.get(timeout=5).message.content.same_as(down)
                own = Payload("knowledge", {"z": np.ones((2, 10), np.float32)})
                attacker.publish(
                    topics.up("client-0", "train"), encode_frames(message(own, "client-0"), 4096)[0], qos=1
                )
                got = server.inbox.get(timeout=5)
                assert (got.client_id, got.message.sender) == ("client-0", "client-0")
            finally:
                attacker.loop_stop()
                attacker.disconnect()
    finally:
        victim.stop()
        server.stop()


def test_without_the_binding_a_client_id_takes_the_session_over(tmp_path):
    """The control for the test above: on a broker without use_username_as_clientid, the same
    connection disconnects its victim (so `connects == 1` above does detect a takeover)."""
    if mosquitto_path() is None:
        pytest.skip("mosquitto not installed")
    with start_broker(kind="mosquitto", workdir=tmp_path) as broker:
        victim = MqttEndpoint(BrokerSettings(broker.url), Topics(RUN), f"edgefd-{RUN}-client-1")
        victim.start(wait=10)
        attacker = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"edgefd-{RUN}-client-1")
        try:
            attacker.connect(broker.host, broker.port)
            attacker.loop_start()
            assert wait_until(lambda: victim.stats.connects > 1 or not victim.connected.is_set(), 5)
        finally:
            attacker.loop_stop()
            attacker.disconnect()
            victim.stop()


def test_a_device_is_confined_to_its_own_topics_of_its_run(secure_broker):
    topics, other = Topics(RUN), Topics("other-run")
    seen, subscribed = [], []
    observer = raw_client(secure_broker, "observer")
    observer.on_message = lambda c, u, message: None if message.retain else seen.append(message.topic)
    observer.on_subscribe = lambda c, u, mid, codes, props: subscribed.append(mid)
    observer.connect(secure_broker.host, secure_broker.port)
    observer.subscribe("#", qos=1)
    observer.loop_start()
    results: dict[str, dict[int, int]] = {"client-0": {}, "edgefd-server": {}}
    clients = {}
    for user in results:
        clients[user] = raw_client(secure_broker, user)
        clients[user].on_publish = lambda c, u, mid, code, props, got=results[user]: got.setdefault(mid, code.value)
        clients[user].connect(secure_broker.host, secure_broker.port)
        clients[user].loop_start()
    try:
        assert wait_until(lambda: subscribed and all(c.is_connected() for c in clients.values()), 10)
        frame = encode_frames(message(Payload("knowledge", {"z": np.ones((3, 10), np.float32)}), "client-0"), 4096)[0]
        attempts = {
            ("client-0", other.up("client-0", "train")): NOT_AUTHORIZED,  # its own id, another run
            ("client-0", other.status("client-0")): NOT_AUTHORIZED,
            ("client-0", other.up("client-1", "train")): NOT_AUTHORIZED,  # another id, another run
            ("client-0", topics.up("client-1", "train")): NOT_AUTHORIZED,  # another id, its run
            ("client-0", topics.status("client-1")): NOT_AUTHORIZED,
            ("client-0", f"{topics.root}/up/client-0/made-up"): NOT_AUTHORIZED,  # no verb edgefd sends
            ("client-0", f"{topics.root}/up/client-0/train/deeper"): NOT_AUTHORIZED,
            ("client-0", "edgefd/elsewhere"): NOT_AUTHORIZED,
            ("edgefd-server", other.down("client-0", "train")): NOT_AUTHORIZED,  # the server: its run only
            ("client-0", topics.up("client-0", "train")): 0,  # what it may do
            ("edgefd-server", topics.down("client-0", "train")): 0,
        }
        mids = {}
        for (user, topic), _ in attempts.items():
            mids[user, topic] = clients[user].publish(topic, frame, qos=1).mid
        assert wait_until(lambda: all(mids[key] in results[key[0]] for key in mids), 5)
        assert {key: results[key[0]][mids[key]] for key in mids} == attempts
        time.sleep(0.5)
        assert sorted(seen) == sorted([topics.up("client-0", "train"), topics.down("client-0", "train")])
    finally:
        for client in (*clients.values(), observer):
            client.loop_stop()
            client.disconnect()


def mqtt_length(n: int) -> bytes:
    """MQTT's variable-length integer (a packet's remaining length)."""
    out = bytearray()
    while True:
        n, digit = n // 128, n % 128
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def mqtt_string(text: str) -> bytes:
    return len(text.encode()).to_bytes(2, "big") + text.encode()


def test_an_oversized_packet_disconnects_its_sender_and_the_broker_stays_up(secure_broker):
    limit = int(dict(shipped_settings())["max_packet_size"])
    topics = Topics(RUN)
    server = endpoint(secure_broker, "edgefd-server", [f"{topics.root}/up/+/+"])
    server.start(wait=10)
    try:
        # paho over MQTT 3.1.1 (as edgefd speaks it) is not told the limit and sends the packet.
        attacker = raw_client(secure_broker, "client-0", protocol=mqtt.MQTTv311)
        dropped = []
        attacker.on_disconnect = lambda c, u, flags, code, props: dropped.append(code)
        attacker.connect(secure_broker.host, secure_broker.port)
        attacker.loop_start()
        try:
            attacker.publish(topics.up("client-0", "train"), b"\0" * limit, qos=1)
            assert wait_until(lambda: dropped, 10), "the broker kept the sender of an oversized packet"
        finally:
            attacker.loop_stop()
            attacker.disconnect()

        # A packet that only announces 200 MB: the broker hangs up on its first bytes, without
        # waiting for (or buffering) the rest.
        context = ssl.create_default_context(cafile=secure_broker.ca)
        plain = socket.create_connection((secure_broker.host, secure_broker.port), timeout=5)
        with context.wrap_socket(plain, server_hostname=secure_broker.host) as raw:
            body = mqtt_string("MQTT") + bytes([4, 0xC2]) + (30).to_bytes(2, "big")
            body += mqtt_string("raw") + mqtt_string("client-0") + mqtt_string(PASSWORDS["client-0"])
            raw.sendall(b"\x10" + mqtt_length(len(body)) + body)
            assert raw.recv(4) == b"\x20\x02\x00\x00"  # CONNACK: accepted
            started = time.monotonic()
            raw.sendall(b"\x32" + mqtt_length(200_000_000))  # PUBLISH, QoS 1, 200 MB to come
            try:
                closed = raw.recv(1) == b""
            except (ConnectionError, ssl.SSLError):
                closed = True
            assert closed and time.monotonic() - started < 2

        # The broker is up, the server never lost its connection, nothing oversized reached it,
        # and a message of several full default-size chunks still goes through.
        assert secure_broker.process.poll() is None
        assert server.connected.is_set() and server.stats.connects == 1 and server.inbox.empty()
        client = endpoint(secure_broker, "client-0")
        client.start(wait=10)
        try:
            big = Payload("knowledge", {"z": np.ones((3, DEFAULT_CHUNK_SIZE // 4), np.float32)})
            assert len(encode_frames(message(big, "client-0"), DEFAULT_CHUNK_SIZE)) >= 3
            client.publish(topics.up("client-0", "train"), message(big, "client-0"))
            assert server.inbox.get(timeout=10).message.content.same_as(big)
        finally:
            client.stop()
    finally:
        server.stop()
