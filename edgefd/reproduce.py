"""`edgefd reproduce NAME`: a paper's small-scale recipe, several seeds, one results table.

A recipe is a shared simulation setting plus the methods it compares (each with its own
hyperparameters). Every (method, seed) run is an ordinary `edgefd simulate` run written under
OUT/NAME/METHOD-sSEED, and the table (mean ± std over seeds of the best and final accuracy, the
bytes, and the bytes each method needed to reach a common target accuracy) is printed and
written to OUT/NAME/results.md, ready to paste into docs/RESULTS.md. With ``--backend ray`` the
runs are Ray tasks (`edgefd.reproduce_ray`); the table is the same.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, cast

from edgefd import results_page
from edgefd.claims import METRIC_NAMES, METRICS, Claim, Direction, judge
from edgefd.metrics.results import SUMMARY_FILE
from edgefd.reproduce_ray import Cluster, NoRay, run_on_ray
from edgefd.runtime.config import BACKENDS, SimulationConfig, config_to_toml
from edgefd.runtime.process import edgefd_command


@dataclass
class Arm:
    """One compared method: a label, an algorithm and its params."""

    label: str
    algo: str
    params: dict[str, Any] = field(default_factory=dict)
    folder: str | None = None
    """Run-folder prefix (default: the algo); set it when two arms share an algo (ablations)."""
    config: dict[str, Any] = field(default_factory=dict)
    """Settings this arm runs with instead of the recipe's (a sweep's point: `partition`,
    `samples_per_client`, `participation`); the table lists them as differences between arms, and a
    claim compares two arms at the same point."""


NOT_SHARED = (
    "algo",
    "params",
    "seed",
    "out",
    "data_root",
    "threads",
    "kernels",
    "device",
    "backend",
    "workers",
    "ray_address",
    "gpus_per_worker",
)
"""Config fields that are not part of a comparison's setting: the method itself, and where it runs."""

_SWEEPABLE = {f.name for f in fields(SimulationConfig)} - {"params", "rounds", *NOT_SHARED}
"""What an arm may set for itself: anything of the setting but its method, seed, folder, threads and
length (a table's rounds and threads are one for all arms)."""


@dataclass
class Recipe:
    name: str
    source: str
    """Where the recipe comes from: the paper's setting and how it is scaled down (the method's page)."""
    base: SimulationConfig
    arms: list[Arm]
    target_from: list[str]
    """Labels whose lowest mean best-accuracy, minus one point, is the common target accuracy."""
    seeds: tuple[int, ...] = (0, 1, 2)
    isolated: bool = False
    """Run every (arm, seed) in a process of its own, so that its peak memory is its own (the table
    then has a peak-memory column), and print the mean accuracy of every round."""
    claims: list[Claim] = field(default_factory=list)
    """The papers' own comparisons between these arms; the table ends with each one's verdict."""

    def __post_init__(self) -> None:
        folders = [arm.folder or arm.algo for arm in self.arms]
        repeated = sorted({name for name in folders if folders.count(name) > 1})
        if repeated:
            raise ValueError(f"recipe {self.name}: arms share the run folder(s) {repeated}; give them Arm.folder")
        for arm in self.arms:
            unknown = sorted(set(arm.config) - _SWEEPABLE)
            if unknown:
                raise ValueError(
                    f"recipe {self.name}: arm {arm.label!r} sets {unknown}, which an arm cannot move "
                    f"(it may set {', '.join(sorted(_SWEEPABLE))})"
                )
        labels = {arm.label for arm in self.arms}
        for claim in self.claims:
            unknown = sorted({claim.method, claim.baseline} - labels)
            if unknown:
                raise ValueError(f"recipe {self.name}: claim {claim.text!r} names no arm {unknown}")


_FEDCACHE_ARMS = [
    Arm("Local", "local"),
    Arm("FedCache", "fedcache", {"knn": "exact"}),  # faithful: per-batch exchange, clients in sequence
    Arm("FedCache (round-batched)", "fedcache", {"knn": "exact", "exchange": "round"}, folder="fedcache-round"),
    # FD with FedCache's KD loss and the leave-one-out teacher: docs/methods/fd.md#distillation-weight-and-temperature
    Arm("FD", "fd", {"beta": 1.5, "temperature": 3.0, "exclude_self": True}),
    Arm("FedAvg", "fedavg"),
]

# Every arm trains as FedCache's code does (one local epoch a round, a new SGD optimiser every round,
# one fixed random batch order per client), so that the arms differ only in the method
# (docs/methods/fedcache.md#optimiser, docs/methods/fedcache.md#batch-order).
_FEDCACHE_TRAINING: dict[str, Any] = {"epochs": 1, "optimizer_lifecycle": "fresh", "batch_order": "fixed"}

RECIPES: dict[str, Recipe] = {
    "fedcache": Recipe(
        name="fedcache",
        source="docs/methods/fedcache.md#scaled-recipes (digits, K = 10, Dirichlet 1.0, ResNet-8, batch 8, 30 rounds)",
        base=SimulationConfig(
            dataset="digits",
            threads=1,
            clients=10,
            partition="dirichlet:1.0",
            models="resnet8",
            rounds=30,
            batch_size=8,
            lr=0.01,
            momentum=0.9,
            weight_decay=5e-4,
            **_FEDCACHE_TRAINING,
        ),
        arms=_FEDCACHE_ARMS,
        target_from=["FedCache", "FedAvg"],
    ),
}

# docs/methods/dfl.md#small-scale-reproduction: digits, 20 devices of 70 samples, half of them per round, MLP,
# plain SGD.
_DFL_BASE = SimulationConfig(
    dataset="digits",
    threads=1,
    clients=20,
    samples_per_client=70,
    participation=0.5,
    models="mlp",
    rounds=100,
    epochs=5,
    batch_size=10,
    lr=0.05,
    momentum=0.0,
    weight_decay=0.0,
    optimizer_lifecycle="fresh",  # DFL's and FedAvg's (docs/methods/dfl.md#optimiser), for every arm
    batch_order="reshuffle",
)
# R of Eq. 6 is each recipe's own length (Alg. 1: rho reaches 0.6 at round 40 of 100), not DFL's default
# 200-round horizon (docs/methods/dfl.md#horizon).
_DFL_RUN_LENGTH = {"horizon": None}
_DFL_ARMS = [
    Arm("FedAvg", "fedavg"),
    Arm("DFL", "dfl", {"threshold": 0.6, **_DFL_RUN_LENGTH}),
    Arm("DFL-DRw/T (threshold 0)", "dfl", {"threshold": 0.0, **_DFL_RUN_LENGTH}, folder="dfl-threshold0"),
    Arm("DFL-FR (fixed 0.6)", "dfl", {"threshold": 0.6, "schedule": "fixed"}, folder="dfl-fixed"),
    # the rest of Table V's threshold sweep (threshold 1 is FedAvg, bit for bit: docs/methods/dfl.md)
    *(
        Arm(
            f"DFL (threshold {threshold})",
            "dfl",
            {"threshold": threshold, **_DFL_RUN_LENGTH},
            folder=f"dfl-t{threshold}",
        )
        for threshold in (0.2, 0.4, 0.8)
    ),
]
for _name, _partition in (("dfl-iid", "iid"), ("dfl-noniid", "dominant:0.8")):
    RECIPES[_name] = Recipe(
        _name,
        f"docs/methods/dfl.md#small-scale-reproduction ({_partition}, 20 devices x 70 samples, frac 0.5, MLP, E 5, "
        "B 10, lr 0.05, 100 rounds)",
        replace(_DFL_BASE, partition=_partition),
        _DFL_ARMS,
        target_from=["FedAvg", "DFL"],
    )

