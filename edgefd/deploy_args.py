"""Command-line flags shared by `edgefd server`, `edgefd client` and `edgefd deploy-local`:
how to reach the broker, and logging."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from edgefd.runtime.mqtt_transport import DEFAULT_CHUNK_SIZE, DEFAULT_MAX_MESSAGE_BYTES, BrokerSettings

PASSWORD_ENV = "EDGEFD_MQTT_PASSWORD"


def add_broker_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    group = parser.add_argument_group("broker")
    group.add_argument("--broker", required=required, metavar="URL", help="mqtt://HOST:PORT or mqtts://HOST:PORT (TLS)")
    group.add_argument("--username", help="MQTT username")
    group.add_argument(
        "--password-file", metavar="FILE", help=f"file whose first line is the MQTT password (or set ${PASSWORD_ENV})"
    )
    group.add_argument("--ca-cert", metavar="FILE", help="CA certificate that signed the broker's (TLS)")
    group.add_argument("--client-cert", metavar="FILE", help="this side's certificate (TLS client auth)")
    group.add_argument("--client-key", metavar="FILE", help="this side's private key (TLS client auth)")
    group.add_argument(
        "--tls-insecure",
        action="store_true",
        help="do not check that the broker's certificate names its host (test CAs only)",
    )
    group.add_argument(
        "--keepalive",
        type=int,
        default=10,
        help="seconds between pings; the broker declares a silent peer dead after 1.5x (default 10)",
    )
    group.add_argument(
        "--chunk-size",
        type=int,
        default=DEFAULT_CHUNK_SIZE,
        help=f"largest MQTT message in bytes, chunk header included (default {DEFAULT_CHUNK_SIZE})",
    )
    group.add_argument(
        "--max-message-bytes",
        type=int,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        help=f"refuse reassembled payloads above this size (default {DEFAULT_MAX_MESSAGE_BYTES})",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def read_password(path: str | None) -> str | None:
    if path:
        file = Path(path)
        if not file.is_file():
            raise ValueError(f"--password-file {path}: no such file")
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
