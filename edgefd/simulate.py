"""`edgefd simulate`: run one method on one machine and write its results.

    edgefd simulate                          # FD on digits, 10 clients, Dirichlet 0.5: ~10 s
    edgefd simulate --algo fedavg --dataset fmnist --clients 20 --rounds 50 --out runs/fedavg
    edgefd simulate --config run.toml --param beta=2

Settings come from, in increasing priority: the defaults of `SimulationConfig`, a TOML file
(`--config`, same keys, method hyperparameters in a `[params]` table), then the command line.
The out folder receives `metrics.jsonl`, `summary.json`, `curves.png` and `models/<client>.pt`
(each client's final model, for `edgefd export`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tomllib
import torch

from edgefd import kernels
from edgefd.algorithms.base import (
    ClientContext,
    ClientData,
    ClientRole,
    ServerContext,
    ServerRole,
    get_method,
    list_methods,
    make_params,
    parse_param_assignments,
)
from edgefd.data import DatasetNotFoundError, load_dataset, partition
from edgefd.export.checkpoint import save_run_models
from edgefd.metrics.results import RunWriter, summarise
from edgefd.models import assign_models, build_model
from edgefd.runtime.loop import HELLO_ROUND, Federation, LoopConfig, RoundRecord
from edgefd.runtime.training import TrainConfig
from edgefd.runtime.transport import DOWN, UP, InProcessTransport


@dataclass
class SimulationConfig:
    """One simulated run. Every field is also a `--flag` and a TOML key."""

    algo: str = "fd"
    """Method name (`edgefd methods` lists them)."""
    dataset: str = "digits"
    data_root: str | None = None
    """Folder holding datasets that are read from disk."""
    clients: int = 10
    rounds: int = 10
    partition: str = "dirichlet:0.5"
    """iid | dirichlet:ALPHA | shards:N | quantity:ALPHA | natural | dominant:FRAC"""
    samples_per_client: int | None = None
    """iid / dominant: each client gets exactly this many training samples; dirichlet / shards: at
    most this many, a random subset of its share (default: split the whole set)."""
    test_fraction: float | None = None
    """Each client's local test split is this fraction of its training size, drawn with the same
    label mix (default: the whole test set, spread in proportion to the clients' sizes)."""
    models: str = "homo"
    """homo | hetero | NAME,NAME,... (round-robin over clients)."""
    seed: int = 0
    out: str | None = None
    """Results folder (default runs/ALGO-DATASET-sSEED)."""
    participation: float = 1.0
    straggler_rate: float = 0.0
    eval_every: int = 1
    precision: str = "fp32"
    """Wire precision of knowledge arrays: fp32 | fp16 | int8."""
    epochs: int = 1
    batch_size: int = 32
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    optimizer: str = "sgd"
    threads: int = 2
    kernels: str | None = None
    """Kernel backend: cpp | torch (default: EDGEFD_KERNELS or cpp)."""
    params: dict[str, Any] = field(default_factory=dict)
    """The method's own hyperparameters (`--param NAME=VALUE`)."""

    def train_config(self) -> TrainConfig:
        return TrainConfig(
            epochs=self.epochs,
            batch_size=self.batch_size,
            lr=self.lr,
            momentum=self.momentum,
            weight_decay=self.weight_decay,
            optimizer=self.optimizer,
        )

    def loop_config(self) -> LoopConfig:
        return LoopConfig(
            rounds=self.rounds,
            participation=self.participation,
            straggler_rate=self.straggler_rate,
            eval_every=self.eval_every,
        )

    def out_dir(self) -> Path:
        return Path(self.out) if self.out else Path("runs") / f"{self.algo}-{self.dataset}-s{self.seed}"

    def validate(self) -> None:
        if self.clients < 1:
            raise ValueError(f"clients: must be >= 1, got {self.clients}")
        if self.precision not in ("fp32", "fp16", "int8"):
            raise ValueError(f"precision: expected fp32, fp16 or int8, got {self.precision!r}")
        if self.threads < 1:
            raise ValueError(f"threads: must be >= 1, got {self.threads}")
        self.loop_config().validate()


@dataclass
class Simulation:
    """The built pieces of a run, before it runs (tests poke at them)."""

    config: SimulationConfig
    federation: Federation
    clients: dict[str, ClientRole]
    server: ServerRole
    model_names: dict[str, str]
    params: Any
    dataset: Any = None
    splits: dict[str, Any] = field(default_factory=dict)
    """Each client's ClientSplit (its train and test indices into `dataset`)."""


def _seed_stream(seed: int, *key: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([seed, *key])


def _torch_seed(sequence: np.random.SeedSequence) -> int:
    return int(sequence.generate_state(1, dtype=np.uint64)[0] % (2**63))


def in_channels_of(input_shape: tuple[int, ...]) -> int:
    """Images are (C, H, W), sensor windows (T, F): channels are C, or F."""
    return int(input_shape[0]) if len(input_shape) == 3 else int(input_shape[-1])


@dataclass
class RunPieces:
    """What every process of a run derives from its config alone (data, split, model names): the
    server and each deployed client build identical pieces from the same config and seed."""

    method: Any
    params: Any
    dataset: Any
    splits: list
    model_names: list[str]
    client_ids: list[str]

    def make_model(self, name: str) -> torch.nn.Module:
        return build_model(
            name,
            in_channels=in_channels_of(tuple(self.dataset.input_shape)),
            num_classes=self.dataset.num_classes,
            input_shape=self.dataset.input_shape,
        )


def client_ids_of(clients: int) -> list[str]:
    """`client-0`, ... or `client-00`, ...: zero-padded so that sorting keeps their order."""
    width = len(str(clients - 1))
    return [f"client-{i:0{width}d}" for i in range(clients)]


def prepare(config: SimulationConfig, dataset: Any = None) -> RunPieces:
    """Validates the config, sets the kernel backend, loads and splits the data. A device that
    brings its own data passes `dataset` (anything with `input_shape` and `num_classes`): then
    nothing is loaded or split."""
    config.validate()
    if config.kernels:
        kernels.set_backend(config.kernels)
    kernels.set_num_threads(config.threads)
    method = get_method(config.algo)
    params = make_params(method.params, config.params)
    splits = []
    if dataset is None:
        dataset = load_dataset(config.dataset, root=config.data_root)
        splits = partition(
            dataset,
            config.clients,
            config.partition,
            seed=config.seed,
            samples_per_client=config.samples_per_client,
            test_fraction=config.test_fraction,
        )
    names = assign_models(config.models, config.clients, input_shape=dataset.input_shape)
    return RunPieces(method, params, dataset, splits, list(names), client_ids_of(config.clients))


def client_data(pieces: RunPieces, index: int) -> ClientData:
    """Client `index`'s share of the dataset."""
    dataset, split = pieces.dataset, pieces.splits[index]
    train_idx = torch.from_numpy(np.asarray(split.train_indices, dtype=np.int64))
    test_idx = torch.from_numpy(np.asarray(split.test_indices, dtype=np.int64))
    return ClientData(
        dataset.train_x[train_idx],
        dataset.train_y[train_idx],
        dataset.test_x[test_idx],
        dataset.test_y[test_idx],
        train_idx,
        dataset.num_classes,
    )


def build_client(config: SimulationConfig, pieces: RunPieces, index: int, data: ClientData | None = None) -> ClientRole:
    """Client `index`'s role, seeded from (seed, 1, index) alone: the same in any process.
    `data` replaces its dataset share (a device's own data)."""
    stream = _seed_stream(config.seed, 1, index)
    torch.manual_seed(_torch_seed(stream))
    if data is None:
        data = client_data(pieces, index)
    name = pieces.model_names[index]
    context = ClientContext(
        pieces.client_ids[index],
        pieces.make_model(name),
        name,
        data,
        config.train_config(),
        np.random.default_rng(stream),
        torch.Generator().manual_seed(_torch_seed(stream.spawn(1)[0])),
        config.precision,
        config.rounds,
    )
    return pieces.method.client(context, pieces.params)


def build_server(config: SimulationConfig, pieces: RunPieces) -> ServerRole:
    """The server role, seeded from (seed, 2)."""
    torch.manual_seed(_torch_seed(_seed_stream(config.seed, 2)))
    model_names = dict(zip(pieces.client_ids, pieces.model_names))
    context = ServerContext(
        list(pieces.client_ids),
        pieces.dataset.num_classes,
        tuple(pieces.dataset.input_shape),
        model_names,
        pieces.make_model,
        config.train_config(),
        config.seed,
        config.precision,
        config.rounds,
    )
    return pieces.method.server(context, pieces.params)


def selection_rng(config: SimulationConfig) -> np.random.Generator:
    """The run's RNG for client selection and simulated stragglers."""
    return np.random.default_rng(_seed_stream(config.seed, 3))


def build(config: SimulationConfig) -> Simulation:
    """Loads the data, splits it, builds every client's model and role, and the server."""
    pieces = prepare(config)
    clients = {pieces.client_ids[i]: build_client(config, pieces, i) for i in range(config.clients)}
    server = build_server(config, pieces)
    federation = Federation(server, clients, InProcessTransport(), config.loop_config(), selection_rng(config))
    return Simulation(
        config,
        federation,
        clients,
        server,
        dict(zip(pieces.client_ids, pieces.model_names)),
        pieces.params,
        pieces.dataset,
        dict(zip(pieces.client_ids, pieces.splits)),
    )


def run(
    config: SimulationConfig, progress: bool = True, on_round: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Builds and runs the simulation, writes its results, and returns the summary."""
    started = time.perf_counter()
    sim = build(config)
    out = config.out_dir()
    writer = RunWriter(out)
    federation = sim.federation

    federation.hello()
    initial = RoundRecord(
        HELLO_ROUND,
        None,
        None,
        federation.transport.ledger.total(UP, HELLO_ROUND),
        federation.transport.ledger.total(DOWN, HELLO_ROUND),
        0.0,
        [],
        [],
    )
    federation.evaluate(initial)
    writer.add(initial)

    bar = _progress_bar(config, progress)
    for round in range(1, config.rounds + 1):
        line = writer.add(federation.run_round(round))
        if on_round is not None:
            on_round(line)
        if bar is not None:
            bar.update(1)
            accuracy = "" if line["accuracy"] is None else f"acc {100 * line['accuracy']:.1f}%  "
            bar.set_postfix_str(
                f"{accuracy}up {_megabytes(line['bytes_up_cumulative'])}  "
                f"down {_megabytes(line['bytes_down_cumulative'])}"
            )
    if bar is not None:
        bar.close()
    save_run_models(sim, writer.lines[-1]["client_accuracy"], out)

    summary = {
        "algo": config.algo,
        "dataset": config.dataset,
        "clients": config.clients,
        "rounds": config.rounds,
        "seed": config.seed,
        **summarise(writer.lines),
        "bytes_hello": initial.bytes_up,
        "wall_seconds": round_seconds(time.perf_counter() - started),
        "models": sim.model_names,
        "params": asdict(sim.params),
        "kernels": kernels.get_backend(),
        "config": asdict(config),
    }
    writer.write_summary(summary)
    from edgefd.metrics.plots import plot_curves  # matplotlib: ~1 s to import, only needed here

    plot_curves({f"{config.algo} (seed {config.seed})": writer.lines}, out / "curves.png")
    return summary


def round_seconds(value: float) -> float:
    return round(value, 3)


def _megabytes(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def _progress_bar(config: SimulationConfig, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=config.rounds, desc=f"{config.algo} on {config.dataset}", unit="round", file=sys.stderr)


# ----------------------------------------------------------------------------------------------
# Command line


def _config_fields() -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(SimulationConfig) if f.name != "params"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "methods: " + ", ".join(m.name for m in list_methods())
    defaults = SimulationConfig()
    parser.add_argument("--config", metavar="FILE", help="TOML file with the same keys (and a [params] table)")
    for name, f in _config_fields().items():
        flag = "--" + name.replace("_", "-")
        kind = {"int": int, "float": float}.get(str(f.type).split(" ")[0], str)
        parser.add_argument(
            flag, dest=name, type=kind, default=argparse.SUPPRESS, help=f"default: {getattr(defaults, name)}"
        )
    parser.add_argument(
        "--param", action="append", default=[], metavar="NAME=VALUE", help="a method hyperparameter (repeatable)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def config_from_args(args: argparse.Namespace) -> SimulationConfig:
    values: dict[str, Any] = {}
    params: dict[str, Any] = {}
    if getattr(args, "config", None):
        path = Path(args.config)
        if not path.is_file():
            raise ValueError(f"--config {path}: no such file")
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"--config {path}: not valid TOML ({error})") from None
        params.update(data.pop("params", {}))
        unknown = sorted(set(data) - set(_config_fields()))
        if unknown:
            raise ValueError(f"--config {path}: unknown key(s) {', '.join(unknown)}")
        values.update(data)
    for name in _config_fields():
        if name in vars(args):
            values[name] = getattr(args, name)
    params.update(parse_param_assignments(getattr(args, "param", [])))
    return SimulationConfig(**values, params=params)


def run_cli(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
        summary = run(config, progress=not args.quiet)
    except DatasetNotFoundError as error:
        print(f"edgefd simulate: {error}", file=sys.stderr)
        return 2
    except ValueError as error:
        print(f"edgefd simulate: {error}", file=sys.stderr)
        return 2
    final = summary["final_accuracy"]
    print(
        f"{config.algo} on {config.dataset}: final accuracy {100 * final:.2f}% "
        f"(best {100 * summary['best_accuracy']:.2f}%), "
        f"{_megabytes(summary['bytes_up_total'])} up, {_megabytes(summary['bytes_down_total'])} down, "
        f"{summary['wall_seconds']:.1f} s -> {config.out_dir()}"
    )
    return 0