# docs/methods/dfl.md#small-scale-reproduction on fmnist, scaled so that 3 seeds take a few CPU-minutes: the
# paper's 80/20 non-IID split, 20 devices of 100 samples (paper: 100 devices of 600), half of them per round
# (paper: 0.1 of 100 = 10, the same K), the MLP 784-64-10 (paper: a 66k-param CNN), plain SGD lr 0.05, E 5,
# B 10, 40 rounds.
RECIPES["dfl-fmnist"] = Recipe(
    "dfl-fmnist",
    "docs/methods/dfl.md#small-scale-reproduction moved to fmnist (80/20 non-IID, 20 devices x 100 samples, frac 0.5, "
    "MLP, E 5, B 10, SGD lr 0.05, 40 rounds; paper: MNIST 100 devices x 600, frac 0.1, CNN, lr 0.01, E 5)",
    SimulationConfig(
        dataset="fmnist",
        clients=20,
        samples_per_client=100,
        participation=0.5,
        models="mlp",
        partition="dominant:0.8",
        rounds=40,
        epochs=5,
        batch_size=10,
        lr=0.05,
        momentum=0.0,
        weight_decay=0.0,
        threads=1,
        optimizer_lifecycle="fresh",
        batch_order="reshuffle",
    ),
    [Arm("FedAvg", "fedavg"), Arm("DFL", "dfl", {"threshold": 0.6, **_DFL_RUN_LENGTH})],
    target_from=["FedAvg", "DFL"],
)

# docs/methods/fedd2s.md#small-scale-reproduction on fmnist, scaled to a few CPU-minutes per seed: 10 clients
# of 150 training samples, Dirichlet 0.1 (the paper's main skew, Z0 = 3), M1 (the paper's CIFAR-10 model, here
# on 1x28x28), half of the clients per round, 50 rounds (with Z0 = 3 a client reaches the floor at its 13th
# participation; at half participation the least-selected client of seeds 0-4 gets 17), E = 2 passes per phase
# (= the baselines' 2 local epochs), batch 32, Adam lr 0.01 re-created every round (FedD2S's per-phase Adam,
# docs/methods/fedd2s.md#optimiser) for every arm.
RECIPES["fedd2s"] = Recipe(
    "fedd2s",
    "docs/methods/fedd2s.md#small-scale-reproduction moved to fmnist (10 clients x 150 train samples, Dirichlet 0.1, "
    "M1, rho 0.5, 50 rounds, E 2, B 32, Adam lr 0.01, Z0 3, S = [C3, F1, F2, F3]; paper: CIFAR-10/CINIC-10/FEMNIST/"
    "CIFAR-100, 50 clients, rho 0.2, 100 rounds, E 4, B 128)",
    SimulationConfig(
        dataset="fmnist",
        clients=10,
        samples_per_client=150,
        partition="dirichlet:0.1",
        participation=0.5,
        models="fedd2s_m1",
        rounds=50,
        epochs=2,
        batch_size=32,
        optimizer="adam",
        lr=0.01,
        weight_decay=0.0,
        threads=1,
        optimizer_lifecycle="fresh",
        batch_order="reshuffle",
    ),
    [
        Arm("Local", "local"),
        Arm("FD", "fd"),
        Arm("FedAvg", "fedavg"),
        Arm("FedD2S", "fedd2s", {"z0": 3, "phase_epochs": None}),
        Arm(
            "FedD2S* (l = 2 from round 1)",
            "fedd2s",
            {"z0": 3, "phase_epochs": None, "schedule": "floor"},
            folder="fedd2s-floor",
        ),
    ],
    target_from=["Local", "FedD2S"],
)

# docs/methods/fedict.md#small-recipe: digits, 5 clients, weak clients (fedict_c1), scaled server, 30 rounds.
_FEDICT_BASE = SimulationConfig(
    dataset="digits",
    threads=1,
    clients=5,
    models="fedict_c1",
    rounds=30,
    epochs=1,  # FedICT's paper (Sec. 5.1.4), for every arm
    batch_size=32,
    lr=0.01,
    momentum=0.9,
    weight_decay=5e-4,
    optimizer_lifecycle="kept",  # FedICT's and FedGKT's code: one client optimiser for the run, for every arm
    batch_order="reshuffle",
)
_FEDICT_ARMS = [
    Arm("Local", "local"),
    Arm("FedGKT", "fedgkt"),
    Arm("FedICT (sim)", "fedict", {"lka": "sim"}, folder="fedict-sim"),
    Arm("FedICT (balanced)", "fedict", {"lka": "balanced"}, folder="fedict-balanced"),
    Arm("FD", "fd"),
    Arm("FedAvg", "fedavg"),
]
for _alpha in ("0.5", "3.0"):
    _name = f"fedict-a{_alpha}"
    RECIPES[_name] = Recipe(
        _name,
        f"docs/methods/fedict.md#small-recipe (digits, K = 5, Dirichlet {_alpha}, fedict_c1 clients, "
        "server auto (fedict_server_small), batch 32, 30 rounds)",
        replace(_FEDICT_BASE, partition=f"dirichlet:{_alpha}"),
        _FEDICT_ARMS,
        target_from=["FedGKT", "FedICT (sim)"],
        seeds=(0, 1, 2),
    )

# Why FedICT (sim) trails FedGKT at alpha 3.0 on digits: the `paper` weights against the authors'
# `reference` formulas, over four seeds.
RECIPES["fedict-profiles"] = Recipe(
    "fedict-profiles",
    "docs/methods/fedict.md#small-recipe at Dirichlet 3.0 (as fedict-a3.0), FedICT's two weight profiles "
    "(docs/methods/fedict.md#reference-profile)",
    replace(_FEDICT_BASE, partition="dirichlet:3.0"),
    [
        Arm("FedGKT", "fedgkt"),
        Arm("FedICT (sim, paper)", "fedict", {"lka": "sim"}, folder="fedict-sim-paper"),
        Arm("FedICT (sim, reference)", "fedict", {"lka": "sim", "profile": "reference"}, folder="fedict-sim-reference"),
        Arm(
            "FedICT (balanced, reference)",
            "fedict",
            {"lka": "balanced", "profile": "reference"},
            folder="fedict-balanced-reference",
        ),
    ],
    target_from=["FedGKT", "FedICT (sim, paper)"],
    seeds=(0, 1, 2, 3),
)

# Which of FedICT's two extra terms costs accuracy at alpha 3.0: FPKD on the client (lambda) or LKA on
# the server (mu), each alone, and both at a third of the paper's weight; FedGKT is lambda = mu = 0.
RECIPES["fedict-weights"] = Recipe(
    "fedict-weights",
    "docs/methods/fedict.md#small-recipe at Dirichlet 3.0 (as fedict-a3.0), FedICT (sim, paper) with lambda and mu "
    "switched on one at a time",
    replace(_FEDICT_BASE, partition="dirichlet:3.0"),
    [
        Arm("FedGKT (lambda = mu = 0)", "fedgkt"),
        Arm("FedICT (lambda = mu = 1.5)", "fedict", {"lka": "sim"}, folder="fedict-sim"),
        Arm("FedICT FPKD only (lambda 1.5, mu 0)", "fedict", {"lka": "sim", "mu": 0.0}, folder="fedict-fpkd-only"),
        Arm("FedICT LKA only (lambda 0, mu 1.5)", "fedict", {"lka": "sim", "lam": 0.0}, folder="fedict-lka-only"),
        Arm("FedICT (lambda = mu = 0.5)", "fedict", {"lka": "sim", "lam": 0.5, "mu": 0.5}, folder="fedict-sim-0.5"),
        Arm(
            "FedICT (server KL x cos_k, the code's reading)",
            "fedict",
            {"lka": "sim", "sim_weighting": "scaled"},
            folder="fedict-sim-scaled",
        ),
    ],
    target_from=["FedGKT (lambda = mu = 0)", "FedICT (lambda = mu = 1.5)"],
    seeds=(0, 1, 2, 3),
)

