"""Building a run from its config: the data and its split, every client's model and role, the
server, the in-process federation. Every process of a run (the simulation, the deployed server, each
deployed client) derives its part from the config and seed alone, so they build identical pieces."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from edgefd import kernels
from edgefd.algorithms.base import (
    ClientContext,
    ClientData,
    ClientRole,
    MethodSpec,
    ServerContext,
    ServerRole,
    get_method,
)
from edgefd.algorithms.params import make_params
from edgefd.data import load_dataset, partition
from edgefd.data.registry import clear_cache as clear_dataset_cache
from edgefd.models import assign_models, build_model, in_channels_of
from edgefd.runtime.channel import Channel, InProcessChannel
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.limits import MessageLimits, method_bounds
from edgefd.runtime.loop import Federation
from edgefd.runtime.records import RoundRecord
from edgefd.runtime.transport import InProcessTransport
from edgefd.runtime.verbs import ClientApp
from edgefd.training import evaluate_model, for_method, place_model

if TYPE_CHECKING:
    from edgefd.runtime.ray_channel import RayChannel


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
    actors: RayChannel | None = None
    """Where the clients live in Ray actors (``--backend ray``; also the federation's channel)."""

    def end_round(self, record: RoundRecord) -> RoundRecord:
        """A round's record as the run keeps it: with Ray, once every actor saved its clients (the
        time it took is the round's) and with what befell them (`RayChannel.end_round`)."""
        return record if self.actors is None else self.actors.end_round(record)

    def final_clients(self) -> dict[str, Any]:
        """Each client as a finished run's checkpoints read it (its ``model``): the roles, or where
        they live in Ray actors, their models fetched from there."""
        if self.actors is None:
            return self.clients
        return {cid: SimpleNamespace(model=model) for cid, model in self.actors.client_models().items()}

    def close(self) -> None:
        """Frees what the run holds outside this process (a Ray backend's actors and local Ray)."""
        self.federation.channel.close()


def _seed_stream(seed: int, *key: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([seed, *key])


def _torch_seed(sequence: np.random.SeedSequence) -> int:
    return int(sequence.generate_state(1, dtype=np.uint64)[0] % (2**63))


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
    class_samples: tuple[int, ...] = ()
    """Training samples of each class of the run's data, counted before a simulation frees the
    training arrays (empty: not known)."""

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


def prepare(config: SimulationConfig, dataset: Any = None, on_demand: bool = False) -> RunPieces:
    """Validates the config, sets the kernel backend, loads and splits the data. A device that
    brings its own data passes `dataset` (anything with `input_shape` and `num_classes`): then
    nothing is loaded or split. `on_demand`: for a process that builds one client (a deployed
    device): 8-bit images stay bytes until its share is taken (`load_dataset(on_demand=True)`)."""
    config.validate()
    if config.kernels:
        kernels.set_backend(config.kernels)
    kernels.set_num_threads(config.threads)
    # oneDNN (torch's convolutions on the CPU) may otherwise choose implementations built on atomic
    # updates, whose result changes from run to run with more than one thread; on this project's
    # reference machines the implementations are the same either way (docs/REPRODUCIBILITY.md).
    torch.backends.mkldnn.deterministic = True  # type: ignore[assignment]  # a module property (torch types it so)
    method = get_method(config.algo)
    params = make_params(method.params, config.params)
    splits = []
    if dataset is None:
        dataset = load_dataset(config.dataset, root=config.data_root, on_demand=on_demand)
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
    return RunPieces(method, params, dataset, splits, list(names), client_ids_of(config.clients), class_counts(dataset))


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
    raw = dataset.raw
    if raw is not None:  # 8-bit images: the client keeps its share as bytes, normalised when used
        train_x, test_x = torch.from_numpy(raw.train[train_idx.numpy()]), torch.from_numpy(raw.test[test_idx.numpy()])
    else:
        train_x, test_x = dataset.train_rows(train_idx), dataset.test_rows(test_idx)
    return ClientData(
        train_x,
        dataset.train_y[train_idx],
        test_x,
        dataset.test_y[test_idx],
        train_idx,
        dataset.num_classes,
        normalise=None if raw is None else raw.normaliser,
    )


def build_client(
    config: SimulationConfig,
    pieces: RunPieces,
    index: int,
    data: ClientData | None = None,
    *,
    recompute_activations: bool = False,
) -> ClientRole:
    """Client `index`'s role, seeded from (seed, 1, index) alone: the same in any process.
    `data` replaces its dataset share (a device's own data); ``recompute_activations`` is a
    device's own choice (`TrainConfig.recompute_activations`)."""
    stream = _seed_stream(config.seed, 1, index)
    torch.manual_seed(_torch_seed(stream))
    if data is None:
        data = client_data(pieces, index)
    name = pieces.model_names[index]
    train = dataclasses.replace(config.train_config(), recompute_activations=recompute_activations)
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
    # resolved as the clients' are: a server that trains copies of client models (FedD2S) trains them alike
    train = for_method(config.train_config(), pieces.method.client.local_training)

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
        samples_per_client=config.samples_per_client,
        class_samples=pieces.class_samples,
    )
    return pieces.method.server(context, pieces.params)


def class_counts(dataset: Any) -> tuple[int, ...]:
    """Training samples of each class of ``dataset`` (empty where it holds no training labels)."""
    labels = getattr(dataset, "train_y", None)
    if labels is None or not len(labels):
        return ()
    counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=dataset.num_classes)
    return tuple(int(count) for count in counts)


