"""`edgefd bench exchange`: what FedCache's per-mini-batch exchange costs over MQTT.

FedCache's paper protocol (``exchange=batch``) asks the server for teachers at every mini-batch,
one client after another; over MQTT every ask is a round trip through the broker. This runs one
FedCache configuration three ways, each in processes of its own: `edgefd simulate` (in-process),
and `edgefd deploy-local` (a loopback broker, a server and one process per client) with
``exchange=batch`` and with ``exchange=round`` (one download and one upload per client and round,
clients in parallel). It prints the median seconds per round (rounds 2..R: round 1 pays for
warm-up), the ratio to the simulation, the step round trips per round and what each costs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

ARMS = (("simulate", None), ("mqtt, exchange=batch", "batch"), ("mqtt, exchange=round", "round"))


@dataclass
class ExchangeResult:
    arm: str
    seconds_per_round: float
    """Median over rounds 2..R of each round's seconds (train, exchange, aggregate, evaluate)."""
    step_round_trips_per_round: float
    accuracy: float | None


def _settings(args: argparse.Namespace) -> list[str]:
    return [
        "--algo", "fedcache", "--dataset", args.dataset, "--clients", str(args.clients),
        "--rounds", str(args.rounds), "--models", args.models, "--batch-size", str(args.batch_size),
        "--samples-per-client", str(args.samples_per_client), "--threads", "1", "--seed", "0",
        "--param", "knn=exact",
    ]  # fmt: skip


def _run(arm: str, exchange: str | None, args: argparse.Namespace, folder: Path) -> ExchangeResult:
    out = folder / (exchange or "simulate")
    if exchange is None:
        command = ["simulate", *_settings(args), "--param", "exchange=batch"]
    else:
        command = ["deploy-local", *_settings(args), "--param", f"exchange={exchange}", "--round-timeout", "120"]
    done = subprocess.run(
        [sys.executable, "-m", "edgefd.cli", *command, "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"edgefd bench exchange: {arm} failed:\n{done.stderr[-2000:]}")
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    steps = summary.get("deployment", {}).get("wire", {}).get("received_messages", {}).get("up/step", 0)
    return ExchangeResult(
        arm,
        round(statistics.median(line["seconds"] for line in lines[2:] or lines[1:]), 3),
        round(steps / args.rounds, 1),
        summary["final_accuracy"],
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dataset", default="digits", help="registered dataset the three runs train on (default: %(default)s)"
    )
    parser.add_argument(
        "--clients",
        type=int,
        default=3,
        metavar="K",
        help="clients; over MQTT each is a process of its own (default: %(default)s)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        metavar="R",
        help="rounds of each run; the median skips round 1, which pays for warm-up (default: %(default)s)",
    )
    parser.add_argument("--models", default="mlp", help="client models, a zoo name or a list (default: %(default)s)")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=8,
        metavar="B",
        help="mini-batch size, so one step round trip per B samples with exchange=batch (default: FedCache's 8)",
    )
    parser.add_argument(
        "--samples-per-client", type=int, default=200, metavar="N", help="training samples per client (default: 200)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")


def run(args: argparse.Namespace) -> int:
    if args.rounds < 2:
        raise SystemExit("edgefd bench exchange: --rounds must be >= 2 (round 1 is warm-up)")
    with tempfile.TemporaryDirectory(prefix="edgefd-bench-exchange-") as folder:
        results = [_run(arm, exchange, args, Path(folder)) for arm, exchange in ARMS]
    base = results[0].seconds_per_round
    print(
        f"FedCache on {args.dataset}: {args.clients} clients, {args.samples_per_client} samples each, "
        f"batch {args.batch_size}, {args.models}, {args.rounds} rounds, one thread per process"
    )
    print(f"{'arm':<22} {'s/round':>8} {'x simulate':>10} {'step trips/round':>17} {'ms per trip':>11}")
    for result in results:
        trips = result.step_round_trips_per_round
        per_trip = f"{1000 * (result.seconds_per_round - base) / trips:.1f}" if trips else "-"
        print(
            f"{result.arm:<22} {result.seconds_per_round:>8.3f} {result.seconds_per_round / base:>10.1f} "
            f"{trips:>17.1f} {per_trip:>11}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    return 0