# The same comparisons on real images and real sensor data (issue 4), scaled to this 2-core machine.
RECIPES["fedcache-fmnist"] = Recipe(
    name="fedcache-fmnist",
    source="docs/methods/fedcache.md#scaled-recipes on Fashion-MNIST (the paper's FMNIST, K = 10, Dirichlet 1.0, "
    "ResNet-8), "
    "scaled: at most 200 training samples per client (local test splits of the same size), batch 8, "
    "10 rounds, hashes = a fixed random projection of the pixels to 64-d",
    base=SimulationConfig(
        dataset="fmnist",
        clients=10,
        partition="dirichlet:1.0",
        samples_per_client=200,
        test_fraction=1.0,
        models="resnet8",
        rounds=10,
        batch_size=8,
        lr=0.01,
        momentum=0.9,
        weight_decay=5e-4,
        threads=1,
        **_FEDCACHE_TRAINING,
    ),
    arms=[
        replace(arm, params={**arm.params, "encoder": "projection:64"}) if arm.algo == "fedcache" else arm
        for arm in _FEDCACHE_ARMS
    ],
    target_from=["FedCache", "FedAvg"],
    seeds=(0, 1, 2),
)
# Does FedCache's deficit on fmnist close with more rounds? The same recipe for 30 rounds, with
# the three arms the question needs (about 20 single-thread minutes).
RECIPES["fedcache-fmnist-30"] = replace(
    RECIPES["fedcache-fmnist"],
    name="fedcache-fmnist-30",
    source=RECIPES["fedcache-fmnist"].source.replace("10 rounds", "30 rounds") + "; Local, FedCache and FD only",
    base=replace(RECIPES["fedcache-fmnist"].base, rounds=30),
    arms=[arm for arm in RECIPES["fedcache-fmnist"].arms if arm.label in ("Local", "FedCache", "FD")],
    target_from=["FedCache", "FD"],
)
# The FedCache authors' own demo setting, at full scale: the whole of Fashion-MNIST over 20 clients,
# ResNet-8/16/20 by client index mod 3, batch 8, the paper's MobileNetV3-Small hash encoder (random weights:
# no ImageNet weights can be fetched here), 10 rounds. Each run in its own process (peak memory).
RECIPES["fedcache-demo"] = Recipe(
    name="fedcache-demo",
    source="the FedCache authors' demo: Fashion-MNIST 60,000 / 10,000, K = 20, Dirichlet 1.0 (local tests "
    "with each client's label mix), ResNet-8/16/20 by client index mod 3, batch 8, SGD lr 0.01 momentum 0.9 "
    "wd 5e-4, beta 1.5, T 3, R 16, hnswlib M 64 / ef 1000, MobileNetV3-Small hashes with random weights, "
    "10 rounds",
    base=SimulationConfig(
        dataset="fmnist",
        threads=1,
        clients=20,
        partition="dirichlet:1.0",
        models="resnet8,resnet16,resnet20",
        rounds=10,
        batch_size=8,
        lr=0.01,
        momentum=0.9,
        weight_decay=5e-4,
        **_FEDCACHE_TRAINING,
    ),
    arms=[
        Arm("Local", "local"),
        Arm("FD", "fd", {"beta": 1.5, "temperature": 3.0, "exclude_self": True}),
        Arm("FedCache", "fedcache", {"encoder": "mobilenet"}),
    ],
    target_from=["FedCache", "FD"],
    seeds=(0,),
    isolated=True,
)
RECIPES["fedict-fmnist"] = Recipe(
    "fedict-fmnist",
    "docs/methods/fedict.md#small-recipe settings on Fashion-MNIST (K = 5, Dirichlet 0.5, fedict_c1 clients), "
    "scaled: the small server fedict_server_small (the paper's A^S_1 costs ~90 s a round here), "
    "at most 200 training samples per client (local test splits of the same size), 12 rounds",
    replace(
        _FEDICT_BASE,
        dataset="fmnist",
        partition="dirichlet:0.5",
        samples_per_client=200,
        test_fraction=1.0,
        rounds=12,
        threads=1,
    ),
    [
        replace(arm, params={**arm.params, "server_model": "fedict_server_small"})
        if arm.algo in ("fedgkt", "fedict")
        else arm
        for arm in _FEDICT_ARMS
    ],
    target_from=["FedGKT", "FedICT (sim)"],
    seeds=(0, 1, 2),
)
RECIPES["fedict-watch"] = Recipe(
    "fedict-watch",
    "docs/methods/fedict.md#small-recipe settings on the smartwatch IMU data (stand-in for the paper's "
    "transport-mode data): 10 clients = 10 subjects (natural split), the weakest fully-connected "
    "client fedict_fc6 for all (FedAvg needs one architecture), server fedict_fc_server, batch 32, "
    "30 rounds",
    replace(_FEDICT_BASE, dataset="watch", clients=10, partition="natural", models="fedict_fc6", threads=1),
    _FEDICT_ARMS,
    target_from=["FedGKT", "FedICT (sim)"],
    seeds=(0, 1, 2),
)

# FedZKT's Sec. IV-A settings scaled to ~45 CPU-minutes in total (single thread;
# docs/methods/fedzkt.md#scaled-recipes): fmnist, 10 devices of 300 samples, edgefd's MNIST-family
# devices without S1 (round-robin S2, S3, S4, S5), global model S5,
# GeneratorA with ngf 16, n_D = 20 server iterations of 32 generated samples, 10 rounds of 2 epochs,
# batch 32, SGD lr 0.05 without momentum (the small CPU models' lrs); FedMD with public mnist5k and
# 1,000 alignment samples per round (paper: 5,000).
_ZKT_BASE = SimulationConfig(
    dataset="fmnist",
    clients=10,
    samples_per_client=300,
    rounds=10,
    epochs=2,
    models="zkt_s2_fc,zkt_s3_lenet5,zkt_s4_lenet3,zkt_s5_lenet_wide",
    batch_size=32,
    lr=0.05,
    momentum=0.0,
    weight_decay=0.0,
    threads=1,
    optimizer_lifecycle="fresh",  # FedZKT's devices (plain SGD: stateless either way), for every arm
    batch_order="reshuffle",
    score_full_test=True,  # the paper scores every device on the whole test set
)
_ZKT_SERVER = {
    "global_model": "zkt_s5_lenet_wide",
    "generator": "zkt_generator",
    "generator_ngf": 16,
    "iterations": 20,
    "server_batch_size": 32,
    "server_lr": 0.05,
}
_ZKT_SOURCE = (
    "docs/methods/fedzkt.md#scaled-recipes: fmnist, 10 devices x 300 samples, {partition}, devices S2-S5 "
    "round-robin (S1 left out for CPU time), global S5, GeneratorA ngf 16, n_D 20 x 32 generated "
    "samples, 10 rounds x 2 epochs, batch 32, SGD lr 0.05 no momentum, prox 1; FedMD public mnist5k, "
    "N_a 1000 (paper: 6,000 samples/device, 50 rounds x 5 epochs, n_D 200 x 256, ResNet-18 global, "
    "N_a 5000)"
)
_ZKT_ARMS = [
    Arm("Local", "local"),
    # no public-label pretraining (FedMD's transfer step) against FedZKT
    # (docs/methods/fedmd.md#public-label-pretraining); the digest at batch 256
    Arm("FedMD (public mnist5k)", "fedmd", {"public_dataset": "mnist5k", "alignment_size": 1000, "pretrain_epochs": 0}),
    Arm("FedZKT (SL)", "fedzkt", {**_ZKT_SERVER, "loss": "sl"}, folder="fedzkt-sl"),
]
_ZKT_ABLATION = [
    Arm("FedZKT (KL)", "fedzkt", {**_ZKT_SERVER, "loss": "kl"}, folder="fedzkt-kl"),
    Arm("FedZKT (l1)", "fedzkt", {**_ZKT_SERVER, "loss": "l1"}, folder="fedzkt-l1"),
]
RECIPES["fedzkt"] = Recipe(
    "fedzkt",
    _ZKT_SOURCE.format(partition="IID"),
    replace(_ZKT_BASE, partition="iid"),
    _ZKT_ARMS,
    target_from=["FedMD (public mnist5k)", "FedZKT (SL)"],
    seeds=(0, 1, 2),
)
RECIPES["fedzkt-dir0.5"] = Recipe(
    "fedzkt-dir0.5",
    _ZKT_SOURCE.format(partition="Dirichlet 0.5"),
    replace(_ZKT_BASE, partition="dirichlet:0.5"),
    _ZKT_ARMS + _ZKT_ABLATION,
    target_from=["FedMD (public mnist5k)", "FedZKT (SL)"],
    seeds=(0, 1, 2),
)
# A sweep of the proximal weight (lambda in {0, 0.01, 0.1, 1}, docs/methods/fedzkt.md#proximal-term-scale; Table IV's
# ablation is lambda = 0 under non-IID data).
RECIPES["fedzkt-prox"] = Recipe(
    "fedzkt-prox",
    _ZKT_SOURCE.format(partition="Dirichlet 0.5") + "; FedZKT (SL) at prox 0, 0.01, 0.1 and 1",
    replace(_ZKT_BASE, partition="dirichlet:0.5"),
    [
        Arm(
            f"FedZKT (SL, prox {prox})",
            "fedzkt",
            {**_ZKT_SERVER, "loss": "sl", "prox": prox},
            folder=f"fedzkt-prox{prox}",
        )
        for prox in (0.0, 0.01, 0.1, 1.0)
    ],
    target_from=["FedZKT (SL, prox 0.0)", "FedZKT (SL, prox 1.0)"],
    seeds=(0, 1, 2),
)


