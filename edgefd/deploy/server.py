"""`edgefd server`: orchestrate a run's rounds over MQTT and write its results.

    edgefd server --broker mqtt://127.0.0.1:1883 --run demo --algo fd --dataset digits \\
        --clients 3 --rounds 5 --round-timeout 60 --out runs/demo
    edgefd server ... --resume        # after a crash: continue from the last round's checkpoint

Exit status: 0 when the run completed; 2 for a setting it cannot run with (or no broker); 3
(LOST_ROUNDS_EXIT) when it completed but some round got no client's uplink or no client's
evaluation: summary.json's ``lost_rounds`` and the log name them.

Takes every `edgefd simulate` setting (flags or `--config run.toml`): the clients receive the
resolved config from the server and build their roles from it. The out folder gets what
`simulate` writes (metrics.jsonl, summary.json, curves.png) plus, per round, the MQTT bytes, and
in summary.json["deployment"] each client's connection and lateness statistics.
"""

from __future__ import annotations

import argparse
import logging
import sys

from edgefd.deploy.flags import add_broker_arguments, broker_settings, setup_logging
from edgefd.deploy.mqtt_channel import MAX_ASKS_AGAIN, DeploymentSettings
from edgefd.runtime.flags import add_config_arguments, config_from_args

LOST_ROUNDS_EXIT = 3
"""The exit status of a run that ended, but lost all the uplinks or all the evaluations of a round
(summary.json's ``lost_rounds``): its results are not those of the run that was asked for."""


def add_deployment_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = DeploymentSettings(run="x")
    group = parser.add_argument_group("deployment")
    group.add_argument(
        "--round-timeout",
        type=float,
        metavar="SECONDS",
        default=defaults.round_timeout,
        help="seconds a training round waits for the selected clients' uplinks after sending the downlinks; "
        "a later uplink is counted as late and discarded, like a simulated straggler (default: %(default)g)",
    )
    group.add_argument(
        "--eval-timeout",
        type=float,
        metavar="SECONDS",
        default=defaults.eval_timeout,
        help="seconds an evaluation waits for the clients' accuracies; clients that do not answer are left "
        "out of that round's mean (default: %(default)g)",
    )
    group.add_argument(
        "--hello-timeout",
        type=float,
        metavar="SECONDS",
        default=defaults.hello_timeout,
        help="seconds the start waits for every client's hello, then goes on with those it has (at least "
        "--min-clients) (default: %(default)g)",
    )
    group.add_argument(
        "--min-clients",
        type=int,
        metavar="N",
        default=defaults.min_clients,
        help="a round starts only when at least N clients are online, and the start waits for at least N "
        "hellos (N >= 1) (default: %(default)s)",
    )
    group.add_argument(
        "--max-wait",
        type=float,
        metavar="SECONDS",
        default=defaults.max_wait,
        help="seconds to wait for --min-clients clients (online, or past a deadline) before going on with "
        "fewer, logged as an error (default: %(default)g)",
    )
    group.add_argument(
        "--step-seconds",
        type=float,
        metavar="SECONDS",
        default=defaults.step_seconds,
        help="a method that exchanges during training (FedCache's exchange=batch): a client's steps phase waits "
        "--round-timeout after each step the server took, and ends at the latest --round-timeout + SECONDS x "
        "the steps its declared data makes (its samples' mini-batches x epochs) after it began, whatever it "
        "sends; a step past that count is refused, and the round's 'held' names the client (default: %(default)g)",
    )
    group.add_argument(
        "--ask-again",
        type=float,
        metavar="SECONDS",
        default=defaults.ask_again,
        help="seconds without an answer from an online client before the server asks it, a few bytes, to "
        "send its answer again from its cache (a broker under load may drop an uplink), then again as often, "
        f"at most {MAX_ASKS_AGAIN} times a phase (default: %(default)g)",
    )


def deployment_settings(args: argparse.Namespace) -> DeploymentSettings:
    return DeploymentSettings(
        run=args.run,
        broker=broker_settings(args),
        round_timeout=args.round_timeout,
        eval_timeout=args.eval_timeout,
        hello_timeout=args.hello_timeout,
        min_clients=args.min_clients,
        max_wait=args.max_wait,
        step_seconds=args.step_seconds,
        ask_again=args.ask_again,
        chunk_size=args.chunk_size,
        max_message_bytes=args.max_message_bytes,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
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
    add_broker_arguments(parser)
    add_deployment_arguments(parser)


def run(args: argparse.Namespace) -> int:
    # torch comes with these: imported here, not for --help
    from edgefd.data import DatasetNotFoundError
    from edgefd.deploy.server_runtime import ServerRuntime

    setup_logging(args.log_level)
    try:
        config = config_from_args(args)
        runtime = ServerRuntime(config, deployment_settings(args), resume=args.resume)
        summary = runtime.run()
    except (ValueError, DatasetNotFoundError, ConnectionError) as error:
        print(f"edgefd server: {error}", file=sys.stderr)
        return 2
    log = logging.getLogger(__name__)
    final = summary["final_accuracy"]
    log.info(
        "%s on %s over MQTT: final accuracy %s, %d B up, %d B down (wire %d B up, %d B down), %.1f s -> %s",
        config.algo,
        config.dataset,
        "none (its last evaluation got no scores)" if final is None else f"{100 * final:.2f}%",
        summary["bytes_up_total"],
        summary["bytes_down_total"],
        summary["deployment"]["wire_bytes_up_total"],
        summary["deployment"]["wire_bytes_down_total"],
        summary["wall_seconds"],
        config.out_dir(),
    )
    if summary["lost_rounds"]:
        lost = "; ".join(f"round {r}: {', '.join(what)}" for r, what in summary["lost_rounds"].items())
        log.error("rounds lost entirely: %s (summary.json's lost_rounds)", lost)
        return LOST_ROUNDS_EXIT
    return 0
