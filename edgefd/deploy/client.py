"""`edgefd client`: the device runtime of a deployed run (see device/README.md).

    edgefd client --broker mqtt://SERVER:1883 --run demo --client-id client-0 --state-dir ~/.edgefd
    edgefd client --config /etc/edgefd/client.toml      # the same settings from a file

It waits for the run's config from the server, builds its own role and data (the run's dataset
share for this client id, or `--data-dir` with the device's own data.npz), answers the server's
requests, reconnects by itself, and resumes from `--state-dir` after a restart. Exits 0 when the
server ends the run or on SIGTERM; 2 on bad settings.

The flags (and the TOML keys of `--config`, same names with underscores) are a stable interface:
device/install.sh and the device's service unit rely on them.
"""

from __future__ import annotations

import argparse
import sys

from edgefd.deploy.client_settings import ClientSettings
from edgefd.deploy.flags import BROKER_FLAGS, BrokerFlags, add_broker_arguments, broker_settings, setup_logging
from edgefd.deploy.mqtt_transport import BrokerSettings
from edgefd.settings import add_config_argument, add_setting_arguments, given_over_file, help_of

CLIENT_FLAGS = (
    "run",
    "client_id",
    "state_dir",
    "models_dir",
    "data_dir",
    "device",
    "recompute_activations",
    "max_message_bytes",
)
"""The `ClientSettings` flags, in the help's order (the broker flags follow, in their group)."""

REQUIRED = ("broker", "run", "client_id")
"""Settings without a default: on the command line or in --config."""

METAVARS = {
    "run": "NAME",
    "client_id": "ID",
    "state_dir": "DIR",
    "models_dir": "DIR",
    "data_dir": "DIR",
    "device": "DEVICE",
    "max_message_bytes": "BYTES",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `ClientSettings`, `BrokerSettings` and `BrokerFlags`; they hold only what the
    command line gives, which `resolve` puts over the `--config` file."""
    add_config_argument(
        parser,
        'any of these settings, keyed by the flag names with underscores, e.g. client_id = "client-0", '
        'broker = "mqtts://HOST:8883"',
    )
    required = " (required here or in --config)"
    helps = {name: help_of(ClientSettings, name) + required for name in ("run", "client_id")}
    add_setting_arguments(parser, ClientSettings, CLIENT_FLAGS, METAVARS, helps=helps, given_only=True)
    broker_help = help_of(BrokerSettings, "broker") + required
    add_broker_arguments(parser, required=False, broker_help=broker_help, given_only=True)


def resolve(args: argparse.Namespace) -> tuple[ClientSettings, BrokerFlags]:
    """The device's settings and its other flags: a flag given over the `--config` file, the file
    over the defaults (`given_over_file`, as every command with --config); a ValueError where the
    broker, the run or the client id is in neither."""
    values = given_over_file(args, (*CLIENT_FLAGS, *BROKER_FLAGS, "log_level"))
    missing = [f"--{name.replace('_', '-')}" for name in REQUIRED if not values.get(name)]
    if missing:
        raise ValueError(f"missing {', '.join(missing)} (on the command line or in --config)")
    own = {name: values[name] for name in CLIENT_FLAGS if name in values}
    flags = {name: values[name] for name in ("password_file", "log_level") if name in values}
    return ClientSettings(**own, broker=broker_settings(values)), BrokerFlags(**flags)


def run(args: argparse.Namespace) -> int:
    from edgefd.runtime.process import return_large_blocks_when_freed

    return_large_blocks_when_freed()  # before torch and the data: a device's peak memory (see its doc)
    # torch comes with these: imported here, not for --help
    from edgefd.data import DatasetNotFoundError
    from edgefd.deploy.client_runtime import ClientRuntime

    try:
        settings, flags = resolve(args)
        setup_logging(flags.log_level)
        return ClientRuntime(settings).run()
    except (ValueError, DatasetNotFoundError) as error:
        print(f"edgefd client: {error}", file=sys.stderr)
        return 2
