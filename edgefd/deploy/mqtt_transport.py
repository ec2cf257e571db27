"""Messages over MQTT: topics, chunked QoS-1 publishing, reassembly, validation and counting.

Every message on a run's topics is one encoded :class:`~edgefd.protocol.Message` cut into chunk
frames (:func:`edgefd.protocol.split`; a small message is one frame). Topics, per run and client:

    edgefd/<run>/down/<client>/<verb>   server -> client   (config, and every verb of the table)
    edgefd/<run>/up/<client>/<verb>     client -> server   (the verbs a client answers or asks on)
    edgefd/<run>/status/<client>        client -> server   retained "status" message: online/offline
                                                          (offline is the connection's last will)

The verbs are those of `edgefd.runtime.verbs.VERBS`. The broker's ACL (server/mosquitto/acl,
generated from that table by `edgefd.deploy.acl`) lets a client write only `up/<its id>/<verb>` and
`status/<its id>` and read only `down/<its id>/+`. A receiver here never trusts a frame: it is
reassembled per topic (duplicates and any order are fine) in its sender's share of the memory for
partial messages, decoded with size limits, and anything that fails is rejected, logged and counted
in :attr:`WireStats.rejected` (and against its sender: :meth:`MqttEndpoint.take_refused`); nothing a
stranger sends can raise into the caller. The method code never sees any of this.

One module over 500 lines: a deployment's MQTT wire in one place, as the codec is a payload's: the
topics and the broker settings, and the endpoint that holds every frame to them.
"""

from __future__ import annotations

import logging
import queue
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

import paho.mqtt.client as mqtt

from edgefd.protocol import (
    MESSAGE_VERSION,
    MESSAGE_VERSIONS,
    BudgetExhaustedError,
    Message,
    ProtocolError,
    Reassembler,
    ReassemblyBudget,
    chunk_count,
    decode_message,
    encode_message_buffers,
    iter_split,
    message_version,
    split,
)
from edgefd.runtime.limits import OPEN_MESSAGE_BYTES
from edgefd.runtime.verbs import VERBS
from edgefd.settings import setting

log = logging.getLogger(__name__)

PREFIX = "edgefd"
CONFIG = "config"
"""The down topic of a client's retained run config (the deployment's own, not a verb of the loop)."""


def down_verbs() -> set[str]:
    """What the server sends a client on: the run's config, and every verb of the table."""
    return {CONFIG, *VERBS}


def up_verbs() -> set[str]:
    """What a client sends the server on: every verb it answers, and those only clients send."""
    return {name for name, spec in VERBS.items() if spec.answers}


QOS = 1
DEFAULT_CHUNK_SIZE = 256 * 1024
MAX_INFLIGHT = 64
"""Frames paho sends before it waits for the broker's acknowledgements (QoS 1)."""
DEVICE_SEND_WINDOW = 2 * MAX_INFLIGHT
"""A device's send window (`MqttEndpoint`'s ``send_window``): frames published and not yet
acknowledged before `MqttEndpoint.publish` waits. paho holds each frame until the broker
acknowledges it, so with a window a message's frames are made as they go out, not all at once
(FedICT's 328 MB upload held its 328 MB of frames beside its features; with the window 32 MB).
Twice paho's in-flight limit: the socket never waits on the window."""
DEFAULT_MAX_MESSAGE_BYTES = OPEN_MESSAGE_BYTES
"""What an endpoint takes on every topic unless told otherwise (its `limit`, `resize`)."""
REJECTION_LOG_SECONDS = 10.0
"""At most one log line per topic and reason this often: a flood of bad frames is counted in full
(`WireStats.rejected`) but writing a line for each would stall the process that reads them."""


SWEEP_SECONDS = 1.0
"""How often, at most, every topic's partial messages are checked for staleness (and more often
with a reassembly timeout under 4 s): a message left unfinished is let go within the timeout plus
this, whether or not another frame comes on its topic."""
BUDGET_REASON = "reassembly-budget"
"""The reason a frame refused for want of room in its sender's share (or the whole reassembly
budget) is counted under: told apart from a message too large for its topic (``OversizedError``)."""

MAX_UNEXPECTED_SENDERS = 1000
"""Distinct ids `MqttEndpoint.unexpected_senders` names; past them a made-up id is only counted in
the ``unexpected-topic`` refusals (a flood of new ids does not grow the endpoint)."""


TopicLimit = Callable[[str, str, str], "int | None"]
"""(direction, client id, verb) -> the largest message accepted on that topic, or None: refused
before any of its bytes are buffered (a receiver routes on the topic first, then reassembles)."""


