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
import json
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
from edgefd import progress as progress_bars
from edgefd.algorithms.base import (
    ClientContext,
    ClientData,
    ClientRole,
    MethodSpec,
    ServerContext,
    ServerRole,
    get_method,
    list_methods,
    make_params,
    parse_param_assignments,
)
from edgefd.data import DatasetNotFoundError, dataset_label, load_dataset, partition
from edgefd.data.registry import clear_cache as clear_dataset_cache
from edgefd.export.checkpoint import save_run_models
from edgefd.metrics.results import RunWriter, summarise
from edgefd.models import assign_models, build_model
from edgefd.runtime.loop import HELLO_ROUND, Federation, LoopConfig, RoundRecord
from edgefd.runtime.training import (
    BATCH_ORDERS,
    OPTIMIZER_LIFECYCLES,
    TrainConfig,
    check_choice,
    for_method,
    place_model,
    resolve_device,
)
from edgefd.runtime.transport import DOWN, UP, InProcessTransport


def setting(default: Any, help: str) -> Any:
    """A config field with its `--flag` help (what it does, what values it takes)."""
    return field(default=default, metadata={"help": help})


@dataclass
class SimulationConfig:
    """One simulated run. Every field is also a `--flag` and a TOML key."""

    algo: str = setting("fd", "the method to run (see `edgefd methods`), e.g. fedcache, fedict, fedavg")
    dataset: str = setting(
        "digits",
        "the data: digits, mnist5k, watch and fmnist are here offline; mnist, kmnist, emnist, cifar10, cifar100, "
        "svhn are read from --data-root; npz:PATH is a file of your own (docs/ADDING_A_DATASET.md)",
    )
    data_root: str | None = setting(None, "folder holding datasets that are read from disk (e.g. ~/data)")
    clients: int = setting(10, "number of clients (devices) in the federation")
    rounds: int = setting(10, "communication rounds")
    partition: str = setting(
        "dirichlet:0.5",
        "how the training set is split over clients: iid, dirichlet:ALPHA (label skew, smaller = more skewed), "
        "shards:K (K classes each), quantity:ALPHA (size skew), natural (one client per subject, watch), "
        "dominant:FRAC (FRAC of each client's data from one class)",
    )
    samples_per_client: int | None = setting(
        None,
        "iid / dominant: each client gets exactly this many training samples; dirichlet / shards: at most this "
        "many, a random subset of its share (default: split the whole set)",
    )
    test_fraction: float | None = setting(
        None,
        "each client's local test split is this fraction of its training size, drawn with the same label mix, "
        "e.g. 0.25 (default: the whole test set, spread in proportion to the clients' sizes)",
    )
    models: str = setting(
        "auto",
        "client models: auto (the family the method needs or its paper uses; the run says which), homo (one "
        "default model: cnn2 for images), hetero (resnet8,resnet16,resnet20 for images), or NAME,NAME,... "
        "given round-robin, e.g. fedict_c1,fedict_c2 (names: python -c 'import edgefd.models as m; "
        "print(m.list_models())')",
    )
    seed: int = setting(0, "seed of everything random: split, models, batch order, selection")
    out: str | None = setting(None, "results folder (default: runs/ALGO-DATASET-sSEED)")
    participation: float = setting(1.0, "fraction of the clients selected each round, e.g. 0.5")
    straggler_rate: float = setting(
        0.0, "probability that a selected client misses the deadline (its uplink is sent but discarded), e.g. 0.1"
    )
    eval_every: int = setting(1, "evaluate the clients every N rounds (and always after the last)")
    precision: str = setting(
        "fp32", "wire precision of knowledge arrays (logits, features): fp32, fp16 (half the bytes) or int8"
    )
    epochs: int = setting(1, "local epochs per round")
    batch_size: int = setting(32, "local mini-batch size")
    lr: float = setting(0.01, "local learning rate")
    momentum: float = setting(0.9, "SGD momentum (ignored by adam)")
    weight_decay: float = setting(5e-4, "L2 weight decay of the local optimiser")
    optimizer: str = setting("sgd", "local optimiser: sgd or adam")
    optimizer_lifecycle: str = setting(
        "method",
        "the clients' local optimiser: fresh (a new one every round), kept (one for the whole run) or method "
        "(what the method's paper code does: `edgefd methods NAME` says); set it to compare methods fairly",
    )
    batch_order: str = setting(
        "method",
        "the clients' batch order: reshuffle (a new order every epoch), fixed (one random order per client, "
        "drawn once) or method (what the method's paper code does)",
    )
    channels_last: bool = setting(
        True,
        "convolutional models in the channels-last (NHWC) memory layout, about a tenth faster to train on a CPU; "
        "false keeps PyTorch's default NCHW (results agree to float rounding)",
    )
    threads: int = setting(2, "CPU threads for torch and the kernels (use 1 to run several simulations at once)")
    kernels: str | None = setting(None, "kernel backend: cpp or torch (default: $EDGEFD_KERNELS, else cpp)")
    device: str = setting(
        "auto",
        "where models train: auto (a CUDA GPU when torch sees one, else the CPU), cpu, cuda or cuda:N; "
        "deployed clients choose their own with `edgefd client --device`",
    )
    score_full_test: bool = setting(
        False,
        "also score every client on the whole test set (every class), beside its own local split: FedZKT's "
        "paper metric; adds accuracy_full to each round and the summary (true or false)",
    )
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
            device=resolve_device(self.device),
            optimizer_lifecycle=self.optimizer_lifecycle,
            batch_order=self.batch_order,
            channels_last=self.channels_last,
        )

    def loop_config(self) -> LoopConfig:
        return LoopConfig(
            rounds=self.rounds,
            participation=self.participation,
            straggler_rate=self.straggler_rate,
            eval_every=self.eval_every,
        )

    def out_dir(self) -> Path:
        return Path(self.out) if self.out else Path("runs") / f"{self.algo}-{dataset_label(self.dataset)}-s{self.seed}"

    def validate(self) -> None:
        if self.clients < 1:
            raise ValueError(f"clients: must be >= 1, got {self.clients}")
        if self.precision not in ("fp32", "fp16", "int8"):
            raise ValueError(f"precision: expected fp32, fp16 or int8, got {self.precision!r}")
        if self.threads < 1:
            raise ValueError(f"threads: must be >= 1, got {self.threads}")
        resolve_device(self.device)
        check_choice("optimizer_lifecycle", self.optimizer_lifecycle, OPTIMIZER_LIFECYCLES)
        check_choice("batch_order", self.batch_order, BATCH_ORDERS)
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
    model_note: str | None = None
    """What `--models auto` picked (None when the models were given)."""


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
    models = resolve_models(config.models, method, tuple(dataset.input_shape))
    names = assign_models(models, config.clients, input_shape=dataset.input_shape)
    return RunPieces(method, params, dataset, splits, list(names), client_ids_of(config.clients))


