"""FedICT's and FedGKT's hyperparameters: the paper's defaults, the spec's switchable choices."""

from __future__ import annotations

import math
from dataclasses import dataclass

from edgefd.algorithms.base import param

PROFILES = ("paper", "reference")
LKA_VARIANTS = ("sim", "balanced")
WEIGHT_FORMS = ("softmax", "linear")
FIRST_ROUND = ("uniform", "skip")
ZS_GENERATION = ("after_client_pass", "two_phase", "train_forward")
LKA_CLIENT_WEIGHTING = ("sample", "client_uniform")
SERVER_ORDERS = ("ascending", "shuffled")
SIM_WEIGHTINGS = ("additive", "scaled")
DIST_META = ("none", "uniform", "normal", "exponential")

#: the demo adds this to teacher probabilities without renormalising (§3.10)
REFERENCE_TEACHER_EPS = 1e-7
#: the demo's KL_Loss() re-applied to probabilities has its own temperature, hard-coded (§3.10)
REFERENCE_EXTRA_TEMPERATURE = 3.0
#: scale of the Tab. VIII random distributions: U(0,3), N(0, sigma=3), Exp(mean 3) (§9 A24)
DIST_META_SCALE = 3.0


def _choice(name: str, value, options: tuple[str, ...], aliases: dict[str, str] | None = None):
    if value is None:
        return None
    value = str(value).strip().lower()
    value = (aliases or {}).get(value, value)
    if value not in options:
        raise ValueError(f"param {name}: expected one of {', '.join(options)}, got {value!r}")
    return value


@dataclass
class FedICTParams:
    lka: str = param("sim", "LKA variant on the server: sim (Eq. 12) | balanced (Eq. 13-14)")
    profile: str = param("paper", "paper (the equations as printed) | reference (the authors' demo arithmetic, §3.10)")
    beta: float = param(1.5, "weight of the base KL term on client and server (§5); the demo's alpha in reference")
    lam: float = param(1.5, "FPKD weight lambda (Eq. 8); 0 = FedGKT client")
    mu: float = param(1.5, "LKA weight mu (Eq. 9); 0 = FedGKT server")
    sim_weighting: str | None = param(
        None,
        "server KL weight of lka=sim: additive (beta + mu cos_k, Eq. 9 + 12 as printed) | scaled (beta cos_k: the "
        "authors' code scales the KL term by the similarity); None: by profile (paper additive, reference scaled)",
    )
    fpkd_T: float = param(3.0, "FPKD weight temperature T (Eq. 11); never applied to logits")
    lka_U: float = param(7.0, "class-balanced LKA weight temperature U (Eq. 14); never applied to logits")
    kd_temperature: float | None = param(
        None, "KD softmax temperature with T^2 scaling (None: 1 in paper, 3 in reference)"
    )
    weight_form: str | None = param(
        None, "FPKD / balance weights: softmax (Eq. 11, 14) | linear (d/T, signed (dS-dk)/U); None: by profile"
    )
    first_round_kd: str | None = param(
        None,
        "round 1 (no server logits yet): uniform (KD to the zero logits the server sends) | skip; None: by profile",
    )
    zs_generation: str | None = param(
        None, "server logits: after_client_pass (eval, Alg. 2 l.17) | two_phase | train_forward; None: by profile"
    )
    lka_client_weighting: str = param(
        "sample", "LKA averaging: sample (minibatch mean, §3.9) | client_uniform (x N/(K N^k), Eq. 12-13)"
    )
    server_order: str = param("ascending", "order of the server's client passes: ascending | shuffled (each round)")
    server_epochs: int = param(1, "server epochs over each client's features per round")
    server_batch_size: int | None = param(None, "server minibatch size (None: the run's batch size)")
    server_model: str = param(
        "auto", "zoo name of the server model (auto: fedict_server / fedict_server_small / fedict_fc_server)"
    )
    nesterov: bool = param(True, "Nesterov momentum for client and server SGD (the demo's optimiser)")
    feature_precision: str | None = param(
        None, "wire precision of the uploaded features fp32|fp16|int8 (None: the run's precision)"
    )
    resend_labels: bool = param(False, "upload labels every round like the demo (the paper sends them once)")
    dist_meta: str = param(
        "none",
        "Tab. VIII ablation: replace d^k by softmax of C draws of uniform(0,3) | normal(0,3) | exponential(mean 3)",
    )

    def __post_init__(self) -> None:
        self.lka = _choice("lka", self.lka, LKA_VARIANTS, {"balance": "balanced", "similarity": "sim"})
        self.profile = _choice("profile", self.profile, PROFILES)
        self.weight_form = _choice("weight_form", self.weight_form, WEIGHT_FORMS)
        self.first_round_kd = _choice("first_round_kd", self.first_round_kd, FIRST_ROUND)
        self.zs_generation = _choice("zs_generation", self.zs_generation, ZS_GENERATION)
        self.lka_client_weighting = _choice("lka_client_weighting", self.lka_client_weighting, LKA_CLIENT_WEIGHTING)
        self.server_order = _choice("server_order", self.server_order, SERVER_ORDERS)
        self.sim_weighting = _choice("sim_weighting", self.sim_weighting, SIM_WEIGHTINGS)
        if self.sim_weighting is not None and self.lka != "sim":
            raise ValueError("param sim_weighting: applies to lka=sim only")
        if self.sim_weighting == "additive" and self.profile == "reference":
            raise ValueError("param sim_weighting: the reference profile is the code's arithmetic, i.e. scaled")
        self.dist_meta = _choice("dist_meta", self.dist_meta, DIST_META)
        if self.feature_precision is not None:
            self.feature_precision = _choice("feature_precision", self.feature_precision, ("fp32", "fp16", "int8"))
        for name in ("beta", "lam", "mu"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"param {name}: must be a finite number >= 0, got {value!r}")
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
    """FedGKT = FedICT with the FPKD and LKA weights off (lam = mu = 0, spec §6.5, §11.4)."""

    lam: float = param(0.0, "FPKD weight: 0 for FedGKT (use --algo fedict to change it)")
    mu: float = param(0.0, "LKA weight: 0 for FedGKT (use --algo fedict to change it)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.lam != 0 or self.mu != 0:
            raise ValueError("fedgkt is fedict with lam = mu = 0; use --algo fedict to set lam or mu")
