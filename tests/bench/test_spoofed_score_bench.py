"""benchmarks/spoofed_score.py: how far one device reporting 1.0 moves a run's mean and median
accuracy, from the clean run's own scores (docs/ROBUSTNESS.md's figures)."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.append(str(BENCHMARKS))

from spoofed_score import reported  # noqa: E402


def test_a_lie_moves_the_mean_by_its_share_and_the_median_no_further_than_the_honest_scores():
    clean_mean, clean_median, lied_mean, lied_median = reported([0.2, 0.5, 0.6])
    assert (clean_mean, clean_median) == (pytest.approx(13 / 30), 0.5)
    assert lied_mean == pytest.approx(0.7)  # (1.0 + 0.5 + 0.6) / 3
    assert lied_median == 0.6  # the better honest score: the lie itself is never the median


def test_the_benchmark_prints_the_clean_and_lied_figures_of_a_run_config(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('algo = "fd"\ndataset = "digits"\nrounds = 2\nthreads = 1\n')
    command = [sys.executable, str(BENCHMARKS / "spoofed_score.py"), "--config", str(config), "--seeds", "0"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert rows[0] == "| figure | clean | one liar | moved (largest in a seed) |"
    mean_row, median_row = rows[1], rows[2]
    clean, lied = (float(cell) for cell in mean_row.split("|")[2:4])
    assert lied > clean  # 1.0 raises a mean of scores below 1
    assert median_row.startswith("| median over the devices |")
