"""The hot loops of federated distillation, as differentiable torch functions.

Four kernels serve every method in edgefd:

``weighted_kl``     KL(teacher || student) with per-sample and per-class weights and a temperature
                    (FedICT's FPKD and LKA, FedCache, DFL, FedD2S, FedZKT's transfer-back step);
``sl_loss``         FedZKT's L1 distance between student and mean-teacher probabilities;
``labelwise_mean``  per-class mean of logits (FD, DFL and FedD2S soft targets);
``gather_mean``     mean of each sample's neighbours' cached logits (FedCache's lookup).

Each has two implementations that give the same numbers: the C++ extension ``edgefd._kernels``
(OpenMP over rows, vectorised exp/log, forward and backward fused) and a pure-torch reference
written to read like the equations. ``set_backend("cpp" | "torch")`` or the environment variable
``EDGEFD_KERNELS`` chooses; ``cpp`` is the default, and the torch reference is the fallback when
the extension is not built. CUDA tensors go to the CUDA kernels (:mod:`edgefd.kernels_cuda`, built
only with ``EDGEFD_CUDA=ON``; compiled but never run on a GPU) under ``cpp``, and to the torch
reference otherwise. Input is validated the same way for both backends and bad input
raises ``ValueError`` naming the argument.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from edgefd import kernels_cuda as _cuda

try:
    import edgefd._kernels as _cpp
except ImportError as error:  # the extension is optional at import time; see set_backend
    _cpp = None
    _CPP_IMPORT_ERROR: ImportError | None = error
else:
    _CPP_IMPORT_ERROR = None

BACKENDS = ("cpp", "torch")

__all__ = [
    "BACKENDS",
    "cpp_available",
    "gather_mean",
    "get_backend",
    "labelwise_mean",
    "set_backend",
    "set_num_threads",
    "sl_loss",
    "use_backend",
    "weighted_kl",
    "reference",
]


# ----------------------------------------------------------------------------------------------
# Backend selection


def cpp_available() -> bool:
    """Whether the compiled extension could be imported."""
    return _cpp is not None


def _initial_backend() -> str:
    requested = os.environ.get("EDGEFD_KERNELS", "").strip().lower()
    if requested:
        if requested not in BACKENDS:
            raise ValueError(f"EDGEFD_KERNELS={requested!r}: expected one of {BACKENDS}")
        if requested == "cpp" and _cpp is None:
            raise ImportError(f"EDGEFD_KERNELS=cpp but the C++ extension is missing: {_CPP_IMPORT_ERROR}")
        return requested
    if _cpp is None:
        warnings.warn(
            f"edgefd C++ kernels are not built ({_CPP_IMPORT_ERROR}); using the torch reference. "
            "Reinstall with `pip install .` to build them.",
            RuntimeWarning,
            stacklevel=2,
        )
        return "torch"
    return "cpp"


_backend = _initial_backend()


def get_backend() -> str:
    return _backend


def set_backend(name: str) -> None:
    """Choose the implementation every kernel call uses from now on: "cpp" or "torch"."""
    global _backend
    if name not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {name!r}")
    if name == "cpp" and _cpp is None:
        raise ImportError(f"the C++ extension is not available: {_CPP_IMPORT_ERROR}")
    _backend = name


@contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Temporarily switch backend (tests and benchmarks compare the two)."""
    previous = _backend
    set_backend(name)
    try:
        yield
    finally:
        set_backend(previous)


def set_num_threads(n: int) -> None:
    """Threads for both backends (the C++ OpenMP pool and torch's intra-op pool)."""
    if n < 1:
        raise ValueError(f"num_threads: must be >= 1, got {n}")
    torch.set_num_threads(n)
    if _cpp is not None:
        _cpp.set_num_threads(n)


# ----------------------------------------------------------------------------------------------
# Validation shared by both backends


def _check_tensor(t: object, name: str, ndim: int, dtype: torch.dtype) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise ValueError(f"{name}: expected dtype {str(dtype).removeprefix('torch.')}, got {t.dtype}")
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{name}: expected a CPU or CUDA tensor, got device {t.device}")
    if t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(t.shape)}")
    if not t.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous tensor (call .contiguous())")
    return t


def _check_float(t: object, name: str, ndim: int) -> torch.Tensor:
    return _check_tensor(t, name, ndim, torch.float32)


def _check_index(t: object, name: str, ndim: int) -> torch.Tensor:
    return _check_tensor(t, name, ndim, torch.int64)