# The papers' sweeps that fit this machine, each point an arm pair (the method and the paper's
# baseline at the same setting). FedCache's ablation (Sec. 6, Tables VII-IX) on the fedcache-fmnist
# setting: FedCache against FD at Dirichlet 1, 3 and 10; at 0.33% and 1% of Fashion-MNIST per client
# (200 and 600 samples; 5% and 20%, 3,000 and 12,000 samples a client, are 15 and 60 times the CPU);
# and at R = 1, 4, 16 and 64 related samples (R = 256 exceeds the ~200 same-class samples of the other
# clients at 200 samples a client).
_FEDCACHE_FMNIST = RECIPES["fedcache-fmnist"]
_FEDCACHE_PAIR = [arm for arm in _FEDCACHE_FMNIST.arms if arm.label in ("FedCache", "FD")]


def _at(arms: list[Arm], suffix: str, folder: str, **config: Any) -> list[Arm]:
    """``arms`` at another point of a sweep: labelled "LABEL (suffix)", with their own folders."""
    return [
        replace(arm, label=f"{arm.label} ({suffix})", folder=f"{arm.folder or arm.algo}-{folder}", config=config)
        for arm in arms
    ]


RECIPES["fedcache-alpha"] = replace(
    _FEDCACHE_FMNIST,
    name="fedcache-alpha",
    source=_FEDCACHE_FMNIST.source + "; FedCache and FD at Dirichlet 1.0, 3.0 and 10.0 (FedCache, Table VII)",
    arms=[
        arm
        for alpha in ("1.0", "3.0", "10.0")
        for arm in _at(_FEDCACHE_PAIR, f"alpha {alpha}", f"a{alpha}", partition=f"dirichlet:{alpha}")
    ],
    target_from=["FedCache (alpha 1.0)", "FD (alpha 1.0)"],
)
RECIPES["fedcache-share"] = replace(
    _FEDCACHE_FMNIST,
    name="fedcache-share",
    source=_FEDCACHE_FMNIST.source + "; FedCache and FD at 200 and 600 samples a client, 0.33% and 1% of the "
    "training set (FedCache, Table VIII)",
    arms=[
        arm
        for share, samples in (("0.33%", 200), ("1%", 600))
        for arm in _at(_FEDCACHE_PAIR, share, f"n{samples}", samples_per_client=samples)
    ],
    target_from=["FedCache (0.33%)", "FD (0.33%)"],
)
RECIPES["fedcache-r"] = replace(
    _FEDCACHE_FMNIST,
    name="fedcache-r",
    source=_FEDCACHE_FMNIST.source + "; FedCache at R = 1, 4, 16 and 64 against FD (FedCache, Table IX)",
    arms=[
        *(
            Arm(f"FedCache (R {r})", "fedcache", {**_FEDCACHE_PAIR[0].params, "neighbours": r}, folder=f"fedcache-r{r}")
            for r in (1, 4, 16, 64)
        ),
        _FEDCACHE_PAIR[1],
    ],
    target_from=["FedCache (R 16)", "FD"],
)

# FedD2S's Table 2 at its other two skews (Z0 = 5 at alpha 0.5 and 7 at alpha 1, as the paper sets it),
# and Fig. 7's dropping-rate sweep at alpha 0.1 with no dropping (Z0 infinite) as its far end.
_FEDD2S = RECIPES["fedd2s"]
for _alpha, _z0 in (("0.5", 5), ("1.0", 7)):
    RECIPES[f"fedd2s-a{_alpha}"] = replace(
        _FEDD2S,
        name=f"fedd2s-a{_alpha}",
        source=_FEDD2S.source.replace("Dirichlet 0.1", f"Dirichlet {_alpha}").replace("Z0 3", f"Z0 {_z0}"),
        base=replace(_FEDD2S.base, partition=f"dirichlet:{_alpha}"),
        arms=[
            Arm("Local", "local"),
            Arm("FedAvg", "fedavg"),
            Arm("FedD2S", "fedd2s", {"z0": _z0, "phase_epochs": None}),
        ],
        target_from=["Local", "FedD2S"],
    )
RECIPES["fedd2s-z0"] = replace(
    _FEDD2S,
    name="fedd2s-z0",
    source=_FEDD2S.source + "; FedD2S at Z0 = 1, 3, 5 and 7 and without dropping (FedD2S, Fig. 7)",
    arms=[
        *(
            Arm(f"FedD2S (Z0 {z0})", "fedd2s", {"z0": z0, "phase_epochs": None}, folder=f"fedd2s-z{z0}")
            for z0 in (1, 3, 5, 7)
        ),
        Arm(
            "FedD2S (no dropping)", "fedd2s", {"z0": 3, "phase_epochs": None, "schedule": "none"}, folder="fedd2s-none"
        ),
    ],
    target_from=["FedD2S (Z0 3)", "FedD2S (Z0 1)"],
)

# FedICT's Table V: heterogeneous clients A^C_1..A^C_5, one each, against FedGKT (FedAvg needs one
# architecture), at the middle of its three skews.
RECIPES["fedict-hetero"] = Recipe(
    "fedict-hetero",
    "docs/methods/fedict.md#small-recipe with heterogeneous clients (digits, K = 5, Dirichlet 1.0, clients "
    "fedict_c1..fedict_c5 one each, server auto, batch 32, 30 rounds)",
    replace(_FEDICT_BASE, partition="dirichlet:1.0", models="fedict_c1,fedict_c2,fedict_c3,fedict_c4,fedict_c5"),
    [arm for arm in _FEDICT_ARMS if arm.label in ("Local", "FedGKT", "FedICT (sim)", "FedICT (balanced)")],
    target_from=["FedGKT", "FedICT (sim)"],
)

# FedZKT's quantity-based label skew at its harshest point (c = 2 classes a device, Fig. 4), and the
# stragglers of Fig. 6 (a portion p of the devices active each round).
RECIPES["fedzkt-c2"] = Recipe(
    "fedzkt-c2",
    _ZKT_SOURCE.format(partition="2 classes a device"),
    replace(_ZKT_BASE, partition="shards:2"),
    _ZKT_ARMS,
    target_from=["FedMD (public mnist5k)", "FedZKT (SL)"],
)
RECIPES["fedzkt-stragglers"] = Recipe(
    "fedzkt-stragglers",
    _ZKT_SOURCE.format(partition="IID") + "; FedZKT (SL) with 20%, 60% and 100% of the devices active each round",
    replace(_ZKT_BASE, partition="iid"),
    [
        Arm(
            f"FedZKT (SL, p {p})",
            "fedzkt",
            {**_ZKT_SERVER, "loss": "sl"},
            folder=f"fedzkt-p{p}",
            config={"participation": p},
        )
        for p in (0.2, 0.6, 1.0)
    ],
    target_from=["FedZKT (SL, p 1.0)", "FedZKT (SL, p 0.6)"],
)


def _claims(*claims: tuple[str, str, str, str, str]) -> list[Claim]:
    """Claims from (method, "above" | "below", baseline, metric, source); `Claim` checks each."""
    return [
        Claim(method, cast(Direction, way), baseline, metric, source)
        for method, way, baseline, metric, source in claims
    ]


