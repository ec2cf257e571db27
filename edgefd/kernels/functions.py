"""One autograd Function per kernel, over a backend.

A backend (:mod:`.cpu`, :mod:`.cuda`) fills buffers the Function allocated: the forward pass of a
loss computes its gradient in the same pass over the rows, and the backward pass only scales it.
So the autograd plumbing (what is saved, what is differentiable, how the incoming gradient is
applied) is written once, and a backend is four forward and two backward calls."""

from __future__ import annotations

from typing import Any, Protocol

import torch


class Backend(Protocol):
    """The compiled kernels of one device type, called on validated, contiguous tensors."""

    name: str

    def weighted_kl(
        self,
        student: torch.Tensor,
        teacher: torch.Tensor,
        temperature: float,
        sample_weight: torch.Tensor | None,
        class_weight: torch.Tensor | None,
        teacher_is_prob: bool,
        grad: torch.Tensor | None,
    ) -> torch.Tensor:
        """The loss (a scalar of the student's dtype); fills ``grad`` (d loss / d student) if given."""
        ...

    def sl_loss(
        self,
        student: torch.Tensor,
        teacher: torch.Tensor,
        grad_student: torch.Tensor | None,
        grad_teacher: torch.Tensor | None,
    ) -> torch.Tensor:
        """The loss; fills the gradients that are given."""
        ...

    def labelwise_mean(
        self,
        logits: torch.Tensor,
        labels: torch.Tensor,
        num_classes: int,
        sample_weight: torch.Tensor | None,
        means: torch.Tensor,
        counts: torch.Tensor,
    ) -> None: ...

    def labelwise_mean_backward(
        self,
        grad_means: torch.Tensor,
        labels: torch.Tensor,
        num_classes: int,
        sample_weight: torch.Tensor | None,
        grad_logits: torch.Tensor,
    ) -> None: ...

    def gather_mean(self, cache: torch.Tensor, neighbours: torch.Tensor, out: torch.Tensor) -> None: ...

    def gather_mean_backward(
        self, grad_out: torch.Tensor, neighbours: torch.Tensor, grad_cache: torch.Tensor
    ) -> None: ...


def _scaled(grad: torch.Tensor | None, grad_output: torch.Tensor) -> torch.Tensor | None:
    """d loss / d input times the incoming gradient. The usual ``loss.backward()`` (an incoming 1
    on the CPU) hands the buffer over without a copy; on a GPU the test would wait for the device,
    so there it always multiplies."""
    if grad is None:
        return None
    if grad_output.device.type == "cpu" and bool(grad_output == 1):
        return grad
    return grad * grad_output


class WeightedKL(torch.autograd.Function):
    """The gradient is kept on ctx (not saved_tensors) and released in backward, so that autograd
    can hand the buffer itself to ``.grad`` instead of copying it."""

    @staticmethod
    def forward(
        ctx: Any,
        backend: Backend,
        student: torch.Tensor,
        teacher: torch.Tensor,
        temperature: float,
        sample_weight: torch.Tensor | None,
        class_weight: torch.Tensor | None,
        teacher_is_prob: bool,
    ) -> torch.Tensor:
        grad = torch.empty_like(student) if ctx.needs_input_grad[1] else None
        loss = backend.weighted_kl(student, teacher, temperature, sample_weight, class_weight, teacher_is_prob, grad)
        ctx.grad = grad
        return loss

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor):
        grad, ctx.grad = ctx.grad, None
        return None, _scaled(grad, grad_output), None, None, None, None, None


class SLLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, backend: Backend, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        grad_s = torch.empty_like(student) if ctx.needs_input_grad[1] else None
        grad_t = torch.empty_like(teacher) if ctx.needs_input_grad[2] else None
        loss = backend.sl_loss(student, teacher, grad_s, grad_t)
        ctx.grads = (grad_s, grad_t)
        return loss

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor):
        (grad_s, grad_t), ctx.grads = ctx.grads, None
        return None, _scaled(grad_s, grad_output), _scaled(grad_t, grad_output)


class LabelwiseMean(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        backend: Backend,
        logits: torch.Tensor,
        labels: torch.Tensor,
        num_classes: int,
        sample_weight: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        means = logits.new_empty((num_classes, logits.shape[1]))
        counts = torch.empty(num_classes, dtype=torch.int64, device=logits.device)
        backend.labelwise_mean(logits, labels, num_classes, sample_weight, means, counts)
        ctx.save_for_backward(labels, sample_weight)
        ctx.backend, ctx.num_classes = backend, num_classes
        ctx.mark_non_differentiable(counts)
        return means, counts

    @staticmethod
    def backward(ctx: Any, grad_means: torch.Tensor, _grad_counts: torch.Tensor):
        labels, sample_weight = ctx.saved_tensors
        grad_means = grad_means.contiguous()
        grad_logits = grad_means.new_empty((labels.shape[0], grad_means.shape[1]))
        ctx.backend.labelwise_mean_backward(grad_means, labels, ctx.num_classes, sample_weight, grad_logits)
        return None, grad_logits, None, None, None


class GatherMean(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, backend: Backend, cache: torch.Tensor, neighbours: torch.Tensor) -> torch.Tensor:
        out = cache.new_empty((neighbours.shape[0], cache.shape[1]))
        backend.gather_mean(cache, neighbours, out)
        ctx.save_for_backward(neighbours)
        ctx.backend, ctx.cache_rows = backend, cache.shape[0]
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor):
        (neighbours,) = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        grad_cache = grad_out.new_empty((ctx.cache_rows, grad_out.shape[1]))
        ctx.backend.gather_mean_backward(grad_out, neighbours, grad_cache)
        return None, grad_cache, None
