"""`edgefd server`: orchestrate a run's rounds over MQTT and write its results.

    edgefd server --broker mqtt://127.0.0.1:1883 --run demo --algo fd --dataset digits \\
        --clients 3 --rounds 5 --round-timeout 60 --out runs/demo
    edgefd server ... --resume        # after a crash: continue from the last round's checkpoint

Exit status: 0 when the run completed; 2 for a setting it cannot run with (or no broker); 5
(TOO_FEW_CLIENTS_EXIT) when fewer than --min-clients clients came online, or sent their hello,
within --max-wait: the run stopped, its last line says so, and ``--resume`` continues it; 4
(REFUSED_EXIT) when it completed but every round refused something a selected client sent (too
large for what the run takes, or not what the method accepts): the last line and summary.json's
``refused_clients`` name the clients; else 3 (LOST_ROUNDS_EXIT) when some round got no client's
uplink or no client's evaluation: summary.json's ``lost_rounds`` and the log name them.

Takes every `edgefd simulate` setting (flags or `--config run.toml`): the clients receive the
resolved config from the server and build their roles from it. The out folder gets what
`simulate` writes (metrics.jsonl, summary.json, curves.png) plus, per round, the MQTT bytes, and
in summary.json["deployment"] each client's connection and lateness statistics.
"""

from __future__ import annotations

import argparse
import logging
import sys

from edgefd.dashboard.flags import add_dashboard_arguments, dashboard_of
from edgefd.deploy.flags import add_broker_arguments, broker_settings, setup_logging
from edgefd.deploy.mqtt_channel import DeploymentSettings, TooFewClients
from edgefd.metrics.results import REFUSED_EXIT, REFUSED_NOTE, final_accuracy_said, refusals_said
from edgefd.runtime.flags import RAY_FLAGS, add_config_arguments, config_from_args
from edgefd.settings import add_setting_arguments, setting_flags, settings_from_args
from edgefd.short_help import fold

LOST_ROUNDS_EXIT = 3
"""The exit status of a run that ended, but lost all the uplinks or all the evaluations of a round
(summary.json's ``lost_rounds``): its results are not those of the run that was asked for."""

TOO_FEW_CLIENTS_EXIT = 5
"""The exit status of a run that stopped because fewer than --min-clients clients came (online before a
round, or with a hello) within --max-wait: it did not go on with fewer than the operator asked for."""

EXIT_STATUS = """exit status: 0 when the run completed; 2 for a setting it cannot run with (or no broker);
  5 when fewer than --min-clients clients came online (or sent their hello) within --max-wait: the run
  stopped, and --resume continues it;
  4 when every round refused something a selected client sent, e.g. an uplink larger than
  --max-message-bytes (the last line and summary.json's refused_clients name the clients); else 3
  when some round got no client's uplink or no client's accuracy (summary.json's lost_rounds)"""
"""The end of `--help` of `edgefd server` and `edgefd deploy-local` (whose status is its server's)."""


DEPLOYMENT_FLAGS = (
    "round_timeout",
    "eval_timeout",
    "hello_timeout",
    "min_clients",
    "max_wait",
    "step_seconds",
    "step_grace",
    "ask_again",
    "holdout_dir",
)
"""The `DeploymentSettings` a user sets on the command line (their help and defaults are the fields')."""


def add_deployment_arguments(parser: argparse.ArgumentParser) -> None:
    """The server's timeouts and holdout data: in `--help` as their names (their defaults fit a run
    on a LAN), in full with `--help-all`."""
    title = "deployment (timeouts, holdout)"
    metavars = {name: "SECONDS" for name in DEPLOYMENT_FLAGS if name not in ("min_clients", "holdout_dir")}
    metavars["holdout_dir"] = "DIR"
    actions = add_setting_arguments(parser.add_argument_group(title), DeploymentSettings, DEPLOYMENT_FLAGS, metavars)
    fold(parser, title, actions)


def deployment_flags(args: argparse.Namespace) -> list[str]:
    """The same deployment flags, for a child process (`edgefd deploy-local`'s server)."""
    return setting_flags(DeploymentSettings, args, DEPLOYMENT_FLAGS)


def deployment_settings(args: argparse.Namespace) -> DeploymentSettings:
    return DeploymentSettings(
        run=args.run,
        broker=broker_settings(vars(args)),
        **settings_from_args(DeploymentSettings, args, DEPLOYMENT_FLAGS),
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXIT_STATUS

    def broker_and_deployment(parser: argparse.ArgumentParser) -> None:
        add_broker_arguments(parser)
        add_deployment_arguments(parser)

    add_config_arguments(parser, hidden=RAY_FLAGS, own_groups=broker_and_deployment)
    add_dashboard_arguments(parser)
    parser.add_argument(
        "--run",
        required=True,
        metavar="NAME",
        help="run name, the same on the server and every client: the MQTT topics are edgefd/NAME/...; "
        "no '/', '+' or '#', e.g. --run demo",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue from OUT/server.ckpt (the round after the last one written) instead of starting "
        "afresh; the config must be the run's (starts afresh, with a warning, if there is no checkpoint)",
    )


def run(args: argparse.Namespace) -> int:
    # torch comes with these: imported here, not for --help
    from edgefd.data import DatasetNotFoundError
    from edgefd.deploy.fleet_view import fleet_page
    from edgefd.deploy.server_runtime import ServerRuntime

    setup_logging(args.log_level)
    try:
        config = config_from_args(args)
        config.check_in_process("edgefd server")
        runtime = ServerRuntime(config, deployment_settings(args), resume=args.resume)
        with dashboard_of(args, fleet_page(runtime)):
            summary = runtime.run()
    except (ValueError, DatasetNotFoundError, ConnectionError) as error:
        print(f"edgefd server: {error}", file=sys.stderr)
        return 2
    except TooFewClients as error:
        print(f"edgefd server: {error}", file=sys.stderr)
        return TOO_FEW_CLIENTS_EXIT
    log = logging.getLogger(__name__)
    log.info(
        "%s on %s over MQTT: final accuracy %s, %d B up, %d B down (wire %d B up, %d B down), %.1f s -> %s%s",
        config.algo,
        config.dataset,
        final_accuracy_said(summary),
        summary["bytes_up_total"],
        summary["bytes_down_total"],
        summary["deployment"]["wire_bytes_up_total"],
        summary["deployment"]["wire_bytes_down_total"],
        summary["wall_seconds"],
        config.out_dir(),
        refusals_said(summary),
    )
    if summary["lost_rounds"]:
        lost = "; ".join(f"round {r}: {', '.join(what)}" for r, what in summary["lost_rounds"].items())
        log.error("rounds lost entirely: %s (summary.json's lost_rounds)", lost)
    if summary["refused_every_round"]:  # the cause, where the refusals also lost rounds: as `simulate` says
        log.error("%s", REFUSED_NOTE)
        return REFUSED_EXIT
    return LOST_ROUNDS_EXIT if summary["lost_rounds"] else 0
