"""One GPU machine, ten minutes: edgefd's CUDA kernels, `--device cuda` for every method and the
papers' GPU-sized settings, written to OUTDIR/gpu_check.json and OUTDIR/summary.md.

    bash scripts/gpu_check.sh OUTDIR          # on a GPU machine: installs edgefd, then runs this
    bash scripts/gpu_check.sh OUTDIR --cpu    # the same steps on the CPU, shapes cut down (CI runs it)

scripts/gpu_check.sh installs edgefd with its CUDA kernels into the machine's Python; this file is
what runs after. Each step is timed and recorded; a step that fails does not stop the next:

1. ``environment``: torch, the GPU, which kernels this edgefd can use.
2. ``kernel_tests``: tests/kernels/test_kernels.py with ``EDGEFD_TEST_DEVICE=cuda`` (every kernel,
   forward and backward, the suite's edge shapes: the CUDA kernels against the torch references).
3. ``kernel_bench``: ``edgefd bench kernels --device cuda --compiled`` (eager torch, torch.compile and
   edgefd's kernels; bandwidth against a device-to-device copy measured in the same run).
4. ``methods``: every registered method, 2 rounds on digits, on the device and on the CPU with the
   same seed: bytes must be identical and final accuracies within a point.
5. ``fedcache_demo``: the fedcache-demo recipe's FedCache arm (the FedCache authors' own setting),
   2 rounds: seconds a round, start-up, peak GPU and host memory.
6. ``fedzkt_paper``: FedZKT with ``preset=paper`` (ResNet-18 global model, n_D 200 x 256), one round.
7. ``deployed_clients``: `edgefd deploy-local` (a broker, a server and three clients as processes)
   with ``device = "auto"`` for FD and FedICT, 2 rounds on digits: each client must say it chose the
   device (a Jetson's path: `edgefd client` on the GPU), and bytes and accuracy must be the
   simulation's on that device (identical bytes, accuracy within a point).

With ``--cpu`` the device is the CPU, steps 4-7 run on a few clients with a hundred samples each
(FedZKT on digits) and FedZKT's server on 2 iterations: it checks that the script runs, not what a GPU does. The exit
status is 1 when a correctness check fails (a kernel test, bytes that differ, accuracies more than a
point apart, a step that crashed); the speed goals are reported, not enforced.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from same_results import SETTINGS as LIGHT_METHOD  # scripts/: the lighter models some methods need on digits

from edgefd.algorithms.base import list_methods
from edgefd.recipes import RECIPES
from edgefd.runtime.config import SimulationConfig, config_to_toml
from edgefd.runtime.process import edgefd_command

ROOT = Path(__file__).resolve().parents[1]
ACCURACY_POINTS = 1.0
"""How far (in accuracy points) a method's device run may end from its CPU run: floating-point sums
run in another order on a GPU, and a few rounds on small data amplify that."""
MEMORY_BOUND = ("weighted_kl", "labelwise_mean", "gather_mean")
BANDWIDTH_GOAL = 0.6
"""The memory-bound kernels' goal at their largest shape: this fraction of the copy bandwidth."""

# On the CPU (--cpu): few clients and samples, one thread (with LIGHT_METHOD: runs of seconds).
LIGHT_RUN: dict[str, Any] = dict(clients=3, samples_per_client=80, threads=1)


@dataclass
class Check:
    """One run of the check: where it writes, what it runs on."""

    out: Path
    work: Path
    device: str
    """"cuda" on a GPU machine, "cpu" with --cpu."""
    jobs: int
    """Simulations run at once in the methods step."""
    timeout: int
    """Seconds any one child process may take."""

    @property
    def cut_down(self) -> bool:
        return self.device == "cpu"

    def env(self) -> dict[str, str]:
        # A cold hash cache (FedCache's start-up is measured), and no thread pool wider than asked.
        return {**os.environ, "EDGEFD_CACHE_DIR": str(self.work / "cache"), "PYTHONUNBUFFERED": "1"}


