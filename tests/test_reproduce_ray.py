"""`edgefd reproduce --backend ray`: every run a Ray task, and the table and run folders those of the
runs one after another; a Ray that cannot be had is a one-line error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from edgefd import results_page
from edgefd.cli import main
from edgefd.recipes import RECIPES, Arm, Recipe
from edgefd.reproduce.runs import run_recipe
from edgefd.reproduce.verify import verify
from edgefd.reproduce_ray import Cluster, NoRay, check_room
from edgefd.runtime.config import SimulationConfig

try:
    import ray
except ImportError:
    if os.environ.get("CI"):  # .ci/run installs edgefd[ray]: there a missing Ray is a failure, not a skip
        raise
    pytest.skip("ray is not installed (pip install 'edgefd[ray]')", allow_module_level=True)

TINY = Recipe(
    "tiny-ray",
    "test",
    SimulationConfig(dataset="digits", clients=2, rounds=2, models="mlp", samples_per_client=30, threads=1),
    [Arm("Local", "local"), Arm("FD", "fd")],
    target_from=["FD"],
    seeds=(0, 1),
)
TWO_THREADS = Recipe(
    "two-threads-ray",
    "test",
    SimulationConfig(
        dataset="mnist5k", clients=3, rounds=1, samples_per_client=150, partition="dirichlet:0.5", threads=2
    ),
    [Arm("FedD2S", "fedd2s")],
    target_from=["FedD2S"],
    seeds=(0,),
)
"""A method's own models on real images at two threads, where its numbers change with the thread
count (tests/runtime/test_ray_channel.py)."""
TIMING_COLUMNS = {"start-up s", "s / round"}
"""The table's clock readings: the only cells that differ between two runs of one recipe."""
TIMING_KEYS = {"wall_seconds", "startup_seconds", "peak_rss_mb"}
"""A summary's clock and memory readings."""


def without_timing(table: str) -> str:
    """The table with its timing columns left out of the main table."""
    lines = table.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| method |"))
    drop = {i for i, cell in enumerate(lines[header].split("|")) if cell.strip() in TIMING_COLUMNS}
    end = lines.index("", header)
    for i in range(header, end):
        lines[i] = "|".join(cell for j, cell in enumerate(lines[i].split("|")) if j not in drop)
    return "\n".join(lines)


def model_state(path):
    """A checkpoint's weights, as lists (comparable with ==)."""
    return {name: tensor.tolist() for name, tensor in torch.load(path, weights_only=False)["state"].items()}


def folder_contents(folder, out):
    """A run folder's files, its own path written as OUT and its clock readings left out."""
    summary = json.loads((folder / "summary.json").read_text().replace(str(out), "OUT"))
    metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    for line in metrics:
        del line["seconds"]
    return {
        "files": sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()),
        "run.toml": (folder / "run.toml").read_text().replace(str(out), "OUT"),
        "summary": {k: v for k, v in summary.items() if k not in TIMING_KEYS},
        "metrics": metrics,
        "models": {p.name: model_state(p) for p in sorted((folder / "models").glob("*.pt"))},
    }


def test_the_ray_backend_gives_the_sequential_table_and_run_folders(tmp_path, monkeypatch, capsys):
    """The main table's timing columns (start-up s, s / round) are left out: they are clock readings."""
    monkeypatch.setitem(RECIPES, TINY.name, TINY)
    assert main(["reproduce", TINY.name, "--out", str(tmp_path / "seq")]) == 0
    printed_sequential = capsys.readouterr().out
    assert main(["reproduce", TINY.name, "--backend", "ray", "--parallel", "2", "--out", str(tmp_path / "ray")]) == 0
    printed = capsys.readouterr().out
    assert not ray.is_initialized()  # the local Ray it started is stopped

    sequential = (tmp_path / "seq" / TINY.name / "results.md").read_text()
    table = (tmp_path / "ray" / TINY.name / "results.md").read_text()
    assert table in printed
    assert without_timing(table) == without_timing(sequential)
    assert without_timing(table) != table  # the columns left out exist
    # a line per run as it arrives: the sequential run's lines, in some order
    assert sorted(line for line in printed.splitlines() if ": best " in line) == sorted(
        line for line in printed_sequential.splitlines() if ": best " in line
    )
    assert printed.count(": best ") == len(TINY.arms) * len(TINY.seeds)
    for arm in TINY.arms:
        for seed in TINY.seeds:
            name = f"{arm.algo}-s{seed}"
            assert folder_contents(tmp_path / "ray" / TINY.name / name, tmp_path / "ray") == folder_contents(
                tmp_path / "seq" / TINY.name / name, tmp_path / "seq"
            )

    # finished runs are kept: nothing left for Ray, the same table
    assert main(["reproduce", TINY.name, "--backend", "ray", "--out", str(tmp_path / "ray")]) == 0
    assert capsys.readouterr().out.count("kept the finished run") == len(TINY.arms) * len(TINY.seeds)
    assert (tmp_path / "ray" / TINY.name / "results.md").read_text() == table


