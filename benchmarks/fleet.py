"""The fleet load test: how many devices one broker and one `edgefd server` serve, and what breaks.

    python3 benchmarks/fleet.py                                        # N = 10 .. 8000, FD and FedCache
    python3 benchmarks/fleet.py --methods fd --clients 50 --rounds 2   # a quick look

For each fleet size N (and each method), on this machine's loopback:

1. a real Mosquitto starts (its default limits, plus no cap on connections);
2. client 0 of the run is built exactly as `edgefd client` builds it and runs one real round: its
   uplink and accuracy are recorded (benchmarks/fleet_devices.py re-addresses them to every device);
3. N lightweight devices connect, several hundred per process, each its own MQTT connection, client
   id and last will (benchmarks/fleet_devices.py);
4. one real `edgefd server` runs R rounds of the method against them (FD, or FedCache with
   ``exchange=round``: one download and one upload per device and round).

A monitor samples every process's CPU time and memory from /proc whenever the server writes a
round. The table gives, per N: the start-up (round 0: every hello, the server's start, the first
evaluation), round seconds p50 / p95, the server's uplink latency p50 / p95 (request sent to
uplink decoded), the CPU each part used while the rounds ran (1.0 = one core), the server's and
the broker's peak memory, messages per second through the server, late uplinks and refused
messages, and which part ran out of CPU first. (What gives first here does so below one core: the
server's one Python interpreter, its lock held most of the time; docs/DEPLOYMENT.md.) Sizes grow
until one breaks (a round with a late uplink, a server error, or the deadline), so the run is
bounded in count and in time; everything is on 127.0.0.1 and stops by itself. The devices share
the machine's cores with the broker and the server: on a small machine the load generator is part
of what saturates, and the table says so.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from broker_rigs import rss_mb, start_mosquitto_bridge, start_rabbitmq_cluster

from edgefd.deploy.broker import start_broker
from edgefd.runtime.config import SimulationConfig, config_to_toml

METHODS = {
    "fd": {},
    # the MQTT-friendly exchange; pixel projections keep the one-time hashing and relation search
    # small (the rounds, not the start-up, are what the load test measures)
    "fedcache": {"exchange": "round", "encoder": "projection:64"},
}
BROKER_LIMITS = "max_connections -1\nmax_inflight_messages 64\nmax_queued_messages 65536\nmax_queued_bytes 134217728\n"
"""The sizes of the shipped server/mosquitto/edgefd.conf: the server's one session must be able to
queue a message from every device at once (at its start, every device's retained status)."""
TICKS = os.sysconf("SC_CLK_TCK")
DEVICES = Path(__file__).resolve().with_name("fleet_devices.py")
"""The device processes' program (a script beside this one)."""
PAGE_POLL_SECONDS = 2.0
"""How often an open dashboard page fetches the run's state (edgefd/dashboard/assets/dashboard.js)."""
MIN_MEASURED_SECONDS = 1.0
"""Rounds shorter than this in all are not given a CPU figure (/proc counts in 10 ms ticks)."""


@dataclass
class FleetPlan:
    """One load test: a method at one fleet size."""

    method: str
    clients: int
    rounds: int = 3
    dataset: str = "fmnist"
    samples_per_client: int = 50
    devices_per_process: int = 250
    round_timeout: float = 120.0
    deadline: float = 900.0
    """Seconds the whole size may take (start included) before it counts as broken."""
    topology: str = "mosquitto"
    """mosquitto (one broker), rabbitmq:N (an N-node RabbitMQ cluster: the server on node 1, the
    device processes spread over the nodes) or bridge:N (N site Mosquittos bridged to a central one:
    the server on the central, the devices on the sites)."""
    params: dict[str, Any] = field(default_factory=dict)
    dashboard: str = "off"
    """off; on: serve the run's page (`--dashboard`) and keep it open, a viewer fetching what the
    page fetches, as often (`PageViewer`); alternate: serve it and open it in one round of each
    pair of rounds, drawn at random (`page_open_rounds`), so that open and closed rounds of one run
    compare in pairs."""

    def config(self, out: Path) -> SimulationConfig:
        params = {**METHODS[self.method], **self.params}
        return SimulationConfig(
            algo=self.method,
            dataset=self.dataset,
            clients=self.clients,
            rounds=self.rounds,
            partition="iid",  # any split loads the wire alike; a skewed one cannot give 8,000 devices 50 samples
            samples_per_client=self.samples_per_client,
            seed=0,
            threads=1,
            out=str(out),
            params=params,
        )


@dataclass
class FleetResult:
    method: str
    topology: str
    clients: int
    samples_per_client: int
    ok: bool
    problem: str | None
    rounds_done: int
    startup_seconds: float | None
    round_seconds_p50: float | None
    round_seconds_p95: float | None
    uplink_latency_p50: float | None
    uplink_latency_p95: float | None
    cpu: dict[str, float]
    """Cores each part used while the rounds ran (CPU seconds / wall seconds): server, broker, devices."""
    server_peak_rss_mb: float | None
    broker_peak_rss_mb: float | None
    """The largest broker process (the busiest node of a cluster)."""
    devices_peak_rss_mb: float | None
    """The largest device process (each holds ``devices_per_process`` devices)."""
    messages_per_second: float | None
    """MQTT messages (frames) the server sent and took per second of the rounds."""
    late_uplinks: int
    rejected: int
    connection_losses: int
    asked_again: int
    """Requests the server sent devices to answer again (it had not received their answer)."""
    saturated: str
    wall_seconds: float
    broker_urls: dict[str, Any] = field(default_factory=dict)
    """Where the server and each device process connected."""
    dashboard: str = "off"
    page_views: int = 0
    """Times the open page fetched the run's state during the run."""
    page_seconds_p50: float | None = None
    """The median time the server took to answer the page's state.json."""
    page_effect: dict[str, Any] | None = None
    """With ``dashboard="alternate"``: the rounds run with the page open and closed, and the open
    round's seconds over its pair's closed one's (`paired_page_effect`)."""
    page_cpu_seconds: float | None = None
    """The CPU time the server spent answering the page, from its log (what the page's requests
    took on their threads' own clocks)."""


def page_open_rounds(rounds: int, seed: int = 0) -> set[int]:
    """For ``--dashboard alternate``: one round of each pair (1, 2), (3, 4), ..., the page open on the
    first round of half the pairs and on the second of the others, in an order drawn at random. Round
    times here alternate (odd rounds ran 5-10% slower than even ones at 1,000 devices) and drift
    over a run: balanced, neither lands on the page's side."""
    pairs = rounds // 2
    on_second = np.random.default_rng(seed).permutation(np.arange(pairs) % 2)
    return {2 * k + 1 + int(second) for k, second in enumerate(on_second)}


def paired_page_effect(seconds: dict[int, float], open_rounds: set[int]) -> dict[str, Any]:
    """The open page's effect on round time from one run: each pair's open round's seconds over its
    closed round's, their geometric mean and its 95% bootstrap interval (scipy.stats.bootstrap).
    Pairs share the run's start, its brokers and the machine's load of the moment, which move a
    whole run's rounds together: the between-run noise is out of the comparison."""
    from scipy.stats import bootstrap

    logs = []
    for first in range(1, max(seconds, default=0), 2):
        pair = (first, first + 1)
        if all(r in seconds for r in pair):
            opened = first if first in open_rounds else first + 1
            closed = first + 1 if opened == first else first
            logs.append(np.log(seconds[opened] / seconds[closed]))
    effect: dict[str, Any] = {
        "pairs": len(logs),
        "open_rounds": sorted(r for r in open_rounds if r in seconds),
        "open_seconds_p50": _percentile([s for r, s in seconds.items() if r in open_rounds], 0.5),
        "closed_seconds_p50": _percentile([s for r, s in seconds.items() if r not in open_rounds], 0.5),
        "ratio": None,
        "ratio_95": None,
    }
    if len(logs) >= 2:
        effect["ratio"] = round(float(np.exp(np.mean(logs))), 4)
    if len(logs) >= 5:
        interval = bootstrap((np.array(logs),), np.mean, confidence_level=0.95, rng=np.random.default_rng(0))
        low, high = interval.confidence_interval
        effect["ratio_95"] = [round(float(np.exp(low)), 4), round(float(np.exp(high)), 4)]
    return effect


class PageViewer:
    """An open dashboard page: fetches state.json every PAGE_POLL_SECONDS, and charts.json when
    the curve gained a point, as the page's script does; keeps how long each state took. Given
    ``open_rounds`` and the run's metrics.jsonl, the page is open only while one of those rounds
    runs (the round after the last line written)."""

    def __init__(self, url: str, metrics: Path | None = None, open_rounds: set[int] | None = None) -> None:
        self.url = url
        self.metrics, self.open_rounds = metrics, open_rounds
        self.seconds: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _is_open(self) -> bool:
        if self.open_rounds is None or self.metrics is None:
            return True
        return _count_lines(self.metrics) in self.open_rounds  # n lines written: round n runs

    def _watch(self) -> None:
        points, polled = -1, -PAGE_POLL_SECONDS
        while not self._stop.wait(0.05):
            started = time.monotonic()
            if started - polled < PAGE_POLL_SECONDS or not self._is_open():
                continue
            polled = started
            try:
                with urllib.request.urlopen(self.url + "state.json", timeout=30) as reply:
                    state = json.loads(reply.read())
                self.seconds.append(time.monotonic() - started)
                if len(state["curve"]) != points:
                    points = len(state["curve"])
                    with urllib.request.urlopen(self.url + "charts.json", timeout=30) as reply:
                        reply.read()
            except OSError:  # not serving yet (the server is starting), or gone
                continue


class ProcessMonitor:
    """CPU seconds and memory of a set of processes, sampled whenever the server writes a round."""

    def __init__(self, pids: dict[str, int], metrics: Path) -> None:
        self.pids, self.metrics = pids, metrics
        self.marks: list[tuple[float, dict[str, float]]] = []
        """(time, CPU seconds per part) each time metrics.jsonl grew by a line, and at the start."""
        self.peak_rss_mb: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def start(self) -> None:
        self.marks.append((time.monotonic(), self.cpu_seconds()))
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def cpu_seconds(self) -> dict[str, float]:
        return {name: _cpu_seconds(pid) for name, pid in self.pids.items()}

    def _watch(self) -> None:
        lines = 0
        while not self._stop.wait(0.05):
            for name, pid in self.pids.items():
                self.peak_rss_mb[name] = max(self.peak_rss_mb.get(name, 0.0), rss_mb(pid, peak=True) or 0.0)
            now = _count_lines(self.metrics)
            if now > lines:
                lines = now
                self.marks.append((time.monotonic(), self.cpu_seconds()))

    def cores_during_rounds(self) -> dict[str, float]:
        """Cores used by each part between round 0's line and the last round's line."""
        if len(self.marks) < 3:
            return {}
        (t0, c0), (t1, c1) = self.marks[1], self.marks[-1]
        seconds = t1 - t0
        if seconds < MIN_MEASURED_SECONDS:  # too short for /proc's clock ticks to say anything
            return {}
        return {name: round((c1[name] - c0[name]) / seconds, 3) for name in c1}


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process (and its waited-for children), from /proc; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS  # fields 14 and 15 of stat(5)


def _count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


def record_payloads(config: SimulationConfig, path: Path) -> None:
    """Client 0 of the run, built as `edgefd client` builds it, runs one real round; its uplink and
    its accuracy are written to ``path`` for the devices to replay."""
    from fleet_devices import Recorded

    from edgefd.protocol.message import SERVER, Message
    from edgefd.runtime.build import build_client, prepare
    from edgefd.runtime.verbs import ClientApp

    pieces = prepare(config)
    role = build_client(config, pieces, 0)
    app = ClientApp(role)
    app.handle(Message("hello", SERVER, role.client_id, 0))
    uplink = app.handle(Message("train", SERVER, role.client_id, 1)).content
    Recorded(uplink, role.evaluate(None)["accuracy"]).save(path)


def _percentile(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, 100 * q)), 4) if values else None