@dataclass
class Step:
    name: str
    ok: bool = False
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def run_child(check: Check, command: list[str], log: Path, env: dict[str, str] | None = None) -> int:
    """Run one child process with its output in ``log``; its exit status (124 on timeout)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as handle:
        try:
            return subprocess.run(
                command, stdout=handle, stderr=subprocess.STDOUT, env=env or check.env(), timeout=check.timeout,
                cwd=check.work,
            ).returncode  # fmt: skip
        except subprocess.TimeoutExpired:
            handle.write(f"\n[gpu_check] killed after {check.timeout} s\n")
            return 124


def tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


# ----------------------------------------------------------------------------------------------
# The steps: each fills in its Step's ok and details.


def environment(check: Check, step: Step) -> None:
    import torch

    import edgefd
    from edgefd import kernels

    details = step.details
    details.update(
        python=platform.python_version(),
        torch=torch.__version__,
        edgefd=str(Path(edgefd.__file__).parent),
        cpu_count=os.cpu_count(),
        cpp_kernels=kernels.cpp_available(),
        cuda_kernels_built=kernels.cuda.built(),
        cuda_kernels_usable=kernels.cuda.available(),
        torch_sees_gpu=torch.cuda.is_available(),
    )
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        details.update(
            gpu=props.name,
            capability=f"{props.major}.{props.minor}",
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            multiprocessors=props.multi_processor_count,
            torch_cuda=torch.version.cuda,
        )
    step.ok = kernels.cpp_available() and (check.device == "cpu" or kernels.cuda.available())
    if not step.ok:
        step.error = (
            "the CUDA kernels are not usable: "
            + ("torch sees no GPU" if not torch.cuda.is_available() else str(kernels.cuda.IMPORT_ERROR))
            if check.device != "cpu"
            else "the C++ kernels are not built"
        )


def kernel_tests(check: Check, step: Step) -> None:
    junit = check.work / "kernel_tests.xml"
    log = check.work / "logs" / "kernel_tests.log"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"]
    command.append(str(ROOT / "tests" / "kernels" / "test_kernels.py"))
    status = run_child(check, command, log, {**check.env(), "EDGEFD_TEST_DEVICE": check.device})
    if junit.exists():
        suite = ElementTree.parse(junit).getroot()
        suite = suite if suite.tag == "testsuite" else suite[0]
        step.details.update({key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")})
    step.details["device"] = check.device
    step.ok = status == 0
    if not step.ok:
        step.error = f"pytest exited {status}:\n{tail(log)}"


def kernel_bench(check: Check, step: Step) -> None:
    report_file = check.work / "kernel_bench.json"
    log = check.work / "logs" / "kernel_bench.log"
    args = ["bench", "kernels", "--device", check.device, "--compiled", "--json", str(report_file)]
    args += ["--quick"] if check.cut_down else []
    status = run_child(check, edgefd_command(*args), log)
    step.ok = status == 0 and report_file.exists()
    if not step.ok:
        step.error = f"edgefd bench kernels exited {status}:\n{tail(log)}"
        return
    report = json.loads(report_file.read_text())
    step.details.update(report)
    step.details["goals"] = [] if check.cut_down else kernel_goals(report["records"])


def kernel_goals(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At each kernel's largest shape: ahead of torch.compile, and the memory-bound ones at 60% or
    more of the copy bandwidth (gather_mean by the bytes it must move: R cached rows per output row)."""
    goals = []
    for kernel in sorted({r["kernel"] for r in records}):
        mine = [r for r in records if r["kernel"] == kernel]
        largest = max(mine, key=lambda r: r["gbps"] * r["cpp_ms"])  # the most bytes touched
        goals.append(
            dict(
                goal=f"{kernel} {largest['shape']}: faster than torch.compile",
                value=f"{largest['compiled_speedup']}x",
                met=largest["compiled_speedup"] is not None and largest["compiled_speedup"] > 1.0,
            )
        )
        name = kernel.split()[0]
        if name in MEMORY_BOUND:
            fraction = largest["moved_fraction"] if name == "gather_mean" else largest["bandwidth_fraction"]
            goals.append(
                dict(
                    goal=f"{kernel} {largest['shape']}: >= {BANDWIDTH_GOAL:.0%} of copy bandwidth",
                    value=f"{fraction:.0%}",
                    met=fraction >= BANDWIDTH_GOAL,
                )
            )
    return goals