# The papers' own comparisons between the arms of each recipe, with the paper's metric (or the
# closest one a run records); a recipe's table ends with each one's computed verdict. Comparisons
# the papers do not make (FedCache against Local, FedICT against FD) are not claims.
_FEDCACHE_CLAIM = ("FedCache", "above", "FD", "best", "FedCache, Table V and Fig. 6 (MAUA)")
_FEDICT_CLAIMS = _claims(
    ("FedICT (sim)", "above", "FedGKT", "best", "FedICT, Table IV (average UA)"),
    ("FedICT (sim)", "above", "FedAvg", "best", "FedICT, Table IV (average UA)"),
    ("FedICT (balanced)", "above", "FedGKT", "best", "FedICT, Table IV (average UA)"),
    ("FedICT (balanced)", "above", "FedAvg", "best", "FedICT, Table IV (average UA)"),
)
_DFL_CLAIMS = _claims(
    ("DFL", "above", "FedAvg", "last-5-rounds", "DFL, Table III (non-IID test accuracy)"),
    ("DFL-DRw/T (threshold 0)", "below", "DFL", "last-5-rounds", "DFL, Table V and Fig. 4"),
    *(
        ("DFL", "above", f"DFL (threshold {threshold})", "last-5-rounds", "DFL, Table V (threshold 0.6 best)")
        for threshold in (0.2, 0.4, 0.8)
    ),
)
_FEDCACHE_SWEEP_CLAIMS = {
    name: _claims(
        *(
            ("FedCache" + suffix, "above", "FD" + suffix, "best", f"FedCache, Table {table} (MAUA)")
            for suffix in suffixes
        )
    )
    for name, table, suffixes in (
        ("fedcache-alpha", "VII", (" (alpha 1.0)", " (alpha 3.0)", " (alpha 10.0)")),
        ("fedcache-share", "VIII", (" (0.33%)", " (1%)")),
    )
}
PAPER_CLAIMS: dict[str, list[Claim]] = {
    "fedcache": _claims(_FEDCACHE_CLAIM),
    "fedcache-fmnist": _claims(_FEDCACHE_CLAIM),
    "fedcache-fmnist-30": _claims(_FEDCACHE_CLAIM),
    "fedcache-demo": _claims(("FedCache", "above", "FD", "best", "FedCache, Table VI and Fig. 6 (MAUA)")),
    "fedict-a0.5": _FEDICT_CLAIMS,
    "fedict-a3.0": _FEDICT_CLAIMS,
    "fedict-fmnist": _FEDICT_CLAIMS,
    "fedict-watch": [
        replace(claim, source="FedICT, Table VII (average UA on the sensor data, TMD)") for claim in _FEDICT_CLAIMS
    ],
    "dfl-noniid": _DFL_CLAIMS,
    "dfl-fmnist": _DFL_CLAIMS[:1],
    **_FEDCACHE_SWEEP_CLAIMS,
    "fedcache-r": _claims(
        *((f"FedCache (R {r})", "above", "FD", "best", "FedCache, Table IX (MAUA)") for r in (1, 4, 16, 64))
    ),
    "dfl-iid": _DFL_CLAIMS[1:],
    "fedd2s": _claims(
        ("FedD2S", "above", "FedAvg", "last-10-rounds", "FedD2S, Table 2 (average UA over the last 10 rounds)")
    ),
    "fedd2s-a0.5": _claims(
        ("FedD2S", "above", "FedAvg", "last-10-rounds", "FedD2S, Table 2 (average UA over the last 10 rounds)")
    ),
    "fedd2s-a1.0": _claims(
        ("FedD2S", "above", "FedAvg", "last-10-rounds", "FedD2S, Table 2 (average UA over the last 10 rounds)")
    ),
    "fedd2s-z0": _claims(
        ("FedD2S (Z0 3)", "above", "FedD2S (Z0 1)", "last-10-rounds", "FedD2S, Fig. 7 (UA rises with Z0 first)"),
        (
            "FedD2S (Z0 3)",
            "above",
            "FedD2S (no dropping)",
            "last-10-rounds",
            "FedD2S, Fig. 7 and Sec. I (layer dropping helps)",
        ),
    ),
    "fedict-hetero": _claims(
        ("FedICT (sim)", "above", "FedGKT", "best", "FedICT, Table V (clients' average UA)"),
        ("FedICT (balanced)", "above", "FedGKT", "best", "FedICT, Table V (clients' average UA)"),
    ),
    "fedzkt-c2": _claims(
        ("FedZKT (SL)", "above", "FedMD (public mnist5k)", "final-whole-test-set", "FedZKT, Fig. 4 (c = 2)")
    ),
    "fedzkt-stragglers": _claims(
        (
            "FedZKT (SL, p 0.2)",
            "below",
            "FedZKT (SL, p 1.0)",
            "final-whole-test-set",
            "FedZKT, Fig. 6 (p = 0.2 slows training)",
        )
    ),
    "fedzkt": _claims(
        ("FedMD (public mnist5k)", "above", "FedZKT (SL)", "final-whole-test-set", "FedZKT, Table I (IID)")
    ),
    "fedzkt-dir0.5": _claims(
        ("FedZKT (SL)", "above", "FedMD (public mnist5k)", "final-whole-test-set", "FedZKT, Fig. 4 (non-IID)"),
        ("FedZKT (SL)", "above", "FedZKT (KL)", "final-whole-test-set", "FedZKT, Table II"),
        ("FedZKT (SL)", "above", "FedZKT (l1)", "final-whole-test-set", "FedZKT, Table II"),
    ),
    "fedzkt-prox": _claims(
        ("FedZKT (SL, prox 1.0)", "above", "FedZKT (SL, prox 0.0)", "final-whole-test-set", "FedZKT, Table IV")
    ),
}
for _name, _paper_claims in PAPER_CLAIMS.items():
    RECIPES[_name] = replace(RECIPES[_name], claims=_paper_claims)


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def bytes_to_reach(lines: list[dict[str, Any]], target: float) -> int | None:
    """Cumulative bytes (up + down, one-time uploads included) at the first round >= target."""
    for line in lines:
        if line.get("accuracy") is not None and line["accuracy"] >= target:
            return line["bytes_up_cumulative"] + line["bytes_down_cumulative"]
    return None


def rounds_to_reach(lines: list[dict[str, Any]], target: float) -> int | None:
    """The first round whose mean client accuracy is >= target (the papers' rounds-to-target)."""
    for line in lines:
        if line["round"] >= 1 and line.get("accuracy") is not None and line["accuracy"] >= target:
            return int(line["round"])
    return None


def _reached_text(values: list[int | None], scale: float, digits: int) -> str:
    """The mean over the seeds that reached the target, and how many did when not all."""
    reached = [value / scale for value in values if value is not None]
    text = f"{statistics.mean(reached):.{digits}f}" if reached else "not reached"
    return text + (f" ({len(reached)}/{len(values)} seeds)" if len(reached) != len(values) else "")


PER_SEED_TITLE = "Per seed ({seeds}), accuracy %:"
"""The line above a table's per-seed values; `verify` finds a seed's column by it."""


def per_seed_metrics(recipe: Recipe) -> list[str]:
    """The metrics a table gives per seed: best and final accuracy, and every metric a claim names."""
    return list(dict.fromkeys(["best", "final", *(claim.metric for claim in recipe.claims)]))


def per_seed_table(
    recipe: Recipe, by_seed: dict[str, dict[int, tuple[dict, list[dict]]]], seeds: tuple[int, ...]
) -> list[str]:
    """Every arm's metrics seed by seed ("a / b / c" in the order of ``seeds``): the paired values a
    claim's verdict is computed from, and what `edgefd reproduce --verify` compares."""
    metrics = per_seed_metrics(recipe)
    rows = [
        PER_SEED_TITLE.format(seeds=" / ".join(map(str, seeds))),
        "",
        "| method | " + " | ".join(METRIC_NAMES[name] for name in metrics) + " |",
        "|---|" + "---:|" * len(metrics),
    ]
    for label, runs in by_seed.items():
        cells = [" / ".join(_metric_text(name, runs[seed]) for seed in seeds) for name in metrics]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return rows


def _metric_text(name: str, run: tuple[dict, list[dict]]) -> str:
    try:
        return f"{100 * METRICS[name](*run):.2f}"
    except ValueError:  # a run shorter than the metric's window (--rounds for a quick look)
        return "-"


