"""FedICT (Wu et al., "Federated Multi-task Distillation for Multi-access Edge Computing", TPDS 2024)
and FedGKT (He et al. 2020) as FedICT with lam = mu = 0.

Spec: ``/work/shared/specs/fedict.md`` (section numbers below refer to it).

Each client model is a feature extractor + predictor (``extract(x)``, ``predict(h)``). Once, the
client uploads its class-distribution vector d^k (Eq. 7), its labels and their stable sample ids.
Every round it trains one epoch with CE + the FPKD-weighted KL towards the server's per-sample
logits, then uploads per-sample features H^k, logits Z^k and sample ids. The server trains one
shared predictor-only model on every client's features, client by client, with CE + the
LKA-weighted KL towards Z^k, and replies with its per-sample logits Z^S and their ids. Knowledge is
keyed by stable sample id on both sides (:class:`SampleIndex`, built once): a client gathers
``Z^S[id]`` for each shuffled minibatch, the server scatters its logits into the canonical order of
the client's hello. Nothing is keyed by batch position (the official demo's bug, §2.2 / §9 A11).

Losses (§3.7): every objective is CE + one class-weighted KL computed by the ``weighted_kl``
kernel (per-class weights in ``class_weight``, rows without a teacher masked by
``sample_weight``); no per-sample-per-class weight matrix is needed by either profile.

``profile=paper`` (default, the equations as printed):
  client  CE + WKL(s, z^S; omega = beta + lam * softmax(d^k / fpkd_T))            Eq. 2, 8, 10, 11
  server  sim:      CE + (beta + mu * cos(d^S, d^k)) * KL(s, z^k)                 Eq. 4, 9, 12
                    (``sim_weighting=scaled``: CE + beta * cos(d^S, d^k) * KL, the authors' code's
                    reading: the similarity scales the base KL term, mu only switches it on)
          balanced: CE + WKL(s, z^k; omega = beta + mu * softmax((d^S - d^k) / lka_U))  Eq. 13, 14
  KD temperature 1 (§3.8, §9 A3); round 1 distils towards the server's initial zeros, i.e. the
  uniform distribution (Alg. 2 l.9-11, §9 A9); Z^S is generated in eval mode right after each
  client's server pass (Alg. 2 l.17, §9 A10).
``profile=reference`` (the authors' demo arithmetic, §3.10): KD temperature 3 with T^2 scaling;
  teacher probabilities ``softmax(t / T) + 1e-7`` (not renormalised); linear weights d^k / fpkd_T
  and signed (d^S - d^k) / lka_U (the kernel takes non-negative weights, so a signed weight vector
  is applied exactly as WKL(omega+) - WKL(omega-); a warning is logged, §9 A6); the demo's
  accidental double-softmax term EXTRA; loss weights client CE + beta * [KL + EXTRA], server
  [KL + EXTRA] + beta * CE (§9 A7); no KD in round 1 (§9 A9); Z^S = the train-mode logits of the
  server's training forward pass (§9 A10). The demo has a single KD weight ``alpha``, which is
  ``beta`` here; ``lam`` and ``mu`` only switch its FPKD / LKA losses on (non-zero) or back to
  FedGKT's plain ``KL_Loss`` (zero), so ``fedgkt --param profile=reference`` is FedML's FedGKT.
  The demo's bugs are not reproduced in either profile: no batch-position keys, no drop_last, full
  test-set accuracy, no server ReduceLROnPlateau (§3.10).

Spec choices (section numbers of fedict.md):
- d^k from all training labels (§3.2, not the demo's drop_last loader); d^S = sum_k N^k d^k / N
  (Alg. 2 l.8) over the clients that said hello.
- "global"/"local" in Eq. 10 and 12-13 are softmax probabilities (§9 A1); the student is the
  current model output, the teacher the received logits (§9 A2); KL(teacher || student) on both
  sides (§3.3, §9 A4).
- FedICT (sim) and FedICT (balanced) share the same FPKD client (§3.7).
- One shared server model for all clients (§2.1), trained client by client in ascending id order
  (§9 A13), ``server_epochs`` = 1 epoch per client per round (§9 A14), SGD with the run's
  lr / momentum / weight decay and Nesterov momentum (§5, [CODE]); constant LR (§9 A14, A15).
- Features are extracted after local training from the non-augmented inputs with eval-mode BN
  (§9 A12; edgefd does not augment).
- LKA is sample-weighted (the server's minibatch mean over each client's samples, §3.9, §9 A8).
- The Z^S of the last round is not sent (§2.4, §9 A30): the runtime sends downlinks at the start
  of a round, so round R's replies stay on the server (they are still computed: an eval pass).
- UA is each client's own model on its whole local test split (§6.6, §9 A21): the default
  ``ClientRole.evaluate``.
- Bytes (§2.4): per round, up ``features [N, D_H] + logits [N,C] + ids [N] int64`` (features
  flattened on the wire, so int8 has one scale per sample), down
  ``logits [N,C] + ids [N] int64``; once, up ``distribution [C] float32 + labels [N] int64 + ids [N]
  int64 + samples + feature shape``. Round 1's downlink is the full zero tensor of the paper (only
  when round-1 KD is on). The ids are edgefd's addition to the paper's formula (N * 8 bytes each
  way per round): they make the replies order-independent. Labels go up once (§2.3), not every
  round as in the demo (``resend_labels=true`` restores that).
- Model choice (§6.3-6.4): clients use whatever ``--models`` assigns and must be split models
  (``fedict_c1..c5``, ``fedict_fc6..8``, FedCache's ``resnet8/16/20``); the zoo's homogeneous
  default ``cnn2`` / ``cnn1d`` is not, and is refused with a ValueError naming the models to pass
  (there is no silent substitution: an explicit ``--models cnn2`` and ``homo`` look the same to a
  method). ``server_model=auto`` picks ``fedict_server`` (A^S_1) for images of 16x16 and larger,
  the small recipe's ``fedict_server_small`` (§11.2) below that (digits), and ``fedict_fc_server``
  (the A^S_2 substitute, §6.3) for sensor windows / vectors.

Switchable deviations (``--param NAME=VALUE``; ``None`` = the profile's value):
  kd_temperature (§3.8), weight_form softmax|linear (§9 A5), first_round_kd uniform|skip (§9 A9),
  zs_generation after_client_pass|two_phase|train_forward (§9 A10), lka_client_weighting
  sample|client_uniform (§3.9, §9 A8), server_order ascending|shuffled (§9 A13), server_epochs and
  server_batch_size (§9 A14), nesterov (§5), resend_labels (§2.3), feature_precision (§2.4, K6:
  fp16/int8 features, opt-in), dist_meta none|uniform|normal|exponential (the random
  distribution-vector ablation of Tab. VIII, scale 3, §7.5, §9 A24).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, cast

import numpy as np
import torch
from torch import nn

from edgefd import kernels
from edgefd.algorithms.base import ClientContext, ClientRole, ServerContext, ServerRole, param, register
from edgefd.protocol import Payload
from edgefd.training import (
    TrainConfig,
    batches,
    forward,
    has_batchnorm,
    predict_logits,
    to_model,
    train_epochs,
)

__all__ = [
    "FedICTParams",
    "FedGKTParams",
    "FedICTClient",
    "FedICTServer",
    "KDLoss",
    "SampleIndex",
    "class_distribution",
    "global_distribution",
    "fpkd_weights",
    "lka_balance_weights",
    "cosine_similarity",
    "client_loss",
    "server_loss",
]

log = logging.getLogger(__name__)

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


# ----------------------------------------------------------------------------------------------
# The O(C) quantities (spec K3, K4)


def class_distribution(labels, num_classes: int) -> np.ndarray:
    """d^k_r = (1/N^k) sum_i 1[y_i = r] (Eq. 7), float64 [C]. All samples count (§3.2)."""
    y = np.asarray(labels).reshape(-1)
    if y.size == 0:
        raise ValueError("class_distribution: no samples (N = 0)")
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"class_distribution: labels must be integers, got {y.dtype}")
    if y.min() < 0 or y.max() >= num_classes:
        raise ValueError(f"class_distribution: labels must lie in [0, {num_classes}), got [{y.min()}, {y.max()}]")
    return np.bincount(y, minlength=num_classes).astype(np.float64) / y.size


def global_distribution(distributions, counts) -> np.ndarray:
    """d^S = sum_k N^k d^k / sum_k N^k (Alg. 2 l.8), float64 [C]."""
    d = np.asarray(distributions, dtype=np.float64)
    n = np.asarray(counts, dtype=np.float64)
    if d.ndim != 2 or n.shape != (d.shape[0],):
        raise ValueError(f"global_distribution: expected [K, C] and [K], got {d.shape} and {n.shape}")
    if n.sum() <= 0:
        raise ValueError("global_distribution: no samples (N = 0)")
    return (n[:, None] * d).sum(0) / n.sum()


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def fpkd_weights(d_k, T: float, form: str = "softmax") -> np.ndarray:
    """FPKD class weights w^k: softmax(d^k / T) (Eq. 11) or the demo's d^k / T (§3.10)."""
    d = np.asarray(d_k, dtype=np.float64)
    return _softmax(d / T) if form == "softmax" else d / T


