"""Command-line flags shared by `edgefd server`, `edgefd client` and `edgefd deploy-local`:
how to reach the broker (`BrokerSettings`), where the MQTT password is read from, and logging."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgefd.deploy.mqtt_transport import BrokerSettings
from edgefd.settings import add_setting_arguments, setting, setting_flags

PASSWORD_ENV = "EDGEFD_MQTT_PASSWORD"

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclasses.dataclass
class BrokerFlags:
    """The flags beside the `BrokerSettings` ones: where a process reads its MQTT password (a
    password is never a flag, which other users could read in the process list), and what it logs."""

    password_file: str | None = setting(
        None, f"file whose first line is the MQTT password (default: ${PASSWORD_ENV} if set, else no password)"
    )
    log_level: str = setting(
        "INFO", f"least severe log messages printed (to stderr): {', '.join(LOG_LEVELS)}", choices=LOG_LEVELS
    )


BROKER_OWNERS = (BrokerSettings, BrokerFlags)
"""The dataclasses that declare the broker flags."""

BROKER_FLAGS = (
    "broker",
    "username",
    "password_file",
    "ca_cert",
    "client_cert",
    "client_key",
    "tls_insecure",
    "keepalive",
    "chunk_size",
)
"""The help's "broker" group, in its order: every `BrokerSettings` but the password (--password-file
says where it is read from); --log-level is with the command's own options."""

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
    parser: argparse.ArgumentParser, required: bool = True, broker_help: str = "", given_only: bool = False
) -> argparse._ArgumentGroup:
    """The broker flags and --log-level; the "broker" group, for a command's own broker flags.
    ``broker_help``: the help of ``--broker``, for a command where it means more (or is optional).
    ``given_only``: as `add_setting_arguments`'s, for a command that reads a `--config` file under
    its flags."""
    group = parser.add_argument_group("broker")
    add_setting_arguments(
        group,
        BROKER_OWNERS,
        BROKER_FLAGS,
        BROKER_METAVARS,
        required=("broker",) if required else (),
        helps={"broker": broker_help},
        given_only=given_only,
    )
    add_setting_arguments(parser, BrokerFlags, ("log_level",), given_only=given_only)
    return group


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


def broker_settings(values: Mapping[str, Any]) -> BrokerSettings:
    """The `BrokerSettings` the broker flags' ``values`` give (one left out: its default), with the
    password read from --password-file (or $EDGEFD_MQTT_PASSWORD)."""
    names = {f.name for f in dataclasses.fields(BrokerSettings)} & set(BROKER_FLAGS)
    given = {name: values[name] for name in names if name in values}
    return BrokerSettings(**given, password=read_password(values.get("password_file")))


def broker_flags(args: argparse.Namespace, url: str) -> list[str]:
    """The same broker flags and --log-level, for a child process, with ``url`` as its --broker."""
    names = tuple(name for name in (*BROKER_FLAGS, "log_level") if name != "broker")
    return ["--broker", url, *setting_flags(BROKER_OWNERS, args, names)]


def setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
