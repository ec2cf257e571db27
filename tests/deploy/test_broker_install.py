"""The broker install of server/README.md: Debian's stock mosquitto.conf (its paths moved into the
test's folder) includes /etc/mosquitto/conf.d, where the README puts edgefd.conf; Mosquitto must
start with both, keep its persistence where Debian's file says, and let a device in over TLS with
its password."""

from __future__ import annotations

import re
from pathlib import Path

from shipped_broker import DEBIAN_MOSQUITTO_CONF, SERVER_DIR, start_installed

from edgefd.deploy.mqtt_transport import BrokerSettings, MqttEndpoint, Topics

ROOT = Path(__file__).resolve().parents[2]


def shipped() -> dict[str, str]:
    """option -> value of server/mosquitto/edgefd.conf (each option is set once)."""
    lines = (SERVER_DIR / "edgefd.conf").read_text().splitlines()
    pairs = [line.split(None, 1) for line in lines if line.strip() and not line.startswith("#")]
    values = dict((name, value.strip()) for name, value in pairs)
    assert len(values) == len(pairs), "an option set twice"
    return values


def test_the_documented_install_starts_on_debians_stock_config(tmp_path):
    with start_installed(tmp_path, ["demo"], {"edgefd-server": "s", "client-0": "c"}) as broker:
        login = BrokerSettings(broker.url, username="client-0", password="c", ca_cert=broker.ca)
        device = MqttEndpoint(login, Topics("demo"), "client-0")
        device.start(wait=10)
        device.stop()
    assert (tmp_path / "var/lib/mosquitto/mosquitto.db").is_file()  # Debian's persistence_location
    assert "Opening ipv4 listen socket" in broker.log.read_text()  # Debian's log_dest


def readme_setup() -> str:
    """The shell block of server/README.md's "Setting up the broker" section."""
    text = (ROOT / "server" / "README.md").read_text()
    section = text[text.index("## Setting up the broker") :]
    return section[section.index("```bash") : section.index("```", section.index("```bash") + 3)]


def test_the_readme_puts_every_file_where_the_config_reads_it():
    steps = readme_setup()
    include = re.search(r"^include_dir (\S+)$", DEBIAN_MOSQUITTO_CONF, re.M)
    assert include and f"cp server/mosquitto/edgefd.conf {include.group(1)}/" in steps
    values = shipped()
    for option in ("password_file", "acl_file", "certfile", "keyfile", "cafile"):
        path = Path(values[option])
        made_there = f"cd {path.parent}" in steps and re.search(rf"-(key)?out {re.escape(path.name)}\b", steps)
        assert str(path) in steps or made_there, f"the README's steps make no {path} ({option})"