def selection_rng(config: SimulationConfig) -> np.random.Generator:
    """The run's RNG for client selection and simulated stragglers (the loop's: a simulation's and a
    deployment's)."""
    return np.random.default_rng(_seed_stream(config.seed, 3))


KEEP_TRAINING_ARRAYS_BELOW = 64 * 2**20
"""A float training set larger than this (bytes) is not kept once every client holds its share (the
clients' copies are the only ones; the loader forgets it too), so it is in memory once, not twice.
Smaller ones stay cached for the next run in this process. (Sets of 8-bit images are loaded as
bytes and never made float whole: their clients keep their shares as bytes.)"""


def without_training_arrays(dataset: Any) -> Any:
    """``dataset`` without its training samples (shapes, classes, statistics and test set kept), and
    the loader's cache cleared, so that the training arrays can be freed."""
    clear_dataset_cache()
    empty_x = torch.empty((0, *dataset.train_x.shape[1:]), dtype=dataset.train_x.dtype)
    return dataclasses.replace(dataset, train_x=empty_x, train_y=torch.empty(0, dtype=torch.int64), train_groups=None)


def build(config: SimulationConfig) -> Simulation:
    """Loads the data, splits it, builds every client's model and role, and the server."""
    in_process = config.backend == "inprocess"  # else the clients are built where they run (ray_channel)
    actors = None if in_process else ray_channel(config)  # they build their clients while this builds the rest
    try:
        return build_with(config, actors)
    except BaseException:
        if actors is not None:
            actors.close()
        raise


def build_with(config: SimulationConfig, actors: RayChannel | None) -> Simulation:
    """`build`, with the clients either built here (``actors`` None) or by those Ray actors."""
    pieces = prepare(config, on_demand=True)  # 8-bit images stay bytes: each client keeps its share so
    in_process = actors is None
    clients = (
        {pieces.client_ids[i]: build_client(config, pieces, i) for i in range(config.clients)} if in_process else {}
    )
    if pieces.dataset.train_x.nbytes > KEEP_TRAINING_ARRAYS_BELOW:
        pieces.dataset = without_training_arrays(pieces.dataset)
    server = build_server(config, pieces)
    scores_server_models = bool(server.server_models())
    full_test = server_test = None
    if config.score_full_test or scores_server_models:
        everything = torch.arange(len(pieces.dataset.test_y))
        whole_test = (pieces.dataset.test_rows(everything), pieces.dataset.test_y)
        full_test = whole_test if config.score_full_test else None
        server_test = whole_test if scores_server_models else None
    channel: Channel
    if actors is None:
        channel = in_process_channel(config, pieces, clients, full_test, server)
    else:
        actors.wait_ready()
        actors.limits = MessageLimits(config.max_message_bytes, partial(method_bounds, server))
        channel = actors
    scorer = None if server_test is None else scorer_on(*server_test)
    federation = Federation(server, channel, config.loop_config(), selection_rng(config), scorer)
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
        actors=actors,
    )


