"""An edgefd child process imports the edgefd its parent imported, never a folder named edgefd (or
numpy) in its working folder."""

import subprocess
import sys

import pytest

from edgefd.runtime.process import edgefd_command


def test_a_child_never_imports_from_the_working_folder(tmp_path):
    """Run from a checkout of edgefd with edgefd installed (not editable), `python -m edgefd.cli`
    put the working folder first on sys.path: deploy-local's server and clients imported the
    checkout, which has no compiled kernels, and ran on the torch references (FedCache, digits,
    3 clients, Dirichlet 0.5, seed 2718: 0.6811 / 0.8595 / 0.9291 deployed against the
    simulation's 0.6772 / 0.8629 / 0.9198). Decoys in the working folder stand for that checkout
    (numpy catches it under an editable install too, whose finder wins for edgefd itself)."""
    for name in ("edgefd", "numpy"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise SystemExit('the {name} of the working folder')\n")
    done = subprocess.run(edgefd_command("methods"), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "fedcache" in done.stdout
    old = subprocess.run(
        [sys.executable, "-m", "edgefd.cli", "methods"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert old.returncode != 0 and "of the working folder" in old.stderr  # what the decoys catch


def test_a_process_knows_how_long_ago_it_started():
    """A device logs its start-up with its hello: the seconds since its interpreter started, imports
    included, which a clock started by edgefd's own code would not count."""
    probe = "import time; time.sleep(1.0); from edgefd.runtime.process import seconds_since_start as s; print(s())"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert 1.0 <= float(done.stdout) < 60


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_device_gives_freed_activations_back_to_the_system():
    """glibc keeps a freed 16 MiB block in its heap once a first one of that size was freed (its
    mmap threshold rises to it: 16 MiB stay with the process here); pinned, each goes back."""
    probe = """
import numpy as np
from edgefd.runtime.process import return_large_blocks_when_freed
pinned = return_large_blocks_when_freed()
def rss():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS")) / 1024
before = rss()
for _ in range(3):
    block = np.ones(4 * 2**20, np.float32)  # 16 MiB: one activation of FedICT's client at batch 256
    del block
print(pinned, rss() - before)
"""
    pinned, held = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    if pinned == "False":
        pytest.skip("not glibc")
    assert float(held) < 4  # MB
