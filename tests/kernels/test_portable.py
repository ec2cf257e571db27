"""The portable C++ row loops (what ARM devices and pre-AVX2 x86 run) against the torch reference.

On an AVX2 machine the kernels take hand-written AVX2 rows; EDGEFD_KERNELS_PORTABLE=1 makes them
take the portable loops instead. The switch is read once per process, so the checks run in a
subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from edgefd import kernels

pytestmark = pytest.mark.skipif(not kernels.cpp_available(), reason="C++ extension not built")

CHECKS = textwrap.dedent("""
    import torch
    from edgefd import _kernels, kernels

    assert _kernels.simd_path() == "portable", _kernels.simd_path()

    def close(a, b, atol=1e-5, rtol=1e-4):
        torch.testing.assert_close(a, b, atol=atol, rtol=rtol)

    def both(fn, *tensors):
        out = []
        for backend in ("cpp", "torch"):
            leaves = [t.detach().clone().requires_grad_(True) for t in tensors]
            with kernels.use_backend(backend):
                loss = fn(*leaves)
            loss.backward()
            out.append((loss.detach(), [leaf.grad for leaf in leaves]))
        return out

    g = torch.Generator().manual_seed(0)
    # C around the vector width (tails), and a batch above the parallel grain
    for batch, classes in [(3, 1), (5, 7), (5, 8), (9, 13), (400, 100)]:
        s = torch.randn(batch, classes, generator=g) * 3
        t = torch.randn(batch, classes, generator=g) * 3
        w, v = torch.rand(batch, generator=g), torch.rand(classes, generator=g)
        p = torch.softmax(torch.randn(batch, classes, generator=g), 1)
        for fn in (lambda s_: kernels.weighted_kl(s_, t, temperature=2.0, sample_weight=w, class_weight=v),
                   lambda s_: kernels.weighted_kl(s_, p, teacher_is_prob=True)):
            (lc, (gc,)), (lt, (gt,)) = both(fn, s)
            close(lc, lt)
            close(gc, gt)
        teachers = torch.randn(4, batch, classes, generator=g) * 2
        (lc, grads_c), (lt, grads_t) = both(kernels.sl_loss, s, teachers)
        close(lc, lt)
        for a, b in zip(grads_c, grads_t):
            close(a, b)
        cache = torch.randn(50, classes, generator=g)
        ids = torch.randint(-1, 50, (batch, 6), generator=g)
        with kernels.use_backend("cpp"):
            mine = kernels.gather_mean(cache, ids)
        with kernels.use_backend("torch"):
            ref = kernels.gather_mean(cache, ids)
        close(mine, ref)
    print("portable ok")
""")


def test_portable_row_loops_match_reference():
    env = dict(os.environ, EDGEFD_KERNELS_PORTABLE="1", OMP_NUM_THREADS="2")
    result = subprocess.run([sys.executable, "-c", CHECKS], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "portable ok" in result.stdout


def test_simd_path_is_reported():
    from edgefd import _kernels

    assert _kernels.simd_path() in ("avx2", "portable")
    if os.environ.get("EDGEFD_KERNELS_PORTABLE", "") not in ("", "0"):
        assert _kernels.simd_path() == "portable"
