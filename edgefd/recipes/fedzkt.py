"""FedZKT's recipes (docs/methods/fedzkt.md#scaled-recipes): its Sec. IV-A setting scaled down, IID
and non-IID against FedMD, the server loss's ablation (Table II), the proximal weight's sweep
(Table IV), the harshest label skew (Fig. 4) and the stragglers (Fig. 6)."""

from __future__ import annotations

from dataclasses import replace

from edgefd.recipes.recipe import Arm, Recipe, claims_of
from edgefd.runtime.config import SimulationConfig

# FedZKT's Sec. IV-A settings scaled to ~45 CPU-minutes in total (single thread;
# docs/methods/fedzkt.md#scaled-recipes): fmnist, 10 devices of 300 samples, edgefd's MNIST-family
# devices without S1 (round-robin S2, S3, S4, S5), global model S5,
# GeneratorA with ngf 16, n_D = 20 server iterations of 32 generated samples, 10 rounds of 2 epochs,
# batch 32, SGD lr 0.05 without momentum (the small CPU models' lrs); FedMD with public mnist5k and
# 1,000 alignment samples per round (paper: 5,000).
_BASE = SimulationConfig(
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
SERVER = {
    "global_model": "zkt_s5_lenet_wide",
    "generator": "zkt_generator",
    "generator_ngf": 16,
    "iterations": 20,
    "server_batch_size": 32,
    "server_lr": 0.05,
    "clip": 0.0,
}
"""FedZKT's server side in these recipes (its params): Eq. 1's ensemble of the devices' outputs as
they are (edgefd's default bounds them, docs/methods/fedzkt.md#bounded-outputs)."""
_SOURCE = (
    "docs/methods/fedzkt.md#scaled-recipes: fmnist, 10 devices x 300 samples, {partition}, devices S2-S5 "
    "round-robin (S1 left out for CPU time), global S5, GeneratorA ngf 16, n_D 20 x 32 generated "
    "samples, 10 rounds x 2 epochs, batch 32, SGD lr 0.05 no momentum, prox 1; FedMD public mnist5k, "
    "N_a 1000 (paper: 6,000 samples/device, 50 rounds x 5 epochs, n_D 200 x 256, ResNet-18 global, "
    "N_a 5000)"
)
_CHOICES = (
    "FedZKT's proximal weight lambda = 1 applies to each minibatch's mean cross-entropy, |D_k| times Eq. 9's "
    "literal weight against its loss summed over a device's |D_k| samples, up to 300 here (prox_scale=minibatch; "
    "fedzkt-prox runs both: docs/methods/fedzkt.md#proximal-term-scale).",
    "FedMD pretrains 2 epochs on its public labels before round 1 (the FedMD paper's transfer step; its authors' "
    "code trains up to 20 epochs with early stopping: docs/methods/fedmd.md#public-label-pretraining).",
)
_ARMS = [
    Arm("Local", "local"),
    # FedMD as its paper runs it: public-label pretraining first (its transfer step, the default's 2
    # epochs: docs/methods/fedmd.md#public-label-pretraining), the digest at batch 256, and its
    # consensus as the paper has it (the mean; edgefd's default is the median, docs/ROBUSTNESS.md)
    Arm("FedMD (public mnist5k)", "fedmd", {"public_dataset": "mnist5k", "alignment_size": 1000, "aggregator": "mean"}),
    Arm("FedZKT (SL)", "fedzkt", {**SERVER, "loss": "sl"}, folder="fedzkt-sl"),
]
_ABLATION = [
    Arm("FedZKT (KL)", "fedzkt", {**SERVER, "loss": "kl"}, folder="fedzkt-kl"),
    Arm("FedZKT (l1)", "fedzkt", {**SERVER, "loss": "l1"}, folder="fedzkt-l1"),
]

RECIPES: dict[str, Recipe] = {}
RECIPES["fedzkt"] = Recipe(
    "fedzkt",
    _SOURCE.format(partition="IID"),
    replace(_BASE, partition="iid"),
    _ARMS,
    target_from=["FedMD (public mnist5k)", "FedZKT (SL)"],
    claims=claims_of(
        ("FedMD (public mnist5k)", "above", "FedZKT (SL)", "final-whole-test-set", "FedZKT, Table I (IID)")
    ),
    choices=_CHOICES,
)
RECIPES["fedzkt-dir0.5"] = Recipe(
    "fedzkt-dir0.5",
    _SOURCE.format(partition="Dirichlet 0.5"),
    replace(_BASE, partition="dirichlet:0.5"),
    _ARMS + _ABLATION,
    target_from=["FedMD (public mnist5k)", "FedZKT (SL)"],
    claims=claims_of(
        ("FedZKT (SL)", "above", "FedMD (public mnist5k)", "final-whole-test-set", "FedZKT, Fig. 4 (non-IID)"),
        ("FedZKT (SL)", "above", "FedZKT (KL)", "final-whole-test-set", "FedZKT, Table II"),
        ("FedZKT (SL)", "above", "FedZKT (l1)", "final-whole-test-set", "FedZKT, Table II"),
    ),
    choices=_CHOICES,
)
# A sweep of the proximal weight (lambda in {0, 0.01, 0.1, 1}, docs/methods/fedzkt.md#proximal-term-scale; Table IV's
# ablation is lambda = 0 under non-IID data).
RECIPES["fedzkt-prox"] = Recipe(
    "fedzkt-prox",
    _SOURCE.format(partition="Dirichlet 0.5")
    + "; FedZKT (SL) at prox 0, 0.01, 0.1 and 1 a minibatch, and 1 over Eq. 9's summed loss (literal); Local",
    replace(_BASE, partition="dirichlet:0.5"),
    [
        Arm(
            f"FedZKT (SL, prox {prox})",
            "fedzkt",
            {**SERVER, "loss": "sl", "prox": prox},
            folder=f"fedzkt-prox{prox}",
        )
        for prox in (0.0, 0.01, 0.1, 1.0)
    ]
    + [
        # Eq. 9 taken literally: lambda = 1 against the loss summed over the device's 300 samples
        Arm(
            "FedZKT (SL, prox 1.0, literal)",
            "fedzkt",
            {**SERVER, "loss": "sl", "prox": 1.0, "prox_scale": "literal"},
            folder="fedzkt-prox1.0-literal",
        ),
        Arm("Local", "local"),
    ],
    target_from=["FedZKT (SL, prox 0.0)", "FedZKT (SL, prox 1.0)"],
    claims=claims_of(
        ("FedZKT (SL, prox 1.0)", "above", "FedZKT (SL, prox 0.0)", "final-whole-test-set", "FedZKT, Table IV"),
        (
            "FedZKT (SL, prox 1.0, literal)",
            "above",
            "FedZKT (SL, prox 0.0)",
            "final-whole-test-set",
            "FedZKT, Table IV (Eq. 9 literally)",
        ),
    ),
    choices=_CHOICES[:1],
)

# FedZKT's quantity-based label skew at its harshest point (c = 2 classes a device, Fig. 4), and the
# stragglers of Fig. 6 (a portion p of the devices active each round).
RECIPES["fedzkt-c2"] = Recipe(
    "fedzkt-c2",
    _SOURCE.format(partition="2 classes a device"),
    replace(_BASE, partition="shards:2"),
    _ARMS,
    target_from=["FedMD (public mnist5k)", "FedZKT (SL)"],
    claims=claims_of(
        ("FedZKT (SL)", "above", "FedMD (public mnist5k)", "final-whole-test-set", "FedZKT, Fig. 4 (c = 2)")
    ),
    choices=_CHOICES,
)
RECIPES["fedzkt-stragglers"] = Recipe(
    "fedzkt-stragglers",
    _SOURCE.format(partition="IID") + "; FedZKT (SL) with 20%, 60% and 100% of the devices active each round",
    replace(_BASE, partition="iid"),
    [
        Arm(
            f"FedZKT (SL, p {p})",
            "fedzkt",
            {**SERVER, "loss": "sl"},
            folder=f"fedzkt-p{p}",
            config={"participation": p},
        )
        for p in (0.2, 0.6, 1.0)
    ]
    + [Arm("Local", "local")],
    target_from=["FedZKT (SL, p 1.0)", "FedZKT (SL, p 0.6)"],
    claims=claims_of(
        (
            "FedZKT (SL, p 0.2)",
            "below",
            "FedZKT (SL, p 1.0)",
            "final-whole-test-set",
            "FedZKT, Fig. 6 (p = 0.2 slows training)",
        )
    ),
    choices=_CHOICES[:1],
)

# Table I's MNIST row (FedMD with public FASHION, as the paper pairs them): mnist5k, the 5,000-image MNIST
# sample that is offline here, in place of MNIST; otherwise the fedzkt recipe (IID).
RECIPES["fedzkt-mnist"] = Recipe(
    "fedzkt-mnist",
    _SOURCE.format(partition="IID")
    .replace("fmnist, 10 devices", "mnist5k, 10 devices")
    .replace("FedMD public mnist5k", "FedMD public fmnist"),
    replace(_BASE, dataset="mnist5k", partition="iid"),
    [
        Arm("Local", "local"),
        Arm(
            "FedMD (public fmnist)",
            "fedmd",
            {"public_dataset": "fmnist", "alignment_size": 1000, "aggregator": "mean"},
        ),
        Arm("FedZKT (SL)", "fedzkt", {**SERVER, "loss": "sl"}, folder="fedzkt-sl"),
    ],
    target_from=["FedMD (public fmnist)", "FedZKT (SL)"],
    claims=claims_of(
        ("FedZKT (SL)", "above", "FedMD (public fmnist)", "final-whole-test-set", "FedZKT, Table I (IID, MNIST)")
    ),
    choices=_CHOICES,
)