def in_process_channel(
    config: SimulationConfig,
    pieces: RunPieces,
    clients: dict[str, ClientRole],
    full_test: tuple[torch.Tensor, torch.Tensor] | None,
    server: ServerRole,
) -> Channel:
    """The clients called in this process, the attacking ones poisoning their messages; a message
    larger than a deployment of the run takes is refused as there (`edgefd.runtime.limits`)."""
    ids = list(pieces.client_ids)
    poisonings = {cid: config.poisoning(cid, ids, role.model.state_dict()) for cid, role in clients.items()}
    attacking = {cid: poisoning for cid, poisoning in poisonings.items() if poisoning is not None}
    limits = MessageLimits(config.max_message_bytes, partial(method_bounds, server))
    return InProcessChannel(clients, InProcessTransport(), full_test, attacking, limits)


def ray_channel(config: SimulationConfig) -> RayChannel:
    """The clients in Ray actors, which build them from the config (`--backend ray`); returns while
    they build them (`RayChannel.wait_ready`)."""
    from edgefd.runtime.ray_channel import RayChannel  # imports Ray: only a Ray run needs it installed

    return RayChannel(config, client_ids_of(config.clients), client_apps, wait=False)


def client_apps(config: SimulationConfig, indices: list[int]) -> dict[str, ClientApp]:
    """Clients ``indices`` of the run, built from its config alone as a deployed device builds its
    own (a Ray actor's clients): the data and split, the models, the whole test set to score on,
    the attackers' poisoning."""
    pieces = prepare(config, on_demand=True)
    roles = {pieces.client_ids[i]: build_client(config, pieces, i) for i in indices}
    full_test = None
    if config.score_full_test:
        everything = torch.arange(len(pieces.dataset.test_y))
        full_test = (pieces.dataset.test_rows(everything), pieces.dataset.test_y)
    ids = list(pieces.client_ids)
    return {
        cid: ClientApp(role, full_test, config.poisoning(cid, ids, role.model.state_dict()))
        for cid, role in roles.items()
    }


def scorer_on(x: torch.Tensor, y: torch.Tensor) -> Callable[[dict[str, nn.Module]], dict[str, float]]:
    """Scores a server's own models on (x, y), the whole test set; a measurement: each model goes
    on in the mode it was in."""

    def score(models: dict[str, nn.Module]) -> dict[str, float]:
        scores = {}
        for name, model in models.items():
            was_training = model.training
            scores[name] = float(evaluate_model(model, x, y)["accuracy"])
            model.train(was_training)
        return scores

    return score


def local_training_of(config: SimulationConfig) -> dict[str, Any]:
    """The clients' local epochs, optimiser lifecycle and batch order as this run resolved them
    (``method`` made concrete): the settings a comparison's arms must share."""
    method = get_method(config.algo).client.local_training
    resolved = for_method(config.train_config(), method)
    return {
        "epochs": resolved.epochs,
        "optimizer_lifecycle": resolved.optimizer_lifecycle,
        "batch_order": resolved.batch_order,
    }


def peak_gpu_mb() -> float | None:
    """The most memory torch's CUDA allocator held for tensors in this process so far, in MiB, on
    the current GPU; None where this process never used CUDA (a CPU run)."""
    if not torch.cuda.is_initialized():
        return None
    return round(torch.cuda.max_memory_allocated() / 2**20, 1)


def round_seconds(value: float) -> float:
    return round(value, 3)