def simulate(check: Check, config: SimulationConfig, name: str, device: str) -> tuple[int, Path]:
    """``edgefd simulate`` on ``config`` with ``--device device`` in a child process; its status and folder."""
    folder = check.work / "runs" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.toml").write_text(config_to_toml(replace(config, out=str(folder), device=device)))
    command = edgefd_command("simulate", "--config", str(folder / "run.toml"), "--quiet")
    return run_child(check, command, check.work / "logs" / f"{name}.log"), folder


def read_run(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return json.loads((folder / "summary.json").read_text()), lines


def method_config(check: Check, method: str) -> SimulationConfig:
    config = SimulationConfig(algo=method, dataset="digits", rounds=2, seed=0)
    if check.cut_down:
        config = replace(config, **LIGHT_RUN, **LIGHT_METHOD.get(method, {}))
    return config


def methods(check: Check, step: Step) -> None:
    names = [spec.name for spec in list_methods()]
    # The CPU run of each method is the reference; with --cpu both runs are on the CPU (a
    # determinism check: they must agree exactly).
    devices = (check.device, "cpu") if check.device != "cpu" else ("cpu", "cpu-again")
    jobs = [(name, device) for name in names for device in devices]

    def one(job: tuple[str, str]) -> tuple[int, Path]:
        name, device = job
        return simulate(check, method_config(check, name), f"{name}-{device}", device.removesuffix("-again"))

    with ThreadPoolExecutor(check.jobs) as pool:
        results = dict(zip(jobs, pool.map(one, jobs)))
    rows = []
    for name in names:
        (status_a, folder_a), (status_b, folder_b) = (results[(name, device)] for device in devices)
        row: dict[str, Any] = dict(method=name)
        if status_a or status_b:
            failed = f"{name}-{devices[0] if status_a else devices[1]}.log"
            row.update(ok=False, error=f"exit {status_a} / {status_b}: {tail(check.work / 'logs' / failed, 5)}")
            rows.append(row)
            continue
        (summary_a, lines_a), (summary_b, lines_b) = read_run(folder_a), read_run(folder_b)
        bytes_a = [(line["bytes_up"], line["bytes_down"]) for line in lines_a]
        bytes_b = [(line["bytes_up"], line["bytes_down"]) for line in lines_b]
        accuracy_a, accuracy_b = 100 * lines_a[-1]["accuracy"], 100 * lines_b[-1]["accuracy"]
        row.update(
            device_seconds=summary_a["wall_seconds"],
            cpu_seconds=summary_b["wall_seconds"],
            bytes_identical=bytes_a == bytes_b,
            bytes_up=sum(b[0] for b in bytes_a),
            device_accuracy=round(accuracy_a, 2),
            cpu_accuracy=round(accuracy_b, 2),
            peak_gpu_mb=summary_a.get("peak_gpu_mb"),
            recorded_device=summary_a.get("device"),
        )
        row["ok"] = row["bytes_identical"] and abs(accuracy_a - accuracy_b) <= ACCURACY_POINTS
        if check.device == "cpu":  # the same run twice on one machine: nothing may differ
            row["ok"] = row["bytes_identical"] and accuracy_a == accuracy_b
        rows.append(row)
    step.details.update(runs=rows, rounds=2, dataset="digits", seed=0)
    step.ok = all(row["ok"] for row in rows)
    if not step.ok:
        step.error = "differ or failed: " + ", ".join(row["method"] for row in rows if not row["ok"])


def timed_run(check: Check, step: Step, config: SimulationConfig, name: str) -> None:
    """One simulation on the device; its seconds a round, start-up and peak memory."""
    status, folder = simulate(check, config, name, check.device)
    if status:
        step.error = f"edgefd simulate exited {status}:\n{tail(check.work / 'logs' / f'{name}.log')}"
        return
    summary, lines = read_run(folder)
    rounds = [line for line in lines if line["round"] > 0]
    step.details.update(
        clients=config.clients,
        samples_per_client=config.samples_per_client,
        rounds=len(rounds),
        params=summary.get("params"),
        startup_seconds=summary.get("startup_seconds"),
        round_seconds=[line["seconds"] for line in rounds],
        wall_seconds=summary.get("wall_seconds"),
        peak_rss_mb=summary.get("peak_rss_mb"),
        peak_gpu_mb=summary.get("peak_gpu_mb"),
        accuracy=round(100 * rounds[-1]["accuracy"], 2) if rounds and rounds[-1]["accuracy"] is not None else None,
    )
    step.ok = True


def fedcache_demo(check: Check, step: Step) -> None:
    recipe = RECIPES["fedcache-demo"]
    arm = next(arm for arm in recipe.arms if arm.algo == "fedcache")
    config = replace(recipe.base, algo="fedcache", params=dict(arm.params), rounds=2, seed=0)
    if check.cut_down:
        config = replace(config, clients=4, samples_per_client=100, rounds=1, test_fraction=0.05, threads=1)
    timed_run(check, step, config, "fedcache-demo")


def fedzkt_paper(check: Check, step: Step) -> None:
    recipe = RECIPES["fedzkt"]
    config = replace(recipe.base, algo="fedzkt", params={"loss": "sl", "preset": "paper"}, rounds=1, seed=0)
    if check.cut_down:
        # digits: the server's ResNet-18 scores the whole test set, 10,000 images of Fashion-MNIST
        # take it 100 s on two cores
        config = replace(
            config,
            dataset="digits",
            models="auto",
            clients=4,
            samples_per_client=50,
            params={**config.params, "iterations": 2, "server_batch_size": 16},
        )
    timed_run(check, step, config, "fedzkt-paper")


DEPLOYED_METHODS = ("fd", "fedict")
"""Methods step 7 deploys: the plainest exchange, and the one whose client carries the most (FedICT)."""


def deployed_clients(check: Check, step: Step) -> None:
    rows = []
    for method in DEPLOYED_METHODS:
        config = replace(method_config(check, method), clients=3)  # a process each: three devices show the path
        status, reference = simulate(check, config, f"{method}-reference", check.device)
        folder = check.work / "runs" / f"{method}-deployed"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "run.toml").write_text(config_to_toml(replace(config, out=str(folder), device="auto")))
        command = edgefd_command("deploy-local", "--config", str(folder / "run.toml"), "--quiet")
        deployed = run_child(check, command, check.work / "logs" / f"{method}-deployed.log")
        row: dict[str, Any] = dict(method=method)
        if status or deployed:
            failed = f"{method}-{'reference' if status else 'deployed'}.log"
            row.update(ok=False, error=f"exit {status} / {deployed}: {tail(check.work / 'logs' / failed, 5)}")
            rows.append(row)
            continue
        said = [_chosen_device(log) for log in sorted((folder / "logs").glob("client-*.log"))]
        (_, lines), (_, simulated) = read_run(folder), read_run(reference)
        accuracy, expected = 100 * lines[-1]["accuracy"], 100 * simulated[-1]["accuracy"]
        row.update(
            clients_chose=said,
            bytes_identical=[(x["bytes_up"], x["bytes_down"]) for x in lines]
            == [(x["bytes_up"], x["bytes_down"]) for x in simulated],
            deployed_accuracy=round(accuracy, 2),
            simulated_accuracy=round(expected, 2),
        )
        close = accuracy == expected if check.cut_down else abs(accuracy - expected) <= ACCURACY_POINTS
        row["ok"] = bool(said) and set(said) == {check.device} and row["bytes_identical"] and close
        rows.append(row)
    step.details.update(runs=rows, rounds=2, dataset="digits", seed=0)
    step.ok = all(row["ok"] for row in rows)
    if not step.ok:
        step.error = "differ or failed: " + ", ".join(row["method"] for row in rows if not row["ok"])


