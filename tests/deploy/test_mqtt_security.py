"""The shipped broker configuration (server/mosquitto): TLS, passwords and the ACL, on a real Mosquitto.

The test makes its own CA and server certificate, a password file with `mosquitto_passwd`, and
starts Mosquitto with server/mosquitto/edgefd.conf (paths and port replaced).
"""

import datetime
import ipaddress
import shutil
import ssl
import subprocess
import time
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt
import pytest

from edgefd.deploy.broker import mosquitto_path, start_broker
from edgefd.deploy.mqtt_transport import BrokerSettings, MqttEndpoint, Topics
from edgefd.protocol import Payload

pytestmark = pytest.mark.skipif(
    mosquitto_path() is None or shutil.which("mosquitto_passwd") is None,
    reason="mosquitto not installed (scripts/install.sh)",
)

SERVER_DIR = Path(__file__).resolve().parents[2] / "server" / "mosquitto"
PASSWORDS = {"edgefd-server": "server-secret", "client-0": "zero-secret", "client-1": "one-secret"}
RUN = "sec"


def make_certificates(folder: Path) -> None:
    """A CA, and a server certificate for 127.0.0.1/localhost signed by it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def write_key(key, name):
        (folder / name).write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
            )
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "edgefd test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    (folder / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (folder / "server.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    write_key(key, "server.key")


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory):
    folder = tmp_path_factory.mktemp("secure")
    (folder / "certs").mkdir()
    make_certificates(folder / "certs")
    passwd = folder / "passwd"
    for i, (user, password) in enumerate(PASSWORDS.items()):
        subprocess.run(
            ["mosquitto_passwd", "-b"] + (["-c"] if i == 0 else []) + [str(passwd), user, password],
            check=True,
            timeout=10,
        )
    shutil.copy(SERVER_DIR / "acl", folder / "acl")
    config = (SERVER_DIR / "edgefd.conf").read_text()
    config = config.replace("/etc/mosquitto/edgefd/", f"{folder}/").replace("/var/lib/mosquitto/", f"{folder}/")
    config = "\n".join(line for line in config.splitlines() if not line.startswith("listener "))
    with start_broker(extra_config=config, workdir=folder, tls=True) as running:
        running.ca = str(folder / "certs" / "ca.crt")
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


def v5_client(broker, user):
    """A raw MQTT 5 client: the broker's refusals come back as reason codes."""
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"raw-{user}", protocol=mqtt.MQTTv5)
    client.username_pw_set(user, PASSWORDS[user])
    client.tls_set(ca_certs=broker.ca, cert_reqs=ssl.CERT_REQUIRED)
    return client


def test_tls_and_password_are_required(secure_broker):
    topics = Topics(RUN)
    server = endpoint(secure_broker, "edgefd-server", [f"{topics.root}/up/+/+"])
    client = endpoint(secure_broker, "client-0")
    server.start(wait=10)
    client.start(wait=10)
    try:
        time.sleep(0.2)
        payload = Payload("knowledge", "client-0", 1, {"z": np.ones((3, 10), np.float32)})
        client.publish(topics.up("client-0", "train"), payload)
        assert server.inbox.get(timeout=5).payload.same_as(payload)
    finally:
        client.stop()
        server.stop()
    with pytest.raises(ConnectionError):
        endpoint(secure_broker, "client-0", password="wrong").start(wait=3)
    plain = MqttEndpoint(
        BrokerSettings(secure_broker.url.replace("mqtts", "mqtt"), username="client-0", password=PASSWORDS["client-0"]),
        topics,
        "plain",
    )
    with pytest.raises(ConnectionError):
        plain.start(wait=3)
    untrusted = MqttEndpoint(
        BrokerSettings(secure_broker.url, username="client-0", password=PASSWORDS["client-0"]), topics, "untrusted"
    )  # the system CAs do not know the test CA
    with pytest.raises(ConnectionError):
        untrusted.start(wait=3)


def test_acl_confines_a_client_to_its_own_topics(secure_broker):
    topics = Topics(RUN)
    server = endpoint(secure_broker, "edgefd-server", [f"{topics.root}/up/+/+", f"{topics.root}/status/+"])
    victim = endpoint(secure_broker, "client-1", [f"{topics.root}/down/client-1/+"])
    server.start(wait=10)
    victim.start(wait=10)
    attacker = v5_client(secure_broker, "client-0")
    results, delivered = {}, []
    attacker.on_message = lambda c, u, message: delivered.append(message.topic)
    attacker.on_subscribe = lambda c, u, mid, codes, props: results.setdefault(mid, [int(code.value) for code in codes])
    attacker.on_publish = lambda c, u, mid, code, props: results.setdefault(mid, int(code.value))
    attacker.connect(secure_broker.host, secure_broker.port)
    attacker.loop_start()
    try:
        time.sleep(0.3)
        forged = Payload("knowledge", "client-1", 1, {"z": np.ones((3, 10), np.float32)})
        from edgefd.deploy.mqtt_transport import encode_frames

        frame = encode_frames(forged, 4096)[0]
        _, sub_other = attacker.subscribe(topics.down("client-1", "train"), qos=1)
        _, sub_own = attacker.subscribe(topics.down("client-0", "train"), qos=1)
        pub_other = attacker.publish(topics.up("client-1", "train"), frame, qos=1)
        pub_status = attacker.publish(topics.status("client-1"), frame, qos=1)
        pub_down = attacker.publish(topics.down("client-1", "train"), frame, qos=1)
        pub_own = attacker.publish(
            topics.up("client-0", "train"),
            encode_frames(Payload("knowledge", "client-0", 1, forged.arrays), 4096)[0],
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
        assert (own.client_id, own.payload.sender) == ("client-0", "client-0")
        # Mosquitto 2.0 grants a subscription it may not serve (SUBACK 1) and then withholds every
        # message on it: the server's downlinks reach client-1 and client-0's own topic only.
        assert results[sub_other] == [1] and results[sub_own] == [1]
        downlink = Payload("knowledge", "server", 1, {"z": np.zeros((3, 10), np.float32)})
        server.publish(topics.down("client-1", "train"), downlink)
        server.publish(topics.down("client-0", "train"), downlink)
        assert victim.inbox.get(timeout=5).payload.same_as(downlink)
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
