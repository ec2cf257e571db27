"""`edgefd bench ray` runs its arms and prints every row; its compute case is the fedcache-demo recipe's
FD arm; its memory figure counts a shared page once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from edgefd import cli
from edgefd.bench.memory import RESIDENT_PAGES, memory_of
from edgefd.bench.ray_backend import (
    ARMS,
    ArmResult,
    case_config,
    goal_lines,
    table,
)

try:
    import ray  # noqa: F401
except ImportError:
    if os.environ.get("CI"):  # .ci/run installs edgefd[ray]: there a missing Ray is a failure, not a skip
        raise
    ray = None


@pytest.mark.skipif(ray is None, reason="ray is not installed (pip install 'edgefd[ray]')")
def test_ray_benchmark_runs_in_process_and_two_workers(tmp_path, capsys):
    out = tmp_path / "ray.json"
    argv = ["bench", "ray", "--cases", "overhead", "--overhead-clients", "2", "--overhead-rounds", "1"]
    argv += ["--arms", "ray-2", "--json", str(out)]
    assert cli.main(argv) == 0
    record = json.loads(out.read_text())
    in_process, two = record["arms"]
    assert (in_process["arm"], two["arm"]) == ("in-process", "ray, 2 workers")
    assert in_process["seconds_per_round"] > 0 and two["seconds_per_round"] > 0 and two["start_up"] > 0
    assert two["nodes"] == 1 and len(two["worker_mb"]) == 2 and min(two["worker_mb"]) > 0 and two["ray_other_mb"] > 0
    # the sampled peak counts the actors and Ray's processes: more than the in-process arm's, and at
    # most the sum of every process's peak resident set, which counts shared pages once per process
    sum_of_peaks = two["driver_mb"] + sum(two["worker_mb"]) + two["ray_other_mb"]
    assert 0 < in_process["memory_mb"] < two["memory_mb"] <= sum_of_peaks
    assert in_process["memory_measure"] == two["memory_measure"] == RESIDENT_PAGES  # CI runs as root
    assert "flower" not in record
    printed = capsys.readouterr().out
    assert "| overhead | ray, 2 workers | 1 |" in printed and "Flower" not in printed
    assert "| overhead: 2 workers at most the in-process peak + 1,100 MB |" in printed


def test_the_tables_have_a_row_for_every_arm_and_goal():
    results = []
    for case in ("overhead", "compute"):
        for label, workers, nodes in ARMS.values():
            results.append(ArmResult(case, label, 2, 1.0, 2.0 if workers is None else 4.0 / workers, 500.0))
            results[-1] = replace(results[-1], memory_mb=400.0)
            if workers is not None:
                memory = 1500.0 if (workers, nodes) == (2, 0) else 0.0  # measured for MEMORY_ARMS only
                results[-1] = replace(
                    results[-1], worker_mb=[600.0] * workers, ray_other_mb=300.0, nodes=nodes or 1, memory_mb=memory
                )
            results[-1] = replace(results[-1], memory_measure="PSS")
    rows = table(results)
    assert len(rows) == 2 + 8
    row = "| compute | ray, 2 nodes x 1 worker | 2 | 1.0 | 2.000 | 1.00x | 500 | 600, 600 | 300 | 2,000 | - |"
    assert row in rows
    row = "| overhead | ray, 2 workers | 1 | 1.0 | 2.000 | 1.00x | 500 | 600, 600 | 300 | 2,000 | 1,500 (PSS) |"
    assert row in rows
    goals = "\n".join(goal_lines(results))
    assert "| compute: 1 worker at most 1.10x in-process | 2.00x | no |" in goals
    assert "| compute: 2 workers at most 0.6x in-process | 1.00x | no |" in goals
    assert (
        "| overhead: 2 workers at most the in-process peak + 1,100 MB | +1,100 MB at the peak, every process" in goals
    )
    assert "| compute: 2 workers at most the in-process peak + 1,400 MB | +1,100 MB at the peak, every process" in goals
    assert "(sum of each one's peak RSS: +1,500 MB) | yes |" in goals
    assert "| Ray start-up under 10 s | at most 1.0 s" in goals


def test_the_compute_case_is_the_fedcache_demo_recipe_with_its_fd_arm():
    settings = {"compute_rounds": 1, "compute_samples": None}
    config = case_config("compute", settings)
    assert (config.dataset, config.clients, config.models) == ("fmnist", 20, "resnet8,resnet16,resnet20")
    assert (config.algo, config.params) == ("fd", {"beta": 1.5, "temperature": 3.0, "exclude_self": True})
    assert (config.batch_size, config.threads, config.rounds, config.samples_per_client) == (8, 1, 1, None)


def test_the_flower_comparison_moved_to_a_script_and_the_old_flag_says_where(tmp_path, capsys):
    assert cli.main(["bench", "ray", "--flower-python", str(tmp_path / "python")]) == 2
    assert "python3 benchmarks/ray_vs_flower.py --flower-python PYTHON" in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() != 0, reason="where pages lie is the kernel's secret to others than root")
def test_memory_counts_a_page_that_several_processes_map_once():
    """Two Pythons share their interpreter's pages: together they hold less than each alone, summed
    (a sum of PSS, the fallback, would give the sum)."""
    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    try:
        time.sleep(1.0)
        (one, measure), (other, _) = (memory_of([p.pid]) for p in sleepers)
        both, _ = memory_of([p.pid for p in sleepers])
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()
    assert measure == RESIDENT_PAGES
    assert max(one, other) < both < one + other - 1.0  # MB: at least a megabyte of the interpreter shared
    assert memory_of([sleepers[0].pid]) == (0.0, RESIDENT_PAGES)  # a process that is gone holds nothing
