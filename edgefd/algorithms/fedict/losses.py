"""FedICT's O(C) quantities (class distributions, FPKD and LKA weights) and its KD losses (Eq. 2-14;
docs/methods/fedict.md#what-the-paper-does)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from edgefd import kernels
from edgefd.algorithms.fedict.params import REFERENCE_EXTRA_TEMPERATURE, REFERENCE_TEACHER_EPS, FedICTParams

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------
# The O(C) quantities (Eq. 7, 11, 12, 14; Alg. 2 l.8)


def class_distribution(labels, num_classes: int) -> np.ndarray:
    """d^k_r = (1/N^k) sum_i 1[y_i = r] (Eq. 7), float64 [C]. All samples count
    (docs/methods/fedict.md#class-distribution-vectors)."""
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


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def fpkd_weights(d_k, T: float, form: str = "softmax") -> np.ndarray:
    """FPKD class weights w^k: softmax(d^k / T) (Eq. 11) or the demo's d^k / T
    (docs/methods/fedict.md#softmax-or-linear-weights)."""
    d = np.asarray(d_k, dtype=np.float64)
    return softmax(d / T) if form == "softmax" else d / T


def lka_balance_weights(d_S, d_k, U: float, form: str = "softmax") -> np.ndarray:
    """Class-balanced LKA weights v^k: softmax((d^S - d^k) / U) (Eq. 14) or the demo's signed
    (d^S - d^k) / U (docs/methods/fedict.md#softmax-or-linear-weights)."""
    r = np.asarray(d_S, dtype=np.float64) - np.asarray(d_k, dtype=np.float64)
    return softmax(r / U) if form == "softmax" else r / U


def cosine_similarity(d_S, d_k) -> float:
    """cos_k = d^S . d^k / (|d^S| |d^k|) (Eq. 12); 0 if either vector is zero."""
    a = np.asarray(d_S, dtype=np.float64)
    b = np.asarray(d_k, dtype=np.float64)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return 0.0 if na == 0 or nb == 0 else float(a @ b / (na * nb))


# ----------------------------------------------------------------------------------------------
# Losses (Eq. 2, 4, 8-14; docs/methods/fedict.md#reference-profile)


@dataclass
class KDLoss:
    """``ce_weight * CE(s, y) + kd_weight * (KL_w(s, t) + [extra] EXTRA(s, t))``.

    ``KL_w = T^2/B sum_b m_b sum_r omega_r q_br (log q_br - log p_br)`` with ``p = softmax(s / T)``,
    ``q = softmax(t / T) (+ teacher_eps)`` and ``m`` the optional row mask; ``omega`` may be signed
    (applied as KL_w(omega+) - KL_w(omega-), which is exact because KL_w is linear in omega).
    ``EXTRA`` is the demo's double softmax (docs/methods/fedict.md#reference-profile): ``9/B sum_b sum_r q2 (log q2 -
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
