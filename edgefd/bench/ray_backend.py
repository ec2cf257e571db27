"""`edgefd bench ray`: what running the clients in Ray actors (`--backend ray`) costs and gains.

Each case runs in-process and through `RayChannel` with 1 worker, 2 workers, and 2 nodes of 1
worker each (a `ray.cluster_utils.Cluster` on this machine: a head with no CPUs and two nodes of
one CPU, so Ray can only put the two actors on different nodes; the table says on how many nodes
they ran). The cases:

- ``overhead``: FD on digits with 100 clients (about 14 samples each): little training per client,
  so the cost per message and per client shows;
- ``compute``: the fedcache-demo recipe's setting (edgefd/recipes/fedcache.py: all of Fashion-MNIST over 20
  clients, ResNet-8/16/20, batch 8, one thread) with its FD arm, whose clients train in parallel
  (the FedCache arm's per-batch exchange calls its clients one at a time: docs/RAY.md).

Every arm runs in a process of its own, so that its memory is its own. Two figures: each process's
own peak resident set (the driver's and each actor's ``ru_maxrss``, the others' ``VmHWM``), whose
sum counts every shared page once per process and is an upper bound; and, for the arms the memory
goal compares (in-process and 2 workers), the peak of the memory the arm's processes (the driver
and all its descendants: Ray's GCS, raylets, agents, the actors) hold together: their distinct
resident pages, each physical page counted once however many processes map it (torch's libraries
are mapped by the driver and every actor), read from /proc/PID/pagemap. A page the arm shares with
a process outside it counts whole, so the figure does not move with what else runs on the machine,
as a sum of proportional set sizes (PSS) does. Reading the pages of a dozen processes takes most
of a second of CPU, so they are sampled in a second run of the arm, whose times are not used.
Reading where pages lie needs root; elsewhere the figure is the sum of the processes' PSS, and the
table says which it is.
Start-up is building the run (for Ray: joining or starting Ray and every actor building its
clients, until all are ready); round 0 (the hellos and the first evaluation) is not timed; a round
is the median of rounds 1..R (train, aggregate, evaluate). Ratios are against the in-process arm of
the same case in the same run.

Flower's simulation engine on the overhead case's FD round, beside edgefd's Ray overhead, is a script
of the checkout (it runs Flower under another interpreter): benchmarks/ray_vs_flower.py.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgefd.bench.memory import descendants, memory_of, peak_mb_of

if TYPE_CHECKING:
    from edgefd.runtime.config import SimulationConfig

ARMS = {
    "in-process": ("in-process", None, 0),
    "ray-1": ("ray, 1 worker", 1, 0),
    "ray-2": ("ray, 2 workers", 2, 0),
    "ray-2-nodes": ("ray, 2 nodes x 1 worker", 2, 2),
}
"""Each arm's name (for ``--arms``), label, workers and nodes: no workers is in-process; no nodes is
a local Ray of ``workers`` CPUs."""

CASES = ("overhead", "compute")

GOALS = {
    "compute_1_worker": 1.10,
    "overhead_1_worker": 1.25,
    "compute_2_workers": 0.6,
    "start_up_seconds": 10.0,
}
"""The goals the Ray backend is held to: a round with 1 worker at most 1.10x (compute) and 1.25x (overhead) the
in-process round, with 2 workers on 2 cores at most 0.6x (compute); a Ray start-up under 10 s."""
MEMORY_GOALS_MB = {"overhead": 1100.0, "compute": 1400.0}
"""With 2 workers, at most the in-process peak plus this much memory (the peak of what every process of
the arm holds), by case: what two actors cost with the CUDA build of torch that PyPI gives x86-64
(each process that imports it holds about 280 MB of its own; docs/RAY.md, "Memory")."""


@dataclass
class ArmResult:
    case: str
    arm: str
    rounds: int
    start_up: float
    """Seconds to build the run: for Ray, starting or joining it and every actor ready."""
    seconds_per_round: float
    """Median over rounds 1..R."""
    driver_mb: float
    worker_mb: list[float] = field(default_factory=list)
    ray_other_mb: float = 0.0
    """The peaks of Ray's other processes (GCS, raylets, idle workers), summed."""
    nodes: int = 0
    """On how many Ray nodes the actors ran."""
    cluster_up: float = 0.0
    """For the 2-node arm: seconds to start the cluster (before the run, as `ray start` would be)."""
    memory_mb: float = 0.0
    """The peak of the memory the arm's processes (the driver and its descendants) hold together,
    sampled in a run of its own (`memory_of`); 0 for an arm not in `MEMORY_ARMS`."""
    memory_measure: str = ""
    """How `memory_mb` was counted: `edgefd.bench.memory.RESIDENT_PAGES`, or `edgefd.bench.memory.PSS`
    where pages cannot be read."""

    @property
    def total_mb(self) -> float:
        return self.driver_mb + sum(self.worker_mb) + self.ray_other_mb