def _check_size(t: torch.Tensor, name: str, dim: int, expected: int, what: str) -> None:
    if t.shape[dim] != expected:
        raise ValueError(f"{name}: dimension {dim} has size {t.shape[dim]}, expected {expected} ({what})")


def _check_weight(w: torch.Tensor | None, name: str, size: int, what: str) -> None:
    if w is None:
        return
    _check_float(w, name, 1)
    _check_size(w, name, 0, size, what)
    if w.requires_grad:
        raise ValueError(f"{name}: weights are constants; pass a tensor that does not require grad")
    if torch.isnan(w).any():
        raise ValueError(f"{name}: contains NaN")
    if (w < 0).any():
        raise ValueError(f"{name}: contains negative values")


def _check_student(student_logits: object) -> tuple[int, int]:
    """A non-empty [B, C] float32 batch of logits; returns (B, C)."""
    batch, classes = _check_float(student_logits, "student_logits", 2).shape
    if batch == 0:
        raise ValueError("student_logits: empty batch (B = 0)")
    if classes == 0:
        raise ValueError("student_logits: no classes (C = 0)")
    return batch, classes


def _same_device(first: torch.Tensor, **others: torch.Tensor | None) -> None:
    for name, t in others.items():
        if t is not None and t.device != first.device:
            raise ValueError(f"{name}: on {t.device}, but the other inputs are on {first.device}")


def _route(t: torch.Tensor) -> str:
    """Which implementation runs: "cpp" (C++ on CPU tensors), "cuda" (the CUDA extension on
    CUDA tensors, when built) or "torch" (the reference: chosen, or CUDA without the extension)."""
    if _backend == "torch":
        return "torch"
    if t.is_cuda:
        return "cuda" if _cuda.available() else "torch"
    return "cpp"


def _numpy(t: torch.Tensor | None):
    return None if t is None else t.detach().numpy()


# ----------------------------------------------------------------------------------------------
# weighted_kl


def weighted_kl(
    student_logits: torch.Tensor,
    teacher: torch.Tensor,
    *,
    temperature: float = 1.0,
    sample_weight: torch.Tensor | None = None,
    class_weight: torch.Tensor | None = None,
    teacher_is_prob: bool = False,
) -> torch.Tensor:
    """``T^2/B * sum_i w_i sum_c v_c p_ic (log p_ic - log q_ic)``, a scalar.

    ``p = softmax(teacher / T)`` (or ``teacher`` itself when ``teacher_is_prob``), ``q =
    softmax(student_logits / T)``, ``0 log 0 = 0``. Differentiable w.r.t. ``student_logits``; the
    teacher is a constant (it is detached).
    """
    batch, classes = _check_student(student_logits)
    _check_float(teacher, "teacher", 2)
    _check_size(teacher, "teacher", 0, batch, "B of student_logits")
    _check_size(teacher, "teacher", 1, classes, "C of student_logits")
    _check_weight(sample_weight, "sample_weight", batch, "B of student_logits")
    _check_weight(class_weight, "class_weight", classes, "C of student_logits")
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature: must be a finite number > 0, got {temperature!r}")
    if teacher_is_prob and ((teacher < 0).any() or torch.isnan(teacher).any()):
        raise ValueError("teacher: probabilities must be >= 0 and not NaN when teacher_is_prob=True")
    _same_device(student_logits, teacher=teacher, sample_weight=sample_weight, class_weight=class_weight)
    teacher = teacher.detach()
    route = _route(student_logits)
    if route == "cuda":
        return _cuda.WeightedKL.apply(
            student_logits, teacher, float(temperature), sample_weight, class_weight, teacher_is_prob
        )
    if route == "cpp":
        return _WeightedKL.apply(
            student_logits, teacher, float(temperature), sample_weight, class_weight, teacher_is_prob
        )
    return reference.weighted_kl(
        student_logits,
        teacher,
        temperature=temperature,
        sample_weight=sample_weight,
        class_weight=class_weight,
        teacher_is_prob=teacher_is_prob,
    )


class _WeightedKL(torch.autograd.Function):
    """Forward computes the gradient too (same pass over the rows); backward only scales it.

    The gradient is kept on ctx (not saved_tensors) and released in backward, so that autograd
    can hand the buffer itself to ``.grad`` instead of copying it."""

    @staticmethod
    def forward(ctx, student, teacher, temperature, sample_weight, class_weight, teacher_is_prob):
        grad = torch.empty_like(student) if ctx.needs_input_grad[0] else None
        loss = _cpp.weighted_kl(
            student.detach().numpy(),
            teacher.numpy(),
            temperature,
            _numpy(sample_weight),
            _numpy(class_weight),
            teacher_is_prob,
            _numpy(grad),
        )
        ctx.grad = grad
        return student.new_tensor(loss)

    @staticmethod
    def backward(ctx, grad_output):
        grad, ctx.grad = ctx.grad, None
        return _scaled(grad, grad_output), None, None, None, None, None


