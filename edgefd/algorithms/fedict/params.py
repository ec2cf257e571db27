"""FedICT's and FedGKT's hyperparameters: the paper's defaults and edgefd's switchable choices
(docs/methods/fedict.md#switchable-choices)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from edgefd.algorithms.params import check_choices
from edgefd.algorithms.toolkit import check_weight_cap, weight_cap_setting
from edgefd.settings import setting

PROFILES = ("paper", "reference")
LKA_VARIANTS = ("sim", "balanced")
WEIGHT_FORMS = ("softmax", "linear")
FIRST_ROUND = ("uniform", "skip")
ZS_GENERATION = ("after_client_pass", "two_phase", "train_forward")
LKA_CLIENT_WEIGHTING = ("sample", "client_uniform")
SERVER_ORDERS = ("ascending", "shuffled")
SIM_WEIGHTINGS = ("additive", "scaled")
DIST_META = ("none", "uniform", "normal", "exponential")
FEATURE_PRECISIONS = ("fp32", "fp16", "int8")

#: the demo adds this to teacher probabilities without renormalising (docs/methods/fedict.md#reference-profile)
REFERENCE_TEACHER_EPS = 1e-7
#: the demo's KL_Loss() re-applied to probabilities has its own temperature, hard-coded
#: (docs/methods/fedict.md#reference-profile)
REFERENCE_EXTRA_TEMPERATURE = 3.0
#: scale of the Table VIII random distributions: U(0,3), N(0, sigma=3), Exp(mean 3)
#: (docs/methods/fedict.md#random-distribution-ablation)
DIST_META_SCALE = 3.0


@dataclass
class FedICTParams:
    lka: str = setting(
        "sim",
        "LKA variant on the server: sim (Eq. 12) | balanced (Eq. 13-14)",
        choices=LKA_VARIANTS,
        aliases={"balance": "balanced", "similarity": "sim"},
    )
    profile: str = setting(
        "paper",
        "paper (the equations as printed) | reference (the authors' demo arithmetic; "
        "docs/methods/fedict.md#reference-profile)",
        choices=PROFILES,
    )
    beta: float = setting(
        1.5, "weight of the base KL term on client and server (Sec. 5.1.4); the demo's alpha in reference"
    )
    lam: float = setting(1.5, "FPKD weight lambda (Eq. 8); 0 = FedGKT client")
    mu: float = setting(1.5, "LKA weight mu (Eq. 9); 0 = FedGKT server")
    sim_weighting: str | None = setting(
        None,
        "server KL weight of lka=sim: additive (beta + mu cos_k, Eq. 9 + 12) | scaled (beta cos_k, the authors' "
        "code); None: by profile (docs/methods/fedict.md#similarity-weighting)",
        choices=SIM_WEIGHTINGS,
    )
    fpkd_T: float = setting(3.0, "FPKD weight temperature T (Eq. 11); never applied to logits")
    lka_U: float = setting(7.0, "class-balanced LKA weight temperature U (Eq. 14); never applied to logits")
    kd_temperature: float | None = setting(
        None,
        "KD softmax temperature with T^2 scaling (None: 1 in paper, 3 in reference; "
        "docs/methods/fedict.md#kd-temperature)",
    )
    weight_form: str | None = setting(
        None,
        "FPKD / balance weights: softmax (Eq. 11, 14) | linear (d/T, signed (dS-dk)/U); None: by profile "
        "(docs/methods/fedict.md#softmax-or-linear-weights)",
        choices=WEIGHT_FORMS,
    )
    first_round_kd: str | None = setting(
        None,
        "round 1 (no server logits yet): uniform (KD to the zero logits the server sends, Alg. 2 l.10-11) | skip; "
        "None: by profile (docs/methods/fedict.md#first-round)",
        choices=FIRST_ROUND,
    )
    zs_generation: str | None = setting(
        None,
        "server logits: after_client_pass (eval, Alg. 2 l.17) | two_phase | train_forward; None: by profile "
        "(docs/methods/fedict.md#server-logit-generation)",
        choices=ZS_GENERATION,
    )
    lka_client_weighting: str = setting(
        "sample",
        "LKA averaging: sample (minibatch mean) | client_uniform (x N/(K N^k), Eq. 12-13; "
        "docs/methods/fedict.md#lka-averaging)",
        choices=LKA_CLIENT_WEIGHTING,
    )
    server_order: str = setting(
        "ascending", "order of the server's client passes: ascending | shuffled (each round)", choices=SERVER_ORDERS
    )
    server_epochs: int = setting(1, "server epochs over each client's features per round")
    server_batch_size: int | None = setting(None, "server minibatch size (None: the run's batch size)")
    server_model: str = setting(
        "auto", "zoo name of the server model (auto: fedict_server / fedict_server_small / fedict_fc_server)"
    )
    nesterov: bool = setting(True, "Nesterov momentum for client and server SGD (the demo's optimiser)")
    feature_precision: str | None = setting(
        None,
        "wire precision of the uploaded features fp32|fp16|int8 (None: the run's precision)",
        choices=FEATURE_PRECISIONS,
    )
    resend_labels: bool = setting(False, "upload labels every round like the demo (the paper sends them once)")
    clip: float = setting(
        0.0,
        "clip each uploaded sample's features and logits to this many times the median norm of the round's "
        "uploads, so that one device's cannot dominate the server's training, e.g. 3 (0: off, the paper's; "
        "docs/methods/fedict.md#robust-uploads)",
    )
    dist_meta: str = setting(
        "none",
        "Table VIII ablation: replace d^k by softmax of C draws of uniform(0,3) | normal(0,3) | exponential(mean 3)",
        choices=DIST_META,
    )
    weight_cap: float = weight_cap_setting()

    def __post_init__(self) -> None:
        check_choices(self)
        check_weight_cap(self.weight_cap)
        if self.sim_weighting is not None and self.lka != "sim":
            raise ValueError("param sim_weighting: applies to lka=sim only")
        if self.sim_weighting == "additive" and self.profile == "reference":
            raise ValueError("param sim_weighting: the reference profile is the code's arithmetic, i.e. scaled")
        for name in ("beta", "lam", "mu"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"param {name}: must be a finite number >= 0, got {value!r}")
        if not (math.isfinite(self.clip) and self.clip >= 0):
            raise ValueError(f"param clip: must be a finite number >= 0, got {self.clip!r}")
        for name in ("fpkd_T", "lka_U"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"param {name}: must be a finite number > 0, got {value!r}")
        if self.kd_temperature is not None and not (math.isfinite(self.kd_temperature) and self.kd_temperature > 0):
            raise ValueError(f"param kd_temperature: must be a finite number > 0, got {self.kd_temperature!r}")
        if self.server_epochs < 1:
            raise ValueError(f"param server_epochs: must be >= 1, got {self.server_epochs}")
        if self.server_batch_size is not None and self.server_batch_size < 1:
            raise ValueError(f"param server_batch_size: must be >= 1, got {self.server_batch_size}")

    # the profile's values of the switchable settings
    @property
    def reference(self) -> bool:
        return self.profile == "reference"

    @property
    def kd_T(self) -> float:
        if self.kd_temperature is not None:
            return float(self.kd_temperature)
        return 3.0 if self.reference else 1.0

    @property
    def weights(self) -> str:
        return self.weight_form or ("linear" if self.reference else "softmax")

    @property
    def first_round(self) -> str:
        return self.first_round_kd or ("skip" if self.reference else "uniform")

    @property
    def generation(self) -> str:
        return self.zs_generation or ("train_forward" if self.reference else "after_client_pass")


@dataclass
class FedGKTParams(FedICTParams):
    """FedGKT = FedICT with the FPKD and LKA weights off (lam = mu = 0: Eq. 2 and 4 of the FedICT paper;
    docs/methods/fedgkt.md#formulation-used)."""

    lam: float = setting(0.0, "FPKD weight: 0 for FedGKT (use --algo fedict to change it)")
    mu: float = setting(0.0, "LKA weight: 0 for FedGKT (use --algo fedict to change it)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.lam != 0 or self.mu != 0:
            raise ValueError("fedgkt is fedict with lam = mu = 0; use --algo fedict to set lam or mu")
