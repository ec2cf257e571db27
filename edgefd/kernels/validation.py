"""Input checks shared by every backend: bad input raises ``ValueError`` naming the argument,
whichever implementation would have run."""

from __future__ import annotations

import math

import torch


def check_tensor(t: object, name: str, ndim: int, dtype: torch.dtype) -> torch.Tensor:
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


def check_float(t: object, name: str, ndim: int) -> torch.Tensor:
    return check_tensor(t, name, ndim, torch.float32)


def check_index(t: object, name: str, ndim: int) -> torch.Tensor:
    return check_tensor(t, name, ndim, torch.int64)


def check_size(t: torch.Tensor, name: str, dim: int, expected: int, what: str) -> None:
    if t.shape[dim] != expected:
        raise ValueError(f"{name}: dimension {dim} has size {t.shape[dim]}, expected {expected} ({what})")


def check_weight(w: torch.Tensor | None, name: str, size: int, what: str) -> None:
    if w is None:
        return
    check_float(w, name, 1)
    check_size(w, name, 0, size, what)
    if w.requires_grad:
        raise ValueError(f"{name}: weights are constants; pass a tensor that does not require grad")
    if torch.isnan(w).any():
        raise ValueError(f"{name}: contains NaN")
    if (w < 0).any():
        raise ValueError(f"{name}: contains negative values")


def check_student(student_logits: object) -> tuple[int, int]:
    """A non-empty [B, C] float32 batch of logits; returns (B, C)."""
    batch, classes = check_float(student_logits, "student_logits", 2).shape
    if batch == 0:
        raise ValueError("student_logits: empty batch (B = 0)")
    if classes == 0:
        raise ValueError("student_logits: no classes (C = 0)")
    return batch, classes


def check_temperature(temperature: object) -> float:
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature: must be a finite number > 0, got {temperature!r}")
    return float(temperature)


def check_range(values: torch.Tensor, name: str, low: int, high: int, what: str) -> None:
    """Every value in [low, high) (the compiled kernels check this while they read; the torch
    reference needs it done first)."""
    if not values.numel():
        return
    smallest, largest = int(values.min()), int(values.max())
    if smallest < low or largest >= high:
        bad = smallest if smallest < low else largest
        raise ValueError(f"{name}: {what} {bad} is outside [{low}, {high})")


def same_device(first: torch.Tensor, **others: torch.Tensor | None) -> None:
    for name, t in others.items():
        if t is not None and t.device != first.device:
            raise ValueError(f"{name}: on {t.device}, but the other inputs are on {first.device}")
