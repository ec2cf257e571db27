"""The `edgefd` command.

Each subcommand lives in the module that owns its work and exposes ``add_arguments(parser)`` and
a ``run(args) -> int``; this file only wires them together, so ``edgefd --help`` and every
``edgefd SUBCOMMAND --help`` list what exists.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from edgefd.short_help import FoldingParser


@dataclass(frozen=True)
class Subcommand:
    name: str
    module: str
    help: str
    entry: str = "run"
    """The module's function that takes the parsed arguments and returns the exit code."""
    description: str = ""
    """A sentence or two for `edgefd NAME --help` (wrapped there); the one-line help if empty."""
    examples: tuple[str, ...] = ()
    """Command lines shown under "examples:" at the end of `edgefd NAME --help`, as written."""


def _epilog(examples: Sequence[str]) -> str | None:
    return "examples:\n" + "\n".join(f"  {line}" for line in examples) if examples else None


# `edgefd bench NAME` has its own list of benchmarks.
BENCHMARKS = {
    "kernels": Subcommand(
        "kernels",
        "edgefd.bench.kernels",
        "C++ kernels vs their torch references",
        description="Time the four kernels (weighted KL, SL loss, label-wise mean, gather mean; forward and "
        "backward; C++ on the CPU, CUDA with --device cuda) against their pure-torch references at several "
        "shapes, eager and, with --compiled, under torch.compile, and compare each kernel's bytes per second "
        "with the copy bandwidth this same run measures. Prints one row per kernel and shape.",
        examples=(
            "edgefd bench kernels --quick                          # tiny shapes: checks it runs (seconds)",
            "edgefd bench kernels --threads 2 --json docs/bench-kernels.json",
            "edgefd bench kernels --device cuda --compiled        # on a GPU, and against torch.compile",
        ),
    ),
    "cache": Subcommand(
        "cache",
        "edgefd.bench.cache",
        "FedCache's knowledge cache at scale (HNSW relations, lookups)",
        description="FedCache's knowledge cache at scale: for N clustered hashes and each HNSW M, the time to "
        "build the sample relations (one hnswlib index per class), one round's lookups and writes for all N "
        "samples, the peak memory, and recall@R against exact search. Each M runs in its own process. Needs "
        "hnswlib (edgefd[server]); the default 1,000,000 samples take several minutes per M.",
        examples=(
            "edgefd bench cache --samples 100000 --m 16                # a quicker look, one setting",
            "edgefd bench cache --json cache.json                      # the full 1,000,000, M = 16 and 64",
        ),
    ),
    "engine": Subcommand(
        "engine",
        "edgefd.bench.engine",
        "simulation engine vs a plain PyTorch loop (FedAvg)",
        description="What the simulation engine costs on top of the training: FedAvg rounds (IID split, one "
        "local epoch) run through the engine and through a plain PyTorch loop doing the same work, rounds "
        "alternating; prints the median seconds per round of each and the engine's overhead.",
        examples=(
            "edgefd bench engine --rounds 9",
            "edgefd bench engine --dataset digits --clients 4 --rounds 3 --threads 1     # quick",
        ),
    ),
    "step": Subcommand(
        "step",
        "edgefd.bench.step",
        "one training step of the client models, NCHW vs channels-last",
        description="One local SGD step (forward, backward, update) of each model at a small batch, in PyTorch's "
        "NCHW layout and in channels-last (NHWC, the runtime's default: --channels-last), steps alternating "
        "between the two; prints the median milliseconds per step of each and their ratio.",
        examples=(
            "edgefd bench step",
            "edgefd bench step --models resnet20 --threads 1 --steps 100",
        ),
    ),
    "exchange": Subcommand(
        "exchange",
        "edgefd.bench.exchange",
        "FedCache's per-mini-batch exchange over MQTT vs simulate and vs exchange=round",
        description="Runs one small FedCache configuration as `edgefd simulate` and as `edgefd deploy-local` (a "
        "loopback broker, one process per client) with exchange=batch (a broker round trip per mini-batch, clients "
        "one after another) and exchange=round; prints the median seconds per round, the ratio to the simulation "
        "and the cost of one step round trip.",
        examples=(
            "edgefd bench exchange",
            "edgefd bench exchange --clients 5 --samples-per-client 400 --rounds 4",
        ),
    ),
    "ray": Subcommand(
        "ray",
        "edgefd.bench.ray_backend",
        "--backend ray against in-process: 1 and 2 workers, 2 nodes",
        description="Runs an overhead-bound case (FD, digits, 100 clients) and a compute-bound one (the "
        "fedcache-demo setting with FD) in-process and through Ray with 1 worker, 2 workers and 2 nodes of 1 worker "
        "(a local Ray cluster), each arm in a process of its own; prints start-up, median seconds per round, the "
        "ratio to in-process, and the peak memory of the driver, of each worker and of Ray's other processes, "
        "then the goals the Ray backend is held to (docs/RAY.md). Flower's simulation engine on the same FD round "
        "is python3 benchmarks/ray_vs_flower.py, a script of the checkout.",
        examples=(
            "edgefd bench ray --json ray.json",
            "edgefd bench ray --cases overhead --overhead-clients 10 --overhead-rounds 2   # a quick look",
        ),
    ),
    "onnx": Subcommand(
        "onnx",
        "edgefd.bench.onnx",
        "exported models: onnxruntime fp32 / int8 vs torch latency and size",
        description="What a device gains from an exported model: each model is exported to fp32 ONNX and a "
        "static-int8 copy, then one forward pass at batch 1 and batch 32 is timed with torch, onnxruntime "
        "fp32 and onnxruntime int8 on the same real inputs. Prints a table of median latencies and file "
        "sizes. The models are freshly initialised (latency does not depend on the weights).",
        examples=(
            "edgefd bench onnx",
            "edgefd bench onnx --models cnn2,resnet20 --threads 2 --repeats 100 --json onnx.json",
        ),
    ),
}