def case_config(case: str, settings: dict[str, Any]) -> SimulationConfig:
    """The run of ``case`` at the benchmark's settings (``clients``, ``rounds``, ``samples``), in-process."""
    from edgefd.runtime.config import SimulationConfig

    if case == "overhead":
        return SimulationConfig(
            algo="fd",
            dataset="digits",
            clients=settings["overhead_clients"],
            rounds=settings["overhead_rounds"],
            threads=1,
            device="cpu",
            out=None,
        )
    return replace(
        fedcache_demo_fd(),
        rounds=settings["compute_rounds"],
        samples_per_client=settings["compute_samples"],
        device="cpu",
        out=None,
    )


def fedcache_demo_fd() -> SimulationConfig:
    """The fedcache-demo recipe's setting with its FD arm: the compute case's run."""
    from edgefd.recipes import RECIPES

    recipe = RECIPES["fedcache-demo"]
    (fd,) = [arm for arm in recipe.arms if arm.algo == "fd"]
    return replace(recipe.base, **fd.config, algo="fd", params=dict(fd.params))


def actor_probe(host: Any) -> tuple[int, str, float]:
    """Run inside an actor: its process id, node and peak resident memory in MB."""
    import ray

    return (
        os.getpid(),
        ray.get_runtime_context().get_node_id(),
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )


def run_arm(case: str, arm: str, settings: dict[str, Any]) -> ArmResult:
    """One arm of one case, in this process (a process of its own: its peaks are the arm's)."""
    from edgefd.runtime.build import build

    label, workers, nodes = ARMS[arm]
    config = case_config(case, settings)
    cluster, cluster_up = None, 0.0
    if workers is not None:
        config = replace(config, backend="ray", workers=workers)
    if nodes:
        from ray.cluster_utils import Cluster

        started = time.perf_counter()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
        for _ in range(nodes):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        cluster_up = time.perf_counter() - started
        config = replace(config, ray_address=cluster.address)
    started = time.perf_counter()
    if workers is not None and not nodes:
        # What RayChannel would start, with address "local": a bare ray.init() joins the cluster that
        # another program started on this machine (its address is in /tmp/ray/ray_current_cluster).
        import ray

        ray.init(address="local", num_cpus=workers, include_dashboard=False, log_to_driver=False)
    sim = build(config)
    start_up = time.perf_counter() - started
    try:
        sim.end_round(sim.federation.start())
        seconds = []
        for r in range(1, config.rounds + 1):
            began = time.perf_counter()
            sim.end_round(sim.federation.run_round(r))
            seconds.append(time.perf_counter() - began)
        result = ArmResult(
            case,
            label,
            config.rounds,
            round(start_up, 3),
            round(statistics.median(seconds), 3),
            0.0,
            cluster_up=round(cluster_up, 3),
        )
        if workers is not None:
            import ray

            actors = sim.federation.channel.actors  # type: ignore[attr-defined]
            probes = ray.get([actor.__ray_call__.remote(actor_probe) for actor in actors])
            pids = {pid for pid, _, _ in probes}
            result.worker_mb = [round(mb, 1) for _, _, mb in probes]
            result.nodes = len({node for _, node, _ in probes})
            others = [pid for pid in descendants(os.getpid()) if pid not in pids]
            result.ray_other_mb = round(sum(peak_mb_of(pid) for pid in others), 1)
    finally:
        sim.close()
        if workers is not None:
            import ray

            ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
    result.driver_mb = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return result