def read_per_seed(text: str) -> dict[tuple[str, str, int], str]:
    """(arm label, metric header, seed) -> the value as printed, from a table's per-seed part."""
    lines = text.splitlines()
    prefix, suffix = PER_SEED_TITLE.split("{seeds}")
    starts = [i for i, line in enumerate(lines) if line.startswith(prefix) and line.endswith(suffix)]
    if not starts:
        raise ValueError("the table has no per-seed values (a table made before they were printed)")
    start = starts[0]
    seeds = [int(seed) for seed in lines[start][len(prefix) : -len(suffix)].split(" / ")]
    header = [cell.strip() for cell in lines[start + 2].strip("|").split("|")]
    values = {}
    for line in lines[start + 4 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        for name, cell in zip(header[1:], cells[1:]):
            for seed, value in zip(seeds, cell.split(" / ")):
                values[(cells[0], name, seed)] = value
    return values


def arm_settings(summary: dict[str, Any]) -> dict[str, str]:
    """What a run trained with, besides its method: every config field that shapes the result, the
    models it got and its local epochs, optimiser lifecycle and batch order as resolved (never "method")."""
    config = summary["config"]
    in_field_order = [
        f.name for f in fields(SimulationConfig) if f.name in config
    ]  # a summary.json read back is sorted
    settings = {name: str(config[name]) for name in in_field_order if name not in NOT_SHARED}
    if config.get("attack", "none") == "none":
        settings.pop("attackers", None)  # how many attack, in a run where none does
    if config.get("max_message_bytes") is None:
        settings.pop("max_message_bytes", None)  # no cap: each message's own bound, which refuses nothing
    if config.get("optimizer") != "sgd":
        settings.pop("momentum", None)  # SGD's alone: Adam never reads it
    settings["models"] = ", ".join(dict.fromkeys(summary["models"].values()))
    settings.update({name: str(value) for name, value in summary["local_training"].items()})
    return settings


def settings_text(per_arm: dict[str, dict[str, str]]) -> list[str]:
    """The settings every arm shares, then each arm's differences (beyond its method and params):
    a comparison is fair when the second list is empty."""
    arms = list(per_arm.values())
    names = list(dict.fromkeys(name for settings in arms for name in settings))
    common = [name for name in names if all(settings.get(name) == arms[0].get(name) for settings in arms)]
    lines = ["Common to all arms: " + ", ".join(f"{name} {arms[0][name]}" for name in common) + "."]
    differing = [name for name in names if name not in common]
    if differing:
        lines.append(
            "Differences between arms: "
            + "; ".join(
                f"{label}: " + ", ".join(f"{name} {settings.get(name, '-')}" for name in differing)
                for label, settings in per_arm.items()
            )
            + "."
        )
    else:
        lines.append("The arms differ only in the method and its params.")
    return lines


def run_isolated(config: SimulationConfig) -> dict[str, Any]:
    """``edgefd simulate`` on ``config`` in a new process; its summary."""
    folder = config.out_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.toml").write_text(config_to_toml(config))
    command = edgefd_command("simulate", "--config", str(folder / "run.toml"))
    subprocess.run(command, check=True)
    return json.loads((folder / "summary.json").read_text())


def timing_columns(runs: list[tuple[dict, list[dict]]]) -> tuple[float, float]:
    """Mean start-up seconds (the one-time uploads and the server's start) and median seconds a round."""
    startup = statistics.mean(s.get("startup_seconds", 0.0) for s, _ in runs)
    per_round = statistics.median(line["seconds"] for _, lines in runs for line in lines if line["round"] > 0)
    return startup, per_round


def per_round_table(results: dict[str, list[tuple[dict, list[dict]]]]) -> list[str]:
    """Mean client accuracy (%) of every evaluated round, arms side by side, mean over seeds."""
    labels = list(results)
    rounds = sorted({line["round"] for runs in results.values() for _, lines in runs for line in lines})
    rows = ["| round | " + " | ".join(labels) + " |", "|---:|" + "---:|" * len(labels)]
    for number in rounds:
        cells = []
        for label in labels:
            values = [
                line["accuracy"]
                for _, lines in results[label]
                for line in lines
                if line["round"] == number and line.get("accuracy") is not None
            ]
            cells.append(f"{100 * statistics.mean(values):.2f}" if values else "")
        rows.append(f"| {number} | " + " | ".join(cells) + " |")
    return rows


def changed_params(summary: dict[str, Any], config: SimulationConfig) -> list[str]:
    """The method params that this code would set differently from the finished run's ``summary``:
    a default that changed since the run (the run.toml names only the params a recipe pins). A
    param the code leaves None is resolved when the run starts (from a preset, the run's length),
    so it is not compared."""
    from edgefd.algorithms.base import get_method, make_params  # torch: not for --help

    current = asdict(make_params(get_method(config.algo).params, config.params))
    recorded = summary.get("params", {})
    return [
        name
        for name, value in current.items()
        if value is not None and json.loads(json.dumps(value)) != recorded.get(name)
    ]


def finished_run(folder: Path, config: SimulationConfig) -> dict[str, Any] | None:
    """The summary of a finished run in ``folder`` made from exactly ``config`` (its run.toml) and
    the method params and local training (epochs, optimiser lifecycle, batch order) this code would
    use, else None."""
    toml, summary_file = folder / "run.toml", folder / SUMMARY_FILE
    if not (toml.is_file() and summary_file.is_file() and toml.read_text() == config_to_toml(config)):
        return None
    summary = json.loads(summary_file.read_text())
    changed = changed_params(summary, config)
    if changed:
        print(f"{folder}: params changed since this run ({', '.join(changed)}): running it again", flush=True)
        return None
    from edgefd.runtime.build import local_training_of  # torch: not for --help

    # a summary written before epochs were recorded has none: its run.toml, which then always named
    # them, already matched
    recorded = summary.get("local_training", {})
    moved = [name for name, value in local_training_of(config).items() if recorded.get(name, value) != value]
    if moved:
        print(f"{folder}: local training changed since this run ({', '.join(moved)}): running it again", flush=True)
        return None
    return summary


def command_text(recipe: Recipe, seeds: tuple[int, ...], rounds: int | None, threads: int | None) -> str:
    """The `edgefd reproduce` command that makes this table: the recipe's name and every option that
    moved it off the recipe's own seeds, rounds or threads."""
    options = []
    if seeds != recipe.seeds:
        options.append("--seeds " + " ".join(map(str, seeds)))
    if rounds is not None and rounds != recipe.base.rounds:
        options.append(f"--rounds {rounds}")
    if threads is not None and threads != recipe.base.threads:
        options.append(f"--threads {threads}")
    return " ".join(["edgefd reproduce", recipe.name, *options])


def recipe_runs(
    recipe: Recipe, out: Path, seeds: tuple[int, ...], rounds: int | None, threads: int | None
) -> list[tuple[str, int, SimulationConfig]]:
    """Every run of a table, as (arm label, seed, config), in the table's order: arm by arm, seed by seed."""
    return [
        (
            arm.label,
            seed,
            replace(
                recipe.base,
                **arm.config,
                algo=arm.algo,
                params=dict(arm.params),
                seed=seed,
                out=str(out / recipe.name / f"{arm.folder or arm.algo}-s{seed}"),
                rounds=rounds or recipe.base.rounds,
                threads=threads or recipe.base.threads,
            ),
        )
        for arm in recipe.arms
        for seed in seeds
    ]


def _print_best(label: str, seed: int, summary: dict[str, Any]) -> None:
    print(f"{label} seed {seed}: best {100 * summary['best_accuracy']:.2f}%", flush=True)


def _print_ray_run(label: str, seed: int, summary: dict[str, Any], where: str) -> None:
    _print_best(label, seed, summary)
    print(f"{label} seed {seed}: ran on {where}", flush=True)


def run_recipe(
    recipe: Recipe,
    out: Path,
    seeds: tuple[int, ...],
    rounds: int | None = None,
    rerun: bool = False,
    threads: int | None = None,
    cluster: Cluster | None = None,
) -> str:
    """Runs every arm and seed (keeping a finished run of the same config unless ``rerun``), then
    writes and returns the table. ``threads`` overrides the recipe's CPU threads (not part of the
    setting: 1 lets two recipes share two cores). With ``cluster`` the runs left to do are Ray tasks
    (`edgefd.reproduce_ray`), and the table is the one they would give one after another."""
    from edgefd.simulate import run as run_simulation  # torch: not for --help

    planned = recipe_runs(recipe, out, seeds, rounds, threads)
    summaries: dict[Path, dict[str, Any]] = {}
    left: list[SimulationConfig] = []
    for label, seed, config in planned:
        folder = config.out_dir()
        summary = None if rerun else finished_run(folder, config)
        if summary is not None:
            print(f"{label} seed {seed}: kept the finished run in {folder} (same config)", flush=True)
        elif cluster is not None:
            left.append(config)
            continue
        elif recipe.isolated:
            summary = run_isolated(config)
        else:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "run.toml").write_text(config_to_toml(config))
            summary = run_simulation(config, progress=True)
        summaries[folder] = summary
        _print_best(label, seed, summary)
    if cluster is not None and left:
        names = {config.out_dir(): (label, seed) for label, seed, config in planned}
        summaries |= run_on_ray(
            left, cluster, lambda done, summary, where: _print_ray_run(*names[done.out_dir()], summary, where)
        )
    results: dict[str, list[tuple[dict, list[dict]]]] = {}
    by_seed: dict[str, dict[int, tuple[dict, list[dict]]]] = {}
    for label, seed, config in planned:
        summary = summaries[config.out_dir()]
        lines = [json.loads(text) for text in (config.out_dir() / "metrics.jsonl").read_text().splitlines()]
        results.setdefault(label, []).append((summary, lines))
        by_seed.setdefault(label, {})[seed] = (summary, lines)
    best = {label: _mean_std([s["best_accuracy"] for s, _ in runs]) for label, runs in results.items()}
    target = min(best[label][0] for label in recipe.target_from) - 0.01
    rounds_run = rounds or recipe.base.rounds
    full = all("best_accuracy_full" in s for runs in results.values() for s, _ in runs)
    rows = [
        f"Recipe `{recipe.name}`: {recipe.source}; ran {rounds_run} rounds, seeds {', '.join(map(str, seeds))}.",
        f'Command: `{command_text(recipe, seeds, rounds, threads)}`. Target accuracy for "bytes to target": '
        f"{100 * target:.2f}% (lowest mean best accuracy of {', '.join(recipe.target_from)}, minus 1 point).",
        *settings_text({label: arm_settings(runs[0][0]) for label, runs in results.items()}),
        "",
        "| method | best acc. % (MAUA) | final acc. % |"
        + (" best % whole test set | final % whole test set |" if full else "")
        + " MB up + down per run | one-time upload MB | MB to target | rounds to target | start-up s | s / round |"
        + (" peak memory MiB |" if recipe.isolated else ""),
        "|---|---:|---:|"
        + ("---:|---:|" if full else "")
        + "---:|---:|---:|---:|---:|---:|"
        + ("---:|" if recipe.isolated else ""),
    ]
    for label, runs in results.items():
        final = _mean_std([s["final_accuracy"] for s, _ in runs])
        total = statistics.mean((s["bytes_up_total"] + s["bytes_down_total"]) / 1e6 for s, _ in runs)
        hello = statistics.mean(s["bytes_hello"] / 1e6 for s, _ in runs)
        reach_text = _reached_text([bytes_to_reach(lines, target) for _, lines in runs], 1e6, 3)
        rounds_text = _reached_text([rounds_to_reach(lines, target) for _, lines in runs], 1, 1)
        whole = ""
        if full:
            best_full = _mean_std([s["best_accuracy_full"] for s, _ in runs])
            final_full = _mean_std([s["final_accuracy_full"] for s, _ in runs])
            whole = (
                f" {100 * best_full[0]:.2f} ± {100 * best_full[1]:.2f} |"
                f" {100 * final_full[0]:.2f} ± {100 * final_full[1]:.2f} |"
            )
        startup, per_round = timing_columns(runs)
        memory = f" {max(s['peak_rss_mb'] for s, _ in runs):.0f} |" if recipe.isolated else ""
        rows.append(
            f"| {label} | {100 * best[label][0]:.2f} ± {100 * best[label][1]:.2f} | "
            f"{100 * final[0]:.2f} ± {100 * final[1]:.2f} |{whole} {total:.3f} | {hello:.3f} | {reach_text} | "
            f"{rounds_text} | "
            f"{startup:.1f} | {per_round:.1f} |{memory}"
        )
    rows += ["", *per_seed_table(recipe, by_seed, seeds)]
    if recipe.isolated:
        rows += ["", "Mean client accuracy (%) after every round, mean over seeds:", "", *per_round_table(results)]
    if recipe.claims:
        rows += ["", "The papers' claims, judged on paired seeds (reproduced: the paper's direction on every seed):"]
        rows += [""] + [f"- {_verdict_line(claim, by_seed)}" for claim in recipe.claims]
    table = "\n".join(rows) + "\n"
    (out / recipe.name).mkdir(parents=True, exist_ok=True)
    (out / recipe.name / "results.md").write_text(table)
    return table


