"""The C++ kernels against their pure-torch references, on random and on hard inputs.

``EDGEFD_TEST_DEVICE=cuda`` runs every test here on a GPU: the tensors are made there, so the "cpp"
backend is the CUDA kernels and the comparison is CUDA against the torch references on the same
device (scripts/gpu_check.sh does this). Unset, everything runs on the CPU.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgefd import kernels
from edgefd.kernels import cuda

ATOL = 1e-5
RTOL = 1e-4

DEVICE = torch.device(os.environ.get("EDGEFD_TEST_DEVICE", "cpu"))
if DEVICE.type != "cpu":
    # Before the parametrize lists below are built: their tensors are made on the device too.
    torch.set_default_device(DEVICE)


def both(fn, *args, **kwargs):
    """Run fn under each backend; returns (cpp_result, torch_result)."""
    results = []
    for backend in ("cpp", "torch"):
        with kernels.use_backend(backend):
            results.append(fn(*args, **kwargs))
    return results


def grads(loss_fn, *tensors):
    """Loss and gradients w.r.t. the given tensors under each backend."""
    out = []
    for backend in ("cpp", "torch"):
        leaves = [t.detach().clone().requires_grad_(True) for t in tensors]
        with kernels.use_backend(backend):
            loss = loss_fn(*leaves)
        loss.backward()
        out.append((loss.detach(), [leaf.grad for leaf in leaves]))
    return out


def close(a, b, atol=ATOL, rtol=RTOL):
    torch.testing.assert_close(a, b, atol=atol, rtol=rtol)


def rng(seed=0):
    return torch.Generator(device=DEVICE).manual_seed(seed)


# ---------------------------------------------------------------------------------------------
# weighted_kl


@pytest.mark.parametrize("batch,classes", [(1, 1), (1, 10), (7, 3), (256, 100), (33, 1000)])
@pytest.mark.parametrize("temperature", [1.0, 3.0, 0.5])
def test_weighted_kl_matches_reference(batch, classes, temperature):
    g = rng(batch * classes)
    s = torch.randn(batch, classes, generator=g) * 3
    t = torch.randn(batch, classes, generator=g) * 3
    w = torch.rand(batch, generator=g)
    v = torch.rand(classes, generator=g)

    def fn(s_, t_):
        return kernels.weighted_kl(s_, t_.detach(), temperature=temperature, sample_weight=w, class_weight=v)

    (lc, (gc, _)), (lt, (gt, _)) = grads(fn, s, t)
    close(lc, lt)
    close(gc, gt)


def test_weighted_kl_unweighted_equals_torch_kl_div():
    g = rng(1)
    s, t = torch.randn(64, 10, generator=g), torch.randn(64, 10, generator=g)
    expected = (
        torch.nn.functional.kl_div(
            torch.log_softmax(s / 2, 1), torch.log_softmax(t / 2, 1), reduction="batchmean", log_target=True
        )
        * 4
    )
    loss_cpp, loss_torch = both(kernels.weighted_kl, s, t, temperature=2.0)
    close(loss_cpp, expected)
    close(loss_torch, expected)


def test_weighted_kl_hand_computed_value():
    # one row, two classes: p = softmax([0, ln 3]) = [1/4, 3/4], q = [1/2, 1/2]
    s = torch.tensor([[0.0, 0.0]])
    t = torch.tensor([[0.0, float(np.log(3.0))]])
    expected = 0.25 * np.log(0.5) + 0.75 * np.log(1.5)
    for backend in kernels.BACKENDS:
        with kernels.use_backend(backend):
            assert kernels.weighted_kl(s, t).item() == pytest.approx(expected, rel=1e-5)


def test_weighted_kl_extreme_logits():
    s = torch.tensor([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4], [0.0, 0.0, 1e4]])
    t = torch.tensor([[-1e4, 1e4, 0.0], [1e4, -1e4, 0.0], [0.0, 0.0, 1e4]])
    (lc, (gc,)), (lt, (gt,)) = grads(lambda s_: kernels.weighted_kl(s_, t), s)
    assert torch.isfinite(lc) and torch.isfinite(gc).all()
    close(lc, lt, rtol=1e-5)
    close(gc, gt)


def test_weighted_kl_one_hot_teacher_probabilities():
    g = rng(2)
    s = torch.randn(20, 5, generator=g)
    p = torch.nn.functional.one_hot(torch.arange(20) % 5, 5).float()
    (lc, (gc,)), (lt, (gt,)) = grads(lambda s_: kernels.weighted_kl(s_, p, teacher_is_prob=True), s)
    close(lc, lt)
    close(gc, gt)
    # with a one-hot teacher, KL reduces to cross-entropy
    close(lc, torch.nn.functional.cross_entropy(s, torch.arange(20) % 5))


def test_weighted_kl_soft_teacher_probabilities_with_zeros():
    g = rng(3)
    s = torch.randn(16, 6, generator=g)
    p = torch.softmax(torch.randn(16, 6, generator=g), 1)
    p[:, 0] = 0
    p = p / p.sum(1, keepdim=True)
    (lc, (gc,)), (lt, (gt,)) = grads(lambda s_: kernels.weighted_kl(s_, p, teacher_is_prob=True, temperature=3.0), s)
    close(lc, lt)
    close(gc, gt)


def test_weighted_kl_zero_weights_give_zero_loss_and_gradient():
    g = rng(4)
    s, t = torch.randn(8, 4, generator=g), torch.randn(8, 4, generator=g)
    for backend in kernels.BACKENDS:
        leaf = s.clone().requires_grad_(True)
        with kernels.use_backend(backend):
            loss = kernels.weighted_kl(leaf, t, sample_weight=torch.zeros(8))
        loss.backward()
        assert loss.item() == 0.0
        assert torch.count_nonzero(leaf.grad) == 0


def test_weighted_kl_gradient_scales_with_upstream_gradient():
    g = rng(5)
    s, t = torch.randn(8, 4, generator=g), torch.randn(8, 4, generator=g)
    leaf = s.clone().requires_grad_(True)
    (kernels.weighted_kl(leaf, t) * 3.0).backward()
    leaf2 = s.clone().requires_grad_(True)
    kernels.weighted_kl(leaf2, t).backward()
    close(leaf.grad, leaf2.grad * 3.0)


def test_weighted_kl_cpp_gradient_passes_gradcheck_against_finite_differences():
    g = rng(6)
    s = torch.randn(4, 5, generator=g, dtype=torch.float32)
    t = torch.randn(4, 5, generator=g)
    leaf = s.clone().requires_grad_(True)
    loss = kernels.weighted_kl(leaf, t, temperature=2.0)
    loss.backward()
    eps = 1e-3
    numeric = torch.zeros_like(s)
    for i in range(4):
        for c in range(5):
            plus, minus = s.clone(), s.clone()
            plus[i, c] += eps
            minus[i, c] -= eps
            numeric[i, c] = (
                kernels.weighted_kl(plus, t, temperature=2.0) - kernels.weighted_kl(minus, t, temperature=2.0)
            ) / (2 * eps)
    close(leaf.grad, numeric, atol=2e-3, rtol=1e-2)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(student_logits=torch.zeros(3), teacher=torch.zeros(3)), "student_logits: expected 2 dimensions"),
        (dict(student_logits=torch.zeros(3, 2), teacher=torch.zeros(4, 2)), "teacher: dimension 0"),
        (dict(student_logits=torch.zeros(3, 2), teacher=torch.zeros(3, 5)), "teacher: dimension 1"),
        (dict(student_logits=torch.zeros(0, 2), teacher=torch.zeros(0, 2)), "empty batch"),
        (dict(student_logits=torch.zeros(3, 2, dtype=torch.float64), teacher=torch.zeros(3, 2)), "float32"),
        (dict(student_logits=torch.zeros(2, 3).t(), teacher=torch.zeros(3, 2)), "contiguous"),
        (
            dict(
                student_logits=torch.zeros(3, 2),
                teacher=torch.zeros(3, 2),
                sample_weight=torch.tensor([1.0, -1.0, 0.0]),
            ),
            "sample_weight: contains negative",
        ),
        (
            dict(
                student_logits=torch.zeros(3, 2),
                teacher=torch.zeros(3, 2),
                class_weight=torch.tensor([1.0, float("nan")]),
            ),
            "class_weight: contains NaN",
        ),
        (
            dict(student_logits=torch.zeros(3, 2), teacher=torch.zeros(3, 2), sample_weight=torch.ones(2)),
            "sample_weight: dimension 0",
        ),
        (dict(student_logits=torch.zeros(3, 2), teacher=torch.zeros(3, 2), temperature=0.0), "temperature"),
        (dict(student_logits=torch.zeros(3, 2), teacher=-torch.ones(3, 2), teacher_is_prob=True), "teacher"),
    ],
)
@pytest.mark.parametrize("backend", kernels.BACKENDS)
def test_weighted_kl_rejects_bad_input(kwargs, match, backend):
    with kernels.use_backend(backend), pytest.raises(ValueError, match=match):
        kernels.weighted_kl(**kwargs)


@settings(max_examples=60, deadline=None)
@given(
    batch=st.integers(1, 40),
    classes=st.integers(1, 40),
    temperature=st.floats(0.2, 8.0),
    scale=st.floats(0.0, 50.0),
    seed=st.integers(0, 2**31 - 1),
    weighted=st.booleans(),
)
def test_weighted_kl_property_backends_agree(batch, classes, temperature, scale, seed, weighted):
    g = rng(seed)
    s = torch.randn(batch, classes, generator=g) * scale
    t = torch.randn(batch, classes, generator=g) * scale
    w = torch.rand(batch, generator=g) if weighted else None
    (lc, (gc,)), (lt, (gt,)) = grads(lambda s_: kernels.weighted_kl(s_, t, temperature=temperature, sample_weight=w), s)
    assert lc.item() >= -1e-5  # KL is never negative
    close(lc, lt, atol=1e-4, rtol=1e-3)
    close(gc, gt, atol=1e-5, rtol=1e-3)


# ---------------------------------------------------------------------------------------------
# sl_loss


# the last shapes exceed the kernels' parallel grain, so the OpenMP path is compared too
@pytest.mark.parametrize("teachers,batch,classes", [(1, 1, 1), (1, 4, 3), (5, 64, 10), (10, 17, 100), (5, 300, 100)])
def test_sl_loss_matches_reference_for_student_and_teachers(teachers, batch, classes):
    g = rng(teachers * batch)
    s = torch.randn(batch, classes, generator=g) * 2
    t = torch.randn(teachers, batch, classes, generator=g) * 2
    (lc, (gsc, gtc)), (lt, (gst, gtt)) = grads(kernels.sl_loss, s, t)
    close(lc, lt)
    close(gsc, gst)
    close(gtc, gtt)


def test_sl_loss_hand_computed_value():
    # student q = [1/2, 1/2]; teachers [1/4, 3/4] and [3/4, 1/4] average to [1/2, 1/2] -> 0
    s = torch.zeros(1, 2)
    t = torch.tensor([[[0.0, float(np.log(3.0))]], [[float(np.log(3.0)), 0.0]]])
    for backend in kernels.BACKENDS:
        with kernels.use_backend(backend):
            assert kernels.sl_loss(s, t).item() == pytest.approx(0.0, abs=1e-6)
            # a single teacher [1/4, 3/4]: |1/2-1/4| + |1/2-3/4| = 1/2
            assert kernels.sl_loss(s, t[:1]).item() == pytest.approx(0.5, rel=1e-5)


def test_sl_loss_extreme_logits_and_only_student_gradient():
    s = torch.tensor([[1e4, -1e4], [0.0, 0.0]])
    t = torch.tensor([[[-1e4, 1e4], [1e4, 0.0]]])
    (lc, (gc,)), (lt, (gt,)) = grads(lambda s_: kernels.sl_loss(s_, t), s)
    close(lc, lt)
    close(gc, gt)


@pytest.mark.parametrize("backend", kernels.BACKENDS)
def test_sl_loss_rejects_bad_input(backend):
    with kernels.use_backend(backend):
        with pytest.raises(ValueError, match="teacher_logits: expected 3 dimensions"):
            kernels.sl_loss(torch.zeros(2, 3), torch.zeros(2, 3))
        with pytest.raises(ValueError, match="teacher_logits: dimension 1"):
            kernels.sl_loss(torch.zeros(2, 3), torch.zeros(4, 5, 3))
        with pytest.raises(ValueError, match="teacher_logits: no teachers"):
            kernels.sl_loss(torch.zeros(2, 3), torch.zeros(0, 2, 3))
        with pytest.raises(ValueError, match="empty batch"):
            kernels.sl_loss(torch.zeros(0, 3), torch.zeros(1, 0, 3))


@settings(max_examples=40, deadline=None)
@given(teachers=st.integers(1, 6), batch=st.integers(1, 20), classes=st.integers(1, 30), seed=st.integers(0, 2**31 - 1))
def test_sl_loss_property_backends_agree(teachers, batch, classes, seed):
    g = rng(seed)
    s = torch.randn(batch, classes, generator=g) * 4
    t = torch.randn(teachers, batch, classes, generator=g) * 4
    (lc, (gsc, gtc)), (lt, (gst, gtt)) = grads(kernels.sl_loss, s, t)
    assert 0.0 <= lc.item() <= 2.0 + 1e-5  # an L1 distance between distributions
    close(lc, lt, atol=1e-5, rtol=1e-4)
    close(gsc, gst)
    close(gtc, gtt)


# ---------------------------------------------------------------------------------------------
# labelwise_mean


@pytest.mark.parametrize("rows,classes,num_classes", [(1, 1, 1), (10, 3, 5), (1000, 10, 10), (5000, 100, 7)])
@pytest.mark.parametrize("weighted", [False, True])
def test_labelwise_mean_matches_reference(rows, classes, num_classes, weighted):
    g = rng(rows)
    x = torch.randn(rows, classes, generator=g)
    labels = torch.randint(0, num_classes, (rows,), generator=g)
    w = torch.rand(rows, generator=g) if weighted else None
    (mc, cc), (mt, ct) = both(kernels.labelwise_mean, x, labels, num_classes, w)
    close(mc, mt)
    assert torch.equal(cc, ct)
    assert int(cc.sum()) == rows


def test_labelwise_mean_empty_classes_get_zero_rows_and_zero_counts():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [10.0, 10.0]])
    labels = torch.tensor([0, 0, 3])
    for backend in kernels.BACKENDS:
        with kernels.use_backend(backend):
            means, counts = kernels.labelwise_mean(x, labels, 5)
        assert counts.tolist() == [2, 0, 0, 1, 0]
        assert means.tolist() == [[2.0, 3.0], [0, 0], [0, 0], [10.0, 10.0], [0, 0]]


def test_labelwise_mean_weights_and_all_zero_weights():
    x = torch.tensor([[0.0], [4.0], [8.0]])
    labels = torch.tensor([0, 0, 1])
    w = torch.tensor([1.0, 3.0, 0.0])
    for backend in kernels.BACKENDS:
        with kernels.use_backend(backend):
            means, counts = kernels.labelwise_mean(x, labels, 2, w)
        assert means[0].item() == pytest.approx(3.0)  # (0*1 + 4*3) / 4
        assert means[1].item() == 0.0  # a class whose rows all weigh 0
        assert counts.tolist() == [2, 1]


@pytest.mark.parametrize("rows", [50, 20_000])
def test_labelwise_mean_gradient_matches_reference(rows):
    g = rng(7)
    x = torch.randn(rows, 4, generator=g)
    labels = torch.randint(0, 6, (rows,), generator=g)
    w = torch.rand(rows, generator=g)
    out = []
    for backend in kernels.BACKENDS:
        leaf = x.clone().requires_grad_(True)
        with kernels.use_backend(backend):
            means, _ = kernels.labelwise_mean(leaf, labels, 6, w)
        (means * torch.arange(24.0).view(6, 4)).sum().backward()
        out.append(leaf.grad)
    close(out[0], out[1])


@pytest.mark.parametrize("backend", kernels.BACKENDS)
def test_labelwise_mean_rejects_bad_input(backend):
    x = torch.zeros(3, 2)
    with kernels.use_backend(backend):
        with pytest.raises(ValueError, match=r"labels: value 5 .*outside \[0, 5\)"):
            kernels.labelwise_mean(x, torch.tensor([0, 5, 1]), 5)
        with pytest.raises(ValueError, match=r"labels: value -1"):
            kernels.labelwise_mean(x, torch.tensor([0, -1, 1]), 5)
        with pytest.raises(ValueError, match="labels: expected dtype int64"):
            kernels.labelwise_mean(x, torch.tensor([0, 1, 1], dtype=torch.int32), 5)
        with pytest.raises(ValueError, match="labels: dimension 0"):
            kernels.labelwise_mean(x, torch.tensor([0, 1]), 5)
        with pytest.raises(ValueError, match="num_classes"):
            kernels.labelwise_mean(x, torch.tensor([0, 1, 1]), 0)
        with pytest.raises(ValueError, match="empty batch"):
            kernels.labelwise_mean(torch.zeros(0, 2), torch.zeros(0, dtype=torch.int64), 5)
        with pytest.raises(ValueError, match="sample_weight: contains NaN"):
            kernels.labelwise_mean(x, torch.tensor([0, 1, 1]), 5, torch.tensor([1.0, float("nan"), 1.0]))


@settings(max_examples=50, deadline=None)
@given(
    rows=st.integers(1, 300), classes=st.integers(1, 20), num_classes=st.integers(1, 30), seed=st.integers(0, 2**31 - 1)
)
def test_labelwise_mean_property(rows, classes, num_classes, seed):
    g = rng(seed)
    x = torch.randn(rows, classes, generator=g) * 10
    labels = torch.randint(0, num_classes, (rows,), generator=g)
    (mc, cc), (mt, ct) = both(kernels.labelwise_mean, x, labels, num_classes)
    close(mc, mt)
    assert torch.equal(cc, ct)
    assert torch.equal(cc, torch.bincount(labels, minlength=num_classes))


# ---------------------------------------------------------------------------------------------
# gather_mean


@pytest.mark.parametrize(
    "cache_rows,classes,n,r", [(1, 1, 1, 1), (100, 10, 50, 16), (1000, 100, 300, 4), (5000, 10, 4000, 16)]
)
def test_gather_mean_matches_reference(cache_rows, classes, n, r):
    g = rng(cache_rows)
    cache = torch.randn(cache_rows, classes, generator=g)
    nb = torch.randint(-1, cache_rows, (n, r), generator=g)
    out_cpp, out_torch = both(kernels.gather_mean, cache, nb)
    close(out_cpp, out_torch)


def test_gather_mean_repeated_and_missing_neighbours():
    cache = torch.tensor([[1.0, 0.0], [0.0, 2.0], [4.0, 4.0]])
    nb = torch.tensor([[0, 0, 1], [-1, -1, -1], [2, -1, 2], [1, -1, 0]])
    expected = torch.tensor([[2 / 3, 2 / 3], [0.0, 0.0], [4.0, 4.0], [0.5, 1.0]])
    for backend in kernels.BACKENDS:
        with kernels.use_backend(backend):
            close(kernels.gather_mean(cache, nb), expected)


def test_gather_mean_gradient_matches_reference():
    g = rng(8)
    cache = torch.randn(30, 5, generator=g)  # many rows name the same cache rows
    nb = torch.randint(-1, 30, (4000, 6), generator=g)
    weights = torch.randn(4000, 5, generator=g)
    out = []
    for backend in kernels.BACKENDS:
        leaf = cache.clone().requires_grad_(True)
        with kernels.use_backend(backend):
            (kernels.gather_mean(leaf, nb) * weights).sum().backward()
        out.append(leaf.grad)
    close(out[0], out[1])


@pytest.mark.parametrize("backend", kernels.BACKENDS)
def test_gather_mean_rejects_bad_input(backend):
    cache = torch.zeros(4, 3)
    with kernels.use_backend(backend):
        with pytest.raises(ValueError, match=r"neighbours: id 4 .*outside \[-1, 4\)"):
            kernels.gather_mean(cache, torch.tensor([[0, 4]]))
        with pytest.raises(ValueError, match=r"neighbours: id -2"):
            kernels.gather_mean(cache, torch.tensor([[0, -2]]))
        with pytest.raises(ValueError, match="neighbours: expected 2 dimensions"):
            kernels.gather_mean(cache, torch.tensor([0, 1]))
        with pytest.raises(ValueError, match="cache: expected dtype float32"):
            kernels.gather_mean(cache.double(), torch.tensor([[0, 1]]))


@settings(max_examples=50, deadline=None)
@given(
    cache_rows=st.integers(1, 200),
    classes=st.integers(1, 20),
    n=st.integers(0, 100),
    r=st.integers(1, 20),
    seed=st.integers(0, 2**31 - 1),
)
def test_gather_mean_property(cache_rows, classes, n, r, seed):
    g = rng(seed)
    cache = torch.randn(cache_rows, classes, generator=g)
    nb = torch.randint(-1, cache_rows, (n, r), generator=g)
    out_cpp, out_torch = both(kernels.gather_mean, cache, nb)
    close(out_cpp, out_torch)


# ---------------------------------------------------------------------------------------------
# backend selection


def test_the_compiled_kernels_of_the_device_are_the_ones_compared():
    """Otherwise "cpp" falls back to the torch reference and every comparison here is the
    reference against itself."""
    if DEVICE.type == "cuda":
        assert cuda.available(), f"the CUDA kernels are not built or no GPU is visible: {cuda.IMPORT_ERROR}"
    else:
        assert kernels.cpp_available(), "the C++ kernels are not built"


def test_set_backend_rejects_unknown_names():
    with pytest.raises(ValueError, match="backend"):
        kernels.set_backend("cuda-please")


def test_environment_variable_selects_backend(monkeypatch):
    import importlib
    import sys

    monkeypatch.setenv("EDGEFD_KERNELS", "torch")
    module = importlib.reload(sys.modules["edgefd.kernels"])
    try:
        assert module.get_backend() == "torch"
        monkeypatch.setenv("EDGEFD_KERNELS", "nonsense")
        with pytest.raises(ValueError, match="EDGEFD_KERNELS"):
            importlib.reload(module)
    finally:
        monkeypatch.delenv("EDGEFD_KERNELS")
        importlib.reload(module)
    assert module.get_backend() == "cpp"