SUBCOMMANDS = [
    Subcommand(
        "simulate",
        "edgefd.simulate",
        "run a method on one machine and write its results",
        "run_cli",
        # Its examples are simulate.add_arguments' epilog.
        description="Run a federated method on this machine: the server and every client in one process, "
        "every payload encoded as the network would carry it. The out folder gets metrics.jsonl (one line "
        "per round: accuracy, bytes up and down, seconds), summary.json and curves.png. Settings come from "
        "the flags or a TOML file (--config); the flags win.",
    ),
    Subcommand(
        "report",
        "edgefd.metrics.report",
        "compare finished runs in a table and one plot",
        description="Compare finished (or unfinished) runs: print one row per run folder with its final and "
        "best accuracy, MB sent up and down, and wall seconds, and draw every run's accuracy against "
        "round and against cumulative bytes in one plot.",
        examples=(
            "edgefd report runs/fedavg runs/fd-int8",
            "edgefd report runs/reproduce/fedcache/*-s0 --plot fedcache.png",
        ),
    ),
    Subcommand(
        "reproduce",
        "edgefd.reproduce",
        "run a paper's small-scale recipe over several seeds",
        description="Run a paper's small-scale recipe: every method it compares, over several seeds, each an "
        "ordinary `edgefd simulate` run written to DIR/RECIPE/METHOD-sSEED (DIR: --out). Then print the "
        "results table (mean and std over seeds of best and final accuracy, MB sent, MB to a common target "
        "accuracy) and write it to DIR/RECIPE/results.md. A full recipe takes minutes to hours.",
        examples=(
            "edgefd reproduce fedcache",
            "edgefd reproduce dfl-iid --seeds 0 --rounds 3 --out /tmp/quick      # a quick look, not the recipe",
        ),
    ),
    Subcommand(
        "compare",
        "edgefd.compare",
        "run methods side by side with one model family and one local training",
        description="Run several methods that differ only in the method: every arm gets the first method's "
        "client models and local training (epochs, optimiser lifecycle, batch order), or the ones the flags "
        "give, the same data, split and seeds, and its own default params. Prints each arm's best and final "
        "accuracy over the seeds and the first method's paired difference to each other arm, and writes "
        "them to DIR/compare.md (DIR: --out, default runs/compare-ALGO-ALGO...).",
        examples=(
            "edgefd compare fedcache fd local --rounds 5",
            "edgefd compare fd local --models cnn2 --epochs 1 --seeds 0 1 2 3 4 --out runs/fd-vs-local",
        ),
    ),
    Subcommand(
        "methods",
        "edgefd.algorithms.describe",
        "list the methods and their hyperparameters",
        description="List every method that `--algo` accepts, with a one-line summary and each of its "
        "`--param NAME=VALUE` hyperparameters, their defaults (the papers' values) and what they do. With a "
        "NAME: that method's paper, the client models `--models auto` gives it on each kind of data, its "
        "params, and command lines to try.",
        examples=(
            "edgefd methods",
            "edgefd methods fedcache",
            "edgefd simulate --algo fedcache --param knn=exact          # then set what it lists",
        ),
    ),
    Subcommand(
        "partition",
        "edgefd.data.partition_cli",
        "split a dataset across clients and show label counts",
        description="Show how a dataset would be split across clients, without training: one row per client "
        "with its train and test sizes and its training samples per label, optionally as a stacked bar "
        "chart. Takes the same --partition strings as `edgefd simulate`.",
        examples=(
            "edgefd partition --list",
            "edgefd partition --dataset watch --partition natural --plot labels.png",
            "edgefd partition --dataset fmnist --clients 20 --partition shards:2",
        ),
    ),
    Subcommand(
        "export",
        "edgefd.export.onnx_export",
        "write a run's client models as ONNX files (+ int8)",
        description="Write the final model of a run's clients (RUN_DIR/models/<client>.pt) as one "
        "self-contained ONNX file each (<client>.onnx: weights inside, dynamic batch) plus a JSON sidecar "
        "(<client>.json: architecture, classes, input shape, normalisation, accuracy measured with "
        "onnxruntime). --int8 adds a static-int8 copy (<client>.int8.onnx).",
        examples=(
            "edgefd export runs/fd --out exported/",
            "edgefd export runs/fd --client client-3 --out exported/ --int8",
            "edgefd predict exported/client-3.onnx sample.npy          # then run it",
        ),
    ),
    Subcommand(
        "export-encoder",
        "edgefd.export.encoder",
        "write FedCache's MobileNetV3 hash encoder as ONNX",
        description="Write FedCache's MobileNetV3-Small hash encoder (channel expansion, resize to 224, "
        "ImageNet normalisation and trunk; 576 floats out per sample) as one ONNX file, with a .json "
        "sidecar beside it, so that devices hash with `--param encoder=onnx:FILE` and no torch.",
        examples=(
            "edgefd export-encoder --weights mobilenet_v3_small.pt --dataset fmnist --out encoder.onnx",
            "edgefd export-encoder --weights mobilenet_v3_small.pt --input-shape 3,32,32 --out encoder32.onnx",
            "edgefd simulate --algo fedcache --dataset fmnist --param encoder=onnx:encoder.onnx",
        ),
    ),
    Subcommand(
        "predict",
        "edgefd.export.predict",
        "run an exported ONNX model with onnxruntime (no torch)",
        description="Classify samples with a model written by `edgefd export`, with onnxruntime alone (torch "
        "is never imported): what an edge device runs. The sidecar beside the model (client-3.onnx -> "
        "client-3.json) gives the input shape, the normalisation and the class names. Prints one line per "
        "sample: file[index]: predicted label (top classes with probabilities).",
        examples=(
            "edgefd predict exported/client-3.onnx digit.png sample.npy",
            "edgefd predict exported/client-3.int8.onnx batch.npy --json",
            "edgefd predict exported/client-3.onnx raw.npy --normalise --top 5",
        ),
    ),
    Subcommand(
        "server",
        "edgefd.deploy.server",
        "orchestrate a run's rounds over MQTT",
        description="Orchestrate a deployed run over MQTT (on the workstation). Takes every `edgefd simulate` "
        "setting (flags or --config run.toml), sends the resolved config to the clients, runs the rounds, "
        "and writes what simulate writes plus each round's MQTT bytes and, in summary.json, each client's "
        "connection and lateness statistics. Start `edgefd client` on each device with the same --run.",
        examples=(
            "edgefd server --broker mqtt://127.0.0.1:1883 --run demo --algo fd --dataset digits --clients 3 \\",
            "    --rounds 5 --round-timeout 60 --out runs/demo",
            "edgefd server --config run.toml --run demo --broker mqtts://HOST:8883 --ca-cert ca.crt \\",
            "    --username edgefd-server --password-file pw --round-timeout 120 --out runs/demo",
            "edgefd server --config run.toml --run demo --broker mqtt://HOST:1883 --out runs/demo --resume",
        ),
    ),
    Subcommand(
        "client",
        "edgefd.deploy.client",
        "the device runtime: take part in a run over MQTT",
        description="The device runtime of a deployed run: connect to the broker, wait for the run's config "
        "from `edgefd server`, build this client's role and data, and answer the server's requests. It "
        "reconnects by itself and resumes from --state-dir after a restart. Exits 0 when the server ends "
        "the run or on SIGTERM, 2 on bad settings. --broker, --run and --client-id are required, on the "
        "command line or in --config.",
        examples=(
            "edgefd client --broker mqtt://SERVER:1883 --run demo --client-id client-0 --state-dir ~/.edgefd",
            'edgefd client --config /etc/edgefd/client.toml     # keys as the flags: client_id = "client-0"',
            "edgefd client --broker mqtts://SERVER:8883 --ca-cert ca.crt --username client-0 --password-file pw \\",
            "    --run demo --client-id client-0 --data-dir /data/edgefd",
        ),
    ),
    Subcommand(
        "deploy-local",
        "edgefd.deploy.local",
        "broker, server and clients as processes on this machine",
        description="A whole MQTT deployment on this machine, as real processes: a broker (unless --broker is "
        "given), one `edgefd server` and one `edgefd client` per client. Waits for the server to finish "
        "and leaves simulate's outputs in the out folder, plus run.toml (the resolved config), logs/ "
        "(every process's log) and clients/ (the clients' checkpoints).",
        examples=(
            "edgefd deploy-local --algo fd --dataset digits --clients 3 --rounds 5 --out runs/local",
            "edgefd deploy-local --broker mqtt://127.0.0.1:1883 --run test --clients 3 --out runs/local",
            "edgefd deploy-local --broker-kind amqtt --clients 2 --rounds 2 --out runs/amqtt",
        ),
    ),
]


