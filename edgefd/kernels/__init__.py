"""The hot loops of federated distillation, as differentiable torch functions.

Four kernels serve every method in edgefd:

``weighted_kl``     KL(teacher || student) with per-sample and per-class weights and a temperature
                    (FedICT's FPKD and LKA, FedCache, DFL, FedD2S, FedZKT's transfer-back step);
``sl_loss``         FedZKT's L1 distance between student and mean-teacher probabilities;
``labelwise_mean``  per-class mean of logits (FD, DFL and FedD2S soft targets);
``gather_mean``     mean of each sample's neighbours' cached logits (FedCache's lookup).

The package, top to bottom: this module is the API (validation, then dispatch);
:mod:`.functions` holds one autograd Function per kernel over a backend; :mod:`.cpu` (the C++
extension ``edgefd._kernels``) and :mod:`.cuda` (``edgefd._kernels_cuda``, built only with
``EDGEFD_CUDA=ON``; compiled but never run on a GPU) are the backends; :mod:`.reference` holds
the pure-torch references, written to read like the equations, that give the same numbers;
:mod:`.validation` the checks.

``set_backend("cpp" | "torch")`` or the environment variable ``EDGEFD_KERNELS`` chooses; ``cpp``
is the default, and the torch reference is the fallback when the extension is not built. Under
``cpp`` CPU tensors go to the C++ kernels and CUDA tensors to the CUDA kernels (the reference when
those are not built). Input is validated the same way whatever runs, and bad input raises
``ValueError`` naming the argument.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from . import cpu, cuda, reference
from .functions import Backend, GatherMean, LabelwiseMean, SLLoss, WeightedKL
from .validation import (
    check_float,
    check_index,
    check_range,
    check_size,
    check_student,
    check_temperature,
    check_weight,
    same_device,
)

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
    """Whether the compiled C++ extension could be imported."""
    return cpu.available()


def _initial_backend() -> str:
    requested = os.environ.get("EDGEFD_KERNELS", "").strip().lower()
    if requested:
        if requested not in BACKENDS:
            raise ValueError(f"EDGEFD_KERNELS={requested!r}: expected one of {BACKENDS}")
        if requested == "cpp" and not cpu.available():
            raise ImportError(f"EDGEFD_KERNELS=cpp but the C++ extension is missing: {cpu.IMPORT_ERROR}")
        return requested
    if not cpu.available():
        warnings.warn(
            f"edgefd C++ kernels are not built ({cpu.IMPORT_ERROR}); using the torch reference. "
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
    if name == "cpp" and not cpu.available():
        raise ImportError(f"the C++ extension is not available: {cpu.IMPORT_ERROR}")
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
    cpu.set_num_threads(n)


def _route(t: torch.Tensor) -> Backend | None:
    """The backend that runs a call on ``t``'s device, or None for the torch reference (chosen, or
    a CUDA tensor without the CUDA extension)."""
    if _backend == "torch":
        return None
    if t.is_cuda:
        return cuda.BACKEND if cuda.available() else None
    return cpu.BACKEND


# ----------------------------------------------------------------------------------------------
# The kernels


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
    batch, classes = check_student(student_logits)
    check_float(teacher, "teacher", 2)
    check_size(teacher, "teacher", 0, batch, "B of student_logits")
    check_size(teacher, "teacher", 1, classes, "C of student_logits")
    check_weight(sample_weight, "sample_weight", batch, "B of student_logits")
    check_weight(class_weight, "class_weight", classes, "C of student_logits")
    temperature = check_temperature(temperature)
    if teacher_is_prob and ((teacher < 0).any() or torch.isnan(teacher).any()):
        raise ValueError("teacher: probabilities must be >= 0 and not NaN when teacher_is_prob=True")
    same_device(student_logits, teacher=teacher, sample_weight=sample_weight, class_weight=class_weight)
    teacher = teacher.detach()
    backend = _route(student_logits)
    if backend is None:
        return reference.weighted_kl(
            student_logits,
            teacher,
            temperature=temperature,
            sample_weight=sample_weight,
            class_weight=class_weight,
            teacher_is_prob=teacher_is_prob,
        )
    return WeightedKL.apply(backend, student_logits, teacher, temperature, sample_weight, class_weight, teacher_is_prob)


def sl_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """``1/B sum_i sum_c |softmax(student)_ic - mean_k softmax(teacher_k)_ic|``, a scalar.

    Differentiable w.r.t. the student and the teachers (FedZKT's generator step needs both).
    """
    batch, classes = check_student(student_logits)
    check_float(teacher_logits, "teacher_logits", 3)
    if teacher_logits.shape[0] == 0:
        raise ValueError("teacher_logits: no teachers (K = 0)")
    check_size(teacher_logits, "teacher_logits", 1, batch, "B of student_logits")
    check_size(teacher_logits, "teacher_logits", 2, classes, "C of student_logits")
    same_device(student_logits, teacher_logits=teacher_logits)
    backend = _route(student_logits)
    if backend is None:
        return reference.sl_loss(student_logits, teacher_logits)
    return SLLoss.apply(backend, student_logits, teacher_logits)


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
    check_float(logits, "logits", 2)
    check_index(labels, "labels", 1)
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes <= 0:
        raise ValueError(f"num_classes: must be a positive int, got {num_classes!r}")
    rows, _ = logits.shape
    if rows == 0:
        raise ValueError("logits: empty batch (N = 0)")
    check_size(labels, "labels", 0, rows, "N of logits")
    check_weight(sample_weight, "sample_weight", rows, "N of logits")
    same_device(logits, labels=labels, sample_weight=sample_weight)
    backend = _route(logits)
    if backend is None:  # the compiled kernels check the label range while they read the labels
        check_range(labels, "labels", 0, num_classes, "value")
        return reference.labelwise_mean(logits, labels, num_classes, sample_weight)
    return LabelwiseMean.apply(backend, logits, labels, num_classes, sample_weight)


def gather_mean(cache: torch.Tensor, neighbours: torch.Tensor) -> torch.Tensor:
    """Mean of the cache rows named in each row of ``neighbours`` (``[n, R]`` int64).

    An id of -1 means "no neighbour" and is left out of that row's mean; a row with none gives
    zeros. Differentiable w.r.t. ``cache``.
    """
    check_float(cache, "cache", 2)
    check_index(neighbours, "neighbours", 2)
    if cache.shape[0] == 0 and neighbours.numel() and bool((neighbours >= 0).any()):
        raise ValueError("cache: empty (M = 0) but neighbours name rows of it")
    same_device(cache, neighbours=neighbours)
    backend = _route(cache)
    if backend is None:  # the compiled kernels check the id range while they read the ids
        check_range(neighbours, "neighbours", -1, cache.shape[0], "id")
        return reference.gather_mean(cache, neighbours)
    return GatherMean.apply(backend, cache, neighbours)