TOPOLOGIES = ("mosquitto", "rabbitmq:N", "bridge:N")


@dataclass
class Brokers:
    """The brokers of one load test: where the server and the devices connect, what to watch."""

    server_url: str
    device_urls: list[str]
    """The device processes take these in turn."""
    pids: dict[str, int]
    """broker-<name> -> the broker process (a RabbitMQ node's Erlang VM)."""
    stop: Callable[[], None]


def start_brokers(topology: str, folder: Path) -> Brokers:
    """Start the brokers of ``topology`` (see FleetPlan.topology) on loopback."""
    kind, _, count = topology.partition(":")
    if kind == "mosquitto" and not count:
        one = start_broker(kind="mosquitto", workdir=folder / "broker", extra_config=BROKER_LIMITS)
        return Brokers(one.url, [one.url], {"broker": one.process.pid}, one.stop)
    if kind not in ("rabbitmq", "bridge") or not count.isdigit() or int(count) < 1:
        raise ValueError(f"topology {topology!r}: expected one of {', '.join(TOPOLOGIES)} (N >= 1)")
    if kind == "rabbitmq":
        cluster = start_rabbitmq_cluster(int(count), folder / "rabbitmq")
        beams = {f"broker-{node.name.split('@')[0]}": node.beam_pid() for node in cluster.nodes}
        pids = {name: pid for name, pid in beams.items() if pid is not None}
        return Brokers(cluster.urls[0], cluster.urls, pids, cluster.stop)
    bridge = start_mosquitto_bridge(int(count), folder / "bridge")
    assert bridge.central is not None  # started, or start_mosquitto_bridge raised
    pids = {"broker-central": bridge.central.process.pid}
    pids.update({f"broker-site-{i + 1}": site.process.pid for i, site in enumerate(bridge.sites)})
    return Brokers(bridge.central_url, bridge.site_urls, pids, bridge.stop)