SAMPLE_SECONDS = 0.1
"""The pause between two samples of an arm's memory (`memory_of`), when `spawn_arm` samples it."""

MEMORY_ARMS = ("in-process", "ray-2")
"""The arms whose peak memory is measured (in a run of their own): those the memory goal compares."""


def spawn_arm(case: str, arm: str, settings: dict[str, Any], sample: bool = False) -> ArmResult:
    """`run_arm` in a new process (this module's ``__main__``); its result is its last line. With
    ``sample``, the peak of what it and its descendants hold together (`memory_of`) is sampled from
    here while it runs (which takes CPU from it: its times are then not the arm's)."""
    spec = json.dumps({"case": case, "arm": arm, "settings": settings})
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen([sys.executable, "-m", "edgefd.bench.ray_backend", spec], stdout=out, stderr=err)
        peak, measure = 0.0, ""
        while sample and child.poll() is None:
            mb, measure = memory_of([child.pid, *descendants(child.pid)])
            peak = max(peak, mb)
            time.sleep(SAMPLE_SECONDS)
        child.wait()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if child.returncode != 0:
        raise RuntimeError(f"edgefd bench ray: {case} / {arm} failed:\n{stderr[-3000:]}")
    result = ArmResult(**json.loads(stdout.strip().splitlines()[-1]))
    return replace(result, memory_mb=round(peak, 1), memory_measure=measure)