def _verdict_line(claim: Claim, by_seed: dict[str, dict[int, tuple[dict, list[dict]]]]) -> str:
    try:
        return judge(claim, by_seed).line()
    except ValueError as error:  # a run too short for the claim's metric (--rounds for a quick look)
        return f"**{claim.text}** ({claim.source}): not judged: {error}"


RESULTS_PAGE = "docs/RESULTS.md"


CROSS_PLATFORM_POINTS = 2.0
"""On a machine of another numeric platform (`results_page.numeric_platform`) than the page's, a value
counts as the page's when it is within this many points of it, or within twice the spread (standard
deviation) of the page's seeds for that arm and metric where that is wider: rounding differences grow
over a run's rounds into differences of the size of a change of seed, never into a new result."""


def verify(recipe: Recipe, page: Path, seeds: tuple[int, ...], out: Path, cluster: Cluster | None = None) -> list[str]:
    """Runs ``recipe`` again at ``seeds`` (afresh, with the thread count its table in ``page`` names,
    as Ray tasks with ``cluster``) and returns every per-seed value that differs from the page's, as
    lines; none: the page holds what this code produces. On the page's numeric platform every value
    must be the page's exactly; on another, within `cross_platform_tolerance` (`verify_rule` says which)."""
    block = results_page.read_blocks(page).get(recipe.name)
    if block is None or block.revision == "none":
        return [f"{page} has no generated table for {recipe.name}"]
    expected = read_per_seed(block.text)
    missing = [seed for seed in seeds if not any(key[2] == seed for key in expected)]
    if missing:
        return [f"{page}'s table for {recipe.name} has no seed {', '.join(map(str, missing))}"]
    actual = read_per_seed(run_recipe(recipe, out, seeds, rerun=True, threads=block.threads, cluster=cluster))
    exact = block.platform == results_page.numeric_platform()
    differences = []
    for (label, metric, seed), value in actual.items():
        wanted = expected.get((label, metric, seed))
        if wanted == value:
            continue
        if not exact and wanted is not None:
            allowed = cross_platform_tolerance(expected, label, metric)
            try:
                if abs(float(value) - float(wanted)) <= allowed:
                    continue
            except ValueError:  # not a number ("not reached"): only the same text is the same
                pass
            differences.append(
                f"{label}, {metric}, seed {seed}: the page says {wanted}, this code gives {value} "
                f"(more than {allowed:.2f} points apart)"
            )
            continue
        differences.append(
            f"{label}, {metric}, seed {seed}: the page says {wanted or 'nothing'}, this code gives {value}"
        )
    return differences


def cross_platform_tolerance(expected: dict[tuple[str, str, int], str], label: str, metric: str) -> float:
    """How far a value of ``label``'s ``metric`` may be from the page's on another numeric platform:
    `CROSS_PLATFORM_POINTS`, or twice the standard deviation of the page's seeds where wider."""
    values = []
    for (arm, name, _), value in expected.items():
        if (arm, name) == (label, metric):
            try:
                values.append(float(value))
            except ValueError:
                pass
    spread = 2 * statistics.stdev(values) if len(values) > 1 else 0.0
    return max(CROSS_PLATFORM_POINTS, spread)


def verify_rule(recipe: Recipe, page: Path) -> str:
    """How `verify` compares ``recipe``'s values with ``page``'s on this machine, in words."""
    block = results_page.read_blocks(page).get(recipe.name)
    here = results_page.numeric_platform()
    if block is None or block.platform == here:
        return f"this machine ({here}) is the page's numeric platform: every value must be the page's exactly"
    made_on = f"on {block.platform}" if block.platform else "on a platform it does not record"
    return (
        f"the page's table was made {made_on}, this machine is {here}: values are compared within "
        f"{CROSS_PLATFORM_POINTS:g} points or twice the page's seed spread (docs/REPRODUCIBILITY.md)"
    )


