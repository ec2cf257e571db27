"""`edgefd reproduce NAME --backend ray`: a recipe's runs as Ray tasks, on this machine or a cluster.

Every (arm, seed) run that is not already finished is one task, all submitted at once. A task asks
Ray for as many CPUs as the run has threads, so that two runs never share a core (and, with
``gpus_per_run``, for that share of a GPU: Ray then shows the task only its GPU, which the run's
``--device auto`` takes as cuda:0), and runs
`edgefd simulate` on the run's config in a process of its own, as `run_isolated` does: torch and
the kernels start from fresh thread settings, the peak memory is the run's own, and the run's
clients stay in that process (only the runs are spread, never a run's clients).

The task's node need not share the driver's disk: the run writes into a temporary folder there and
the task returns every file of it, which the driver writes into the run's folder. That folder is
then a sequential run's: its run.toml, metrics.jsonl, summary.json (naming the driver's folder as
its ``out``), curves.png and models. The driver prints two lines for each run as it arrives (its
best accuracy, and the node and GPU it ran on);
`edgefd.reproduce` builds the table from the folders in (arm, seed) order, whatever the order of
arrival.
"""

from __future__ import annotations

import json
import socket
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from edgefd.metrics.results import SUMMARY_FILE, summary_text
from edgefd.runtime.config import SimulationConfig, config_to_toml
from edgefd.runtime.process import edgefd_command

RunFiles = dict[str, bytes]
"""A finished run's folder: every file's bytes, by its path in the folder ("models/client-0.pt")."""

OnRun = Callable[[SimulationConfig, dict[str, Any], str], None]
"""Told of each run as the driver has written it: its config, its summary and where it ran."""


class NoRay(ValueError):
    """Ray cannot be had: not installed, no cluster at the address, or no node with a run's CPUs."""


@dataclass(frozen=True)
class Cluster:
    """Where `edgefd reproduce --backend ray` runs a recipe's runs."""

    parallel: int = 2
    """Runs at a time on a local Ray, which is started with parallel x the runs' threads CPUs and
    stopped at the end."""
    address: str | None = None
    """The Ray cluster to join instead (auto, or HOST:PORT): its CPUs decide how many runs go at once."""
    gpus_per_run: float = 0.0
    """GPUs each run's task asks Ray for; a fraction shares one GPU between runs (0.5: two runs)."""


def run_task(config: SimulationConfig) -> tuple[RunFiles, str]:
    """One run, in a new process on the task's node, in a temporary folder there: its files, as its
    folder on the driver must hold them, and where it ran (the node, and the GPUs Ray gave it)."""
    import ray

    gpus = ray.get_gpu_ids()
    where = socket.gethostname() + (f", GPU {', '.join(map(str, gpus))}" if gpus else "")
    with tempfile.TemporaryDirectory(prefix="edgefd-run-") as tmp:
        folder = Path(tmp) / "run"
        toml = Path(tmp) / "run.toml"
        toml.write_text(config_to_toml(replace(config, out=str(folder))))
        done = subprocess.run(
            edgefd_command("simulate", "--config", str(toml), "--quiet"), capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{config.out_dir()}: edgefd simulate failed on {socket.gethostname()} "
                f"(exit status {done.returncode}):\n{done.stderr[-4000:]}"
            )
        files = {path.relative_to(folder).as_posix(): path.read_bytes() for path in folder.rglob("*") if path.is_file()}
    summary = json.loads(files[SUMMARY_FILE])
    summary["config"]["out"] = config.out  # the driver's folder, as a sequential run's summary names it
    files[SUMMARY_FILE] = summary_text(summary).encode()
    files["run.toml"] = config_to_toml(config).encode()
    return files, where


def write_run(folder: Path, files: RunFiles) -> None:
    """A task's files into the run's folder; summary.json last, which marks the run finished
    (`edgefd.reproduce.runs.finished_run`)."""
    for name in sorted(files, key=lambda name: name == SUMMARY_FILE):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(files[name])


def run_on_ray(configs: Sequence[SimulationConfig], cluster: Cluster, on_run: OnRun) -> dict[Path, dict[str, Any]]:
    """Runs every config as a Ray task (see the module's docstring), writes each run's folder as it
    arrives and tells ``on_run``; the summaries by run folder. Joins a Ray this process has
    already started; one it starts itself is stopped at the end. A Ray that cannot be had is
    `NoRay` (one line); runs that failed are a RuntimeError once the others are written."""
    from edgefd.runtime.ray_channel import connect, import_ray

    threads = max(config.threads for config in configs)
    try:
        ray = import_ray()
        started = not ray.is_initialized()
        if started:
            connect(ray, cluster.address, cluster.parallel * threads)
    except ValueError as error:
        raise NoRay(str(error)) from None
    try:
        check_room(ray, threads, cluster.gpus_per_run)
        task = ray.remote(run_task)
        pending = {
            task.options(num_cpus=config.threads, num_gpus=cluster.gpus_per_run).remote(config): config
            for config in configs
        }
        summaries: dict[Path, dict[str, Any]] = {}
        failed: list[str] = []
        while pending:
            [ready], _ = ray.wait(list(pending), num_returns=1)
            config = pending.pop(ready)
            try:
                files, where = ray.get(ready)
            except ray.exceptions.RayError as error:
                failed.append(f"{config.out_dir()}: {error}")
                continue
            write_run(config.out_dir(), files)
            summaries[config.out_dir()] = json.loads(files[SUMMARY_FILE])
            on_run(config, summaries[config.out_dir()], where)
    finally:
        if started:
            ray.shutdown()
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(configs)} run(s) failed on Ray:\n" + "\n".join(failed))
    return summaries


def check_room(ray: Any, threads: int, gpus: float = 0.0) -> None:
    """`NoRay` unless some node of the cluster has ``threads`` CPUs and ``gpus`` GPUs: Ray would keep
    a task that fits on no node waiting for ever."""
    alive = [node["Resources"] for node in ray.nodes() if node["Alive"]]
    most = max((resources.get("CPU", 0) for resources in alive), default=0)
    if most < threads:
        raise NoRay(
            f"--backend ray: a run needs {threads} CPUs (its threads) and no node of the Ray cluster has them "
            f"(the largest has {most:g}): run with fewer --threads"
        )
    if gpus > 0 and not any(r.get("CPU", 0) >= threads and r.get("GPU", 0) >= gpus for r in alive):
        most_gpus = max((resources.get("GPU", 0) for resources in alive), default=0)
        raise NoRay(
            f"--gpus-per-run {gpus:g}: no node of the Ray cluster has {gpus:g} GPU(s) beside {threads} CPU(s) "
            f"(the most GPUs on a node: {most_gpus:g})"
        )