def table(results: list[ArmResult]) -> list[str]:
    """One row per case and arm, ratios against the case's in-process arm."""
    base = {r.case: r for r in results if r.arm == "in-process"}
    lines = [
        "| case | arm | nodes | start-up s | s / round | x in-process | driver MB | each worker MB "
        "| Ray's other processes MB | sum of peaks MB | memory MB (peak, all processes) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        ratio = r.seconds_per_round / base[r.case].seconds_per_round
        workers = ", ".join(f"{mb:,.0f}" for mb in r.worker_mb) or "-"
        lines.append(
            f"| {r.case} | {r.arm} | {r.nodes or '-'} | {r.start_up:.1f} | {r.seconds_per_round:.3f} | {ratio:.2f}x "
            f"| {r.driver_mb:,.0f} | {workers} | {r.ray_other_mb:,.0f} | {r.total_mb:,.0f} "
            f"| {f'{r.memory_mb:,.0f} ({r.memory_measure})' if r.memory_mb else '-'} |"
        )
    return lines


def goal_lines(results: list[ArmResult]) -> list[str]:
    """Each goal (`GOALS`) that this run measured, its figure, and whether it is met."""
    by = {(r.case, r.arm): r for r in results}
    lines = ["| goal | measured | met? |", "|---|---|---|"]

    def ratio(case: str, arm: str) -> float | None:
        if (case, arm) not in by or (case, "in-process") not in by:
            return None
        return by[case, arm].seconds_per_round / by[case, "in-process"].seconds_per_round

    for case, arm, goal, text in (
        ("compute", "ray, 1 worker", GOALS["compute_1_worker"], "compute: 1 worker at most 1.10x in-process"),
        ("overhead", "ray, 1 worker", GOALS["overhead_1_worker"], "overhead: 1 worker at most 1.25x in-process"),
        ("compute", "ray, 2 workers", GOALS["compute_2_workers"], "compute: 2 workers at most 0.6x in-process"),
    ):
        value = ratio(case, arm)
        if value is not None:
            lines.append(f"| {text} | {value:.2f}x | {'yes' if value <= goal else 'no'} |")
    ray_arms = [r for r in results if r.arm != "in-process"]
    if ray_arms:
        worst = max(ray_arms, key=lambda r: r.start_up)
        met = worst.start_up < GOALS["start_up_seconds"]
        lines.append(
            f"| Ray start-up under 10 s | at most {worst.start_up:.1f} s ({worst.case}, {worst.arm}) "
            f"| {'yes' if met else 'no'} |"
        )
    for case in CASES:
        if (case, "ray, 2 workers") in by and (case, "in-process") in by:
            ray, base = by[case, "ray, 2 workers"], by[case, "in-process"]
            extra = ray.memory_mb - base.memory_mb
            bound = ray.total_mb - base.total_mb
            goal = MEMORY_GOALS_MB[case]
            met = extra <= goal
            lines.append(
                f"| {case}: 2 workers at most the in-process peak + {goal:,.0f} MB | +{extra:,.0f} MB at the peak, "
                f"every process of the arm, {ray.memory_measure} (sum of each one's peak RSS: +{bound:,.0f} MB) "
                f"| {'yes' if met else 'no'} |"
            )
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cases",
        default=",".join(CASES),
        metavar="LIST",
        help="which cases: overhead (FD, digits, 100 clients), compute (the fedcache-demo setting, FD) "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--arms",
        default=",".join(ARMS),
        metavar="LIST",
        help="which arms, comma-separated: in-process (always run), ray-1 (1 worker), ray-2 (2 workers), "
        "ray-2-nodes (2 nodes x 1 worker) (default: all)",
    )
    parser.add_argument(
        "--overhead-clients", type=int, default=100, metavar="N", help="clients of the overhead case (default: 100)"
    )
    parser.add_argument(
        "--overhead-rounds",
        type=int,
        default=5,
        metavar="R",
        help="timed rounds of the overhead case; the median is reported (default: %(default)s)",
    )
    parser.add_argument(
        "--compute-rounds", type=int, default=1, metavar="R", help="timed rounds of the compute case (default: 1)"
    )
    parser.add_argument(
        "--compute-samples",
        type=int,
        metavar="N",
        help="at most N training samples per client in the compute case, for a quick look (default: all, "
        "the recipe's 60,000 over 20 clients)",
    )
    parser.add_argument(
        "--flower-python",
        metavar="PYTHON",
        help="moved: Flower's simulation engine against edgefd's Ray backend is python3 benchmarks/ray_vs_flower.py "
        "--flower-python PYTHON, a script of the checkout; here an error that says so",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")


def _names(text: str, known: tuple[str, ...] | list[str], what: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise SystemExit(f"edgefd bench ray: unknown {what} {unknown or text!r}; choose from {', '.join(known)}")
    return names


def machine() -> str:
    """This machine's CPUs and load: the figures are only comparable within one run on one machine."""
    model = "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text().splitlines() if cpuinfo.exists() else []:
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    return f"{os.cpu_count()} CPUs ({model}), load average {load} at the start"


def run(args: argparse.Namespace) -> int:
    if args.flower_python is not None:
        print(
            "edgefd bench ray: --flower-python moved to a script of the checkout: "
            "python3 benchmarks/ray_vs_flower.py --flower-python PYTHON",
            file=sys.stderr,
        )
        return 2
    cases = _names(args.cases, CASES, "case(s)")
    arms = ["in-process", *(a for a in _names(args.arms, list(ARMS), "arm(s)") if a != "in-process")]
    settings = {
        "overhead_clients": args.overhead_clients,
        "overhead_rounds": args.overhead_rounds,
        "compute_rounds": args.compute_rounds,
        "compute_samples": args.compute_samples,
    }
    where = machine()
    print(where, flush=True)
    results = []
    for case in cases:
        for arm in arms:
            result = spawn_arm(case, arm, settings)
            print(
                f"{case} / {arm}: start-up {result.start_up:.1f} s, {result.seconds_per_round:.3f} s/round",
                flush=True,
            )
            if arm in MEMORY_ARMS:
                sampled = spawn_arm(case, arm, settings, sample=True)
                result = replace(result, memory_mb=sampled.memory_mb, memory_measure=sampled.memory_measure)
                print(
                    f"{case} / {arm}: peak memory {result.memory_mb:,.0f} MB, {result.memory_measure} "
                    "(a second run, sampled)",
                    flush=True,
                )
            results.append(result)
    print()
    print("\n".join(table(results)))
    print()
    print("\n".join(goal_lines(results)))
    if args.json:
        record = {
            "machine": where,
            "arms": [asdict(r) for r in results],
            "settings": settings,
        }
        Path(args.json).write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    request = json.loads(sys.argv[1])
    print(json.dumps(asdict(run_arm(request["case"], request["arm"], request["settings"]))))
