"""The CUDA path of :mod:`edgefd.kernels`: autograd functions over ``edgefd._kernels_cuda``.

The extension is built only on request (``EDGEFD_CUDA=ON pip install .``, or CMake
``-DEDGEFD_CUDA=ON``); it takes raw device pointers (``tensor.data_ptr()``) and the current CUDA
stream handle, so it never links libtorch. :mod:`edgefd.kernels` validates the input and sends
CUDA tensors here when the extension is importable and a GPU is visible; otherwise CUDA tensors
go to the pure-torch reference, which runs on the GPU too.

Status: the CUDA sources compile for sm_75 and sm_87 (tests/test_kernels_cuda_build.py builds them
with nvcc), and their code gives the torch references' values, gradients and errors when run under
a CPU emulation of CUDA's execution model (tests/test_kernels_cuda_emulated.py), but they have
never been run on a GPU: the machine they were written on has none. This module's autograd
functions have run on top of the emulated kernels (the same test, through the public
``edgefd.kernels`` API); only its device and stream lines (``torch.cuda.device``,
``current_stream``) have never run. Treat both as unverified on hardware until
``tests/test_kernels.py``-style comparisons have been run on a CUDA device.
"""

from __future__ import annotations

import torch

try:
    import edgefd._kernels_cuda as _cu
except ImportError as error:  # not built: the usual case
    _cu = None
    IMPORT_ERROR: ImportError | None = error
else:
    IMPORT_ERROR = None


def built() -> bool:
    """Whether the CUDA extension was compiled into this install."""
    return _cu is not None


def available() -> bool:
    """Whether CUDA tensors can use the CUDA kernels (extension built and a GPU visible)."""
    return _cu is not None and torch.cuda.is_available()


def _ptr(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.data_ptr()


def _stream(t: torch.Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream


def _scaled(grad: torch.Tensor | None, grad_output: torch.Tensor) -> torch.Tensor | None:
    return None if grad is None else grad * grad_output


class WeightedKL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, student, teacher, temperature, sample_weight, class_weight, teacher_is_prob):
        grad = torch.empty_like(student) if ctx.needs_input_grad[0] else None
        loss = torch.zeros((), dtype=torch.float64, device=student.device)
        with torch.cuda.device(student.device):
            _cu.weighted_kl(
                _ptr(student),
                _ptr(teacher),
                student.shape[0],
                student.shape[1],
                float(temperature),
                _ptr(sample_weight),
                _ptr(class_weight),
                bool(teacher_is_prob),
                _ptr(grad),
                _ptr(loss),
                _stream(student),
            )
        ctx.grad = grad
        return loss.to(student.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        grad, ctx.grad = ctx.grad, None
        return _scaled(grad, grad_output), None, None, None, None, None


class SLLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, student, teacher):
        grad_s = torch.empty_like(student) if ctx.needs_input_grad[0] else None
        grad_t = torch.empty_like(teacher) if ctx.needs_input_grad[1] else None
        loss = torch.zeros((), dtype=torch.float64, device=student.device)
        k, b, c = teacher.shape
        with torch.cuda.device(student.device):
            _cu.sl_loss(_ptr(student), _ptr(teacher), k, b, c, _ptr(grad_s), _ptr(grad_t), _ptr(loss), _stream(student))
        ctx.grads = (grad_s, grad_t)
        return loss.to(student.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        (grad_s, grad_t), ctx.grads = ctx.grads, None
        return _scaled(grad_s, grad_output), _scaled(grad_t, grad_output)


class LabelwiseMean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, labels, num_classes, sample_weight):
        means = logits.new_empty((num_classes, logits.shape[1]))
        counts = torch.empty(num_classes, dtype=torch.int64, device=logits.device)
        with torch.cuda.device(logits.device):
            _cu.labelwise_mean(
                _ptr(logits),
                _ptr(labels),
                logits.shape[0],
                logits.shape[1],
                num_classes,
                _ptr(sample_weight),
                _ptr(means),
                _ptr(counts),
                _stream(logits),
            )
        ctx.save_for_backward(labels, sample_weight)
        ctx.num_classes = num_classes
        ctx.mark_non_differentiable(counts)
        return means, counts

    @staticmethod
    def backward(ctx, grad_means, _grad_counts):
        labels, sample_weight = ctx.saved_tensors
        grad_means = grad_means.contiguous()
        grad_x = grad_means.new_empty((labels.shape[0], grad_means.shape[1]))
        with torch.cuda.device(grad_means.device):
            _cu.labelwise_mean_backward(
                _ptr(grad_means),
                _ptr(labels),
                labels.shape[0],
                grad_means.shape[1],
                ctx.num_classes,
                _ptr(sample_weight),
                _ptr(grad_x),
                _stream(grad_means),
            )
        return grad_x, None, None, None


class GatherMean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cache, neighbours):
        out = cache.new_empty((neighbours.shape[0], cache.shape[1]))
        with torch.cuda.device(cache.device):
            _cu.gather_mean(
                _ptr(cache),
                cache.shape[0],
                cache.shape[1],
                _ptr(neighbours),
                neighbours.shape[0],
                neighbours.shape[1],
                _ptr(out),
                _stream(cache),
            )
        ctx.save_for_backward(neighbours)
        ctx.cache_rows = cache.shape[0]
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (neighbours,) = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        grad_cache = grad_out.new_empty((ctx.cache_rows, grad_out.shape[1]))
        with torch.cuda.device(grad_out.device):
            _cu.gather_mean_backward(
                _ptr(grad_out),
                ctx.cache_rows,
                grad_out.shape[1],
                _ptr(neighbours),
                neighbours.shape[0],
                neighbours.shape[1],
                _ptr(grad_cache),
                _stream(grad_out),
            )
        return grad_cache, None