def _chosen_device(log: Path) -> str | None:
    """The device an `edgefd client` said ``--device auto`` chose (its "device: cuda (...)" line)."""
    for line in log.read_text(errors="replace").splitlines():
        if ": device: " in line and "--device auto" in line:
            return line.split(": device: ", 1)[1].split()[0]
    return None


STEPS: dict[str, Callable[[Check, Step], None]] = {
    "environment": environment,
    "kernel_tests": kernel_tests,
    "kernel_bench": kernel_bench,
    "methods": methods,
    "fedcache_demo": fedcache_demo,
    "fedzkt_paper": fedzkt_paper,
    "deployed_clients": deployed_clients,
}


# ----------------------------------------------------------------------------------------------
# The summary


def summary_markdown(check: Check, steps: list[Step], seconds: float) -> str:
    env = steps[0].details if steps and steps[0].name == "environment" else {}
    where = env.get("gpu") or ("CPU (--cpu: shapes cut down, not a GPU measurement)" if check.cut_down else "no GPU")
    lines = [
        f"# edgefd GPU check: {where}",
        "",
        f"torch {env.get('torch')}, Python {env.get('python')}, {env.get('cpu_count')} CPUs; "
        f"{seconds:.0f} s in all. Command: `bash scripts/gpu_check.sh OUTDIR{' --cpu' if check.cut_down else ''}`.",
        "",
        "| step | ok | seconds | |",
        "|---|---|---:|---|",
    ]
    for step in steps:
        note = (step.error or "").splitlines()[0][:100] if step.error else ""
        lines.append(f"| {step.name} | {'yes' if step.ok else '**no**'} | {step.seconds:.0f} | {note} |")
    by_name = {step.name: step for step in steps}
    if "kernel_tests" in by_name:
        d = by_name["kernel_tests"].details
        lines += ["", f"Kernel tests on {d.get('device')}: {d.get('tests')} run, {d.get('failures')} failed, "
                  f"{d.get('errors')} errors, {d.get('skipped')} skipped."]  # fmt: skip
    bench = by_name.get("kernel_bench")
    if bench and bench.details.get("records"):
        d = bench.details
        lines += [
            "",
            f"Kernels on {d['device']}, copy bandwidth {d['copy_gbps']} GB/s (read + written):",
            "",
            "| kernel | shape | edgefd ms | torch.compile ms | eager ms | vs compile | of copy | moved / copy |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in d["records"]:
            lines.append(
                f"| {r['kernel']} | {r['shape']} | {r['cpp_ms']:.3f} | {r['compiled_ms']:.3f} | {r['torch_ms']:.3f} "
                f"| {r['compiled_speedup']}x | {r['bandwidth_fraction']:.0%} | {r['moved_fraction']:.0%} |"
            )
        if d.get("goals"):
            lines += ["", "| goal | value | met |", "|---|---:|---|"]
            lines += [f"| {g['goal']} | {g['value']} | {'yes' if g['met'] else '**no**'} |" for g in d["goals"]]
    if by_name.get("methods") and by_name["methods"].details.get("runs"):
        lines += [
            "",
            f"Every method, 2 rounds on digits, seed 0, {check.device} against the CPU:",
            "",
            "| method | ok | bytes identical | accuracy (device) | accuracy (CPU) | s (device) | s (CPU) "
            "| peak GPU MiB |",
            "|---|---|---|---:|---:|---:|---:|---:|",
        ]
        for r in by_name["methods"].details["runs"]:
            if "error" in r:
                lines.append(f"| {r['method']} | **no** | {r['error'].splitlines()[0][:80]} | | | | | |")
                continue
            lines.append(
                f"| {r['method']} | {'yes' if r['ok'] else '**no**'} | {r['bytes_identical']} | {r['device_accuracy']} "
                f"| {r['cpu_accuracy']} | {r['device_seconds']} | {r['cpu_seconds']} | {r['peak_gpu_mb'] or '-'} |"
            )
    deployed = by_name.get("deployed_clients")
    if deployed and deployed.details.get("runs"):
        lines += [
            "",
            f"`edgefd deploy-local` with device = auto, 2 rounds on digits, against `simulate` on {check.device}:",
            "",
            "| method | ok | clients chose | bytes identical | accuracy (deployed) | accuracy (simulated) |",
            "|---|---|---|---|---:|---:|",
        ]
        for r in deployed.details["runs"]:
            if "error" in r:
                lines.append(f"| {r['method']} | **no** | {r['error'].splitlines()[0][:80]} | | | |")
                continue
            lines.append(
                f"| {r['method']} | {'yes' if r['ok'] else '**no**'} | {', '.join(map(str, r['clients_chose']))} "
                f"| {r['bytes_identical']} | {r['deployed_accuracy']} | {r['simulated_accuracy']} |"
            )
    for name, title in (("fedcache_demo", "fedcache-demo, FedCache arm"), ("fedzkt_paper", "FedZKT preset=paper")):
        d = by_name[name].details if name in by_name else {}
        if d.get("round_seconds"):
            lines += [
                "",
                f"{title}: {d['clients']} clients, {d['rounds']} round(s): start-up {d['startup_seconds']} s, "
                f"seconds a round {d['round_seconds']}, peak host {d['peak_rss_mb']} MiB, "
                f"peak GPU {d['peak_gpu_mb'] or '-'} MiB, accuracy {d['accuracy']}%.",
            ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("out", metavar="OUTDIR", help="folder for gpu_check.json and summary.md")
    parser.add_argument("--cpu", action="store_true", help="run on the CPU with the shapes cut down (CI)")
    parser.add_argument("--steps", nargs="+", choices=list(STEPS), default=list(STEPS), help="run only these steps")
    parser.add_argument("--work", metavar="DIR", help="folder for the runs and logs (default: a new temporary one)")
    parser.add_argument(
        "--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 4), help="simulations at once in the methods step"
    )
    parser.add_argument("--timeout", type=int, default=420, help="seconds any one child process may take")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="edgefd-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    check = Check(out, work.resolve(), "cpu" if args.cpu else "cuda", max(1, args.jobs), args.timeout)
    print(f"edgefd GPU check on {check.device}; runs and logs in {check.work}", flush=True)
    started = time.perf_counter()
    steps = []
    for name in args.steps:
        step = Step(name)
        print(f"[{time.perf_counter() - started:5.0f} s] {name} ...", flush=True)
        begun = time.perf_counter()
        try:
            STEPS[name](check, step)
        except Exception:
            step.ok, step.error = False, traceback.format_exc()
        step.seconds = round(time.perf_counter() - begun, 1)
        print(f"[{time.perf_counter() - started:5.0f} s] {name}: {'ok' if step.ok else 'FAILED'}", flush=True)
        if step.error:
            print(step.error, flush=True)
        steps.append(step)
        if name == "environment" and not step.ok:
            print("the other steps need what the environment lacks: not run", flush=True)
            break
    seconds = time.perf_counter() - started
    record = dict(device=check.device, seconds=round(seconds, 1), steps=[vars(step) for step in steps])
    (out / "gpu_check.json").write_text(json.dumps(record, indent=2, default=str))
    summary = summary_markdown(check, steps, seconds)
    (out / "summary.md").write_text(summary)
    print(summary)
    return 0 if all(step.ok for step in steps) else 1


if __name__ == "__main__":
    sys.exit(main())
