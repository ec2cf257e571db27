"""The CPU backend: the C++ extension ``edgefd._kernels`` (OpenMP over rows, vectorised exp/log,
forward and backward fused), called on numpy views of CPU tensors, so nothing links libtorch."""

from __future__ import annotations

import numpy as np
import torch

try:
    import edgefd._kernels as _cpp
except ImportError as error:  # the extension is optional at import time; see edgefd.kernels.set_backend
    _cpp = None
    IMPORT_ERROR: ImportError | None = error
else:
    IMPORT_ERROR = None


def available() -> bool:
    """Whether the compiled extension could be imported."""
    return _cpp is not None


def set_num_threads(n: int) -> None:
    """Threads of the extension's OpenMP pool (nothing when it is not built)."""
    if _cpp is not None:
        _cpp.set_num_threads(n)


def _numpy(t: torch.Tensor | None) -> np.ndarray | None:
    return None if t is None else t.detach().numpy()


class CpuBackend:
    name = "cpp"

    def weighted_kl(self, student, teacher, temperature, sample_weight, class_weight, teacher_is_prob, grad):
        loss = _cpp.weighted_kl(
            _numpy(student),
            _numpy(teacher),
            temperature,
            _numpy(sample_weight),
            _numpy(class_weight),
            teacher_is_prob,
            _numpy(grad),
        )
        return student.new_tensor(loss)

    def sl_loss(self, student, teacher, grad_student, grad_teacher):
        loss = _cpp.sl_loss(_numpy(student), _numpy(teacher), _numpy(grad_student), _numpy(grad_teacher))
        return student.new_tensor(loss)

    def labelwise_mean(self, logits, labels, num_classes, sample_weight, means, counts):
        _cpp.labelwise_mean(
            _numpy(logits), _numpy(labels), num_classes, _numpy(sample_weight), _numpy(means), _numpy(counts)
        )

    def labelwise_mean_backward(self, grad_means, labels, num_classes, sample_weight, grad_logits):
        _cpp.labelwise_mean_backward(_numpy(grad_means), _numpy(labels), _numpy(sample_weight), _numpy(grad_logits))

    def gather_mean(self, cache, neighbours, out):
        _cpp.gather_mean(_numpy(cache), _numpy(neighbours), _numpy(out))

    def gather_mean_backward(self, grad_out, neighbours, grad_cache):
        _cpp.gather_mean_backward(_numpy(grad_out), _numpy(neighbours), _numpy(grad_cache))


BACKEND = CpuBackend()
