"""The pure-torch references of the four kernels: the equations written plainly, differentiable
through autograd. No validation here: :mod:`edgefd.kernels` checks the input before any backend
or reference runs. They are the fallback when the C++ extension is missing, the `torch` backend,
and what the tests and `edgefd bench kernels` compare the compiled kernels against."""

from __future__ import annotations

import torch


def weighted_kl(
    student_logits: torch.Tensor,
    teacher: torch.Tensor,
    *,
    temperature: float = 1.0,
    sample_weight: torch.Tensor | None = None,
    class_weight: torch.Tensor | None = None,
    teacher_is_prob: bool = False,
) -> torch.Tensor:
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


def sl_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    q = torch.softmax(student_logits, dim=1)
    m = torch.softmax(teacher_logits, dim=2).mean(dim=0)
    return (q - m).abs().sum() / student_logits.shape[0]


def labelwise_mean(
    logits: torch.Tensor, labels: torch.Tensor, num_classes: int, sample_weight: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    weights = torch.ones_like(labels, dtype=logits.dtype) if sample_weight is None else sample_weight
    sums = logits.new_zeros((num_classes, logits.shape[1])).index_add(0, labels, logits * weights[:, None])
    totals = logits.new_zeros(num_classes).index_add(0, labels, weights)
    counts = torch.bincount(labels, minlength=num_classes)
    safe = torch.where(totals > 0, totals, torch.ones_like(totals))
    means = torch.where((totals > 0)[:, None], sums / safe[:, None], torch.zeros_like(sums))
    return means, counts


def gather_mean(cache: torch.Tensor, neighbours: torch.Tensor) -> torch.Tensor:
    valid = neighbours >= 0
    if cache.shape[0] == 0:
        return cache.new_zeros((neighbours.shape[0], cache.shape[1]))
    rows = cache[neighbours.clamp(min=0)] * valid[..., None]
    found = valid.sum(dim=1, keepdim=True).to(cache.dtype)
    return rows.sum(dim=1) / found.clamp(min=1)
