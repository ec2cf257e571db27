"""A run's settings: `SimulationConfig`, the one dataclass behind `edgefd simulate`'s flags, the TOML
files of `--config` and the deployed server's and clients' config (they must agree on it)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgefd.runtime.attack import ATTACKS, Poisoning, attackers
from edgefd.settings import setting

# The methods below import what they use: `edgefd simulate --help` builds its flags from this class
# and must not wait seconds for torch, which the data, the loop and the trainer import.
if TYPE_CHECKING:
    from edgefd.runtime.loop import LoopConfig
    from edgefd.training import TrainConfig


BACKENDS = ("inprocess", "ray")
"""Where a simulation's clients run (`SimulationConfig.backend`)."""

EXECUTION_SETTINGS = ("backend", "workers", "ray_address", "gpus_per_worker")
"""Settings that say where a run executes, not what it computes: `config_to_toml` leaves them out at
their defaults, so that an in-process run's run.toml reads as it did before they existed."""

DEFAULT_THREADS = 2
"""A run's threads where the environment does not say: the target devices' cores."""


def default_threads() -> int:
    """``$OMP_NUM_THREADS``, the usual way to cap a process's threads (a test suite or a job scheduler
    sets it), else `DEFAULT_THREADS`. As OpenMP does, a value that is not a positive count is ignored;
    a list ("4,2": nested levels) gives its first level."""
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) > 0 else DEFAULT_THREADS