def _scaled(grad: torch.Tensor | None, grad_output: torch.Tensor) -> torch.Tensor | None:
    """d loss/d input times the incoming gradient (no copy for the usual `loss.backward()`)."""
    if grad is None or bool(grad_output == 1):
        return grad
    return grad * grad_output


# ----------------------------------------------------------------------------------------------
# sl_loss


def sl_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """``1/B sum_i sum_c |softmax(student)_ic - mean_k softmax(teacher_k)_ic|``, a scalar.

    Differentiable w.r.t. the student and the teachers (FedZKT's generator step needs both).
    """
    batch, classes = _check_student(student_logits)
    _check_float(teacher_logits, "teacher_logits", 3)
    if teacher_logits.shape[0] == 0:
        raise ValueError("teacher_logits: no teachers (K = 0)")
    _check_size(teacher_logits, "teacher_logits", 1, batch, "B of student_logits")
    _check_size(teacher_logits, "teacher_logits", 2, classes, "C of student_logits")
    _same_device(student_logits, teacher_logits=teacher_logits)
    route = _route(student_logits)
    if route == "cuda":
        return _cuda.SLLoss.apply(student_logits, teacher_logits)
    if route == "cpp":
        return _SLLoss.apply(student_logits, teacher_logits)
    return reference.sl_loss(student_logits, teacher_logits)


class _SLLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, student, teacher):
        grad_s = torch.empty_like(student) if ctx.needs_input_grad[0] else None
        grad_t = torch.empty_like(teacher) if ctx.needs_input_grad[1] else None
        loss = _cpp.sl_loss(student.detach().numpy(), teacher.detach().numpy(), _numpy(grad_s), _numpy(grad_t))
        ctx.grads = (grad_s, grad_t)
        return student.new_tensor(loss)

    @staticmethod
    def backward(ctx, grad_output):
        (grad_s, grad_t), ctx.grads = ctx.grads, None
        return _scaled(grad_s, grad_output), _scaled(grad_t, grad_output)


# ----------------------------------------------------------------------------------------------
# labelwise_mean


