"""`edgefd deploy-local`: a whole deployment on this machine, as real processes.

    edgefd deploy-local --algo fd --dataset digits --clients 3 --rounds 3 --out runs/local
    edgefd deploy-local --broker mqtt://127.0.0.1:1883 ...     # use a running broker

Starts a broker (Mosquitto when installed, else the embedded amqtt; unless `--broker` is given),
one `edgefd server` and K `edgefd client` processes, shows the server's rounds as they finish
(`--quiet`: only the final line), waits for the server to finish, and leaves
the same outputs as `edgefd simulate` in the out folder (plus run.toml, the resolved config the
server ran; logs/ with every process's log; clients/ with the clients' checkpoints; models/ with
each client's final model, which the clients write when the run ends). Its exit status is its
server's (`edgefd.deploy.server`: 4 when every round refused a selected client's message, else 3
for a round lost entirely), 2 for a setting it cannot run with.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from edgefd import progress
from edgefd.dashboard.flags import add_dashboard_arguments, dashboard_flags, dashboard_url
from edgefd.deploy.broker import KINDS, start_broker
from edgefd.deploy.flags import add_broker_arguments, broker_flags, broker_settings
from edgefd.deploy.mqtt_transport import BrokerSettings, broker_problem
from edgefd.deploy.server import (
    EXIT_STATUS,
    LOST_ROUNDS_EXIT,
    TOO_FEW_CLIENTS_EXIT,
    add_deployment_arguments,
    deployment_flags,
)
from edgefd.metrics.results import METRICS_FILE, REFUSED_EXIT, REFUSED_NOTE, final_accuracy_said, refusals_said
from edgefd.runtime.config import SimulationConfig, config_to_toml
from edgefd.runtime.flags import RAY_FLAGS, add_config_arguments, config_from_args
from edgefd.runtime.process import edgefd_command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXIT_STATUS
    add_config_arguments(parser, hidden=RAY_FLAGS, own_groups=add_broker_and_deployment_arguments)
    parser.add_argument(
        "--run",
        metavar="NAME",
        help="run name: the MQTT topics are edgefd/NAME/..., e.g. --run test (default: local-<random hex>)",
    )


def add_broker_and_deployment_arguments(parser: argparse.ArgumentParser) -> None:
    """The broker to start or use, and the server's timeouts: shown right after the common flags."""
    broker = add_broker_arguments(
        parser,
        required=False,
        broker_help="use this running broker, mqtt://HOST:PORT or mqtts://HOST:PORT, e.g. mqtt://127.0.0.1:1883 "
        "(default: start one, see --broker-kind)",
    )
    broker.add_argument(
        "--broker-kind",
        choices=KINDS,
        default="auto",
        help="the broker to start on a free local port when --broker is not given: mosquitto, amqtt "
        "(embedded, pure Python) or auto: mosquitto if installed, else amqtt (default: %(default)s)",
    )
    add_deployment_arguments(parser)
    add_dashboard_arguments(parser)


def follow_rounds(server: subprocess.Popen, metrics: Path, config: SimulationConfig, enabled: bool) -> int:
    """Waits for the server to exit, showing each round as it lands in its metrics.jsonl (the bar
    `edgefd simulate` shows); the server's exit status."""
    progress.set_enabled(enabled)
    bar = progress.round_bar(config.rounds, f"{config.algo} on {config.dataset} over MQTT")
    shown = 0
    while True:
        code = server.poll()  # before reading: the lines of a server that has exited are all there
        lines = finished_lines(metrics)
        for line in lines[shown:]:
            if line["round"] > 0:  # round 0: the hellos
                progress.show_round(bar, line)
        shown = len(lines)
        if code is not None:
            if bar is not None:
                bar.close()
            return code
        time.sleep(0.5)


def finished_lines(metrics: Path) -> list[dict]:
    """The complete lines of a metrics.jsonl that is still being written (none before it exists)."""
    try:
        text = metrics.read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.split("\n")[:-1] if line.strip()]


def _command(*args: str) -> list[str]:
    return edgefd_command(*args)


