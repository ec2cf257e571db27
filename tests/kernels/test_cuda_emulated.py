"""The CUDA kernels' code, run on the CPU under an emulation of CUDA's execution model, against the
torch references: values, gradients and bad-input errors.

No GPU exists on this project's machines. tests/kernels/cuda_emulation/cuda_runtime.h stands in for the
CUDA runtime (one OS thread per CUDA thread, real barriers for __syncthreads and warp shuffles,
blocks one at a time, atomics under a lock, host memory as device memory); g++ compiles
csrc/*.cu against it, with a small C interface (tests/kernels/cuda_emulation/c_api.cpp) in place of the
pybind11 bindings (those are compiled by nvcc in test_kernels_cuda_build.py). This checks the
kernels' indexing, block reductions, shared-memory use, gradient formulas and error reporting; it
cannot check GPU-specific behaviour (memory model, occupancy,
the real warp scheduler), so the kernels remain unrun on a GPU (see README).
"""

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from edgefd.kernels import reference

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("weighted_kl", "sl_loss", "labelwise_mean", "gather_mean")

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def _to_cpu_source(text: str) -> str:
    """`kernel<<<grid, block, shared, stream>>>(args)` -> a call of the emulator's launcher."""
    text = re.sub(r"(\w+)<<<(.+?)>>>\(", r"edgefd_cpu::launcher(\1, \2)(", text, flags=re.S)
    return re.sub(
        r"extern __shared__ float (\w+)\[\];",
        r"float* \1 = reinterpret_cast<float*>(edgefd_cpu::dynamic_shared);",
        text,
    )