def _start_devices(plan: FleetPlan, folder: Path, urls: list[str], run: str, used: list[str]) -> list[subprocess.Popen]:
    """The device processes, taking ``urls`` in turn (appended to ``used``, one per process)."""
    processes: list[subprocess.Popen] = []
    for first in range(0, plan.clients, plan.devices_per_process):
        count = min(plan.devices_per_process, plan.clients - first)
        broker = urls[len(processes) % len(urls)]
        used.append(broker)
        command = [
            sys.executable, str(DEVICES), "--config", str(folder / "run.toml"),
            "--recorded", str(folder / "recorded.npz"), "--broker", broker, "--run", run,
            "--first", str(first), "--count", str(count), "--deadline", str(plan.deadline),
        ]  # fmt: skip
        log = open(folder / f"devices-{first}.log", "wb")
        processes.append(
            subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, env={**os.environ, "OMP_NUM_THREADS": "1"})
        )
    return processes


def _read_json_line(process: subprocess.Popen, key: str, deadline: float) -> Any:
    """The value of the next JSON line of ``process`` holding ``key`` (None at EOF or deadline)."""
    assert process.stdout is not None
    found: list[Any] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if key in value:
                found.append(value[key])
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(max(0.0, deadline - time.monotonic()))
    return found[0] if found else None