class _RenamedFlag(argparse.Action):
    """A flag's old spelling: an error that names the new one (never taken silently)."""

    def __init__(self, option_strings: list[str], dest: str, new: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: str | None = None) -> None:
        parser.error(
            f"{option} is now {self.new} N: the runs at a time on a local Ray (simulate's --workers, Ray actors "
            "that host clients, is another thing)"
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "recipe",
        nargs="?",
        choices=sorted(RECIPES),
        metavar="RECIPE",
        help="the recipe to run, one of: %(choices)s (docs/RESULTS.md has each one's setting and results)",
    )
    parser.add_argument(
        "--write-docs",
        nargs="?",
        const=RESULTS_PAGE,
        metavar="PAGE",
        help="also write the table, stamped with this code's revision and the thread count, between the "
        f"recipe's markers in PAGE (default: {RESULTS_PAGE})",
    )
    parser.add_argument(
        "--check-docs",
        nargs="?",
        const=RESULTS_PAGE,
        metavar="PAGE",
        help="run nothing: say which recipes' tables in PAGE are stale (the code changed since the revision "
        f"that made them, or no generated table); exit status 1 if any is (default: {RESULTS_PAGE})",
    )
    parser.add_argument(
        "--verify",
        nargs="?",
        const=RESULTS_PAGE,
        metavar="PAGE",
        help="run RECIPE again, afresh, at --seeds (default: its first seed) with the thread count of its "
        "table in PAGE, and compare every arm's per-seed accuracies with the table; exit status 1 if any "
        f"differs (default: {RESULTS_PAGE})",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        default="runs/reproduce",
        help="folder for the runs (DIR/RECIPE/METHOD-sSEED) and the table (DIR/RECIPE/results.md) "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        metavar="SEED",
        help="seeds to run every method with, e.g. --seeds 0 1 (default: the recipe's own, 2 to 4 seeds)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        metavar="N",
        help="run N rounds instead of the recipe's, for a quick look (the table is then not the recipe's) "
        "(default: the recipe's)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="CPU threads for every run instead of the recipe's (1 lets two recipes share two cores; "
        "not part of the compared setting) (default: the recipe's)",
    )
    parser.add_argument(
        "--rerun",
        action="store_true",
        help="run every arm again; by default a run whose folder holds a finished run of the same config "
        "(its run.toml and summary.json) made with the method params this code would use is kept, so an "
        "interrupted recipe goes on where it stopped",
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="inprocess",
        help="where the runs go: inprocess (one after another) or ray (each (method, seed) run left to do "
        "is a Ray task, on this machine or a cluster: docs/RAY.md); the table is the same (default: %(default)s)",
    )
    parser.add_argument(
        "--parallel",
        type=int,
        metavar="N",
        help="with --backend ray: runs at a time on the local Ray it starts (N x the runs' threads CPUs) (default: 2)",
    )
    parser.add_argument(
        "--workers",
        nargs="?",
        action=_RenamedFlag,
        new="--parallel",
        metavar="N",
        help="the old name of --parallel: now an error that names it",
    )
    parser.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="with --backend ray: the Ray cluster to join (auto, or HOST:PORT) instead of starting a local Ray; "
        "its CPUs decide how many runs go at once",
    )
    parser.add_argument(
        "--gpus-per-run",
        type=float,
        metavar="F",
        help="with --backend ray: GPUs each run asks Ray for, a fraction to share one (0.25: four runs a GPU); "
        "the run trains on the GPU Ray gives it (default: none, CPUs only)",
    )


def check_docs(page: Path) -> int:
    """One line per recipe: its table in ``page`` is current or why it is stale; 1 if any is stale."""
    root = Path(_git_toplevel(page.resolve().parent) or page.resolve().parent)
    blocks = results_page.read_blocks(page)
    stale = 0
    for name in sorted(RECIPES):
        why = results_page.staleness(root, blocks.get(name))
        stale += why is not None
        revision = blocks[name].revision if name in blocks else "-"
        print(f"{name:<20} {'stale: ' + why if why else 'current'} (revision {revision})")
    print(f"{stale} of {len(RECIPES)} tables in {page} are stale" if stale else f"every table in {page} is current")
    return 1 if stale else 0


def _git_toplevel(folder: Path) -> str | None:
    done = subprocess.run(["git", "-C", str(folder), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def run(args: argparse.Namespace) -> int:
    if args.check_docs is not None:
        page = Path(args.check_docs)
        if not page.is_file():
            print(f"edgefd reproduce: --check-docs: no page {page} (run from the repository's root)", file=sys.stderr)
            return 2
        return check_docs(page)
    if args.recipe is None:
        print(
            "edgefd reproduce: give a RECIPE (or --check-docs); `edgefd reproduce --help` lists them", file=sys.stderr
        )
        return 2
    recipe = RECIPES[args.recipe]
    if args.threads is not None and args.threads < 1:
        print(f"edgefd reproduce: --threads must be >= 1, got {args.threads}", file=sys.stderr)
        return 2
    cluster, refusal = cluster_of(args)
    if refusal is not None:
        print(f"edgefd reproduce: {refusal}", file=sys.stderr)
        return 2
    try:
        return _run(args, recipe, cluster)
    except NoRay as error:
        print(f"edgefd reproduce: {error}", file=sys.stderr)
        return 2


def cluster_of(args: argparse.Namespace) -> tuple[Cluster | None, str | None]:
    """Where the runs go (None: in this process, one after another), or why the flags cannot say."""
    if args.backend != "ray":
        if args.parallel is not None or args.ray_address is not None or args.gpus_per_run is not None:
            return None, "--parallel, --ray-address and --gpus-per-run are for --backend ray"
        return None, None
    if args.parallel is not None and args.parallel < 1:
        return None, f"--parallel must be >= 1, got {args.parallel}"
    gpus = args.gpus_per_run or 0.0
    if not (math.isfinite(gpus) and gpus >= 0) or (gpus > 1 and not gpus.is_integer()):
        return None, f"--gpus-per-run must be a fraction of one GPU or a whole number of GPUs, got {args.gpus_per_run}"
    return Cluster(parallel=args.parallel or Cluster.parallel, address=args.ray_address, gpus_per_run=gpus), None


def _run(args: argparse.Namespace, recipe: Recipe, cluster: Cluster | None) -> int:
    if args.verify is not None:
        page = Path(args.verify)
        if not page.is_file():
            print(f"edgefd reproduce: --verify: no page {page} (run from the repository's root)", file=sys.stderr)
            return 2
        print(f"{recipe.name}: {verify_rule(recipe, page)}")
        differences = verify(recipe, page, tuple(args.seeds or recipe.seeds[:1]), Path(args.out) / "verify", cluster)
        for line in differences:
            print(line)
        print(
            f"{recipe.name}: {len(differences)} value(s) differ from {page}"
            if differences
            else f"{recipe.name}: every value is the one in {page}"
        )
        return 1 if differences else 0
    seeds = tuple(args.seeds or recipe.seeds)
    docs_page = Path(args.write_docs) if args.write_docs is not None else None
    if docs_page is not None:
        if args.rounds is not None and args.rounds != recipe.base.rounds:
            print("edgefd reproduce: --write-docs writes the recipe's own table: drop --rounds", file=sys.stderr)
            return 2
        if not docs_page.is_file():
            print(
                f"edgefd reproduce: --write-docs: no page {docs_page} (run from the repository's root)",
                file=sys.stderr,
            )
            return 2
        try:
            results_page.check_markers(docs_page, recipe.name)
        except ValueError as error:
            print(f"edgefd reproduce: {error}", file=sys.stderr)
            return 2
    table = run_recipe(recipe, Path(args.out), seeds, args.rounds, args.rerun, args.threads, cluster)
    print(table)
    if docs_page is not None:
        command = command_text(recipe, seeds, args.rounds, args.threads) + " --write-docs"
        revision = results_page.code_revision(Path(__file__).resolve().parents[1])
        threads = args.threads or recipe.base.threads
        text = results_page.block_text(command, revision, threads, table, results_page.numeric_platform())
        results_page.write_block(docs_page, recipe.name, text)
        print(f"wrote the table into {docs_page} (revision {revision})")
    return 0