class Inbox(queue.Queue):
    """Received messages waiting for the runtime's thread, bounded in bytes: when the runtime falls
    behind, the network thread refuses new messages (counted) instead of holding them all."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__()
        self.max_bytes = max_bytes
        self.bytes = 0

    def offer(self, item: Incoming) -> bool:
        """Queue ``item`` unless that would pass ``max_bytes`` (an empty inbox takes anything)."""
        with self.mutex:
            if self.bytes and self.bytes + item.nbytes > self.max_bytes:
                return False
        self.put(item)
        return True

    def _put(self, item: Incoming) -> None:  # called by Queue.put with its lock held
        super()._put(item)
        self.bytes += item.nbytes

    def _get(self) -> Incoming:
        item = super()._get()
        self.bytes -= item.nbytes
        return item


def check_name(what: str, name: str) -> str:
    """Run names and client ids become topic levels: no '/', '+', '#', not empty."""
    if not name or any(c in name for c in "/+#") or any(ord(c) < 0x20 for c in name):
        raise ValueError(f"{what} {name!r}: must be non-empty without '/', '+', '#' or control characters")
    return name


@dataclass(frozen=True)
class Topics:
    """The topic names of one run."""

    run: str

    def __post_init__(self) -> None:
        check_name("run name", self.run)

    @property
    def root(self) -> str:
        return f"{PREFIX}/{self.run}"

    def down(self, client_id: str, verb: str) -> str:
        return f"{self.root}/down/{client_id}/{verb}"

    def up(self, client_id: str, verb: str) -> str:
        return f"{self.root}/up/{client_id}/{verb}"

    def status(self, client_id: str) -> str:
        return f"{self.root}/status/{client_id}"

    def parse(self, topic: str) -> tuple[str, str, str]:
        """(direction, client id, verb) of one of this run's topics; verb is "" for status.
        Raises ValueError for anything else."""
        parts = topic.split("/")
        if len(parts) < 4 or "/".join(parts[:2]) != self.root:
            raise ValueError(f"topic {topic!r} is not under {self.root}/")
        direction, client_id, rest = parts[2], parts[3], parts[4:]
        if direction == "status" and not rest:
            return direction, client_id, ""
        verbs = {"down": down_verbs, "up": up_verbs}.get(direction)
        if verbs is None or len(rest) != 1 or rest[0] not in verbs():
            raise ValueError(f"topic {topic!r}: unknown direction or verb")
        return direction, client_id, rest[0]


RECONNECT_DELAYS = (0.2, 2.0)
"""paho's back-off between connection attempts: the first wait, doubled after each failure up to the
second (reset by a connection)."""
FAIL_FAST = 5.0
"""Seconds a side that waits for its connection (`MqttEndpoint.start` with ``wait``: the server)
goes on trying once an attempt failed, before it gives up with the cause: long enough to ride out a
broker that restarts, short enough that a wrong host or port says so at once."""
PROBE_TIMEOUT = 3.0
"""Seconds `broker_problem` gives a TCP connection or a TLS handshake."""


def broker_problem(settings: BrokerSettings, timeout: float = PROBE_TIMEOUT) -> str | None:
    """Why a connection to the broker fails, in a few seconds and in words: the host does not
    resolve, nothing listens on the port, nothing answers, or the TLS handshake fails (the CA, the
    certificate's host name). None when a TCP connection (and its TLS handshake) opens: then a
    failure is the broker's answer (a login it refuses), which `MqttEndpoint` reports itself. paho
    retries without saying why; this is what its attempts are told apart by."""
    host, port = settings.host, settings.port
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        return f"cannot resolve the host {host!r} ({error.strerror})"
    try:
        connection = socket.create_connection((host, port), timeout=timeout)
    except ConnectionRefusedError:
        return f"nothing listens on {host}:{port} (connection refused)"
    except TimeoutError:
        return f"no answer from {host}:{port} within {timeout:g} s (a firewall, or the wrong host or port)"
    except OSError as error:
        return f"cannot reach {host}:{port} ({error.strerror or error})"
    with connection:
        if not settings.tls:
            return None
        try:
            context = ssl.create_default_context(cafile=settings.ca_cert)
            if settings.client_cert:
                context.load_cert_chain(settings.client_cert, settings.client_key)
            context.check_hostname = not settings.tls_insecure
            with context.wrap_socket(connection, server_hostname=host):
                return None
        except ssl.SSLError as error:  # CertificateError included
            return f"the TLS handshake with {host}:{port} failed ({error.reason or error})"
        except OSError as error:  # a CA or key file that cannot be read, a reset
            return f"the TLS handshake with {host}:{port} failed ({error.strerror or error})"


@dataclass
class BrokerSettings:
    """How this side reaches the broker: the broker flags of `edgefd server`, `edgefd client` and
    `edgefd deploy-local` are made from these settings (`edgefd.deploy.flags`). Credentials in the
    URL (mqtt://USER:PASSWORD@HOST:PORT) are used when ``username`` is not given, and never logged
    (`shown_url`)."""

    broker: str = setting(
        help="the MQTT broker: mqtt://HOST:PORT, or mqtts://HOST:PORT for TLS (port default 1883 / 8883), "
        "e.g. mqtts://server.lan:8883"
    )
    username: str | None = setting(
        None,
        "MQTT username; with the broker set up as in server/README.md: edgefd-server for the server, the "
        "client id (e.g. client-0) for a device (default: none, connect without a login)",
    )
    password: str | None = setting(
        None,
        "MQTT password; never a flag, which other users could read in the process list: the commands read it "
        "from --password-file (or $EDGEFD_MQTT_PASSWORD)",
    )
    ca_cert: str | None = setting(
        None, "with mqtts://: the CA certificate that signed the broker's, e.g. ca.crt (default: the system's CAs)"
    )
    client_cert: str | None = setting(
        None, "with mqtts://: this side's certificate, for brokers that require TLS client auth (with --client-key)"
    )
    client_key: str | None = setting(
        None, "with mqtts://: this side's private key, for brokers that require TLS client auth (with --client-cert)"
    )
    tls_insecure: bool = setting(False, "do not check that the broker's certificate names its host (test CAs only)")
    keepalive: int = setting(
        10,
        "seconds between MQTT pings; the broker declares a silent peer dead (and publishes its last will) "
        "after about 1.5x this",
    )
    chunk_size: int = setting(
        DEFAULT_CHUNK_SIZE,
        "largest MQTT message this side sends, in bytes, chunk header included; larger payloads are split into "
        f"chunks (default: {DEFAULT_CHUNK_SIZE} = {DEFAULT_CHUNK_SIZE / 1024:g} KiB)",
    )

    def __post_init__(self) -> None:
        parts = urlsplit(self.broker)
        if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
            raise ValueError(f"broker {self.broker!r}: expected mqtt://HOST:PORT or mqtts://HOST:PORT")
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"broker {self.broker!r}: the port is not a number") from None
        self.host = parts.hostname
        self.tls = parts.scheme == "mqtts"
        self.port = port or (8883 if self.tls else 1883)
        if parts.username is not None and self.username is None:
            self.username, self.password = unquote(parts.username), unquote(parts.password or "") or None
        self.shown_url = f"{parts.scheme}://{parts.hostname}:{self.port}"
        """The URL without its credentials: the only form logs and errors print."""


@dataclass
class Incoming:
    """One reassembled, decoded message, with the topic it came on."""

    direction: str
    client_id: str
    verb: str
    message: Message
    nbytes: int
    """Length of the encoded message."""
    received_at: float = field(default_factory=time.monotonic)
    version: int = MESSAGE_VERSION
    """The protocol version it came in (`edgefd.protocol.message`)."""

    @property
    def content_bytes(self) -> int:
        """Length of the content's encoding (the codec's count, as in a simulation)."""
        return self.nbytes - self.message.metadata_bytes


@dataclass
class WireStats:
    """What crossed the wire at this endpoint, in MQTT payload bytes (chunk headers included)."""

    sent_bytes: Counter = field(default_factory=Counter)
    """Per "direction/verb" key, bytes of the frames published."""
    sent_frames: Counter = field(default_factory=Counter)
    sent_messages: Counter = field(default_factory=Counter)
    received_bytes: Counter = field(default_factory=Counter)
    """Per "direction/verb" key, bytes of the frames accepted (rejected frames are not in it)."""
    received_frames: Counter = field(default_factory=Counter)
    received_messages: Counter = field(default_factory=Counter)
    rejected: Counter = field(default_factory=Counter)
    """Per reason (the ProtocolError class name, BUDGET_REASON, or the runtime's reason), frames or
    messages refused."""
    rejected_bytes: int = 0
    duplicates: int = 0
    """Frames ignored as repeats of frames already taken (QoS 1 redelivery)."""
    stale_retained: Counter = field(default_factory=Counter)
    """Per "direction/verb" key, retained frames ignored on a direction this endpoint takes live
    messages only (`MqttEndpoint`'s ``stale_retained``): copies the broker stored earlier."""
    connects: int = 0

    def snapshot(self) -> dict:
        return {
            "sent_bytes": dict(self.sent_bytes),
            "sent_frames": dict(self.sent_frames),
            "sent_messages": dict(self.sent_messages),
            "received_bytes": dict(self.received_bytes),
            "received_frames": dict(self.received_frames),
            "received_messages": dict(self.received_messages),
            "rejected": dict(self.rejected),
            "rejected_bytes": self.rejected_bytes,
            "duplicates": self.duplicates,
            "stale_retained": dict(self.stale_retained),
            "connects": self.connects,
        }


@dataclass(frozen=True)
class PeerCounts:
    """What an endpoint has counted per peer so far (`MqttEndpoint.peers`)."""

    bytes_from: dict[str, int]
    bytes_to: dict[str, int]
    refused_pending: Counter
    """Per (client id, verb, reason), refusals not yet taken by `MqttEndpoint.take_refused`."""
    unexpected_senders: dict[str, int]


def encode_frames(message: Message, chunk_size: int, version: int = MESSAGE_VERSION) -> list[bytes]:
    """The frames that carry `message` in protocol ``version`` (what :meth:`MqttEndpoint.publish`
    sends), cut from the encoded buffers: the encoded message is never held whole beside its frames."""
    return split(encode_message_buffers(message, version), chunk_size)


def newest_common(ours: Collection[int], theirs: Collection[int]) -> int | None:
    """The protocol version two sides agree on: the newest both speak (None: they share none)."""
    common = set(ours) & set(theirs)
    return max(common) if common else None


def _no_delay(sock) -> None:
    """Send small messages at once: without TCP_NODELAY, Nagle's algorithm holds a message until
    the previous one is acknowledged, and the peer delays that acknowledgement (40 ms on Linux),
    so a request-answer round trip costs ~90 ms instead of ~1 ms on loopback."""
    if sock is not None and getattr(sock, "family", None) in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class MqttEndpoint:
    """One paho client that sends messages and queues the decoded messages it receives.

    It reconnects by itself (paho's loop thread); `subscriptions` are renewed on every connect and
    `on_connect` hooks run after that, so a runtime can re-announce itself after a broker restart.
    Received messages go to :attr:`inbox` (a thread-safe queue) for the runtime's own thread.

    Protocol versions: it reads and writes :attr:`versions` (this release's), refusing a message of
    any other with a line that names both sides' versions and which to upgrade. To each peer (a
    message's receiver) it writes the version :meth:`write_to` set, and before that the oldest of
    :attr:`versions`, which every peer of this release or the one before reads. The runtimes
    decide the version (a device: the newest both sides speak, from the config; the server: the
    one each device writes in).
    """

    def __init__(
        self,
        settings: BrokerSettings,
        topics: Topics,
        client_id: str,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        will: tuple[str, bytes] | None = None,
        reassembly_timeout: float = 120.0,
        limit: TopicLimit | None = None,
        reassembly_budget_bytes: int | None = None,
        inbox_max_bytes: int | None = None,
        stale_retained: Collection[str] = (),
        clock: Callable[[], float] = time.monotonic,
        send_window: int | None = None,
    ) -> None:
        """``limit``: what each topic may carry (default: ``max_message_bytes`` on every topic of
        the run). Memory held for received bytes is bounded twice: partial messages of every topic
        share ``reassembly_budget_bytes`` (default twice ``max_message_bytes``, per-frame overhead
        counted), and decoded messages waiting for the runtime ``inbox_max_bytes`` (default four
        times ``max_message_bytes``). Each sender (the client id of a topic) holds its partial
        messages in a share of that budget (:meth:`size_budget`: a sender that floods unfinished
        messages exhausts its own share, not the others'), and a partial message idle for
        ``reassembly_timeout`` seconds of ``clock`` is let go within :data:`SWEEP_SECONDS` more,
        whether or not another frame comes on its topic.

        ``stale_retained``: directions ("up", "status") on which this endpoint takes live messages
        only. A frame the broker hands over with the retain flag is one it stored before this
        connection subscribed (MQTT sets the flag only then; a message published while the
        subscription exists arrives without it, retained or not): it is counted in
        :attr:`WireStats.stale_retained`, never buffered, and its topic's retained message is
        cleared (an empty retained payload: a broker whose ACL refuses it drops it, and the stale
        message is then only ignored).

        ``send_window``: frames published and not yet acknowledged before :meth:`publish` waits for
        acknowledgements (None: it never waits, a server's choice: its thread must go on reading
        uplinks and watching deadlines). A device sets :data:`DEVICE_SEND_WINDOW`, so that a large
        upload's frames are made as they go out."""
        self.settings = settings
        self.topics = topics
        self.versions: tuple[int, ...] = MESSAGE_VERSIONS
        self._writes_to: dict[str, int] = {}
        self.chunk_size = chunk_size
        self.max_message_bytes = max_message_bytes
        self.reassembly_timeout = reassembly_timeout
        self.limit = limit
        self.stale_retained = frozenset(stale_retained)
        self.budget = ReassemblyBudget(reassembly_budget_bytes or 2 * max_message_bytes)
        self.clock = clock
        self._shares: dict[str, ReassemblyBudget] = {}
        """Each sender's share of `budget` (see `size_budget`)."""
        self._share_bytes: dict[str, int] = {}
        self._next_sweep = clock() + self._sweep_seconds()
        self.refused: Counter = Counter()
        """Per (client id, verb, reason) ("status" for a status topic), frames and messages refused on
        a topic this receiver takes messages on: who was refused what (see `take_refused`)."""
        self.inbox = Inbox(inbox_max_bytes or 4 * max_message_bytes)
        self.stats = WireStats()
        self.bytes_from: Counter = Counter()
        """Per sender (client id of a topic), bytes of the frames accepted from it."""
        self.bytes_to: Counter = Counter()
        """Per receiver, bytes of the frames published to it."""
        self.unexpected_senders: Counter = Counter()
        """Per id, frames refused on a topic of an id this receiver takes nothing from (a device
        that is not a client of the run): at most MAX_UNEXPECTED_SENDERS ids."""
        self.connected = threading.Event()
        self.subscriptions: list[str] = []
        self.on_connect_hooks: list = []
        self._reassemblers: dict[str, Reassembler] = {}
        self._lock = threading.Lock()
        self._acked = threading.Condition(self._lock)
        """Notified on each acknowledgement (`publish` waits on it for room in its window)."""
        self._network_thread: int | None = None
        """paho's loop thread, which reads the acknowledgements: it never waits for them."""
        self.send_window = send_window
        self._unacked: set[int] = set()
        """Message ids published and not yet acknowledged by the broker (QoS 1)."""
        self._acked_early: set[int] = set()
        """Acknowledgements that came before `publish` returned their id."""
        self._rejection_log: dict[tuple[str, str], tuple[float, int]] = {}
        """(topic, reason) -> when it was last logged, and how many were not logged since."""
        self._client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=True, protocol=mqtt.MQTTv311
        )
        if settings.username is not None:
            self._client.username_pw_set(settings.username, settings.password)
        if settings.tls:
            self._client.tls_set(
                ca_certs=settings.ca_cert,
                certfile=settings.client_cert,
                keyfile=settings.client_key,
                cert_reqs=ssl.CERT_REQUIRED,
            )
            self._client.tls_insecure_set(settings.tls_insecure)
        if will is not None:
            self._client.will_set(will[0], will[1], qos=QOS, retain=True)
        # paho annotates the delays as int, but they are only compared and doubled: floats work.
        self._client.reconnect_delay_set(*RECONNECT_DELAYS)  # type: ignore[arg-type]  # paho: int
        self._client.max_inflight_messages_set(MAX_INFLIGHT)
        self._client.on_connect = self._on_connect
        self._client.on_connect_fail = self._on_connect_fail
        self.failure: tuple[float, str] | None = None
        """Since when connecting fails, and why (None while connected, or before any attempt failed)."""
        self._failed_attempts = 0
        self._client.on_disconnect = self._on_disconnect
        self._client.on_message = self._on_message
        self._client.on_publish = self._on_publish

    # ------------------------------------------------------------------ connection
    def start(self, wait: float | None = None) -> None:
        """Connect in the background (retrying until the broker answers, each failed attempt logged
        with its cause and the wait before the next); `wait`: block until connected, or raise
        ConnectionError naming the cause once attempts have failed for `FAIL_FAST` seconds, or after
        ``wait`` seconds."""
        self._client.connect_async(self.settings.host, self.settings.port, keepalive=self.settings.keepalive)
        self._client.loop_start()
        if wait is None:
            return
        deadline = time.monotonic() + wait
        while not self.connected.wait(0.1):
            failure, now = self.failure, time.monotonic()
            if failure is not None and now - failure[0] >= min(FAIL_FAST, wait):
                self.stop()
                raise ConnectionError(f"cannot connect to {self.settings.shown_url}: {failure[1]}")
            if now >= deadline:
                self.stop()
                why = failure[1] if failure is not None else broker_problem(self.settings)
                if why is None:  # a connection opened, and no MQTT answer came on it
                    why = "it accepted the connection but never answered" + (
                        "" if self.settings.tls else " (a TLS listener? then mqtts://)"
                    )
                raise ConnectionError(f"no connection to {self.settings.shown_url} within {wait:.0f} s: {why}")

    def stop(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        if reason_code.is_failure:
            log.error("broker %s refused the connection: %s", self.settings.shown_url, reason_code)
            login = any(word in str(reason_code).lower() for word in ("authori", "password"))
            hint = ": check --username and the password" if login else ""
            self._failed(f"the broker refused the connection ({reason_code}{hint})")
            return
        self._network_thread = threading.get_ident()
        self.failure, self._failed_attempts = None, 0
        self.stats.connects += 1
        _no_delay(client.socket())
        for topic in self.subscriptions:
            client.subscribe(topic, qos=QOS)
        self.connected.set()
        log.info("connected to %s (connection %d)", self.settings.shown_url, self.stats.connects)
        for hook in self.on_connect_hooks:
            try:
                hook()
            except Exception:  # a hook's bug must not kill paho's thread
                log.exception("on-connect hook failed")

    def _on_connect_fail(self, client, userdata) -> None:
        """paho's attempt failed before the broker answered (it does not say why): find out, and
        say so with the wait before the next attempt."""
        why = broker_problem(self.settings) or "the connection closed before the broker answered"
        self._failed(why)
        first, most = RECONNECT_DELAYS
        delay = min(first * 2 ** (self._failed_attempts - 1), most)
        log.warning("cannot connect to %s: %s; trying again in %.1f s", self.settings.shown_url, why, delay)

    def _failed(self, why: str) -> None:
        self._failed_attempts += 1
        since = self.failure[0] if self.failure is not None else time.monotonic()
        self.failure = (since, why)

    def _on_disconnect(self, client, userdata, flags, reason_code, properties) -> None:
        self.connected.clear()
        if reason_code != 0:
            log.warning("lost the broker (%s); reconnecting", reason_code)

    # ------------------------------------------------------------------ sending
    def write_to(self, peer: str, version: int) -> None:
        """Write every later message to ``peer`` (a client id, or the server) in ``version``."""
        if version not in self.versions:
            raise ValueError(f"protocol version {version}: this endpoint speaks {self.versions}")
        with self._lock:
            self._writes_to[peer] = version

    def version_for(self, peer: str) -> int:
        """The protocol version messages to ``peer`` go in (see the class's docstring)."""
        with self._lock:
            return self._writes_to.get(peer, min(self.versions))

    def publish(self, topic: str, message: Message, *, retain: bool = False) -> int:
        """Encode, chunk and publish at QoS 1, in the version its receiver speaks; returns the bytes
        of the frames (what the wire carries). While disconnected, paho keeps the frames and sends
        them on reconnection."""
        buffers = encode_message_buffers(message, self.version_for(message.receiver))
        needed = chunk_count(sum(memoryview(buffer).nbytes for buffer in buffers), self.chunk_size)
        if retain and needed > 1:
            raise ValueError(f"a retained message must be one frame; {topic} needs {needed}")
        nbytes, count = 0, 0
        for frame in iter_split(buffers, self.chunk_size):  # made as the window lets them go
            self._wait_for_window()
            self._track(self._client.publish(topic, frame, qos=QOS, retain=retain).mid)
            nbytes, count = nbytes + len(frame), count + 1
        key = self._key(topic)
        with self._lock:
            self.stats.sent_bytes[key] += nbytes
            self.stats.sent_frames[key] += count
            self.stats.sent_messages[key] += 1
            self.bytes_to[message.receiver] += nbytes
        log.debug("sent %s: %d bytes in %d frame(s)", topic, nbytes, count)
        return nbytes

    def _wait_for_window(self) -> None:
        """With a ``send_window``, wait until fewer frames than it await the broker's acknowledgement.
        Only while connected (paho keeps what is published while disconnected, as before), and never
        on paho's own thread (an on-connect hook's message), which is the one that reads them."""
        if self.send_window is None or threading.get_ident() == self._network_thread:
            return
        with self._acked:
            while len(self._unacked) >= self.send_window and self.connected.is_set():
                self._acked.wait(0.1)

    def clear_retained(self, topic: str) -> None:
        self._track(self._client.publish(topic, b"", qos=QOS, retain=True).mid)

    def flush(self, timeout: float) -> bool:
        """Wait until the broker has acknowledged everything published so far (paho resends what
        was published while disconnected once it reconnects); False if `timeout` seconds passed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._unacked:
                    return True
            time.sleep(0.05)
        return False

    def _track(self, mid: int) -> None:
        with self._lock:
            if mid in self._acked_early:
                self._acked_early.discard(mid)
            else:
                self._unacked.add(mid)

    def _on_publish(self, client, userdata, mid, reason_code, properties) -> None:
        with self._lock:
            if mid in self._unacked:
                self._unacked.discard(mid)
            else:
                self._acked_early.add(mid)
            self._acked.notify_all()

    def _key(self, topic: str) -> str:
        try:
            direction, _, verb = self.topics.parse(topic)
        except ValueError:
            return "other"
        return f"{direction}/{verb}" if verb else direction

    # ------------------------------------------------------------------ receiving
    def reject(self, reason: str, topic: str, detail: str, nbytes: int = 0) -> None:
        """Count and log a refused frame or message (also used by the runtimes for their checks)."""
        with self._lock:
            self.stats.rejected[reason] += 1
            self.stats.rejected_bytes += nbytes
            unlogged = self._due_a_line(topic, reason)
        if unlogged is not None:
            more = f" ({unlogged} more like it since the last line)" if unlogged else ""
            log.warning("rejected a message on %s: %s: %s%s", topic, reason, detail, more)

    def _due_a_line(self, topic: str, reason: str) -> int | None:
        """None if a line of ``reason`` on ``topic`` was written less than REJECTION_LOG_SECONDS
        ago (this one is counted as unlogged), else how many went unlogged since. Lock held."""
        now = time.monotonic()
        last, unlogged = self._rejection_log.get((topic, reason), (-REJECTION_LOG_SECONDS, 0))
        if now - last < REJECTION_LOG_SECONDS:
            self._rejection_log[topic, reason] = (last, unlogged + 1)
            return None
        if len(self._rejection_log) >= 4096:  # topics are the senders' to choose: keep this bounded
            self._rejection_log.clear()
        self._rejection_log[topic, reason] = (now, 0)
        return unlogged

    def _ignore_stale(self, topic: str, key: str, nbytes: int) -> None:
        """A retained frame on a live-only direction (see ``stale_retained``): counted, logged
        (an uplink as a warning: no honest client retains one; a status at debug level: every
        client leaves one), and its topic cleared."""
        with self._lock:
            self.stats.stale_retained[key] += 1
            unlogged = self._due_a_line(topic, "stale-retained")
        self._track(self._client.publish(topic, b"", qos=QOS, retain=True).mid)
        if unlogged is not None:
            more = f" ({unlogged} more like it since the last line)" if unlogged else ""
            log.log(
                logging.DEBUG if key == "status" else logging.WARNING,
                "ignored a retained message on %s (%d bytes): the broker stored it before this connection, "
                "it is not live; cleared%s",
                topic,
                nbytes,
                more,
            )

    def size_budget(self, shares: Mapping[str, int], total: int | None = None) -> None:
        """Give each sender (client id) its share of the reassembly budget, in bytes, and make the
        whole budget ``total`` (default: the sum of the shares, so that every sender may hold its
        share at once and none waits on another's; a smaller total bounds memory tighter, and lets
        senders that all fill their shares together be refused). Senders not named share the whole.
        Shares are replaced whole; what a sender holds already stays held."""
        with self._lock:
            self._share_bytes = dict(shares)
            self.budget.max_bytes = sum(shares.values()) if total is None else total
            for cid, share in self._shares.items():
                share.max_bytes = self._share_bytes.get(cid, self.budget.max_bytes)

    def size_inbox(self, largest: int) -> None:
        """Room in the inbox for four messages of ``largest`` bytes waiting for the runtime's thread
        (the largest a sender may send now: the receiver's limits follow the run)."""
        self.inbox.max_bytes = 4 * largest

    def resize(self, max_message_bytes: int) -> None:
        """Take messages of up to ``max_message_bytes`` on every topic (an endpoint without `limit`),
        with room for twice that in partial messages and four times that in the inbox."""
        with self._lock:
            self.max_message_bytes = max_message_bytes
        self.size_budget({}, total=2 * max_message_bytes)
        self.size_inbox(max_message_bytes)

    def _share(self, client_id: str) -> ReassemblyBudget:
        """The share of the reassembly budget ``client_id``'s topics hold their partial messages in.
        Lock held."""
        share = self._shares.get(client_id)
        if share is None:
            share = self._shares[client_id] = self.budget.share(self._share_bytes.get(client_id, self.budget.max_bytes))
        return share

    def _sweep_seconds(self) -> float:
        return min(SWEEP_SECONDS, self.reassembly_timeout / 4)

    def evict_stale(self) -> int:
        """Let go of every topic's partial messages idle for more than the reassembly timeout, at
        most once every :data:`SWEEP_SECONDS` (earlier calls return 0); returns how many went. A
        reassembler drops its own stale messages only when a frame comes on its topic, and a sender
        that stops sending (it disconnected, or it meant to) sends none: without this sweep its
        unfinished messages would hold its share until then. Called on every frame received and by
        a runtime's loop while it waits, so it runs even when nothing arrives."""
        now = self.clock()
        with self._lock:
            if now < self._next_sweep:
                return 0
            self._next_sweep = now + self._sweep_seconds()
            reassemblers = list(self._reassemblers.items())
        gone = 0
        for topic, reassembler in reassemblers:
            if reassembler.pending:
                evicted = reassembler.evict_stale()
                if evicted:
                    log.debug("let go %d unfinished message(s) on %s: idle past the timeout", evicted, topic)
                gone += evicted
        return gone

    def peers(self) -> PeerCounts:
        """Copies of what this endpoint counts per peer, for a reader on another thread (a dashboard)."""
        with self._lock:
            return PeerCounts(
                dict(self.bytes_from), dict(self.bytes_to), Counter(self.refused), dict(self.unexpected_senders)
            )

    def take_refused(self) -> Counter:
        """The per-device refusals counted since the last call (see `refused`), and start afresh."""
        with self._lock:
            refused, self.refused = self.refused, Counter()
        return refused

    def _refuse(self, client_id: str, verb: str, reason: str, topic: str, detail: str, nbytes: int) -> None:
        """`reject`, and counted against the sender (a client of the topics this receiver takes)."""
        self.reject(reason, topic, detail, nbytes)
        with self._lock:
            self.refused[client_id, verb or "status", reason] += 1

    def _on_message(self, client, userdata, message) -> None:
        topic, data = message.topic, bytes(message.payload)
        if not data:
            return  # a cleared retained message
        self.evict_stale()
        try:
            direction, client_id, verb = self.topics.parse(topic)
        except ValueError as error:
            self.reject("topic", topic, str(error), len(data))
            return
        if message.retain and direction in self.stale_retained:
            self._ignore_stale(topic, f"{direction}/{verb}" if verb else direction, len(data))
            return
        largest = self.max_message_bytes if self.limit is None else self.limit(direction, client_id, verb)
        if largest is None:
            self.reject("unexpected-topic", topic, "not a topic this receiver takes messages on", len(data))
            with self._lock:
                if client_id in self.unexpected_senders or len(self.unexpected_senders) < MAX_UNEXPECTED_SENDERS:
                    self.unexpected_senders[client_id] += 1
            return
        reassembler = self._reassemblers.get(topic)
        if reassembler is not None and reassembler.max_message_bytes != largest:
            with self._lock:  # the topic's limit moved with the run (a round's bounds; a client's config)
                reassembler.max_total_bytes = max(2 * largest, reassembler.max_total_bytes)
                reassembler.max_message_bytes = largest
        if reassembler is None:
            # A status is a state, not an event, and a client's last will is the same frame every
            # time that client dies: status topics keep no memory of messages already taken.
            with self._lock:
                reassembler = self._reassemblers[topic] = Reassembler(
                    max_messages=16,
                    max_total_bytes=2 * largest,  # room for the frames' overhead
                    max_message_bytes=largest,
                    timeout=self.reassembly_timeout,
                    clock=self.clock,
                    remember=0 if direction == "status" else 4096,
                    budget=self._share(client_id),
                )
        duplicates = reassembler.stats.duplicates
        try:
            whole = reassembler.feed(data)
            decoded = None if whole is None else decode_message(whole, max_bytes=largest, versions=self.versions)
        except ProtocolError as error:
            reason = BUDGET_REASON if isinstance(error, BudgetExhaustedError) else type(error).__name__
            self._refuse(client_id, verb, reason, topic, str(error), len(data))
            return
        key = f"{direction}/{verb}" if verb else direction
        with self._lock:
            if reassembler.stats.duplicates > duplicates:
                self.stats.duplicates += 1
                return
            self.stats.received_bytes[key] += len(data)
            self.stats.received_frames[key] += 1
            self.bytes_from[client_id] += len(data)
            if decoded is not None:
                self.stats.received_messages[key] += 1
        if decoded is not None:
            assert whole is not None  # the message was decoded from it
            log.debug("received %s: %d bytes", topic, len(whole))
            incoming = Incoming(direction, client_id, verb, decoded, len(whole), version=message_version(whole))
            if not self.inbox.offer(incoming):
                detail = f"{self.inbox.bytes} bytes wait for the runtime"
                self._refuse(client_id, verb, "inbox-full", topic, detail, len(whole))

    def subscribe(self, topic_filter: str) -> None:
        """Subscribe now (if connected) and after every reconnection."""
        self.subscriptions.append(topic_filter)
        if self.connected.is_set():
            self._client.subscribe(topic_filter, qos=QOS)
