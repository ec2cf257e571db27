"""benchmarks/threads_under_load.py measures every (threads, load) cell it is asked for: a real
simulation each, its wall and CPU seconds, in its table and in its JSON."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "threads_under_load.py"


def test_every_cell_is_a_measured_simulation(tmp_path):
    out = tmp_path / "threads.json"
    command = [sys.executable, str(SCRIPT), "--algo", "fd", "--rounds", "1", "--clients", "2"]
    command += ["--threads", "1,2", "--load", "1", "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())
    assert [(row["threads"], row["load"]) for row in rows] == [(1, 1), (2, 1)]
    for row in rows:
        assert row["median_wall_seconds"] > 0 and row["median_cpu_seconds"] > 0
        assert 0.0 <= row["final_accuracy"] <= 1.0
        assert f"{row['threads']:>7} {row['load']:>5} {row['median_wall_seconds']:>8.2f}" in done.stdout


def test_bad_counts_are_refused_by_name():
    done = subprocess.run([sys.executable, str(SCRIPT), "--threads", "0"], capture_output=True, text=True)
    assert done.returncode == 2 and "--threads" in done.stderr
