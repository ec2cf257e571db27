"""A/B timing of the C++ kernels of two git revisions, in one process, interleaved.

`edgefd bench kernels` measures the installed build against torch; on a shared, noisy machine two
separate runs of it cannot show a 10% change. This script compiles `csrc/` of two revisions (or
the working tree) into two small shared libraries with the extension's compiler flags, loads both,
and times them call by call on the same inputs, so that the noise hits both sides alike. It
reports medians, their ratio, and the largest difference between the two sides' outputs.

    python3 benchmarks/kernels_ab.py fbdb14c            # that revision vs the working tree
    python3 benchmarks/kernels_ab.py HEAD~3 HEAD --threads 1 2 --repeats 21

labelwise_mean is included as a control: when neither side changed it, its ratio shows the noise.
Needs g++ with OpenMP; x86-64 or aarch64.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("weighted_kl.cpp", "sl_loss.cpp", "labelwise_mean.cpp", "gather_mean.cpp")
# The extension's flags (CMakeLists.txt); -Bsymbolic keeps each library's calls inside itself.
FLAGS = (
    "-O3",
    "-fopenmp",
    "-fopenmp-simd",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-std=c++17",
    "-shared",
    "-fPIC",
    "-Wl,-Bsymbolic",
)
WORKTREE = "worktree"

# A C interface over kernels.hpp, so that ctypes can call both builds.
WRAPPER = r"""
#include <cstdint>
#include "kernels.hpp"
extern "C" {
double ab_weighted_kl(const float* s, const float* t, int64_t B, int64_t C, float T, float* g) {
    return edgefd::weighted_kl_forward(s, t, B, C, T, nullptr, nullptr, false, g);
}
double ab_sl_loss(const float* s, const float* t, int64_t K, int64_t B, int64_t C, float* gs) {
    return edgefd::sl_loss_forward(s, t, K, B, C, gs, nullptr);
}
void ab_labelwise_mean(const float* x, const int64_t* y, int64_t N, int64_t C, float* means, int64_t* counts) {
    edgefd::labelwise_mean(x, y, N, C, C, nullptr, means, counts);
}
void ab_gather_mean(const float* cache, int64_t M, int64_t C, const int64_t* ids, int64_t n, int64_t R, float* out) {
    edgefd::gather_mean(cache, M, C, ids, n, R, out);
}
}
"""


def build(rev: str, work: Path) -> Path:
    """Compiles csrc/ of `rev` (a git revision, or "worktree") into work/<rev>/ab.so."""
    out = work / rev.replace("/", "_")
    out.mkdir(parents=True)
    if rev == WORKTREE:
        names = [p.name for p in (ROOT / "csrc").iterdir() if p.suffix in (".cpp", ".hpp")]
        for name in names:
            (out / name).write_bytes((ROOT / "csrc" / name).read_bytes())
    else:
        listing = subprocess.run(
            ["git", "ls-tree", "--name-only", rev, "csrc/"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout.split()
        for path in listing:
            if path.endswith((".cpp", ".hpp")):
                data = subprocess.run(
                    ["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True
                ).stdout
                (out / Path(path).name).write_bytes(data)
    (out / "ab_wrapper.cpp").write_text(WRAPPER)
    library = out / "ab.so"
    subprocess.run(
        ["g++", *FLAGS, f"-I{out}", str(out / "ab_wrapper.cpp"), *(str(out / s) for s in SOURCES), "-o", str(library)],
        check=True,
    )
    return library


def load(library: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(library))
    lib.ab_weighted_kl.restype = ctypes.c_double
    lib.ab_sl_loss.restype = ctypes.c_double
    return lib


def ptr(a: np.ndarray) -> ctypes.c_void_p:
    return a.ctypes.data_as(ctypes.c_void_p)


@dataclass
class Case:
    name: str
    make: Callable[[ctypes.CDLL], tuple[Callable[[], object], np.ndarray]]
    """Given a library, returns (the call to time, the output array it writes)."""


def cases() -> list[Case]:
    rng = np.random.default_rng(0)
    B, C, K = 65536, 100, 10
    student = (rng.standard_normal((B, C)) * 3).astype(np.float32)
    teacher = (rng.standard_normal((B, C)) * 3).astype(np.float32)
    teachers = rng.standard_normal((K, B, C)).astype(np.float32)
    rows = rng.standard_normal((1_000_000, C)).astype(np.float32)
    labels = rng.integers(0, C, 1_000_000).astype(np.int64)
    n, R = 60_000, 16
    cache = rng.standard_normal((n, C)).astype(np.float32)
    ids = rng.integers(0, n, (n, R)).astype(np.int64)

    def kl(lib):
        g = np.zeros((B, C), np.float32)
        return (lambda: lib.ab_weighted_kl(ptr(student), ptr(teacher), B, C, ctypes.c_float(3.0), ptr(g))), g

    def sl(lib):
        g = np.zeros((B, C), np.float32)
        return (lambda: lib.ab_sl_loss(ptr(student), ptr(teachers), K, B, C, ptr(g))), g

    def lw(lib):
        means, counts = np.zeros((C, C), np.float32), np.zeros(C, np.int64)
        return (lambda: lib.ab_labelwise_mean(ptr(rows), ptr(labels), len(labels), C, ptr(means), ptr(counts))), means

    def gm(lib):
        out = np.zeros((n, C), np.float32)
        return (lambda: lib.ab_gather_mean(ptr(cache), n, C, ptr(ids), n, R, ptr(out))), out

    return [
        Case(f"weighted_kl fwd+bwd B={B} C={C}", kl),
        Case(f"sl_loss fwd+bwd K={K} B={B} C={C}", sl),
        Case(f"labelwise_mean N=1000000 C={C} (control)", lw),
        Case(f"gather_mean n={n} R={R} C={C}", gm),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", help="git revision of the A side")
    parser.add_argument("new", nargs="?", default=WORKTREE, help="git revision of the B side (default: working tree)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="OpenMP thread counts to time")
    parser.add_argument("--repeats", type=int, default=15, help="timed calls per side; medians are reported")
    args = parser.parse_args()
    omp = ctypes.CDLL("libgomp.so.1")
    with tempfile.TemporaryDirectory(prefix="kernels_ab_") as tmp:
        old, new = (load(build(rev, Path(tmp) / side)) for rev, side in ((args.old, "a"), (args.new, "b")))
        print(f"A = {args.old}, B = {args.new}; medians of {args.repeats} interleaved calls")
        for case in cases():
            (call_a, out_a), (call_b, out_b) = case.make(old), case.make(new)
            call_a(), call_b()
            diff = float(np.abs(out_a - out_b).max())
            for threads in args.threads:
                omp.omp_set_num_threads(threads)
                times = ([], [])
                for _ in range(args.repeats):
                    for side, call in enumerate((call_a, call_b)):
                        start = time.perf_counter()
                        call()
                        times[side].append(time.perf_counter() - start)
                a, b = (statistics.median(t) * 1e3 for t in times)
                print(
                    f"{case.name:<42} {threads} thr  A {a:8.2f} ms  B {b:8.2f} ms  A/B {a / b:5.2f}x"
                    f"  max |out A - out B| {diff:.2g}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
