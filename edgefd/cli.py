"""The `edgefd` command.

Each subcommand lives in the module that owns its work and exposes ``add_arguments(parser)`` and
a ``run(args) -> int``; this file only wires them together, so ``edgefd --help`` and every
``edgefd SUBCOMMAND --help`` list what exists.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Subcommand:
    name: str
    module: str
    help: str
    entry: str = "run"
    """The module's function that takes the parsed arguments and returns the exit code."""


# `edgefd bench NAME` has its own list of benchmarks.
BENCHMARKS = {
    "kernels": Subcommand("kernels", "edgefd.bench.kernels", "C++ kernels vs their torch references"),
    "cache": Subcommand("cache", "edgefd.bench.cache", "FedCache's knowledge cache at scale (HNSW relations, lookups)"),
    "engine": Subcommand("engine", "edgefd.bench.engine", "simulation engine vs a plain PyTorch loop (FedAvg)"),
    "onnx": Subcommand(
        "onnx", "edgefd.bench.onnx", "exported models: onnxruntime fp32 / int8 vs torch latency and size"
    ),
}

SUBCOMMANDS = [
    Subcommand("simulate", "edgefd.simulate", "run a method on one machine and write its results", "run_cli"),
    Subcommand("report", "edgefd.metrics.report", "compare finished runs in a table and one plot"),
    Subcommand("reproduce", "edgefd.reproduce", "run a paper's small-scale recipe over several seeds"),
    Subcommand("methods", "edgefd.algorithms.describe", "list the methods and their hyperparameters"),
    Subcommand("partition", "edgefd.data.partition_cli", "split a dataset across clients and show label counts"),
    Subcommand("export", "edgefd.export.onnx_export", "write a run's client models as ONNX files (+ int8)"),
    Subcommand("export-encoder", "edgefd.export.encoder", "write FedCache's MobileNetV3 hash encoder as ONNX"),
    Subcommand("predict", "edgefd.export.predict", "run an exported ONNX model with onnxruntime (no torch)"),
    Subcommand("server", "edgefd.deploy_server", "orchestrate a run's rounds over MQTT"),
    Subcommand("client", "edgefd.deploy_client", "the device runtime: take part in a run over MQTT"),
    Subcommand("deploy-local", "edgefd.deploy_local", "broker, server and clients as processes on this machine"),
]


def _load(module: str):
    return importlib.import_module(module)


def _chosen(argv: Sequence[str] | None) -> str | None:
    """The subcommand named in argv (its first word that is not an option), if any."""
    for word in argv or ():
        if not word.startswith("-"):
            return word
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """Every subcommand is listed, but when ``argv`` names one only its module is imported:
    ``edgefd predict`` then runs without importing torch (an edge device may not have it)."""
    chosen = _chosen(argv)
    parser = argparse.ArgumentParser(
        prog="edgefd",
        description="Federated knowledge distillation for edge devices.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_load('edgefd').__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    bench = commands.add_parser(
        "bench",
        help="run a benchmark and print its figures",
        description="Benchmarks print figures; nothing here asserts on time.",
    )
    which = bench.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    for item in BENCHMARKS.values():
        sub = which.add_parser(item.name, help=item.help, description=item.help)
        sub.set_defaults(_entry=(item.module, item.entry))
        if chosen in (None, "bench"):
            _load(item.module).add_arguments(sub)

    for item in SUBCOMMANDS:
        sub = commands.add_parser(item.name, help=item.help, description=item.help)
        sub.set_defaults(_entry=(item.module, item.entry))
        if chosen in (None, item.name):
            _load(item.module).add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    entry = getattr(args, "_entry", None)
    if entry is None:
        # `edgefd` or `edgefd bench` alone: show what can be run.
        if args.command == "bench":
            parser.parse_args(["bench", "--help"])
        parser.print_help()
        return 2
    try:
        module, function = entry
        return int(getattr(_load(module), function)(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
