"""The broker install of server/README.md, and what the docs say of the shipped config.

The install: Debian's stock mosquitto.conf (its paths moved into the test's folder) includes
/etc/mosquitto/conf.d, where the README puts edgefd.conf; Mosquitto must start with both, keep its
persistence where Debian's file says, and let a device in over TLS with its password. The docs:
every value they quote for an option of server/mosquitto/edgefd.conf is the file's."""

from __future__ import annotations

import re
from pathlib import Path

from fleet import BROKER_LIMITS
from shipped_broker import DEBIAN_MOSQUITTO_CONF, SERVER_DIR, start_installed

from edgefd.deploy.mqtt_transport import BrokerSettings, MqttEndpoint, Topics

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    ROOT / "server" / "README.md",
    *sorted(doc for doc in (ROOT / "docs").glob("*.md") if doc.name != "CHANGELOG.md"),  # its values are of their day
]
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


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


def quoted_values(text: str) -> list[tuple[str, str]]:
    """(option, value) wherever a doc quotes one, outside code blocks (those are other configs):
    `option value`, `option` (value), and table rows | `a` / `b` | value / value |."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    found = re.findall(r"`([a-z_]+) ([^`]+)`", prose)
    found += re.findall(r"`([a-z_]+)` \(([^)]+)\)", prose)
    for names, values in re.findall(r"^\|\s*(`[a-z_]+`(?:\s*/\s*`[a-z_]+`)*)\s*\|\s*([^|]+?)\s*\|", prose, re.M):
        options = re.findall(r"`([a-z_]+)`", names)
        quoted = [v.strip() for v in values.split(" / ")] if len(options) > 1 else [values]
        found += zip(options, quoted)
    return found


def quantity(text: str) -> int | None:
    """A quoted value as a number of bytes or a count ("1 GiB", "1,114,112 (1 MiB + 64 KiB)",
    "65536"); None for anything else (a word may be another config's: the test broker's
    `persistence false`)."""
    text = re.sub(r"\s*\(.*\)$", "", text.strip())
    match = re.fullmatch(r"(\d[\d,]*)\s*(B|KiB|MiB|GiB)?", text)
    return int(match.group(1).replace(",", "")) * UNITS[match.group(2) or "B"] if match else None


def test_every_number_the_docs_quote_from_the_shipped_config_is_its_value():
    values = shipped()
    quoted = set()
    for doc in DOCS:
        for option, value in quoted_values(doc.read_text()):
            if option in values and quantity(value) is not None:
                quoted.add(option)
                assert quantity(value) == quantity(values[option]), (
                    f"{doc}: {option} {value!r}, the config's {values[option]}"
                )
    # the docs do quote the sizes (so the check above has something to check)
    for option in ("max_packet_size", "message_size_limit", "memory_limit", "max_queued_messages", "max_queued_bytes"):
        assert option in quoted, f"no doc quotes {option}"
    # what the fleet benchmark and the hostile-device test run as "the shipped sizes"
    for line in BROKER_LIMITS.splitlines():
        option, value = line.split()
        if option in values:
            assert value == values[option], option