def _load(module: str):
    return importlib.import_module(module)


def _words(argv: Sequence[str]) -> list[str]:
    """The words of argv that are not options: the subcommand (and the benchmark) come first."""
    return [word for word in argv if not word.startswith("-")]


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """Every subcommand is listed, but only the module of the one ``argv`` names is imported (every
    module when ``argv`` is None): `edgefd --help` and `edgefd predict` then start without torch,
    which takes seconds and hundreds of MB to import (an edge device may not even have it)."""
    words = None if argv is None else _words(argv)
    chosen = None if words is None else (words[:1] or [""])[0]
    benchmark = None if words is None else (words[1:2] or [""])[0]
    parser = FoldingParser(  # its subcommands' too: a run's --help folds its less common flags
        prog="edgefd",
        description="Federated knowledge distillation for edge devices.",
        epilog="Run `edgefd COMMAND --help` for a command's options and examples.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_load('edgefd').__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", help="what to do (one of those below)")

    bench = commands.add_parser(
        "bench",
        help="run a benchmark and print its figures",
        description=_wrap(
            "Run one benchmark and print its figures (median times, bandwidths, sizes); nothing here asserts "
            "on time. Each benchmark takes --json FILE to keep its figures; docs/BENCHMARKS.md has the current figures."
        ),
        epilog=_epilog(("edgefd bench kernels --quick", "edgefd bench onnx --models cnn2 --repeats 10")),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = bench.add_subparsers(
        dest="benchmark", metavar="BENCHMARK", help="which benchmark to run (`edgefd bench BENCHMARK --help`)"
    )
    for item in BENCHMARKS.values():
        _add_command(which, item, chosen is None or (chosen == "bench" and benchmark in (None, item.name)))

    for item in SUBCOMMANDS:
        _add_command(commands, item, chosen in (None, item.name))
    return parser


_HELP_WIDTH = 100


def _wrap(text: str) -> str:
    # The subcommands use RawDescriptionHelpFormatter (the examples keep their lines), so the
    # description is wrapped here.
    return textwrap.fill(text, width=_HELP_WIDTH)


def _add_command(commands: argparse._SubParsersAction, item: Subcommand, load: bool) -> None:
    """Adds ``item``'s parser; its module (and so its flags) only when ``load``."""
    epilog = _epilog(item.examples)
    sub = commands.add_parser(
        item.name,
        help=item.help,
        description=_wrap(item.description or item.help),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub.set_defaults(_entry=(item.module, item.entry))
    if load:
        _load(item.module).add_arguments(sub)
        if sub.epilog != epilog:
            # The module wrote its own epilog (`simulate` lists the methods): keep both.
            sub.epilog = "\n\n".join(text for text in (epilog, sub.epilog) if text)


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
    except BrokenPipeError:  # `edgefd methods | head`: the reader stopped reading; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