def run_plan(plan: FleetPlan, folder: Path, say=print) -> FleetResult:
    """One fleet size, start to end; every process it started is gone when it returns."""
    folder.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    deadline = started + plan.deadline
    run = f"fleet-{uuid.uuid4().hex[:8]}"
    config = plan.config(folder / "server")
    (folder / "run.toml").write_text(config_to_toml(config))
    say(f"  {plan.method}, {plan.clients} devices: recording client 0's round")
    try:
        record_payloads(config, folder / "recorded.npz")
    except ValueError as error:  # e.g. the dataset cannot give every device its samples
        return _result(plan, folder / "server", None, [], f"no run: {error}", time.monotonic() - started, {})
    brokers: Brokers | None = None
    urls: dict[str, Any] = {"server": None, "devices": []}
    devices: list[subprocess.Popen] = []
    server: subprocess.Popen | None = None
    monitor: ProcessMonitor | None = None
    viewer: PageViewer | None = None
    problem: str | None = None
    reports: list[dict[str, Any]] = []
    try:
        brokers = start_brokers(plan.topology, folder)
        urls["server"] = brokers.server_url
        devices = _start_devices(plan, folder, brokers.device_urls, run, urls["devices"])
        say(f"  {plan.method}, {plan.clients} devices: {len(devices)} device processes connecting")
        ready = [_read_json_line(p, "ready", deadline) for p in devices]
        if any(r is None for r in ready):
            failed = [i for i, r in enumerate(ready) if r is None]
            first_log = folder / f"devices-{failed[0] * plan.devices_per_process}.log"
            problem = f"{len(failed)} device process(es) not connected: {_last_line(devices[failed[0]], first_log)}"
            raise _Broken(problem)
        command = [
            sys.executable, "-m", "edgefd.cli", "server", "--config", str(folder / "run.toml"), "--run", run,
            "--broker", brokers.server_url, "--min-clients", str(plan.clients),
            "--round-timeout", str(plan.round_timeout), "--hello-timeout", str(plan.round_timeout),
            "--eval-timeout", str(plan.round_timeout), "--max-wait", str(plan.round_timeout), "--quiet",
        ]  # fmt: skip
        if plan.dashboard != "off":
            port = _free_port()
            command += ["--dashboard", f"127.0.0.1:{port}"]
            open_rounds = page_open_rounds(plan.rounds) if plan.dashboard == "alternate" else None
            viewer = PageViewer(f"http://127.0.0.1:{port}/", folder / "server" / "metrics.jsonl", open_rounds)
        with open(folder / "server.log", "wb") as log:
            server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        if viewer is not None:
            viewer.start()
        pids = {"server": server.pid, **brokers.pids}
        pids.update({f"devices-{i}": p.pid for i, p in enumerate(devices)})
        monitor = ProcessMonitor(pids, folder / "server" / "metrics.jsonl")
        monitor.start()
        say(f"  {plan.method}, {plan.clients} devices: server running {plan.rounds} rounds")
        try:
            code = server.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            problem = f"the run passed its {plan.deadline:.0f} s deadline"
            raise _Broken(problem) from None
        monitor.stop()
        if code != 0:
            problem = f"the server exited with {code} (server.log)"
            raise _Broken(problem)
        reports = [r for r in (_read_json_line(p, "report", time.monotonic() + 30) for p in devices) if r]
    except _Broken:
        pass
    except RuntimeError as error:  # a broker that would not start
        problem = f"brokers: {error}"
    finally:
        if monitor is not None and monitor._thread.is_alive():
            monitor.stop()
        if viewer is not None and viewer._thread.is_alive():
            viewer.stop()
        for process in [*devices, *([server] if server else [])]:
            if process.poll() is None:
                process.kill()
            process.wait()
        if brokers is not None:
            brokers.stop()
    result = _result(plan, folder / "server", monitor, reports, problem, time.monotonic() - started, urls)
    if viewer is not None:
        result.dashboard, result.page_views = plan.dashboard, len(viewer.seconds)
        result.page_seconds_p50 = _percentile(viewer.seconds, 0.5)
        result.page_cpu_seconds = page_cpu_seconds(folder / "server.log")
        if viewer.open_rounds is not None:
            seconds = {line["round"]: line["seconds"] for line in _lines(folder / "server") if line["round"] >= 1}
            result.page_effect = paired_page_effect(seconds, viewer.open_rounds)
            open_seconds = sum(s for r, s in seconds.items() if r in viewer.open_rounds)
            if result.page_cpu_seconds is not None and open_seconds:
                result.page_effect["page_cores_while_open"] = round(result.page_cpu_seconds / open_seconds, 4)
    return result