def labelwise_mean(
    logits: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    sample_weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class (weighted) mean of the rows of ``logits``.

    Returns ``(means [num_classes, C], counts [num_classes] int64)``; ``counts`` is the number of
    rows of each class. A class with no rows, or whose rows all have weight 0, gets a zero row.
    Differentiable w.r.t. ``logits``.
    """
    _check_float(logits, "logits", 2)
    _check_index(labels, "labels", 1)
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes <= 0:
        raise ValueError(f"num_classes: must be a positive int, got {num_classes!r}")
    rows, _ = logits.shape
    if rows == 0:
        raise ValueError("logits: empty batch (N = 0)")
    _check_size(labels, "labels", 0, rows, "N of logits")
    _check_weight(sample_weight, "sample_weight", rows, "N of logits")
    _same_device(logits, labels=labels, sample_weight=sample_weight)
    route = _route(logits)
    if route == "cuda":  # the C++ and CUDA kernels check label range while they read them
        return _cuda.LabelwiseMean.apply(logits, labels, num_classes, sample_weight)
    if route == "cpp":
        return _LabelwiseMean.apply(logits, labels, num_classes, sample_weight)
    low, high = int(labels.min()), int(labels.max())
    if low < 0 or high >= num_classes:
        bad = low if low < 0 else high
        raise ValueError(f"labels: value {bad} is outside [0, {num_classes})")
    return reference.labelwise_mean(logits, labels, num_classes, sample_weight)


class _LabelwiseMean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, labels, num_classes, sample_weight):
        means = logits.new_empty((num_classes, logits.shape[1]))
        counts = torch.empty(num_classes, dtype=torch.int64)
        _cpp.labelwise_mean(
            logits.detach().numpy(), labels.numpy(), num_classes, _numpy(sample_weight), means.numpy(), counts.numpy()
        )
        ctx.save_for_backward(labels, sample_weight)
        ctx.mark_non_differentiable(counts)
        return means, counts

    @staticmethod
    def backward(ctx, grad_means, _grad_counts):
        labels, sample_weight = ctx.saved_tensors
        grad_x = grad_means.new_empty((labels.shape[0], grad_means.shape[1]))
        _cpp.labelwise_mean_backward(
            grad_means.contiguous().numpy(), labels.numpy(), _numpy(sample_weight), grad_x.numpy()
        )
        return grad_x, None, None, None


# ----------------------------------------------------------------------------------------------
# gather_mean


def gather_mean(cache: torch.Tensor, neighbours: torch.Tensor) -> torch.Tensor:
    """Mean of the cache rows named in each row of ``neighbours`` (``[n, R]`` int64).

    An id of -1 means "no neighbour" and is left out of that row's mean; a row with none gives
    zeros. Differentiable w.r.t. ``cache``.
    """
    _check_float(cache, "cache", 2)
    _check_index(neighbours, "neighbours", 2)
    if cache.shape[0] == 0 and neighbours.numel() and bool((neighbours >= 0).any()):
        raise ValueError("cache: empty (M = 0) but neighbours name rows of it")
    _same_device(cache, neighbours=neighbours)
    route = _route(cache)
    if route == "cuda":  # the C++ and CUDA kernels check id range while they read them
        return _cuda.GatherMean.apply(cache, neighbours)
    if route == "cpp":
        return _GatherMean.apply(cache, neighbours)
    if neighbours.numel():
        low, high = int(neighbours.min()), int(neighbours.max())
        if low < -1 or high >= cache.shape[0]:
            bad = low if low < -1 else high
            raise ValueError(f"neighbours: id {bad} is outside [-1, {cache.shape[0]})")
    return reference.gather_mean(cache, neighbours)


class _GatherMean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cache, neighbours):
        result = cache.new_empty((neighbours.shape[0], cache.shape[1]))
        _cpp.gather_mean(cache.detach().numpy(), neighbours.numpy(), result.numpy())
        ctx.save_for_backward(neighbours)
        ctx.cache_rows = cache.shape[0]
        return result

    @staticmethod
    def backward(ctx, grad_out):
        (neighbours,) = ctx.saved_tensors
        grad_cache = grad_out.new_empty((ctx.cache_rows, grad_out.shape[1]))
        _cpp.gather_mean_backward(grad_out.contiguous().numpy(), neighbours.numpy(), grad_cache.numpy())
        return grad_cache, None


# ----------------------------------------------------------------------------------------------
# The pure-torch references: the equations, written plainly, differentiable through autograd.


class reference:  # noqa: N801 - a namespace, used as edgefd.kernels.reference.weighted_kl
    """Pure-torch implementations. No validation: call the public functions for that."""

    @staticmethod
    def weighted_kl(
        student_logits, teacher, *, temperature=1.0, sample_weight=None, class_weight=None, teacher_is_prob=False
    ):
        t = float(temperature)
        log_q = torch.log_softmax(student_logits / t, dim=1)
        if teacher_is_prob:
            p = teacher
            plogp = torch.xlogy(p, p)
        else:
            log_p = torch.log_softmax(teacher / t, dim=1)
            p = log_p.exp()
            plogp = p * log_p
        terms = plogp - p * log_q
        if class_weight is not None:
            terms = terms * class_weight
        rows = terms.sum(dim=1)
        if sample_weight is not None:
            rows = rows * sample_weight
        return rows.sum() * (t * t / student_logits.shape[0])

    @staticmethod
    def sl_loss(student_logits, teacher_logits):
        q = torch.softmax(student_logits, dim=1)
        m = torch.softmax(teacher_logits, dim=2).mean(dim=0)
        return (q - m).abs().sum() / student_logits.shape[0]

    @staticmethod
    def labelwise_mean(logits, labels, num_classes, sample_weight=None):
        weights = torch.ones_like(labels, dtype=logits.dtype) if sample_weight is None else sample_weight
        sums = logits.new_zeros((num_classes, logits.shape[1])).index_add(0, labels, logits * weights[:, None])
        totals = logits.new_zeros(num_classes).index_add(0, labels, weights)
        counts = torch.bincount(labels, minlength=num_classes)
        safe = torch.where(totals > 0, totals, torch.ones_like(totals))
        means = torch.where((totals > 0)[:, None], sums / safe[:, None], torch.zeros_like(sums))
        return means, counts

    @staticmethod
    def gather_mean(cache, neighbours):
        valid = neighbours >= 0
        if cache.shape[0] == 0:
            return cache.new_zeros((neighbours.shape[0], cache.shape[1]))
        rows = cache[neighbours.clamp(min=0)] * valid[..., None]
        found = valid.sum(dim=1, keepdim=True).to(cache.dtype)
        return rows.sum(dim=1) / found.clamp(min=1)
