"""Deployment overhead: `edgefd deploy-local` against `edgefd simulate`, per round after start-up.

    python3 benchmarks/deploy_overhead.py                              # FD and FedCache, fmnist, 10 clients
    python3 benchmarks/deploy_overhead.py --arms fd,fedcache-round --rounds 6 --json overhead.json
    python3 benchmarks/deploy_overhead.py --quick                      # digits, tiny: checks it runs

Each arm runs the same config twice, each time in processes of its own: `edgefd simulate` (one
process, the clients one after another) and `edgefd deploy-local` (a Mosquitto broker, the server
and one process per client, all on this machine). Both write metrics.jsonl with each round's
`seconds` (train, aggregate, evaluate: the one round loop's own timer), so start-up is apart:
it is reported as the wall time from launch until round 0 (the hellos and the first evaluation)
is written. While a run goes, the benchmark reads the CPU time (user + system) of every process
of the run (simulate; or deploy-local with its broker, server and clients) from /proc each time
a round is written, so each round also has its CPU seconds: on a machine with fewer cores than
clients the deployment's wall time per round is that of clients sharing the cores, and its CPU
seconds show what the deployment costs beyond the simulation's work.

Prints, per arm, the median over rounds 2..R (round 1 pays for warm-up) of wall and CPU seconds
per round for each, and the ratios deploy / simulate; --json FILE writes everything, including
every round's figures.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
ARMS = {
    "fd": ("fd", ()),
    "fedcache-round": ("fedcache", ("exchange=round",)),
    "fedcache-batch": ("fedcache", ("exchange=batch",)),
}
CONTROLLED = ("fd", "fedcache-round")
"""Arms whose clients train with train_round, which the control (K processes, no MQTT) can run."""


@dataclass
class RunResult:
    command: str
    """simulate | deploy-local"""
    startup_seconds: float
    """Launch until round 0 is written (imports, data, models, hellos, the first evaluation)."""
    total_seconds: float
    round_seconds: list[float]
    """metrics.jsonl's `seconds` of rounds 1..R."""
    round_cpu_seconds: list[float]
    """CPU seconds of all the run's processes between the lines of rounds r-1 and r, for r = 1..R."""
    accuracy: float | None
    processes: int
    """The most processes the run had at once (deploy-local: itself, broker, server, clients)."""


@dataclass
class ArmResult:
    arm: str
    algo: str
    params: list[str]
    simulate: RunResult
    deploy: RunResult
    processes: RunResult | None = None
    """The control: the clients' work in K processes at once, no broker, server or messages."""
    wall_ratio: float | None = None
    cpu_ratio: float = 0.0
    wall_ratio_to_processes: float | None = None
    cpu_ratio_to_processes: float | None = None
    same_accuracy: bool = False
    settings: dict = field(default_factory=dict)


def ratio_of(value: float, reference: float) -> float | None:
    """value / reference to 3 decimals; None when the reference is 0 (a round too quick to time)."""
    return round(value / reference, 3) if reference else None


def median_after_warmup(values: list[float]) -> float:
    later = values[1:] or values
    return statistics.median(later)


# ------------------------------------------------------------------------------------- processes
def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of a live process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS


def _cpu(pid: int) -> float:
    stat = _stat(pid)
    return 0.0 if stat is None else stat[1]


