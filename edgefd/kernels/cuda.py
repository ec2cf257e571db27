"""The CUDA backend of :mod:`edgefd.kernels`: ``edgefd._kernels_cuda``, called with raw device pointers.

The extension is built only on request (``EDGEFD_CUDA=ON pip install .``, or CMake
``-DEDGEFD_CUDA=ON``); it takes raw device pointers (``tensor.data_ptr()``) and the current CUDA
stream handle, so it never links libtorch. :mod:`edgefd.kernels` validates the input and sends
CUDA tensors here when the extension is importable and a GPU is visible; otherwise CUDA tensors
go to the pure-torch reference, which runs on the GPU too.

Status: the CUDA sources compile for sm_75 and sm_87 (tests/kernels/test_cuda_build.py builds them
with nvcc), and their code gives the torch references' values, gradients and errors when run under
a CPU emulation of CUDA's execution model (tests/kernels/test_cuda_emulated.py), but they have
never been run on a GPU: the machine they were written on has none. This backend has run on top
of the emulated kernels (the same test, through the public ``edgefd.kernels`` API); only its
device and stream lines (``torch.cuda.device``,
``current_stream``) have never run. Treat both as unverified on hardware until
``scripts/gpu_check.sh`` (which runs tests/kernels/test_kernels.py on CUDA tensors) has passed on a GPU.
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


class CudaBackend:
    """Each call runs on the tensors' device and its current stream; losses accumulate in a float64
    device scalar (no host round trip) and are returned in the input's dtype."""

    name = "cuda"

    def weighted_kl(self, student, teacher, temperature, sample_weight, class_weight, teacher_is_prob, grad):
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
        return loss.to(student.dtype)

    def sl_loss(self, student, teacher, grad_student, grad_teacher):
        loss = torch.zeros((), dtype=torch.float64, device=student.device)
        k, b, c = teacher.shape
        with torch.cuda.device(student.device):
            _cu.sl_loss(
                _ptr(student),
                _ptr(teacher),
                k,
                b,
                c,
                _ptr(grad_student),
                _ptr(grad_teacher),
                _ptr(loss),
                _stream(student),
            )
        return loss.to(student.dtype)

    def labelwise_mean(self, logits, labels, num_classes, sample_weight, means, counts):
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

    def labelwise_mean_backward(self, grad_means, labels, num_classes, sample_weight, grad_logits):
        with torch.cuda.device(grad_means.device):
            _cu.labelwise_mean_backward(
                _ptr(grad_means),
                _ptr(labels),
                labels.shape[0],
                grad_means.shape[1],
                num_classes,
                _ptr(sample_weight),
                _ptr(grad_logits),
                _stream(grad_means),
            )

    def gather_mean(self, cache, neighbours, out):
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

    def gather_mean_backward(self, grad_out, neighbours, grad_cache):
        with torch.cuda.device(grad_out.device):
            _cu.gather_mean_backward(
                _ptr(grad_out),
                grad_cache.shape[0],
                grad_out.shape[1],
                _ptr(neighbours),
                neighbours.shape[0],
                neighbours.shape[1],
                _ptr(grad_cache),
                _stream(grad_out),
            )


BACKEND = CudaBackend()
