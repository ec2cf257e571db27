"""Command-line flags shared by `edgefd server`, `edgefd client` and `edgefd deploy-local`:
how to reach the broker, and logging."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from edgefd.deploy.mqtt_transport import DEFAULT_CHUNK_SIZE, DEFAULT_MAX_MESSAGE_BYTES, BrokerSettings

PASSWORD_ENV = "EDGEFD_MQTT_PASSWORD"


BROKER_HELP = (
    "the MQTT broker: mqtt://HOST:PORT, or mqtts://HOST:PORT for TLS (port default 1883 / 8883), "
    "e.g. mqtts://server.lan:8883"
)


def add_broker_arguments(
    parser: argparse.ArgumentParser, required: bool = True, broker_help: str = BROKER_HELP
) -> None:
    """``broker_help``: the help of ``--broker``, for a command where it means more (or is optional)."""
    group = parser.add_argument_group("broker")
    group.add_argument("--broker", required=required, metavar="URL", help=broker_help)
    group.add_argument(
        "--username",
        metavar="NAME",
        help="MQTT username; with the broker set up as in server/README.md: edgefd-server for the server, the "
        "client id (e.g. client-0) for a device (default: none, connect without a login)",
    )
    group.add_argument(
        "--password-file",
        metavar="FILE",
        help=f"file whose first line is the MQTT password (default: ${PASSWORD_ENV} if set, else no password)",
    )
    group.add_argument(
        "--ca-cert",
        metavar="FILE",
        help="with mqtts://: the CA certificate that signed the broker's, e.g. ca.crt (default: the system's CAs)",
    )
    group.add_argument(
        "--client-cert",
        metavar="FILE",
        help="with mqtts://: this side's certificate, for brokers that require TLS client auth (with --client-key)",
    )
    group.add_argument(
        "--client-key",
        metavar="FILE",
        help="with mqtts://: this side's private key, for brokers that require TLS client auth (with --client-cert)",
    )
    group.add_argument(
        "--tls-insecure",
        action="store_true",
        help="do not check that the broker's certificate names its host (test CAs only)",
    )
    group.add_argument(
        "--keepalive",
        type=int,
        metavar="SECONDS",
        default=10,
        help="seconds between MQTT pings; the broker declares a silent peer dead (and publishes its last will) "
        "after about 1.5x this (default: %(default)s)",
    )
    group.add_argument(
        "--chunk-size",
        type=int,
        metavar="BYTES",
        default=DEFAULT_CHUNK_SIZE,
        help="largest MQTT message this side sends, in bytes, chunk header included; larger payloads are "
        f"split into chunks (default: %(default)s = {DEFAULT_CHUNK_SIZE / 1024:g} KiB)",
    )
    group.add_argument(
        "--max-message-bytes",
        type=int,
        metavar="BYTES",
        default=DEFAULT_MAX_MESSAGE_BYTES,
        help="refuse (and count) reassembled payloads larger than this many bytes "
        f"(default: %(default)s = {DEFAULT_MAX_MESSAGE_BYTES / 2**20:g} MiB)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="least severe log messages printed (to stderr): %(choices)s (default: %(default)s)",
    )


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
    return BrokerSettings(
        args.broker,
        username=args.username,
        password=read_password(args.password_file),
        ca_cert=args.ca_cert,
        client_cert=args.client_cert,
        client_key=args.client_key,
        tls_insecure=args.tls_insecure,
        keepalive=args.keepalive,
    )


def broker_flags(args: argparse.Namespace, url: str) -> list[str]:
    """The same broker flags, for a child process."""
    flags = [
        "--broker",
        url,
        "--keepalive",
        str(args.keepalive),
        "--chunk-size",
        str(args.chunk_size),
        "--max-message-bytes",
        str(args.max_message_bytes),
        "--log-level",
        args.log_level,
    ]
    for name in ("username", "password_file", "ca_cert", "client_cert", "client_key"):
        if getattr(args, name):
            flags += ["--" + name.replace("_", "-"), getattr(args, name)]
    if args.tls_insecure:
        flags.append("--tls-insecure")
    return flags


def setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