def _spawn(command: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen:
    """A process of the deployment, its output into its log."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)


def _failure(code: int, out: Path) -> str | None:
    """What deploy-local says of a server that did not complete the run it was asked for (None:
    it did, refusals aside)."""
    log = out / "logs" / "server.log"
    if code == LOST_ROUNDS_EXIT:
        lost = json.loads((out / "summary.json").read_text())["lost_rounds"]
        return (
            f"the run lost every uplink or every evaluation of round(s) {', '.join(lost)} "
            f"({out / 'summary.json'}, lost_rounds); see {log}"
        )
    if code == TOO_FEW_CLIENTS_EXIT:  # the server's last line says how many came
        said = log.read_text(errors="replace").strip().splitlines()[-1:]
        return "".join(said).removeprefix("edgefd server: ")
    if code not in (0, REFUSED_EXIT):
        return f"the server exited with {code}; see {log}"
    return None


def run(args: argparse.Namespace) -> int:
    # torch comes with these: imported here, not for --help
    from edgefd import kernels
    from edgefd.export.checkpoint import MODELS_DIR
    from edgefd.runtime.build import client_ids_of

    try:
        config = config_from_args(args)
        config.validate()
        config.check_in_process("edgefd deploy-local")
        page = dashboard_url(args)
        if args.broker:  # a broker it cannot reach: said now, not after the server's wait
            reached = broker_settings({**vars(args), "broker": args.broker})
            problem = broker_problem(reached)
            if problem is not None:
                raise ValueError(f"cannot connect to {reached.shown_url}: {problem}")
    except ValueError as error:
        print(f"edgefd deploy-local: {error}", file=sys.stderr)
        return 2
    out = config.out_dir()
    config.out = str(out)
    # every process runs this process's kernels, or fails saying why (never a torch fallback unseen)
    config.kernels = config.kernels or kernels.get_backend()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    (out / "run.toml").write_text(config_to_toml(config))
    run_name = args.run or f"local-{uuid.uuid4().hex[:8]}"
    broker = None
    url = args.broker
    if not args.broker:
        broker = start_broker(kind=args.broker_kind, workdir=out / "broker")
        url = broker.url
    shared = broker_flags(args, url) + ["--run", run_name]
    timing = deployment_flags(args)
    env = {**os.environ, "OMP_NUM_THREADS": str(config.threads)}
    processes: dict[str, subprocess.Popen] = {}
    started = time.perf_counter()
    try:
        server = _command(
            "server", "--config", str(out / "run.toml"), "--quiet", *shared, *timing, *dashboard_flags(args)
        )  # fmt: skip
        processes["server"] = _spawn(server, out / "logs" / "server.log", env)
        if page is not None:
            print(f"dashboard: {page or 'its address is in ' + str(out / 'logs' / 'server.log')}", file=sys.stderr)
        for cid in client_ids_of(config.clients):
            client = _command(
                "client", "--client-id", cid, "--state-dir", str(out / "clients"),
                "--models-dir", str(out / MODELS_DIR), "--device", config.device, *shared,
            )  # fmt: skip
            processes[cid] = _spawn(client, out / "logs" / f"{cid}.log", env)
        code = follow_rounds(processes["server"], out / METRICS_FILE, config, enabled=not args.quiet)
        for process in processes.values():
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.terminate()
                process.wait(timeout=10)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
        if broker is not None:
            broker.stop()
    failure = _failure(code, out)
    if failure is not None:
        print(f"edgefd deploy-local: {failure}", file=sys.stderr)
        return code
    summary = json.loads((out / "summary.json").read_text())
    deployment = summary["deployment"]
    where = broker.kind if broker else BrokerSettings(url).shown_url
    print(
        f"{config.algo} on {config.dataset} over MQTT ({where}): final accuracy "
        f"{final_accuracy_said(summary)}, {summary['bytes_up_total']} B up, "
        f"{summary['bytes_down_total']} B "
        f"down (wire {deployment['wire_bytes_up_total']} B up, {deployment['wire_bytes_down_total']} B down), "
        f"{time.perf_counter() - started:.1f} s -> {out}{refusals_said(summary)}"
    )
    if code == REFUSED_EXIT:
        print(f"edgefd deploy-local: {REFUSED_NOTE}; see {out / 'logs' / 'server.log'}", file=sys.stderr)
    return code
