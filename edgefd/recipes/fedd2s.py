"""FedD2S's recipes (docs/methods/fedd2s.md#small-scale-reproduction): its setting moved to
Fashion-MNIST at the paper's three skews (Table 2), and the dropping-rate sweep (Fig. 7)."""

from __future__ import annotations

from dataclasses import replace

from edgefd.recipes.recipe import Arm, Recipe, claims_of
from edgefd.runtime.config import SimulationConfig

_TABLE_2 = ("FedD2S", "above", "FedAvg", "last-10-rounds", "FedD2S, Table 2 (average UA over the last 10 rounds)")
_AGAINST_FEDMD = ("FedD2S", "above", "FedMD", "last-10-rounds", "FedD2S, Table 2 (average UA over the last 10 rounds)")
"""The paper's own comparisons (a recipe's table ends with their verdicts)."""
_FEDMD = Arm("FedMD", "fedmd", {"public_dataset": "mnist5k", "alignment_size": 1000})
"""FedMD as FedD2S's paper runs it, whose public set it does not name: MNIST-5k beside Fashion-MNIST (as
FedZKT pairs them), the recipe's client models, 1,000 alignment samples a round."""

RECIPES: dict[str, Recipe] = {}
# docs/methods/fedd2s.md#small-scale-reproduction on fmnist, scaled to a few CPU-minutes per seed: 10 clients
# of 150 training samples, Dirichlet 0.1 (the paper's main skew, Z0 = 3), M1 (the paper's CIFAR-10 model, here
# on 1x28x28), half of the clients per round, 50 rounds (with Z0 = 3 a client reaches the floor at its 13th
# participation; at half participation the least-selected client of seeds 0-4 gets 17), E = 2 passes per phase
# (= the baselines' 2 local epochs), batch 32, Adam lr 0.01 re-created every round (FedD2S's per-phase Adam,
# docs/methods/fedd2s.md#optimiser) for every arm.
RECIPES["fedd2s"] = Recipe(
    "fedd2s",
    "docs/methods/fedd2s.md#small-scale-reproduction moved to fmnist (10 clients x 150 train samples, Dirichlet 0.3, "
    "M1, rho 0.5, 50 rounds, E 2, B 32, Adam lr 0.01, Z0 3, S = [C3, F1, F2, F3]; paper: CIFAR-10/CINIC-10/FEMNIST/"
    "CIFAR-100, 50 clients, rho 0.2, 100 rounds, E 4, B 128, Dirichlet 0.1 with Z0 3: on fmnist at 0.1, Local "
    "reaches 92% on its own label mix and leaves sharing nothing to show)",
    SimulationConfig(
        dataset="fmnist",
        clients=10,
        samples_per_client=150,
        partition="dirichlet:0.3",
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
        _FEDMD,
        Arm("FedD2S", "fedd2s", {"z0": 3, "phase_epochs": None}),
        Arm(
            "FedD2S* (l = 2 from round 1)",
            "fedd2s",
            {"z0": 3, "phase_epochs": None, "schedule": "floor"},
            folder="fedd2s-floor",
        ),
    ],
    target_from=["Local", "FedD2S"],
    claims=claims_of(_TABLE_2, _AGAINST_FEDMD),
)

# FedD2S's Table 2 at its other two skews (Z0 = 5 at alpha 0.5 and 7 at alpha 1, as the paper sets it),
# and Fig. 7's dropping-rate sweep at alpha 0.1 with no dropping (Z0 infinite) as its far end.
_FEDD2S = RECIPES["fedd2s"]
for _alpha, _z0 in (("0.5", 5), ("1.0", 7)):
    RECIPES[f"fedd2s-a{_alpha}"] = replace(
        _FEDD2S,
        name=f"fedd2s-a{_alpha}",
        source=_FEDD2S.source.split("; paper:")[0]
        .replace("Dirichlet 0.3", f"Dirichlet {_alpha}")
        .replace("Z0 3", f"Z0 {_z0}")
        + "; paper: CIFAR-10/CINIC-10/FEMNIST/CIFAR-100, 50 clients, rho 0.2, 100 rounds, E 4, B 128, "
        f"Dirichlet {_alpha})",
        base=replace(_FEDD2S.base, partition=f"dirichlet:{_alpha}"),
        arms=[
            Arm("Local", "local"),
            Arm("FedAvg", "fedavg"),
            _FEDMD,
            Arm("FedD2S", "fedd2s", {"z0": _z0, "phase_epochs": None}),
        ],
        target_from=["Local", "FedD2S"],
        claims=claims_of(_TABLE_2, _AGAINST_FEDMD),
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
        Arm("Local", "local"),
    ],
    target_from=["FedD2S (Z0 3)", "FedD2S (Z0 1)"],
    claims=claims_of(
        ("FedD2S (Z0 3)", "above", "FedD2S (Z0 1)", "last-10-rounds", "FedD2S, Fig. 7 (UA rises with Z0 first)"),
        (
            "FedD2S (Z0 3)",
            "above",
            "FedD2S (no dropping)",
            "last-10-rounds",
            "FedD2S, Fig. 7 and Sec. I (layer dropping helps)",
        ),
    ),
)