def tree_cpu(root: int) -> tuple[float, int]:
    """CPU seconds (user + system) of ``root`` and its live descendants, and their number."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                stats[int(entry)] = stat
    members, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _) in stats.items():
            if ppid == parent and pid not in members:
                members.add(pid)
                frontier.append(pid)
    return sum(stats[p][1] for p in members if p in stats), len(members & stats.keys())


def run_one(command: str, settings: list[str], out: Path, timeout: float) -> RunResult:
    """One run, watched: the CPU time of its processes is read whenever a round line is written."""
    metrics = out / "metrics.jsonl"
    extra = ["--round-timeout", "600", "--hello-timeout", "600"] if command == "deploy-local" else []
    argv = [sys.executable, "-m", "edgefd.cli", command, *settings, *extra, "--out", str(out), "--quiet"]
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    cpu_at_line: list[float] = []
    startup = None
    most = 1
    try:
        while process.poll() is None:
            if time.perf_counter() - started > timeout:
                raise RuntimeError(f"{command} did not finish within {timeout:.0f} s")
            lines = metrics.read_text().count("\n") if metrics.exists() else 0
            cpu, count = tree_cpu(process.pid)
            most = max(most, count)
            while len(cpu_at_line) < lines:  # usually one new line; the CPU read is within 0.1 s of it
                cpu_at_line.append(cpu)
                if startup is None:
                    startup = time.perf_counter() - started
            time.sleep(0.1)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # deploy-local stops its broker, server and clients
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
    output = process.stdout.read() if process.stdout else ""
    if process.returncode != 0:
        raise RuntimeError(f"{command} exited {process.returncode}:\n{output[-2000:]}")
    total = time.perf_counter() - started
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    rounds = [r for r in records if r["round"] >= 1]
    cpu = [b - a for a, b in zip(cpu_at_line, cpu_at_line[1:])]
    return RunResult(
        command,
        round(startup or total, 2),
        round(total, 2),
        [round(r["seconds"], 3) for r in rounds],
        [round(c, 2) for c in cpu],
        records[-1].get("accuracy"),
        most,
    )


def _control_worker(settings: list[str], index: int, barrier) -> None:
    """One client of the control: its role as `edgefd client` builds it, from the same flags as the
    simulate and deploy-local runs, trained and evaluated round after round with no server (no
    downlink: the methods' first-round path), in step with the others."""
    import torch

    from edgefd.protocol.message import SERVER, Message
    from edgefd.runtime.build import build_client, prepare
    from edgefd.runtime.flags import add_config_arguments, config_from_args
    from edgefd.runtime.verbs import ClientApp

    try:
        parser = argparse.ArgumentParser()
        add_config_arguments(parser)
        run = config_from_args(parser.parse_args(settings))
        torch.set_num_threads(run.threads)
        role = build_client(run, prepare(run, on_demand=True), index)
        app = ClientApp(role)
        barrier.wait()
        for r in range(1, run.rounds + 1):
            app.handle(Message("train", SERVER, role.client_id, r))
            role.evaluate(None)
            barrier.wait()
    except BaseException:
        barrier.abort()  # the parent and the other workers stop waiting: the control has failed
        raise


def run_control(settings: list[str], args: argparse.Namespace) -> RunResult:
    """The clients' own work in K processes at once, without broker, server or messages: what
    K processes on this machine's cores cost by themselves, to tell the deployment's own overhead
    (deploy-local against this) from the machine's (this against simulate)."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(args.clients + 1)
    env = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # as deploy-local sets it for its processes
    started = time.perf_counter()
    try:
        workers = [context.Process(target=_control_worker, args=(settings, i, barrier)) for i in range(args.clients)]
        for worker in workers:
            worker.start()
    finally:
        if env is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = env
    walls, cpus = [], []
    try:
        barrier.wait(timeout=args.timeout)
        startup = time.perf_counter() - started
        before, at = sum(_cpu(w.pid) for w in workers), time.perf_counter()
        for _ in range(args.rounds):
            barrier.wait(timeout=args.timeout)
            now, cpu = time.perf_counter(), sum(_cpu(w.pid) for w in workers)
            walls.append(round(now - at, 6))  # a quick run's round takes a few milliseconds
            cpus.append(round(cpu - before, 2))
            before, at = cpu, now
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
    return RunResult(
        "processes", round(startup, 2), round(time.perf_counter() - started, 2), walls, cpus, None, args.clients
    )


def settings_of(algo: str, params: tuple[str, ...], args: argparse.Namespace) -> list[str]:
    flags = [
        "--algo", algo, "--dataset", args.dataset, "--clients", str(args.clients), "--rounds", str(args.rounds),
        "--samples-per-client", str(args.samples_per_client), "--threads", str(args.threads), "--seed", "0",
    ]  # fmt: skip
    for param in (*params, *args.param):
        flags += ["--param", param]
    return flags


def run_arm(name: str, args: argparse.Namespace, folder: Path) -> ArmResult:
    algo, params = ARMS[name]
    settings = settings_of(algo, params, args)
    simulate = run_one("simulate", settings, folder / f"{name}-simulate", args.timeout)
    deploy = run_one("deploy-local", settings, folder / f"{name}-deploy", args.timeout)
    processes = run_control(settings, args) if name in CONTROLLED and not args.no_control else None
    result = ArmResult(name, algo, list(params), simulate, deploy, processes, settings={"flags": settings})
    result.wall_ratio = ratio_of(median_after_warmup(deploy.round_seconds), median_after_warmup(simulate.round_seconds))
    sim_cpu, dep_cpu = median_after_warmup(simulate.round_cpu_seconds), median_after_warmup(deploy.round_cpu_seconds)
    result.cpu_ratio = round(dep_cpu / sim_cpu, 3) if sim_cpu else 0.0
    result.same_accuracy = simulate.accuracy == deploy.accuracy
    if processes is not None:
        result.wall_ratio_to_processes = ratio_of(
            median_after_warmup(deploy.round_seconds), median_after_warmup(processes.round_seconds)
        )
        proc_cpu = median_after_warmup(processes.round_cpu_seconds)
        result.cpu_ratio_to_processes = round(dep_cpu / proc_cpu, 3) if proc_cpu else None
    return result


def table(results: list[ArmResult], args: argparse.Namespace) -> str:
    def fig(run: RunResult | None, cpu: bool = False) -> str:
        if run is None:
            return "-"
        return f"{median_after_warmup(run.round_cpu_seconds if cpu else run.round_seconds):.2f}"

    def ratio(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    lines = [
        f"{args.dataset}, {args.clients} clients, {args.samples_per_client} samples each, {args.rounds} rounds, "
        f"--threads {args.threads} in every process, seed 0; medians over rounds 2..{args.rounds}. "
        f"processes = the clients' own work in {args.clients} processes at once, no broker, server or messages",
        "",
        "| arm | start-up s, simulate / deploy | s / round: simulate | processes | deploy | deploy / simulate | "
        "deploy / processes | CPU s / round: simulate | processes | deploy | deploy / simulate | "
        "deploy / processes | same final accuracy |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        s, p, d = r.simulate, r.processes, r.deploy
        lines.append(
            f"| {r.arm} | {s.startup_seconds:.1f} / {d.startup_seconds:.1f} | {fig(s)} | {fig(p)} | {fig(d)} | "
            f"{ratio(r.wall_ratio)} | {ratio(r.wall_ratio_to_processes)} | {fig(s, True)} | {fig(p, True)} | "
            f"{fig(d, True)} | {r.cpu_ratio:.2f} | {ratio(r.cpu_ratio_to_processes)} | "
            f"{'yes' if r.same_accuracy else 'no'} |"
        )
    return "\n".join(lines)


def _interrupted(*_) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", default="fd,fedcache-round,fedcache-batch", help=f"of {', '.join(ARMS)}")
    parser.add_argument("--dataset", default="fmnist")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--samples-per-client", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the medians skip round 1 (default: 5)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in every process (default: 1)")
    parser.add_argument("--param", action="append", default=[], help="extra --param NAME=VALUE for every run")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds before a run is abandoned")
    parser.add_argument(
        "--no-control", action="store_true", help="skip the control (the clients' work in K processes, no MQTT)"
    )
    parser.add_argument("--quick", action="store_true", help="digits, 2 clients, 2 rounds: checks that it runs")
    parser.add_argument("--keep", metavar="DIR", help="keep the run folders here")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupted)
    if args.quick:
        args.dataset, args.clients, args.samples_per_client, args.rounds = "digits", 2, 40, 2
    names = [n.strip() for n in args.arms.split(",") if n.strip()]
    unknown = sorted(set(names) - set(ARMS))
    if unknown or args.rounds < 2:
        parser.error(f"--arms: unknown {', '.join(unknown)}" if unknown else "--rounds must be >= 2")
    scratch = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="edgefd-deploy-overhead-"))
    results = []
    try:
        for name in names:
            print(f"{name}: simulate, then deploy-local", flush=True)
            result = run_arm(name, args, scratch)
            print(f"  wall ratio {result.wall_ratio}, CPU ratio {result.cpu_ratio}", flush=True)
            results.append(result)
    finally:
        if not args.keep:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)
    print()
    print(table(results, args))
    if args.json:
        document = {k: v for k, v in vars(args).items() if k not in ("json", "keep")}
        Path(args.json).write_text(json.dumps({**document, "arms": [asdict(r) for r in results]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
