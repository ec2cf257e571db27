"""benchmarks/poisoning.py runs a clean and an attacked arm under every defence a method has, and
prints what the attack cost each: the command docs/ROBUSTNESS.md's tables come from."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "poisoning.py"


def test_every_defence_of_a_method_is_an_arm_clean_and_attacked():
    command = [sys.executable, str(SCRIPT), "--methods", "fd", "local", "--attacks", "max-in-bounds"]
    command += ["--seeds", "0", "--clients", "3", "--rounds", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "| attack | mean (the paper's) | median | trimmed mean (20%) |" in out  # FD's defences
    assert "| attack | mean (the paper's) |\n" in out  # Local's: no defence, nothing to poison
    rows = [line for line in out.splitlines() if line.startswith(("| clean |", "| max-in-bounds |"))]
    assert len(rows) == 4
    fd_mean_attacked = float(rows[1].split("|")[2].split("±")[0])
    fd_median_attacked = float(rows[1].split("|")[3].split("±")[0])
    assert fd_median_attacked > fd_mean_attacked  # what the median is for
