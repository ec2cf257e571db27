"""The broker as server/README.md installs it, in a test's folder: Debian's stock mosquitto.conf
(its paths moved under the folder) including conf.d/edgefd.conf, the shipped file with its paths
and its listener's port replaced, nothing else; the ACL with its @RUN@ filled in; a CA and a server
certificate of the test's own; a password file made with `mosquitto_passwd`.

Used by the tests that attack the broker or the server with a device's own credentials."""

from __future__ import annotations

import datetime
import getpass
import ipaddress
import re
import shutil
import subprocess
from pathlib import Path

from mqtt_helpers import skip_unless_ci

from edgefd.deploy.broker import RunningBroker, free_port, mosquitto_path, start_broker

SERVER_DIR = Path(__file__).resolve().parents[2] / "server" / "mosquitto"
RUN_PLACEHOLDER = "@RUN@"
DEBIAN_MOSQUITTO_CONF = (
    "pid_file /run/mosquitto/mosquitto.pid\n"
    "persistence true\n"
    "persistence_location /var/lib/mosquitto/\n"
    "log_dest file /var/log/mosquitto/mosquitto.log\n"
    "include_dir /etc/mosquitto/conf.d\n"
)
"""The settings of Debian's /etc/mosquitto/mosquitto.conf (mosquitto 2.0.11, bookworm), comments
left out: the file server/README.md installs edgefd.conf beside."""
DEBIAN_FOLDERS = ("/etc/mosquitto", "/var/lib/mosquitto", "/var/log/mosquitto", "/run/mosquitto")


def rerooted(text: str, root: Path) -> str:
    """``text`` with every path of Debian's Mosquitto folders moved under ``root``."""
    pattern = "|".join(re.escape(folder) for folder in DEBIAN_FOLDERS)
    return re.sub(rf"(?<=\s)({pattern})(?=/|\s|$)", lambda match: f"{root}{match.group(1)}", text)


def make_certificates(folder: Path) -> None:
    """A CA, and a server certificate for 127.0.0.1/localhost signed by it (what the README's
    openssl commands make)."""
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


def install(root: Path, port: int, runs: list[str], passwords: dict[str, str], extra_acl: str = "") -> str:
    """server/README.md's broker setup under ``root`` (for /): the ACL once per run name, edgefd.conf
    in conf.d with its listener on 127.0.0.1:``port``, certificates, passwords, and Debian's stock
    mosquitto.conf. Returns that main config, with a `user` line first: Mosquitto started as root
    would otherwise switch to user mosquitto, who cannot read the test's private folder."""
    if mosquitto_path() is None or shutil.which("mosquitto_passwd") is None:
        skip_unless_ci("mosquitto and mosquitto_passwd are not installed (scripts/install.sh)")
    etc = root / "etc" / "mosquitto"
    for folder in (etc / "edgefd" / "certs", etc / "conf.d", root / "var/lib/mosquitto", root / "var/log/mosquitto"):
        folder.mkdir(parents=True, exist_ok=True)
    (root / "run" / "mosquitto").mkdir(parents=True, exist_ok=True)
    acl = (SERVER_DIR / "acl").read_text()
    (etc / "edgefd" / "acl").write_text("\n".join(acl.replace(RUN_PLACEHOLDER, run) for run in runs) + extra_acl)
    shipped = (SERVER_DIR / "edgefd.conf").read_text()
    assert shipped.count("\nlistener 8883\n") == 1
    shipped = shipped.replace("\nlistener 8883\n", f"\nlistener {port} 127.0.0.1\n")
    (etc / "conf.d" / "edgefd.conf").write_text(rerooted(shipped, root))
    make_certificates(etc / "edgefd" / "certs")
    passwd = etc / "edgefd" / "passwd"
    for i, (user, password) in enumerate(passwords.items()):
        subprocess.run(
            ["mosquitto_passwd", "-b"] + (["-c"] if i == 0 else []) + [str(passwd), user, password],
            check=True,
            timeout=10,
        )
    main = f"user {getpass.getuser()}\n" + rerooted(DEBIAN_MOSQUITTO_CONF, root)
    (etc / "mosquitto.conf").write_text(main)
    return main


def start_installed(root: Path, runs: list[str], passwords: dict[str, str], extra_acl: str = "") -> RunningBroker:
    """Install (see `install`) and start Mosquitto as Debian's service does: with the main config,
    which includes edgefd.conf. The broker's `ca` is the CA certificate, its `log` its log file."""
    port = free_port()
    config = install(root, port, runs, passwords, extra_acl)
    running = start_broker(port, config=config, workdir=root, tls=True)
    running.ca = str(root / "etc/mosquitto/edgefd/certs/ca.crt")  # type: ignore[attr-defined]
    running.log = root / "var/log/mosquitto/mosquitto.log"  # type: ignore[attr-defined]
    return running
