"""Shared test settings: deterministic, quiet, and one thread in every process of the suite.

One thread: `OMP_NUM_THREADS=1` before torch loads, inherited by every process a test starts
(`edgefd simulate`, servers, devices), and the default of every run's `threads` (its default is
$OMP_NUM_THREADS where set). With two threads a process spins at each parallel region's barrier
while the other thread waits for a core: beside two busy processes on 2 cores, FedD2S's 10 rounds
took 84 s with two threads and 30 s with one, and 18 s either way alone (docs/TESTING.md)."""

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

os.environ.setdefault("MPLBACKEND", "Agg")
# FedCache's hash cache (and anything else edgefd keeps between runs) in a folder of this session,
# never the user's ~/.cache. Removed when the process that made it exits (each pytest-xdist worker
# makes its own): left behind, a suite's caches filled 5.5 GB of /tmp over a few hundred runs.
_test_cache_dir = tempfile.mkdtemp(prefix="edgefd-test-cache-")
os.environ["EDGEFD_CACHE_DIR"] = _test_cache_dir
atexit.register(shutil.rmtree, _test_cache_dir, ignore_errors=True)

import torch  # noqa: E402

torch.set_num_threads(1)

# The benchmarks' shared pieces (broker rigs, the fleet load test and its devices) are scripts of
# benchmarks/, not modules of the package: the tests import them by name, as the scripts import each other.
sys.path.append(str(Path(__file__).resolve().parents[1] / "benchmarks"))

SLOWEST_FIRST = ("tests/device/test_arm64.py",)
"""Files that take minutes (the emulated device: its bundle, its install, its run), collected first."""


def pytest_collection_modifyitems(session, config, items):
    """The slowest files first: pytest-xdist (`--dist loadfile`) hands out files in collection order,
    so the emulated device's tests run beside every other file rather than after most of them
    (in CI they started 15 minutes into a 33-minute suite)."""
    first = [item for item in items if item.nodeid.startswith(SLOWEST_FIRST)]
    if first:
        chosen = {id(item) for item in first}
        items[:] = first + [item for item in items if id(item) not in chosen]