def test_a_recipe_at_two_threads_on_ray_is_the_sequential_recipe(tmp_path, monkeypatch):
    monkeypatch.setitem(RECIPES, TWO_THREADS.name, TWO_THREADS)
    assert main(["reproduce", TWO_THREADS.name, "--out", str(tmp_path / "seq")]) == 0
    assert main(["reproduce", TWO_THREADS.name, "--backend", "ray", "--out", str(tmp_path / "ray")]) == 0
    for arm in TWO_THREADS.arms:
        name = f"{arm.algo}-s0"
        ours = folder_contents(tmp_path / "seq" / TWO_THREADS.name / name, tmp_path / "seq")
        assert ours["summary"]["config"]["threads"] == 2
        assert folder_contents(tmp_path / "ray" / TWO_THREADS.name / name, tmp_path / "ray") == ours


def test_verify_runs_on_ray_and_finds_the_sequential_values(tmp_path):
    recipe = replace(TINY, arms=TINY.arms[1:], seeds=(0,))
    table = run_recipe(recipe, tmp_path / "seq", (0,))
    page = tmp_path / "RESULTS.md"
    page.write_text(f"{results_page.start_marker(recipe.name)}\n{results_page.end_marker(recipe.name)}\n")
    results_page.write_block(
        page,
        recipe.name,
        results_page.block_text("edgefd reproduce tiny-ray", "abc", 1, table, results_page.numeric_platform()),
    )
    assert verify(recipe, page, (0,), tmp_path / "verify", Cluster(parallel=1)) == []
    assert (tmp_path / "verify" / recipe.name / "fd-s0" / "summary.json").is_file()  # run again, on Ray


def reproduce_command(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; sys.path[:] = [p for p in sys.path if p]; from edgefd.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, "reproduce", *args], capture_output=True, text=True, timeout=120)


def test_an_unreachable_ray_address_is_a_one_line_error(tmp_path):
    done = reproduce_command(
        "fedict-watch", "--seeds", "0", "--backend", "ray", "--ray-address", "127.0.0.1:1", "--out", str(tmp_path)
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "--ray-address 127.0.0.1:1" in done.stderr
    assert not (tmp_path / "fedict-watch").exists()  # nothing ran


def test_the_ray_flags_need_the_ray_backend(capsys):
    assert main(["reproduce", "fedict-watch", "--gpus-per-run", "0.5"]) == 2
    assert "--parallel, --ray-address and --gpus-per-run are for --backend ray" in capsys.readouterr().err
    assert main(["reproduce", "fedict-watch", "--backend", "ray", "--gpus-per-run", "1.5"]) == 2
    assert "--gpus-per-run must be a fraction of one GPU or a whole number of GPUs, got 1.5" in capsys.readouterr().err


def test_each_run_gets_its_share_of_a_gpu(tmp_path, capsys):
    """On a Ray with one declared GPU (this machine has none: Ray hands out the id, torch sees no CUDA
    and the run's --device auto takes the CPU), two runs of half a GPU each are given GPU 0."""
    recipe = replace(TINY, arms=TINY.arms[1:], base=replace(TINY.base, rounds=1))
    ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        run_recipe(recipe, tmp_path, (0, 1), cluster=Cluster(gpus_per_run=0.5))
    finally:
        ray.shutdown()
    ran = [line for line in capsys.readouterr().out.splitlines() if ": ran on " in line]
    assert sorted(line.split(": ran on ")[0] for line in ran) == ["FD seed 0", "FD seed 1"]
    assert all(line.endswith(", GPU 0") for line in ran), ran


class ThreeNodes:
    """A cluster's `ray.nodes()`: a live node of 2 CPUs, a live node of 1 CPU and 1 GPU, a dead node of
    8 CPUs and 4 GPUs."""

    def nodes(self):
        return [
            {"Alive": True, "Resources": {"CPU": 2.0}},
            {"Alive": True, "Resources": {"CPU": 1.0, "GPU": 1.0}},
            {"Alive": False, "Resources": {"CPU": 8.0, "GPU": 4.0}},
        ]


def test_a_run_that_fits_on_no_live_node_is_refused_rather_than_left_waiting():
    check_room(ThreeNodes(), 2)
    with pytest.raises(NoRay, match=r"a run needs 4 CPUs .*the largest has 2\)"):
        check_room(ThreeNodes(), 4)
    check_room(ThreeNodes(), 1, gpus=0.5)
    with pytest.raises(NoRay, match=r"--gpus-per-run 2: no node .* has 2 GPU\(s\) beside 1 CPU\(s\) .*: 1\)"):
        check_room(ThreeNodes(), 1, gpus=2)
    with pytest.raises(NoRay, match=r"no node of the Ray cluster has 1 GPU\(s\) beside 2 CPU\(s\)"):
        check_room(ThreeNodes(), 2, gpus=1)  # the GPU's node has 1 CPU