PAGE_COST_LINE = re.compile(r"dashboard: (\d+) requests served in ([0-9.]+) s of CPU")


def page_cpu_seconds(log: Path) -> float | None:
    """The CPU the server's page took, as the server logs it when it stops serving."""
    try:
        found = PAGE_COST_LINE.search(log.read_text(errors="replace"))
    except OSError:
        return None
    return float(found.group(2)) if found else None


def _lines(out: Path) -> list[dict[str, Any]]:
    metrics = out / "metrics.jsonl"
    return [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []


def describe_page_effect(result: FleetResult) -> str:
    """The alternate run's verdict, in one line."""
    effect = result.page_effect or {}
    if effect.get("ratio") is None:
        return f"page effect: too few paired rounds ({effect.get('pairs', 0)})"
    interval = effect["ratio_95"]
    within = f", 95% interval {interval[0]:.3f} to {interval[1]:.3f}" if interval else ""
    cores = effect.get("page_cores_while_open")
    cost = f"; the page took {cores:.2%} of one core while open" if cores is not None else ""
    return (
        f"round seconds with the page open / closed = {effect['ratio']:.3f} over {effect['pairs']} pairs of rounds"
        f"{within} (p50 {effect['open_seconds_p50']} s open, {effect['closed_seconds_p50']} s closed; "
        f"state.json answered in {result.page_seconds_p50} s p50{cost})"
    )


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _last_line(process: subprocess.Popen, log: Path) -> str:
    """Why a device process failed: the last line of its log (or that it is still connecting)."""
    if process.poll() is None:
        return "still connecting at the deadline"
    lines = log.read_text(errors="replace").strip().splitlines()
    return f"exited with {process.returncode}: {lines[-1] if lines else 'no output'}"


class _Broken(Exception):
    """This fleet size broke (the reason is the result's ``problem``)."""


def _result(
    plan: FleetPlan,
    out: Path,
    monitor: ProcessMonitor | None,
    reports: list[dict[str, Any]],
    problem: str | None,
    wall: float,
    urls: dict[str, Any],
) -> FleetResult:
    lines = _lines(out)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    deployment = summary.get("deployment", {})
    rounds = [line for line in lines if line["round"] >= 1]
    seconds = [line["seconds"] for line in rounds]
    late = sum(len(line["late"]) for line in rounds)
    latency = deployment.get("uplink_latency_seconds", {})
    frames = sum(line["wire"]["frames_up"] + line["wire"]["frames_down"] for line in rounds)
    rejected = sum(deployment.get("rejected", {}).values()) + sum(len(line.get("rejected", {})) for line in lines)
    cores = monitor.cores_during_rounds() if monitor is not None else {}
    cpu = {}
    if cores:
        cpu = {
            "server": cores["server"],
            "broker": max(v for k, v in cores.items() if k.startswith("broker")),  # the busiest node
            "devices": round(sum(v for k, v in cores.items() if k.startswith("devices")), 3),
        }
    if problem is None and len(rounds) < plan.rounds:
        problem = f"only {len(rounds)} of {plan.rounds} rounds ran"
    if problem is None and late:
        problem = f"{late} uplink(s) missed their round"
    if problem is None:
        problem = _first_error(out.parent / "server.log")
    peaks = monitor.peak_rss_mb if monitor else {}
    device_peaks = [v for k, v in peaks.items() if k.startswith("devices")]
    broker_peaks = [v for k, v in peaks.items() if k.startswith("broker")]
    return FleetResult(
        plan.method,
        plan.topology,
        plan.clients,
        plan.samples_per_client,
        problem is None,
        problem,
        len(rounds),
        round(lines[0]["seconds"], 2) if lines else None,
        _percentile(seconds, 0.5),
        _percentile(seconds, 0.95),
        latency.get("p50"),
        latency.get("p95"),
        cpu,
        deployment.get("peak_rss_mb"),
        round(max(broker_peaks), 1) if broker_peaks else None,
        round(max(device_peaks), 1) if device_peaks else None,
        round(frames / sum(seconds), 1) if seconds else None,
        late,
        rejected,
        sum(r.get("connection_losses", 0) for r in reports),
        sum(r.get("asked_again", 0) for r in reports),
        saturated_part(cpu),
        round(wall, 1),
        urls,
    )


def _first_error(log: Path) -> str | None:
    """The server's first logged error (e.g. clients it never saw online), None if it logged none."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return None
    errors = [line.split(" ERROR ", 1)[1] for line in lines if " ERROR " in line]
    if not errors:
        return None
    more = f" (and {len(errors) - 1} more errors)" if len(errors) > 1 else ""
    return f"server: {errors[0]}{more}"


def saturated_part(cpu: dict[str, float], cores: int | None = None) -> str:
    """Which part ran out of CPU first: the broker and the server each use about one core at most
    (Mosquitto is single-threaded; the server's decoding and aggregation share one Python
    interpreter), the machine has ``cores``."""
    if not cpu:
        return "- (rounds too short to measure)"
    cores = cores or os.cpu_count() or 1
    total = sum(cpu.values())
    single = {name: cpu.get(name, 0.0) for name in ("server", "broker")}
    busiest = max(single, key=lambda name: single[name])
    if single[busiest] >= 0.85:
        return f"{busiest} ({single[busiest]:.2f} of its one core)"
    if total >= 0.85 * cores:
        return f"the machine's {cores} cores ({total:.2f} in use; the devices took {cpu.get('devices', 0.0):.2f})"
    return f"none (busiest: {busiest} at {single[busiest]:.2f} core)"


def format_table(results: list[FleetResult]) -> str:
    def show(value: Any, digits: int = 2) -> str:
        return "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)

    header = (
        "| method | devices | samples each | ok | start s | round s p50 / p95 | uplink latency s p50 / p95 "
        "| CPU cores server / broker / devices | server MB | broker MB | msg/s | late | refused | out of CPU first |"
    )
    rows = [header, "|" + "---|" * 14]
    for r in results:
        opened = {"off": None, "on": "page open", "alternate": "page open in half the rounds"}[r.dashboard]
        page = f", {opened} ({r.page_views} views)" if opened else ""
        method = r.method + page
        rows.append(
            f"| {method} | {r.clients} | {r.samples_per_client} | {'yes' if r.ok else 'NO: ' + str(r.problem)} "
            f"| {show(r.startup_seconds, 1)} "
            f"| {show(r.round_seconds_p50)} / {show(r.round_seconds_p95)} "
            f"| {show(r.uplink_latency_p50, 3)} / {show(r.uplink_latency_p95, 3)} "
            f"| {' / '.join(f'{r.cpu[k]:.2f}' for k in ('server', 'broker', 'devices')) if r.cpu else '-'} "
            f"| {show(r.server_peak_rss_mb, 0)} | {show(r.broker_peak_rss_mb, 0)} | {show(r.messages_per_second, 0)} "
            f"| {r.late_uplinks} | {r.rejected} | {r.saturated} |"
        )
    return "\n".join(rows)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--methods",
        nargs="+",
        default=list(METHODS),
        choices=list(METHODS),
        help="methods whose rounds the fleet runs (default: %(default)s)",
    )
    parser.add_argument(
        "--clients",
        nargs="+",
        type=int,
        default=[10, 100, 1000, 2000, 4000, 8000],
        metavar="N",
        help="fleet sizes, run smallest first; a method stops growing at its first size that breaks "
        "(default: %(default)s)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds per size (default: %(default)s)")
    parser.add_argument(
        "--topology",
        default="mosquitto",
        metavar="KIND",
        help="the brokers: mosquitto (one), rabbitmq:N (an N-node RabbitMQ cluster with its MQTT plugin; the "
        "server on node 1, the device processes spread over the nodes) or bridge:N (N site Mosquittos bridged "
        "to a central one that the server uses) (default: %(default)s)",
    )
    parser.add_argument(
        "--dataset", default="fmnist", help="the run's dataset (the devices' shares) (default: %(default)s)"
    )
    parser.add_argument(
        "--samples-per-client",
        type=int,
        default=50,
        metavar="N",
        help="training samples per device, fewer where the dataset cannot give every device that many: sizes "
        "FedCache's messages (default: %(default)s)",
    )
    parser.add_argument(
        "--devices-per-process",
        type=int,
        default=250,
        metavar="N",
        help="devices one load-generator process holds (default: %(default)s)",
    )
    parser.add_argument(
        "--round-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="the server's round, hello and eval timeout (default: %(default)g)",
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=900.0,
        metavar="SECONDS",
        help="seconds one size may take in all before it counts as broken (default: %(default)g)",
    )
    parser.add_argument(
        "--dashboard",
        choices=("off", "on", "both", "alternate"),
        default="off",
        help="serve each run's page (`edgefd server --dashboard`) with a viewer polling it as an open page does: "
        "on; both: each size twice, the page closed then open, and the ratio of their round seconds; alternate: "
        "one run, the page open in one round of each pair drawn at random, and the open rounds' seconds over "
        "their pairs' closed ones with a 95%% interval (needs --rounds of 10 or more) (default: %(default)s)",
    )
    parser.add_argument("--out", type=Path, help="keep the runs' folders here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")


def run(args: argparse.Namespace) -> int:
    if any(n < 1 for n in args.clients) or args.rounds < 1 or args.devices_per_process < 1:
        print("benchmarks/fleet.py: --clients, --rounds and --devices-per-process must be >= 1", file=sys.stderr)
        return 2
    kind, _, count = args.topology.partition(":")
    if not (args.topology == "mosquitto" or (kind in ("rabbitmq", "bridge") and count.isdigit() and int(count) >= 1)):
        print(f"benchmarks/fleet.py: --topology {args.topology!r}: expected {', '.join(TOPOLOGIES)}", file=sys.stderr)
        return 2
    root = args.out or Path(tempfile.mkdtemp(prefix="edgefd-fleet-"))
    from edgefd.data import load_dataset

    train_size = len(load_dataset(args.dataset).train_y)
    results: list[FleetResult] = []
    if args.dashboard == "alternate" and args.rounds < 10:
        print("benchmarks/fleet.py: --dashboard alternate needs --rounds 10 or more (5 pairs)", file=sys.stderr)
        return 2
    pages = {"both": ["off", "on"]}.get(args.dashboard, [args.dashboard])
    for method in args.methods:
        for clients in sorted(set(args.clients)):
            arms = []
            for page in pages:
                plan = FleetPlan(
                    method,
                    clients,
                    rounds=args.rounds,
                    dataset=args.dataset,
                    samples_per_client=min(args.samples_per_client, train_size // clients),
                    devices_per_process=args.devices_per_process,
                    round_timeout=args.round_timeout,
                    deadline=args.deadline,
                    topology=args.topology,
                    dashboard=page,
                )
                result = run_plan(plan, root / f"{method}-{clients}{'' if page == 'off' else '-page'}")
                results.append(result)
                arms.append(result)
                print(format_table([result]).splitlines()[-1], flush=True)
                if result.page_effect is not None:
                    print(f"  {method}, {clients} devices: {describe_page_effect(result)}", flush=True)
            if len(arms) == 2 and arms[0].round_seconds_p50 and arms[1].round_seconds_p50:
                ratio = arms[1].round_seconds_p50 / arms[0].round_seconds_p50
                print(
                    f"  {method}, {clients} devices: round seconds p50 with the page open / closed = {ratio:.3f} "
                    f"(state.json answered in {arms[1].page_seconds_p50} s p50)",
                    flush=True,
                )
            broken = next((r for r in arms if not r.ok), None)
            if broken is not None:
                print(f"  {method} stops growing at {clients} devices: {broken.problem}", flush=True)
                break
    print(
        f"\nFleet load test on {os.cpu_count()} cores, brokers: {args.topology} on loopback, {args.dataset}, "
        f"{args.samples_per_client} samples per device, {args.rounds} rounds (runs in {root}):\n"
    )
    print(format_table(results))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    return 0 if all(r.ok for r in results[:1]) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 benchmarks/fleet.py",
        description="A load test on loopback: a real Mosquitto, one real `edgefd server`, and N lightweight devices "
        "(several hundred per process, each its own MQTT connection and identity) replaying the uplink a real "
        "client recorded, for FD rounds and FedCache rounds (exchange=round). For each N (growing until one breaks) "
        "prints the start-up, round seconds and uplink latency p50/p95, the CPU of the server, the broker and the "
        "devices, peak memory, messages per second, late uplinks and which part saturated first.",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
