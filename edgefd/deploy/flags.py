"""Command-line flags shared by `edgefd server`, `edgefd client` and `edgefd deploy-local`:
how to reach the broker, and logging."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from pathlib import Path

from edgefd.deploy.mqtt_transport import DEFAULT_CHUNK_SIZE, BrokerSettings
from edgefd.settings import add_setting_arguments, setting, setting_flags, settings_from_args

PASSWORD_ENV = "EDGEFD_MQTT_PASSWORD"


BROKER_HELP = (
    "the MQTT broker: mqtt://HOST:PORT, or mqtts://HOST:PORT for TLS (port default 1883 / 8883), "
    "e.g. mqtts://server.lan:8883"
)

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclasses.dataclass
class BrokerFlags:
    """How a process reaches the broker, and what it logs: the flags `edgefd server`, `edgefd client`
    and `edgefd deploy-local` share (`add_broker_arguments` makes them, `broker_flags` passes them
    on to a child process)."""

    broker: str | None = setting(None, BROKER_HELP)
    username: str | None = setting(
        None,
        "MQTT username; with the broker set up as in server/README.md: edgefd-server for the server, the "
        "client id (e.g. client-0) for a device (default: none, connect without a login)",
    )
    password_file: str | None = setting(
        None, f"file whose first line is the MQTT password (default: ${PASSWORD_ENV} if set, else no password)"
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
    log_level: str = setting(
        "INFO", f"least severe log messages printed (to stderr): {', '.join(LOG_LEVELS)}", choices=LOG_LEVELS
    )


BROKER_FLAGS = tuple(f.name for f in dataclasses.fields(BrokerFlags) if f.name != "log_level")
"""The `BrokerFlags` in the help's "broker" group (--log-level is with the command's own options)."""

BROKER_METAVARS = {
    "broker": "URL",
    "username": "NAME",
    "password_file": "FILE",
    "ca_cert": "FILE",
    "client_cert": "FILE",
    "client_key": "FILE",
    "keepalive": "SECONDS",
    "chunk_size": "BYTES",
}


def add_broker_arguments(
    parser: argparse.ArgumentParser, required: bool = True, broker_help: str = BROKER_HELP
) -> None:
    """The `BrokerFlags` as flags. ``broker_help``: the help of ``--broker``, for a command where it
    means more (or is optional)."""
    group = parser.add_argument_group("broker")
    add_setting_arguments(
        group,
        BrokerFlags,
        BROKER_FLAGS,
        BROKER_METAVARS,
        required=("broker",) if required else (),
        helps={"broker": broker_help},
    )
    add_setting_arguments(parser, BrokerFlags, ("log_level",))


def read_password(path: str | None) -> str | None:
    if path:
        file = Path(path)
        if not file.is_file():
            raise ValueError(f"--password-file {path}: no such file")
        mode = file.stat().st_mode & 0o777
        if mode & 0o077:
            raise ValueError(
                f"--password-file {path}: readable or writable by others (mode {mode:03o}); run `chmod 600 {path}`"
            )
        lines = file.read_text().splitlines()
        return lines[0] if lines else ""
    return os.environ.get(PASSWORD_ENV)


def broker_settings(args: argparse.Namespace) -> BrokerSettings:
    flags = BrokerFlags(**settings_from_args(BrokerFlags, args, BROKER_FLAGS))
    return BrokerSettings(
        flags.broker or "",
        username=flags.username,
        password=read_password(flags.password_file),
        ca_cert=flags.ca_cert,
        client_cert=flags.client_cert,
        client_key=flags.client_key,
        tls_insecure=flags.tls_insecure,
        keepalive=flags.keepalive,
    )


def broker_flags(args: argparse.Namespace, url: str) -> list[str]:
    """The same `BrokerFlags`, for a child process, with ``url`` as its --broker."""
    names = tuple(f.name for f in dataclasses.fields(BrokerFlags) if f.name != "broker")
    return ["--broker", url, *setting_flags(BrokerFlags, args, names)]


def setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
