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
from pathlib import Path

from edgefd.deploy.flags import add_broker_arguments, broker_settings, setup_logging
from edgefd.deploy.mqtt_transport import BrokerSettings
from edgefd.settings import help_of, read_config_file

REQUIRED = ("broker", "run", "client_id")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="TOML file with any of these settings, keyed by the flag names with underscores, e.g. "
        'client_id = "client-0", broker = "mqtts://HOST:8883"; a flag set to other than its default wins '
        "over the file",
    )
    parser.add_argument(
        "--run",
        metavar="NAME",
        help="run name, as given to `edgefd server --run`, e.g. demo (required here or in --config)",
    )
    parser.add_argument(
        "--client-id",
        metavar="ID",
        help="this device's id in the run: client-0, client-1, ... (client-00, client-01, ... for 10 or more "
        "clients) (required here or in --config)",
    )
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        help="folder for this client's checkpoint, so that a restart resumes the run, e.g. ~/.edgefd "
        "(default: none, a restart starts the client afresh)",
    )
    parser.add_argument(
        "--models-dir",
        metavar="DIR",
        help="folder where the client writes its final model (CLIENT_ID.pt) when the server ends the run, for "
        "`edgefd export` (default: STATE_DIR/models with --state-dir, else none)",
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help="folder with this device's own data.npz (train_x, train_y, test_x, test_y, num_classes; see "
        "device/README.md) (default: the run's dataset share of this client id)",
    )
    parser.add_argument(
        "--device",
        default="auto",
        metavar="DEVICE",
        help="where this device trains: auto (its CUDA GPU when torch sees one, e.g. a Jetson with NVIDIA's torch; "
        "else the CPU), cpu, cuda or cuda:N (default: %(default)s)",
    )
    parser.add_argument(
        "--max-message-bytes",
        type=int,
        metavar="BYTES",
        help="the largest message this device takes from the server, whatever the run allows (default: what the "
        "run's server may send it: 64 MiB plus twice its model's weights, or the run's --max-message-bytes)",
    )
    add_broker_arguments(
        parser, required=False, broker_help=help_of(BrokerSettings, "broker") + " (required here or in --config)"
    )


def _defaults() -> dict:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return vars(parser.parse_args([]))


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Merge `--config`: a file value fills every setting left at its default on the command line."""
    if args.config:
        path = Path(args.config)
        values = read_config_file(path)
        defaults = _defaults()
        unknown = sorted(set(values) - set(defaults) - {"config"})
        if unknown:
            raise ValueError(f"--config {path}: unknown key(s) {', '.join(unknown)}")
        for key, value in values.items():
            if getattr(args, key) == defaults[key]:
                setattr(args, key, value)
    missing = [f"--{k.replace('_', '-')}" for k in REQUIRED if not getattr(args, k)]
    if missing:
        raise ValueError(f"missing {', '.join(missing)} (on the command line or in --config)")
    return args


def run(args: argparse.Namespace) -> int:
    # torch comes with these: imported here, not for --help
    from edgefd.data import DatasetNotFoundError
    from edgefd.deploy.client_runtime import ClientRuntime, ClientSettings

    try:
        args = resolve(args)
        setup_logging(args.log_level)
        settings = ClientSettings(
            args.run,
            args.client_id,
            broker_settings(vars(args)),
            state_dir=args.state_dir,
            models_dir=args.models_dir,
            data_dir=args.data_dir,
            max_message_bytes=args.max_message_bytes,
            device=args.device,
        )
        return ClientRuntime(settings).run()
    except (ValueError, DatasetNotFoundError) as error:
        print(f"edgefd client: {error}", file=sys.stderr)
        return 2