def lka_balance_weights(d_S, d_k, U: float, form: str = "softmax") -> np.ndarray:
    """Class-balanced LKA weights v^k: softmax((d^S - d^k) / U) (Eq. 14) or the demo's signed
    (d^S - d^k) / U (§3.10)."""
    r = np.asarray(d_S, dtype=np.float64) - np.asarray(d_k, dtype=np.float64)
    return _softmax(r / U) if form == "softmax" else r / U


def cosine_similarity(d_S, d_k) -> float:
    """cos_k = d^S . d^k / (|d^S| |d^k|) (Eq. 12); 0 if either vector is zero (K4)."""
    a = np.asarray(d_S, dtype=np.float64)
    b = np.asarray(d_k, dtype=np.float64)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return 0.0 if na == 0 or nb == 0 else float(a @ b / (na * nb))


# ----------------------------------------------------------------------------------------------
# Losses (§3.7, §3.10)


@dataclass
class KDLoss:
    """``ce_weight * CE(s, y) + kd_weight * (KL_w(s, t) + [extra] EXTRA(s, t))``.

    ``KL_w = T^2/B sum_b m_b sum_r omega_r q_br (log q_br - log p_br)`` with ``p = softmax(s / T)``,
    ``q = softmax(t / T) (+ teacher_eps)`` and ``m`` the optional row mask; ``omega`` may be signed
    (applied as KL_w(omega+) - KL_w(omega-), which is exact because KL_w is linear in omega).
    ``EXTRA`` is the demo's double softmax (§3.10): ``9/B sum_b sum_r q2 (log q2 -
    log_softmax(log p / 3))`` with ``q2 = softmax(q / 3) + 1e-7``.
    """

    class_weight: torch.Tensor
    temperature: float = 1.0
    ce_weight: float = 1.0
    kd_weight: float = 1.0
    teacher_eps: float = 0.0
    extra: bool = False
    _positive: torch.Tensor = field(init=False, repr=False)
    _negative: torch.Tensor | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        w = torch.as_tensor(self.class_weight, dtype=torch.float64).reshape(-1)
        if not torch.isfinite(w).all():
            raise ValueError("class_weight: must be finite")
        self.class_weight = w.to(torch.float32)
        self._positive = w.clamp(min=0).to(torch.float32).contiguous()
        negative = (-w).clamp(min=0).to(torch.float32).contiguous()
        self._negative = negative if bool((negative > 0).any()) else None

    @property
    def signed(self) -> bool:
        return self._negative is not None

    def components(
        self,
        student: torch.Tensor,
        teacher: torch.Tensor,
        labels: torch.Tensor,
        sample_weight: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(total loss, CE) of a minibatch; ``teacher`` are logits, ``sample_weight`` masks rows."""
        ce = nn.functional.cross_entropy(student, labels)
        total = self.ce_weight * ce if self.ce_weight != 1 else ce
        if self.kd_weight == 0:
            return total, ce
        student = student.contiguous()
        teacher = teacher.detach().to(torch.float32).contiguous()
        T = self.temperature
        if self.teacher_eps > 0:
            q = (torch.softmax(teacher / T, dim=1) + self.teacher_eps).contiguous()
            kd = self._kl(student, q, sample_weight, True)
        else:
            q = None
            kd = self._kl(student, teacher, sample_weight, False)
        if self.extra:
            if q is None:
                q = torch.softmax(teacher / T, dim=1)
            log_p = torch.log_softmax(student / T, dim=1).contiguous()
            q2 = (torch.softmax(q / REFERENCE_EXTRA_TEMPERATURE, dim=1) + REFERENCE_TEACHER_EPS).contiguous()
            kd = kd + kernels.weighted_kl(
                log_p, q2, temperature=REFERENCE_EXTRA_TEMPERATURE, sample_weight=sample_weight, teacher_is_prob=True
            )
        return total + (self.kd_weight * kd if self.kd_weight != 1 else kd), ce

    def __call__(self, student, teacher, labels, sample_weight=None) -> torch.Tensor:
        return self.components(student, teacher, labels, sample_weight)[0]

    def _kl(self, student, teacher, sample_weight, is_prob: bool) -> torch.Tensor:
        kd = kernels.weighted_kl(
            student,
            teacher,
            temperature=self.temperature,
            sample_weight=sample_weight,
            class_weight=self._positive,
            teacher_is_prob=is_prob,
        )
        if self._negative is not None:
            kd = kd - kernels.weighted_kl(
                student,
                teacher,
                temperature=self.temperature,
                sample_weight=sample_weight,
                class_weight=self._negative,
                teacher_is_prob=is_prob,
            )
        return kd


def client_loss(params: FedICTParams, d_k, num_classes: int) -> KDLoss:
    """The client objective J^k_ICT (Eq. 8) of the chosen profile."""
    T = params.kd_T
    if not params.reference:
        omega = params.beta + params.lam * fpkd_weights(d_k, params.fpkd_T, params.weights)
        return KDLoss(torch.as_tensor(omega), T)
    eps = REFERENCE_TEACHER_EPS
    if params.lam == 0:  # the demo's FedGKT path: CE + alpha * KL_Loss(T)
        return KDLoss(torch.ones(num_classes), T, kd_weight=params.beta, teacher_eps=eps)
    omega = fpkd_weights(d_k, params.fpkd_T, params.weights)  # FPKD: CE + alpha * (KL_w + EXTRA)
    return KDLoss(torch.as_tensor(omega), T, kd_weight=params.beta, teacher_eps=eps, extra=True)


def server_loss(params: FedICTParams, d_S, d_k, num_classes: int, lka_scale: float = 1.0) -> KDLoss:
    """The server objective J^S_ICT (Eq. 9) for one client's samples. ``lka_scale`` multiplies the
    LKA (mu) part only: N / (K N^k) for ``lka_client_weighting=client_uniform``."""
    T = params.kd_T
    if not params.reference:
        if params.lka == "sim":
            similarity = lka_scale * cosine_similarity(d_S, d_k)
            if params.sim_weighting == "scaled":
                rho = params.beta * similarity if params.mu > 0 else params.beta
            else:
                rho = params.beta + params.mu * similarity
            omega = np.full(num_classes, rho)
        else:
            omega = params.beta + params.mu * lka_scale * lka_balance_weights(d_S, d_k, params.lka_U, params.weights)
        return KDLoss(torch.as_tensor(omega), T)
    eps = REFERENCE_TEACHER_EPS
    if params.mu == 0:  # FedGKT's server: KL_Loss(T) + alpha * CE
        return KDLoss(torch.ones(num_classes), T, ce_weight=params.beta, teacher_eps=eps)
    if params.lka == "sim":
        omega = np.full(num_classes, lka_scale * cosine_similarity(d_S, d_k))
    else:
        omega = lka_scale * lka_balance_weights(d_S, d_k, params.lka_U, params.weights)
    return KDLoss(torch.as_tensor(omega), T, ce_weight=params.beta, teacher_eps=eps, extra=True)


# ----------------------------------------------------------------------------------------------
# Sample identity (§2.2, K5)


class SampleIndex:
    """Stable sample id -> row of the local arrays, built once (sorted ids + binary search)."""

    def __init__(self, ids) -> None:
        ids = np.asarray(ids).reshape(-1)
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"sample ids must be integers, got {ids.dtype}")
        ids = ids.astype(np.int64)
        self._order = np.argsort(ids, kind="stable")
        self._sorted = ids[self._order]
        if ids.size > 1 and bool((self._sorted[1:] == self._sorted[:-1]).any()):
            raise ValueError("sample ids must be unique")
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def rows(self, ids) -> np.ndarray:
        """Rows of ``ids`` (ValueError naming them if any is unknown)."""
        ids = np.asarray(ids).reshape(-1)
        if ids.size == 0:
            return np.zeros(0, dtype=np.int64)
        if not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"sample ids must be integers, got {ids.dtype}")
        n = len(self._sorted)
        if n == 0:
            raise ValueError(f"{ids.size} unknown sample id(s), e.g. {ids[:3].tolist()}")
        pos = np.minimum(np.searchsorted(self._sorted, ids), n - 1)
        found = self._sorted[pos] == ids
        if not found.all():
            bad = ids[~found]
            raise ValueError(f"{bad.size} unknown sample id(s), e.g. {bad[:3].tolist()}")
        return self._order[pos]


def _optimizer(parameters, config: TrainConfig, nesterov: bool) -> torch.optim.Optimizer:
    if config.optimizer == "sgd":
        return torch.optim.SGD(
            parameters,
            lr=config.lr,
            momentum=config.momentum,
            weight_decay=config.weight_decay,
            nesterov=bool(nesterov and config.momentum > 0),
        )
    if config.optimizer == "adam":
        return torch.optim.Adam(parameters, lr=config.lr, weight_decay=config.weight_decay)
    raise ValueError(f"optimizer: expected 'sgd' or 'adam', got {config.optimizer!r}")


def _not_split_error(who: str, name: str) -> ValueError:
    return ValueError(
        f"fedict/fedgkt need client models split into a feature extractor and a predictor "
        f"(extract/predict); {who} has {name!r}. Pass --models fedict_c1 (or fedict_c1,...,fedict_c5, "
        f"resnet8) for images, or --models fedict_fc6,fedict_fc7,fedict_fc8 for sensor windows"
    )


class _SplitLike(Protocol):
    """What a client model offers on top of nn.Module (checked in FedICTClient.__init__)."""

    def extract(self, x: torch.Tensor) -> torch.Tensor: ...

    def predict(self, features: torch.Tensor) -> torch.Tensor: ...


# ----------------------------------------------------------------------------------------------
# Client


class FedICTClient(ClientRole):
    def __init__(self, context: ClientContext, params: FedICTParams) -> None:
        super().__init__(context, params)
        if not (callable(getattr(self.model, "extract", None)) and callable(getattr(self.model, "predict", None))):
            raise _not_split_error(f"client {context.client_id}", context.model_name)
        self.optimizer = self.round_optimizer(build=partial(_optimizer, nesterov=params.nesterov))  # a partial pickles
        self.index = SampleIndex(self.data.train_ids.numpy())
        if len(self.index) != len(self.data.train_y):
            raise ValueError("train_ids and train_y differ in length")
        C = self.data.num_classes
        self.distribution = self._distribution(context.rng)
        self.loss = client_loss(params, self.distribution, C)
        self.feature_precision = params.feature_precision or context.precision

    def _distribution(self, rng: np.random.Generator) -> np.ndarray:
        """d^k (Eq. 7), or its random replacement of the Tab. VIII ablation (§7.5)."""
        C = self.data.num_classes
        meta = self.params.dist_meta
        if meta == "none":
            return class_distribution(self.data.train_y.numpy(), C)
        s = DIST_META_SCALE
        x = {
            "uniform": lambda: rng.uniform(0.0, s, C),
            "normal": lambda: rng.normal(0.0, s, C),
            "exponential": lambda: rng.exponential(s, C),
        }[meta]()
        return _softmax(x)

    def hello(self) -> Payload:
        feature_shape = np.asarray(self.feature_shape(), dtype=np.int64)
        return Payload(
            "hello",
            self.client_id,
            -1,
            {
                "distribution": self.distribution.astype(np.float32),
                "labels": self.data.train_y.numpy().astype(np.int64),
                "ids": self.index.ids,
                "feature_shape": feature_shape,
            },
            {"samples": len(self.index)},
        )

    @torch.no_grad()
    def feature_shape(self) -> tuple[int, ...]:
        """Per-sample shape of H^k (the server checks that its model takes it)."""
        if len(self.data.train_x) == 0:
            return tuple(getattr(self.model, "feature_shape", ()))
        training = self.model.training
        self.model.eval()
        try:
            split = cast(_SplitLike, self.model)
            return tuple(forward(split.extract, self.data.train_x[:1], on=self.model).shape[1:])
        finally:
            self.model.train(training)

    def teacher(self, downlink: Payload | None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Server logits in the local row order, gathered by sample id, and which rows have one.

        None: no KD this round (``first_round_kd=skip`` before any server logits)."""
        n, C = len(self.index), self.data.num_classes
        if downlink is None:
            if self.params.first_round == "skip":
                return None
            return torch.zeros(n, C), torch.ones(n, dtype=torch.bool)  # zeros: the uniform target
        ids = downlink.arrays["ids"]
        logits = np.asarray(downlink.arrays["logits"], dtype=np.float32)
        if logits.shape != (len(ids), C):
            raise ValueError(f"server logits: expected shape ({len(ids)}, {C}), got {logits.shape}")
        rows = torch.from_numpy(self.index.rows(ids))
        table = torch.zeros(n, C)
        known = torch.zeros(n, dtype=torch.bool)
        table[rows] = torch.from_numpy(logits.copy())
        known[rows] = True
        return table, known

    def train_round(self, round: int, downlink: Payload | None) -> Payload:
        y = self.data.train_y
        teacher = self.teacher(downlink)
        if teacher is None:
            loss_fn = lambda logits, idx: nn.functional.cross_entropy(logits, y[idx])  # noqa: E731
        else:
            table, known = teacher
            mask = None if bool(known.all()) else known.to(torch.float32)
            loss = self.loss

            def loss_fn(logits: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
                return loss(logits, table[idx], y[idx], None if mask is None else mask[idx].contiguous())

        train_epochs(
            self.model,
            self.data.train_x,
            loss_fn,
            self.optimizer.for_round(),
            self.context.train,
            self.context.torch_generator,
            fixed_order=self.batch_order,
        )
        features, logits = self.extract()
        # features travel as [N, D_H] (one int8 scale per sample); the server knows their shape from hello
        arrays = {
            "ids": self.index.ids,
            "features": features.reshape(len(features), -1).numpy(),
            "logits": logits.numpy(),
        }
        if self.params.resend_labels:
            arrays["labels"] = y.numpy().astype(np.int64)
        payload = Payload("features", self.client_id, round, arrays)
        if self.feature_precision != "fp32":
            payload = payload.with_precision(self.feature_precision, ["features"])
        if self.context.precision != "fp32":
            payload = payload.with_precision(self.context.precision, ["logits"])
        return payload

    @torch.no_grad()
    def extract(self) -> tuple[torch.Tensor, torch.Tensor]:
        """H^k (Eq. 5) and Z^k (Eq. 6) of every training sample, eval-mode, in local row order."""
        self.model.eval()
        x = self.data.train_x
        step = self.context.train.eval_batch_size
        hs, zs = [], []
        split = cast(_SplitLike, self.model)
        for start in range(0, len(x), step):
            h = split.extract(to_model(self.model, x[start : start + step]))
            hs.append(h.to(x.device))
            zs.append(split.predict(h).to(x.device))
        return torch.cat(hs).contiguous(), torch.cat(zs).contiguous()


# ----------------------------------------------------------------------------------------------
# Server


@dataclass
class _ClientState:
    index: SampleIndex
    labels: torch.Tensor
    distribution: np.ndarray
    feature_shape: tuple[int, ...]
    server_logits: np.ndarray
    """Z^S in the canonical order of the client's hello (zeros until the first server pass)."""
    has_logits: bool = False
    loss: KDLoss | None = None


class FedICTServer(ServerRole):
    def __init__(self, context: ServerContext, params: FedICTParams) -> None:
        super().__init__(context, params)
        for cid, name in sorted(context.client_models.items()):
            if not _is_split(name):
                raise _not_split_error(f"client {cid}", name)
        self.model_name = self._server_model_name(context.input_shape)
        self.model = context.build_model(self.model_name)
        if not hasattr(self.model, "input_feature_shape"):
            raise ValueError(
                f"server_model {self.model_name!r} does not take client features; use "
                "fedict_server, fedict_server_small or fedict_fc_server"
            )
        self.optimizer = _optimizer(self.model.parameters(), context.train, params.nesterov)
        self.batch_size = params.server_batch_size or context.train.batch_size
        seed = np.random.SeedSequence([int(context.seed), 0xFED1C7])
        self.generator = torch.Generator().manual_seed(int(seed.generate_state(1, dtype=np.uint64)[0] % 2**63))
        self.order_rng = np.random.default_rng(seed.spawn(1)[0])
        self.clients: dict[str, _ClientState] = {}
        self.global_distribution: np.ndarray | None = None
        self._warned_signed = False

    def _server_model_name(self, input_shape: tuple[int, ...]) -> str:
        name = self.params.server_model
        if name != "auto":
            return name
        if len(input_shape) != 3:
            return "fedict_fc_server"
        return "fedict_server" if min(input_shape[1:]) >= 16 else "fedict_server_small"

    def start(self, hellos: dict[str, Payload]) -> None:
        C = self.num_classes
        server_model: Any = self.model  # torch types unknown Module attributes as Tensor | Module
        expected = tuple(int(s) for s in server_model.input_feature_shape)
        for cid in sorted(hellos):
            p = hellos[cid]
            index = SampleIndex(p.arrays["ids"])
            labels = np.asarray(p.arrays["labels"]).reshape(-1).astype(np.int64)
            d = np.asarray(p.arrays["distribution"], dtype=np.float64).reshape(-1)
            shape = tuple(int(s) for s in np.asarray(p.arrays["feature_shape"]).reshape(-1))
            n = int(p.scalars["samples"])
            if len(labels) != n or len(index) != n:
                raise ValueError(f"hello of {cid}: {n} samples but {len(labels)} labels and {len(index)} ids")
            if n and (labels.min() < 0 or labels.max() >= C):
                raise ValueError(f"hello of {cid}: labels must lie in [0, {C})")
            if d.shape != (C,) or not np.isfinite(d).all() or (d < 0).any() or abs(d.sum() - 1) > 1e-4:
                raise ValueError(f"hello of {cid}: distribution must be {C} non-negative numbers summing to 1")
            if shape != expected:
                raise ValueError(
                    f"client {cid} extracts features of shape {shape}, but the server model "
                    f"{self.model_name!r} takes {expected}; choose --param server_model=... to match"
                )
            self.clients[cid] = _ClientState(
                index, torch.from_numpy(labels), d, shape, np.zeros((n, C), dtype=np.float32)
            )
        if not self.clients:
            return
        counts = np.array([len(s.index) for s in self.clients.values()], dtype=np.float64)
        self.global_distribution = global_distribution([s.distribution for s in self.clients.values()], counts)
        total, k = counts.sum(), len(self.clients)
        for state in self.clients.values():
            scale = 1.0
            if self.params.lka_client_weighting == "client_uniform":
                scale = total / (k * max(len(state.index), 1))
            state.loss = server_loss(self.params, self.global_distribution, state.distribution, C, scale)
            if state.loss.signed and not self._warned_signed:
                self._warned_signed = True
                log.warning(
                    "fedict: the linear class-balanced LKA weights are signed; negative weights make "
                    "the server maximise KL on classes a client over-represents (spec §9 A6)"
                )

    def downlink(self, round: int, client_id: str) -> Payload | None:
        state = self.clients.get(client_id)
        if state is None:
            return None
        if not state.has_logits and self.params.first_round == "skip":
            return None
        payload = Payload("knowledge", "server", round, {"ids": state.index.ids, "logits": state.server_logits})
        precision = self.context.precision
        return payload.with_precision(precision, ["logits"]) if precision != "fp32" else payload

    def aggregate(self, round: int, uplinks: dict[str, Payload]) -> dict[str, float]:
        arrived = [cid for cid in sorted(uplinks) if cid in self.clients]
        if not arrived:
            return {}
        if self.params.server_order == "shuffled":
            arrived = [arrived[i] for i in self.order_rng.permutation(len(arrived))]
        generation = self.params.generation
        totals = np.zeros(4)  # loss * n, ce * n, correct, n
        pending = []
        for cid in arrived:
            state = self.clients[cid]
            rows, features, teacher = self._unpack(cid, state, uplinks[cid])
            trained = self._train(state, rows, features, teacher, totals, capture=generation == "train_forward")
            if generation == "after_client_pass":
                self._generate(state, rows, features)
            elif generation == "two_phase":
                pending.append((state, rows, features))
            elif generation == "train_forward":
                missed = ~trained
                if missed.any():
                    self._generate(state, rows[missed.numpy()], features[missed])
                state.has_logits = True
        for state, rows, features in pending:
            self._generate(state, rows, features)
        n = max(totals[3], 1.0)
        return {
            "server_loss": totals[0] / n,
            "server_ce": totals[1] / n,
            "server_accuracy": totals[2] / n,
            "server_clients": float(len(arrived)),
        }

    def _unpack(self, cid: str, state: _ClientState, payload: Payload):
        rows = state.index.rows(payload.arrays["ids"])
        features = np.asarray(payload.arrays["features"], dtype=np.float32)
        logits = np.asarray(payload.arrays["logits"], dtype=np.float32)
        n = len(rows)
        flat = (n, int(np.prod(state.feature_shape, dtype=np.int64)))
        if features.shape not in (flat, (n,) + state.feature_shape):
            raise ValueError(
                f"uplink of {cid}: features of shape {features.shape}, expected {flat} "
                f"(or {(n,) + state.feature_shape})"
            )
        features = features.reshape((n,) + state.feature_shape)
        if logits.shape != (n, self.num_classes):
            raise ValueError(f"uplink of {cid}: logits of shape {logits.shape}, expected {(n, self.num_classes)}")
        if "labels" in payload.arrays and not np.array_equal(
            np.asarray(payload.arrays["labels"]).reshape(-1), state.labels.numpy()[rows]
        ):
            raise ValueError(f"uplink of {cid}: labels disagree with the hello's labels for the same sample ids")
        return rows, torch.from_numpy(features.copy()), torch.from_numpy(logits.copy())

    def _train(
        self,
        state: _ClientState,
        rows: np.ndarray,
        features: torch.Tensor,
        teacher: torch.Tensor,
        totals: np.ndarray,
        capture: bool,
    ) -> torch.Tensor:
        """``server_epochs`` passes of J^S_ICT over one client's uploaded samples; returns which
        samples got train-forward logits (``capture``: written into Z^S by id)."""
        labels = state.labels[torch.from_numpy(rows)]
        trained = torch.zeros(len(rows), dtype=torch.bool)
        skip_singletons = has_batchnorm(self.model)
        self.model.train()
        assert state.loss is not None  # start() sets every client's loss
        for _ in range(self.params.server_epochs):
            for idx in batches(len(rows), self.batch_size, self.generator):
                if len(idx) < 2 and skip_singletons:
                    continue  # BatchNorm cannot train on one sample (§9 A16)
                out = forward(self.model, features[idx])
                loss, ce = state.loss.components(out, teacher[idx], labels[idx])
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()
                b = len(idx)
                totals += (loss.item() * b, ce.item() * b, float((out.argmax(1) == labels[idx]).sum()), b)
                if capture:
                    state.server_logits[rows[idx.numpy()]] = out.detach().numpy()
                    trained[idx] = True
        return trained

    def _generate(self, state: _ClientState, rows: np.ndarray, features: torch.Tensor) -> None:
        """Z^S = f(H^k; W^S) (Eq. 3), eval mode, scattered into the canonical order by id."""
        if len(rows):
            state.server_logits[rows] = predict_logits(self.model, features, self.context.train.eval_batch_size).numpy()
        state.has_logits = True


def _is_split(name: str) -> bool:
    from edgefd.models import model_entry

    try:
        return model_entry(name).split
    except ValueError:
        return True  # not a zoo name (a custom model): the client checks for extract/predict


FEDICT_PAPER = (
    "Z. Wu et al., FedICT: Federated Multi-task Distillation for Multi-access Edge Computing, IEEE TPDS 35(6) "
    "2024, DOI 10.1109/TPDS.2023.3289444"
)


def fedict_family(input_shape: tuple[int, ...]) -> str:
    """The paper's heterogeneous clients: A^C_1..A^C_5 on images, the fully-connected A^C_6..A^C_8 on
    sensor data (each split into extractor and predictor, as FedICT needs)."""
    if len(input_shape) == 3:
        return "fedict_c1,fedict_c2,fedict_c3,fedict_c4,fedict_c5"
    return "fedict_fc6,fedict_fc7,fedict_fc8"


register(
    "fedict",
    "FedICT: per-sample feature/logit co-distillation with FPKD (client) and LKA (server)",
    FedICTClient,
    FedICTServer,
    FedICTParams,
    paper=FEDICT_PAPER,
    models=fedict_family,
)
register(
    "fedgkt",
    "FedGKT: FedICT's protocol and losses with lam = mu = 0 (plain CE + beta KL both sides)",
    FedICTClient,
    FedICTServer,
    FedGKTParams,
    paper="C. He et al., Group Knowledge Transfer: Federated Learning of Large CNNs at the Edge, NeurIPS 2020 "
    "(here: " + FEDICT_PAPER + ", with lam = mu = 0)",
    models=fedict_family,
)