class EmulatedKernels:
    """The emulated build behind the real extension's call signatures (stream handles ignored)."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._lib = library
        library.edgefd_last_error.restype = ctypes.c_char_p
        p, i, f = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
        signatures = {
            "weighted_kl": [p, p, i, i, f, p, p, ctypes.c_int, p, p],
            "sl_loss": [p, p, i, i, i, p, p, p],
            "labelwise_mean": [p, p, i, i, i, p, p, p],
            "labelwise_mean_backward": [p, p, i, i, i, p, p],
            "gather_mean": [p, i, i, p, i, i, p],
            "gather_mean_backward": [p, i, i, p, i, i, p],
        }
        for name, argtypes in signatures.items():
            function = getattr(library, f"edgefd_{name}")
            function.argtypes, function.restype = argtypes, ctypes.c_int
            setattr(self, name, self._wrap(function))

    def _wrap(self, function):
        def call(*args):
            status = function(*args[:-1])  # the last argument is the stream
            if status:
                message = self._lib.edgefd_last_error().decode()
                raise (ValueError if status == 1 else RuntimeError)(message)

        return call


@pytest.fixture(scope="module")
def cu(tmp_path_factory):
    build = tmp_path_factory.mktemp("cuda_emulated")
    sources = []
    for name in SOURCES:
        target = build / f"{name}.cpp"
        target.write_text(_to_cpu_source((ROOT / "csrc" / f"{name}.cu").read_text()))
        sources.append(str(target))
    library = build / "kernels_cuda_emulated.so"
    command = [
        "g++",
        "-std=c++20",
        "-O1",
        "-shared",
        "-fPIC",
        "-pthread",
        "-w",
        f"-I{ROOT / 'tests' / 'kernels' / 'cuda_emulation'}",
        f"-I{ROOT / 'csrc'}",
        str(ROOT / "tests" / "kernels" / "cuda_emulation" / "c_api.cpp"),
        *sources,
        "-o",
        str(library),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return EmulatedKernels(ctypes.CDLL(str(library)))


def _p(t):
    return 0 if t is None else t.data_ptr()


def _loss():
    return torch.zeros((), dtype=torch.float64)


@pytest.mark.parametrize("classes", [7, 100])  # one warp per row, and four
@pytest.mark.parametrize("teacher_is_prob", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_weighted_kl(cu, classes, teacher_is_prob, weighted):
    g = torch.Generator().manual_seed(classes)
    batch, temperature = 6, 2.5
    student = torch.randn(batch, classes, generator=g) * 3
    teacher = torch.randn(batch, classes, generator=g) * 3
    if teacher_is_prob:
        teacher = torch.softmax(teacher, 1)
        teacher[0, :2] = 0.0  # 0 log 0 = 0
        teacher = teacher / teacher.sum(1, keepdim=True)
    sample_weight = torch.rand(batch, generator=g) if weighted else None
    class_weight = torch.rand(classes, generator=g) if weighted else None
    grad, loss = torch.empty_like(student), _loss()
    cu.weighted_kl(
        _p(student),
        _p(teacher),
        batch,
        classes,
        temperature,
        _p(sample_weight),
        _p(class_weight),
        teacher_is_prob,
        _p(grad),
        _p(loss),
        0,
    )
    s = student.clone().requires_grad_()
    expected = reference.weighted_kl(
        s,
        teacher,
        temperature=temperature,
        sample_weight=sample_weight,
        class_weight=class_weight,
        teacher_is_prob=teacher_is_prob,
    )
    expected.backward()
    torch.testing.assert_close(loss.float(), expected.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad, s.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("classes", [5, 70])
def test_sl_loss(cu, classes):
    g = torch.Generator().manual_seed(classes)
    teachers, batch = 3, 4
    student = torch.randn(batch, classes, generator=g) * 2
    teacher = torch.randn(teachers, batch, classes, generator=g) * 2
    grad_s, grad_t, loss = torch.empty_like(student), torch.empty_like(teacher), _loss()
    cu.sl_loss(_p(student), _p(teacher), teachers, batch, classes, _p(grad_s), _p(grad_t), _p(loss), 0)
    s, t = student.clone().requires_grad_(), teacher.clone().requires_grad_()
    expected = reference.sl_loss(s, t)
    expected.backward()
    torch.testing.assert_close(loss.float(), expected.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad_s, s.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(grad_t, t.grad, rtol=1e-4, atol=1e-6)

    loss_only = _loss()  # no gradient buffers: the loss alone
    cu.sl_loss(_p(student), _p(teacher), teachers, batch, classes, 0, 0, _p(loss_only), 0)
    assert float(loss_only) == pytest.approx(float(loss), rel=1e-6)


@pytest.mark.parametrize("weighted", [False, True])
def test_labelwise_mean_forward_backward_and_bad_label(cu, weighted):
    g = torch.Generator().manual_seed(3)
    rows, classes, num_classes = 40, 6, 5
    logits = torch.randn(rows, classes, generator=g)
    labels = torch.randint(0, num_classes - 1, (rows,), generator=g)  # class 4 stays empty
    weight = torch.rand(rows, generator=g) if weighted else None
    means, counts = torch.empty(num_classes, classes), torch.empty(num_classes, dtype=torch.int64)
    cu.labelwise_mean(_p(logits), _p(labels), rows, classes, num_classes, _p(weight), _p(means), _p(counts), 0)
    x = logits.clone().requires_grad_()
    expected_means, expected_counts = reference.labelwise_mean(x, labels, num_classes, weight)
    torch.testing.assert_close(means, expected_means.detach(), rtol=1e-5, atol=1e-6)
    assert torch.equal(counts, expected_counts)
    assert torch.equal(means[4], torch.zeros(classes))

    grad_means = torch.randn(num_classes, classes, generator=g)
    grad_x = torch.empty(rows, classes)
    cu.labelwise_mean_backward(_p(grad_means), _p(labels), rows, classes, num_classes, _p(weight), _p(grad_x), 0)
    expected_means.backward(grad_means)
    torch.testing.assert_close(grad_x, x.grad, rtol=1e-5, atol=1e-6)

    labels[17] = num_classes
    with pytest.raises(ValueError, match=r"labels: value 5 at index 17 is outside \[0, 5\)"):
        cu.labelwise_mean(_p(logits), _p(labels), rows, classes, num_classes, _p(weight), _p(means), _p(counts), 0)
    with pytest.raises(ValueError, match="index 17"):
        cu.labelwise_mean_backward(_p(grad_means), _p(labels), rows, classes, num_classes, _p(weight), _p(grad_x), 0)


def test_gather_mean_forward_backward_and_bad_id(cu):
    g = torch.Generator().manual_seed(5)
    cache_rows, classes = 20, 5
    cache = torch.randn(cache_rows, classes, generator=g)
    neighbours = torch.randint(0, cache_rows, (12, 4), generator=g)
    neighbours[0] = -1  # no neighbour at all: zeros
    neighbours[1, 2:] = -1  # some missing
    neighbours[2] = 3  # the same row four times
    out = torch.empty(12, classes)
    cu.gather_mean(_p(cache), cache_rows, classes, _p(neighbours), 12, 4, _p(out), 0)
    c = cache.clone().requires_grad_()
    expected = reference.gather_mean(c, neighbours)
    torch.testing.assert_close(out, expected.detach(), rtol=1e-6, atol=1e-6)

    grad_out = torch.randn(12, classes, generator=g)
    grad_cache = torch.full((cache_rows, classes), 7.0)  # must be overwritten, not added to
    cu.gather_mean_backward(_p(grad_out), cache_rows, classes, _p(neighbours), 12, 4, _p(grad_cache), 0)
    expected.backward(grad_out)
    torch.testing.assert_close(grad_cache, c.grad, rtol=1e-5, atol=1e-6)

    neighbours[7, 1] = cache_rows
    with pytest.raises(ValueError, match=r"neighbours: id 20 at \[7, 1\] is outside \[-1, 20\)"):
        cu.gather_mean(_p(cache), cache_rows, classes, _p(neighbours), 12, 4, _p(out), 0)
    with pytest.raises(ValueError, match=r"at \[7, 1\]"):
        cu.gather_mean_backward(_p(grad_out), cache_rows, classes, _p(neighbours), 12, 4, _p(grad_cache), 0)


def test_sl_loss_rejects_rows_too_wide_for_shared_memory(cu):
    with pytest.raises(ValueError, match="above the CUDA kernel's limit"):
        cu.sl_loss(1, 1, 1, 1, 5000, 0, 0, 1, 0)


@pytest.fixture
def cuda_route(cu, monkeypatch):
    """edgefd.kernels as it runs with the CUDA extension built: every call takes the CUDA route,
    through edgefd.kernels' autograd functions and its CUDA backend, into the emulated kernels (CPU tensors; the
    device and stream plumbing, which needs a GPU, is replaced by no-ops)."""
    import contextlib

    from edgefd import kernels
    from edgefd.kernels import cuda

    monkeypatch.setattr(cuda, "_cu", cu)
    monkeypatch.setattr(cuda, "_stream", lambda t: 0)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(kernels, "_route", lambda t: cuda.BACKEND)
    return kernels


def test_public_api_through_the_cuda_autograd_functions(cuda_route):
    kernels = cuda_route
    g = torch.Generator().manual_seed(11)
    student = torch.randn(5, 40, generator=g).requires_grad_()
    teacher = torch.randn(5, 40, generator=g)
    weight = torch.rand(5, generator=g)
    loss = kernels.weighted_kl(student, teacher, temperature=3.0, sample_weight=weight)
    (2 * loss).backward()
    s = student.detach().clone().requires_grad_()
    expected = reference.weighted_kl(s, teacher, temperature=3.0, sample_weight=weight)
    (2 * expected).backward()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(student.grad, s.grad, rtol=1e-4, atol=1e-6)

    teachers = torch.randn(2, 5, 40, generator=g).requires_grad_()
    student.grad = None
    kernels.sl_loss(student, teachers).backward()
    s, t = student.detach().clone().requires_grad_(), teachers.detach().clone().requires_grad_()
    reference.sl_loss(s, t).backward()
    torch.testing.assert_close(student.grad, s.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(teachers.grad, t.grad, rtol=1e-4, atol=1e-6)

    labels = torch.tensor([0, 2, 2, 1, 0])
    means, counts = kernels.labelwise_mean(student, labels, 4)
    student.grad = None
    means.sum().backward()
    s = student.detach().clone().requires_grad_()
    expected_means, expected_counts = reference.labelwise_mean(s, labels, 4)
    expected_means.sum().backward()
    torch.testing.assert_close(means, expected_means, rtol=1e-5, atol=1e-6)
    assert torch.equal(counts, expected_counts)
    torch.testing.assert_close(student.grad, s.grad, rtol=1e-5, atol=1e-6)

    cache = torch.randn(6, 40, generator=g).requires_grad_()
    neighbours = torch.tensor([[0, 5, -1], [2, 2, 3], [-1, -1, -1]])
    out = kernels.gather_mean(cache, neighbours)
    (out * 3).sum().backward()
    c = cache.detach().clone().requires_grad_()
    expected = reference.gather_mean(c, neighbours)
    (expected * 3).sum().backward()
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(cache.grad, c.grad, rtol=1e-5, atol=1e-6)