@dataclass
class SimulationConfig:
    """One simulated run. Every field is also a command-line flag and a TOML key."""

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
    epochs: int | None = setting(
        None,
        "local epochs per round (default: the method's paper's, 1 for most: `edgefd methods NAME` says; set it "
        "to compare methods fairly)",
    )
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
    threads: int = setting(
        help="CPU threads for torch and the kernels (default: $OMP_NUM_THREADS where it is set, else 2; "
        "use 1 to run several simulations at once)",
        default_factory=default_threads,
    )
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
    attack: str = setting(
        "none",
        "a poisoning experiment: the first --attackers clients train honestly, then send scaled (x100), flipped "
        "(negated) or max-in-bounds values in every uplink, within what the schemas admit "
        "(docs/ROBUSTNESS.md); none: every client honest",
        choices=ATTACKS,
    )
    attackers: int = setting(1, "with --attack: how many clients attack (the first in client-id order)")
    max_message_bytes: int | None = setting(
        None,
        "the largest message, in bytes, the server takes from a client and a client from the server, e.g. "
        "100000000; a client whose uplink is larger misses the round, named under the round's rejected (default: "
        "each message's own bound, from the method's schemas for this run's data and models; 64 MiB where a "
        "size is open: docs/DEPLOYMENT.md, Message sizes)",
    )
    backend: str = setting(
        "inprocess",
        "where the clients run: inprocess (this process, one after another) or ray (Ray actors, on this machine "
        "or a cluster: docs/RAY.md); the results are the same",
        choices=BACKENDS,
    )
    workers: int = setting(2, "with --backend ray: how many Ray actors host the clients (client i on actor i mod N)")
    ray_address: str | None = setting(
        None,
        "with --backend ray: the cluster to join (auto, or HOST:PORT); default: start a local Ray of --workers CPUs",
    )
    gpus_per_worker: float = setting(
        0.0,
        "with --backend ray: the GPUs each actor asks Ray for (a fraction shares one, e.g. 0.5: two actors a "
        "GPU); the actor trains on the GPU Ray gives it",
    )
    params: dict[str, Any] = field(default_factory=dict)
    """The method's own hyperparameters (`--param NAME=VALUE`)."""

    def train_config(self) -> TrainConfig:
        """The local-training settings: this config's values of `TrainConfig`'s fields, the device
        resolved (`resolve_device`)."""
        from edgefd.training import TrainConfig, resolve_device

        return TrainConfig(**{**self._values_of(TrainConfig), "device": resolve_device(self.device)})

    def loop_config(self) -> LoopConfig:
        """The round loop's settings: this config's values of `LoopConfig`'s fields."""
        from edgefd.runtime.loop import LoopConfig

        return LoopConfig(**self._values_of(LoopConfig))

    def _values_of(self, owner: type) -> dict[str, Any]:
        """This config's values of the fields of ``owner`` that are settings here (its other fields
        keep their own defaults)."""
        names = {f.name for f in fields(self)}
        return {f.name: getattr(self, f.name) for f in fields(owner) if f.name in names}

    def out_dir(self) -> Path:
        from edgefd.data import dataset_label

        return Path(self.out) if self.out else Path("runs") / f"{self.algo}-{dataset_label(self.dataset)}-s{self.seed}"

    def validate(self) -> None:
        from edgefd.training import check_choice

        if self.clients < 1:
            raise ValueError(f"clients: must be >= 1, got {self.clients}")
        if self.precision not in ("fp32", "fp16", "int8"):
            raise ValueError(f"precision: expected fp32, fp16 or int8, got {self.precision!r}")
        if self.threads < 1:
            raise ValueError(f"threads: must be >= 1, got {self.threads}")
        self.train_config()  # checks the device, the local epochs and the training choices
        self.loop_config()  # checks the rounds, the participation, the straggler rate and eval_every
        check_choice("backend", self.backend, BACKENDS)
        if self.workers < 1:
            raise ValueError(f"workers: must be >= 1, got {self.workers}")
        if not (math.isfinite(self.gpus_per_worker) and self.gpus_per_worker >= 0):
            raise ValueError(f"gpus_per_worker: must be >= 0, got {self.gpus_per_worker}")
        if self.gpus_per_worker > 1 and not float(self.gpus_per_worker).is_integer():  # Ray's rule for GPUs
            raise ValueError(
                f"gpus_per_worker: a fraction of one GPU or a whole number of GPUs, got {self.gpus_per_worker}"
            )
        if self.gpus_per_worker > 0 and self.device == "cpu":
            raise ValueError("gpus_per_worker: the actors would hold GPUs and train on the CPU (--device cpu)")
        if self.attack != "none" and not 0 < self.attackers <= self.clients:
            raise ValueError(f"attackers: must be in [1, {self.clients}] (--clients), got {self.attackers}")
        from edgefd.runtime.limits import check_cap

        check_cap(self.max_message_bytes)

    def check_in_process(self, command: str) -> None:
        """A ValueError if this config asks for Ray: ``command`` runs its clients otherwise (a
        deployment's are its devices), and must not ignore the flag."""
        if self.backend != "inprocess" or self.ray_address is not None or self.gpus_per_worker:
            raise ValueError(
                f"--backend ray, --ray-address and --gpus-per-worker are for `edgefd simulate`, not `{command}`"
            )

    def poisoning(self, client_id: str, client_ids: list[str], weights: Iterable[str]) -> Poisoning | None:
        """What ``client_id`` does to its training messages under --attack (None: it is honest);
        ``weights``: the names of its model's state entries."""
        if client_id not in attackers(client_ids, self.attack, self.attackers):
            return None
        return Poisoning(self.attack, frozenset(weights))


def config_to_toml(config: SimulationConfig) -> str:
    """The config as `simulate --config` reads it. A None setting is left out (every one defaults to
    None); a None param is written as "none" (a method's param may default to a value, and TOML has
    no null: leaving it out would read back as that default)."""

    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        return json.dumps(str(v))

    values = asdict(config)
    params = values.pop("params")
    defaults = {f.name: f.default for f in fields(SimulationConfig)}
    for key in EXECUTION_SETTINGS:
        if values[key] == defaults[key]:
            del values[key]
    lines = [f"{k} = {value(v)}" for k, v in values.items() if v is not None]
    lines += ["", "[params]"] + [f"{k} = {value('none' if v is None else v)}" for k, v in params.items()]
    return "\n".join(lines) + "\n"