def resolve_models(models: str, method: MethodSpec, input_shape: tuple[int, ...]) -> str:
    """``--models auto`` is the family the method declares for this data shape; anything else
    stands as given."""
    if models.strip().lower() == "auto":
        return method.models(input_shape)
    return models


def model_choice_note(config: SimulationConfig, pieces: RunPieces) -> str | None:
    """What ``--models auto`` picked, to tell the user (None when the models were given)."""
    if config.models.strip().lower() != "auto":
        return None
    names = list(dict.fromkeys(pieces.model_names))
    return (
        f"--models auto: {', '.join(names)} for {config.algo} on {config.dataset} "
        f"(samples of shape {tuple(pieces.dataset.input_shape)}); pass --models to choose others"
    )


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
    train = config.train_config()
    context = ClientContext(
        pieces.client_ids[index],
        place_model(pieces.make_model(name), train),  # built on the CPU: the same weights on any device
        name,
        data,
        train,
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
    train = config.train_config()

    def make_model(name: str) -> torch.nn.Module:
        return place_model(pieces.make_model(name), train)

    context = ServerContext(
        list(pieces.client_ids),
        pieces.dataset.num_classes,
        tuple(pieces.dataset.input_shape),
        model_names,
        make_model,
        train,
        config.seed,
        config.precision,
        config.rounds,
    )
    return pieces.method.server(context, pieces.params)


def selection_rng(config: SimulationConfig) -> np.random.Generator:
    """The run's RNG for client selection and simulated stragglers."""
    return np.random.default_rng(_seed_stream(config.seed, 3))


KEEP_TRAINING_ARRAYS_BELOW = 64 * 2**20
"""A training set larger than this (bytes) is not kept once every client holds its share (the
clients' copies are the only ones; the loader forgets it too): Fashion-MNIST's 188 MB is then in
memory once, not twice. Smaller ones stay cached for the next run in this process."""


def without_training_arrays(dataset: Any) -> Any:
    """``dataset`` without its training samples (shapes, classes, statistics and test set kept), and
    the loader's cache cleared, so that the training arrays can be freed."""
    clear_dataset_cache()
    empty_x = torch.empty((0, *dataset.train_x.shape[1:]), dtype=dataset.train_x.dtype)
    return dataclasses.replace(dataset, train_x=empty_x, train_y=torch.empty(0, dtype=torch.int64), train_groups=None)


def build(config: SimulationConfig) -> Simulation:
    """Loads the data, splits it, builds every client's model and role, and the server."""
    pieces = prepare(config)
    clients = {pieces.client_ids[i]: build_client(config, pieces, i) for i in range(config.clients)}
    if pieces.dataset.train_x.nbytes > KEEP_TRAINING_ARRAYS_BELOW:
        pieces.dataset = without_training_arrays(pieces.dataset)
    server = build_server(config, pieces)
    full_test = (pieces.dataset.test_x, pieces.dataset.test_y) if config.score_full_test else None
    federation = Federation(
        server, clients, InProcessTransport(), config.loop_config(), selection_rng(config), full_test
    )
    return Simulation(
        config,
        federation,
        clients,
        server,
        dict(zip(pieces.client_ids, pieces.model_names)),
        pieces.params,
        pieces.dataset,
        dict(zip(pieces.client_ids, pieces.splits)),
        model_note=model_choice_note(config, pieces),
    )


def config_to_toml(config: SimulationConfig) -> str:
    """The config as `simulate --config` reads it (None values are left out: they are defaults)."""

    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        return json.dumps(str(v))

    values = asdict(config)
    params = values.pop("params")
    lines = [f"{k} = {value(v)}" for k, v in values.items() if v is not None]
    lines += ["", "[params]"] + [f"{k} = {value(v)}" for k, v in params.items() if v is not None]
    return "\n".join(lines) + "\n"


def run(
    config: SimulationConfig, progress: bool = True, on_round: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Builds and runs the simulation, writes its results, and returns the summary."""
    started = time.perf_counter()
    progress_bars.set_enabled(progress)  # for this run; `finally` below puts the default back
    try:
        return _run(config, progress, on_round, started)
    finally:
        progress_bars.set_enabled(True)


def _run(
    config: SimulationConfig,
    progress: bool,
    on_round: Callable[[dict[str, Any]], None] | None,
    started: float,
) -> dict[str, Any]:
    sim = build(config)
    if progress and sim.model_note:
        print(sim.model_note, file=sys.stderr)
    out = config.out_dir()
    writer = RunWriter(out)
    federation = sim.federation

    hello_started = time.perf_counter()
    federation.hello()  # the one-time uploads and the server's start (FedCache: hashing and relations)
    initial = RoundRecord(
        HELLO_ROUND,
        None,
        None,
        federation.transport.ledger.total(UP, HELLO_ROUND),
        federation.transport.ledger.total(DOWN, HELLO_ROUND),
        time.perf_counter() - hello_started,
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
        "startup_seconds": round_seconds(initial.seconds),
        "peak_rss_mb": peak_rss_mb(),
        "models": sim.model_names,
        "params": asdict(sim.server.params),  # as the server resolved them (FedZKT's preset)
        "local_training": local_training_of(config),
        "kernels": kernels.get_backend(),
        "config": asdict(config),
    }
    writer.write_summary(summary)
    from edgefd.metrics.plots import plot_curves  # matplotlib: ~1 s to import, only needed here

    plot_curves({f"{config.algo} (seed {config.seed})": writer.lines}, out / "curves.png")
    return summary


def local_training_of(config: SimulationConfig) -> dict[str, str]:
    """The clients' optimiser lifecycle and batch order as this run resolved them (``method`` made
    concrete): the settings a comparison's arms must share."""
    method = get_method(config.algo).client.local_training
    resolved = for_method(config.train_config(), method)
    return {"optimizer_lifecycle": resolved.optimizer_lifecycle, "batch_order": resolved.batch_order}


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MiB (its whole life: run a measured run in a
    process of its own, as `edgefd reproduce` does for recipes that report memory)."""
    import resource

    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return round(kib / 1024, 1)


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


EXAMPLES = """examples:
  edgefd simulate                                    # FD on digits, 10 clients, 10 rounds
  edgefd simulate --algo fedcache --dataset fmnist --samples-per-client 200 --rounds 20
  edgefd simulate --algo fedict --partition dirichlet:0.1 --precision fp16 --out runs/fedict
  edgefd simulate --algo fd --param beta=2 --param temperature=3
  edgefd simulate --config run.toml                  # the same keys in TOML, method params in [params]

methods: {methods} (their --param NAME=VALUE: edgefd methods NAME)"""


METAVAR_OF_KIND: dict[Any, str] = {int: "N", float: "X"}
METAVARS = {
    "data_root": "DIR",
    "out": "DIR",
    "partition": "SCHEME",
    "kernels": "BACKEND",
    "lr": "LR",
    "score_full_test": "BOOL",
    "channels_last": "BOOL",
    "optimizer_lifecycle": "WHEN",
    "batch_order": "ORDER",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`edgefd simulate`'s flags and its examples."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EXAMPLES.format(methods=", ".join(m.name for m in list_methods()))
    add_config_arguments(parser)


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """The run's settings as flags, shared by `simulate`, `server` and `deploy-local`."""
    parser.add_argument(
        "--config", metavar="FILE", help="TOML file with the same keys as these flags and a [params] table; flags win"
    )
    defaults = SimulationConfig()
    for name, f in _config_fields().items():
        flag = "--" + name.replace("_", "-")
        kinds: dict[str, Callable[[str], Any]] = {"int": int, "float": float, "bool": parse_bool}
        kind = kinds.get(str(f.type).split(" ")[0], str)
        default = getattr(defaults, name)
        shown = "" if default is None else f" (default: {default})"
        parser.add_argument(
            flag,
            dest=name,
            type=kind,
            default=argparse.SUPPRESS,
            metavar=METAVARS.get(name) or METAVAR_OF_KIND.get(kind, name.upper()),
            help=f.metadata["help"] + shown,
        )
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a hyperparameter of the method, repeatable, e.g. --param beta=1.5 (edgefd methods NAME lists them)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars, only the final line")


def parse_bool(text: str) -> bool:
    """A true/false flag value (true, false, yes, no, on, off, 1, 0)."""
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


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
