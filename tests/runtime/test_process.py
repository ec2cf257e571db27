"""An edgefd child process imports the edgefd its parent imported, never a folder named edgefd (or
numpy) in its working folder."""

import subprocess
import sys

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
