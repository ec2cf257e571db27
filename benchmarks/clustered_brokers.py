"""One small deployment over three broker topologies: a single Mosquitto, a RabbitMQ cluster (MQTT
plugin; server on node 1, clients spread over the nodes) and Mosquitto sites bridged to a central
Mosquitto (server on the central broker, clients spread over the sites).

    python3 benchmarks/clustered_brokers.py                          # FD, digits, 4 clients, 3 rounds
    python3 benchmarks/clustered_brokers.py --clients 6 --rounds 5 --repeat 2
    python3 benchmarks/clustered_brokers.py --algo fedcache --models mlp --param knn=exact   # a round trip per batch

For each topology: the seconds to start it, the round-trip time of a small QoS-1 request and its
answer between a device's broker and the server's (median of 200, 1 KiB each way), the server's
seconds per round (mean over rounds >= 1, from its metrics.jsonl) and for the whole run, the
brokers' resident memory before the run, at its end and at their peak (RSS and VmHWM of each
beam.smp or mosquitto), and whether the run's metrics equal `edgefd simulate`'s. Every client is
its own `edgefd client` process, started after the server has published the configs. Prints a
Markdown table with the load average after each run (docs/DEPLOYMENT.md, "Past one broker", has the
figures); --json FILE keeps the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from broker_rigs import rss_mb, start_mosquitto_bridge, start_rabbitmq_cluster

from edgefd.algorithms.params import parse_param_assignments
from edgefd.deploy.broker import start_broker
from edgefd.deploy.mqtt_transport import BrokerSettings, MqttEndpoint, Topics
from edgefd.runtime.build import client_ids_of
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run

KEYS = ("round", "accuracy", "client_accuracy", "bytes_up", "bytes_down", "selected")


def _edgefd(args: list[Any], log: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(log, "ab") as handle:
        return subprocess.Popen(
            [sys.executable, "-m", "edgefd.cli", *map(str, args)], stdout=handle, stderr=subprocess.STDOUT, env=env
        )


def _lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def round_trip_ms(device_url: str, server_url: str, count: int = 200) -> float:
    """Median milliseconds from a request published on `device_url` to its answer, which an echo
    client on `server_url` publishes when the request reaches it."""
    answers: queue.Queue = queue.Queue()

    def connect(url: str, name: str) -> tuple[mqtt.Client, threading.Event]:
        settings = BrokerSettings(url)
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=name, protocol=mqtt.MQTTv311)
        subscribed = threading.Event()
        client.on_subscribe = lambda *args: subscribed.set()
        client.connect(settings.host, settings.port)
        # as edgefd's endpoints: no Nagle delay on small messages (else ~40 ms per hop)
        client.socket().setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client.loop_start()
        return client, subscribed

    echo, echo_ready = connect(server_url, "bench-echo")
    echo.on_message = lambda client, userdata, message: client.publish("edgefd/_probe/pong", message.payload, qos=1)
    echo.subscribe("edgefd/_probe/ping", qos=1)
    device, device_ready = connect(device_url, "bench-device")
    device.on_message = lambda client, userdata, message: answers.put(time.perf_counter())
    device.subscribe("edgefd/_probe/pong", qos=1)
    assert echo_ready.wait(10) and device_ready.wait(10)
    times = []
    try:
        for _ in range(20):  # until the route is up (a bridge may still subscribe)
            device.publish("edgefd/_probe/ping", b"x", qos=1)
            try:
                answers.get(timeout=0.5)
                break
            except queue.Empty:
                continue
        time.sleep(0.5)
        while not answers.empty():
            answers.get()
        for _ in range(count):
            sent = time.perf_counter()
            device.publish("edgefd/_probe/ping", bytes(1024), qos=1)
            times.append(answers.get(timeout=10) - sent)
    finally:
        for client in (echo, device):
            client.disconnect()
            client.loop_stop()
    return round(1000 * statistics.median(times), 2)


def deploy(config: dict, params: list[str], server_url: str, client_urls: list[str], work: Path) -> dict[str, Any]:
    """One run: the server on `server_url`, client i on `client_urls[i % len]`; returns its figures."""
    flags = [item for k, v in config.items() for item in ("--" + k.replace("_", "-"), v)]
    flags += [item for param in params for item in ("--param", param)]
    clients = client_ids_of(config["clients"])
    out, logs = work / "deploy", work / "logs"
    logs.mkdir(parents=True)
    started = time.perf_counter()
    server = _edgefd(
        ["server", "--broker", server_url, "--run", "bench", *flags, "--out", out, "--quiet",
         "--round-timeout", 120, "--min-clients", len(clients)],
        logs / "server.log",
    )  # fmt: skip
    topics = Topics("bench")
    watcher = MqttEndpoint(BrokerSettings(server_url), topics, "bench-watcher")
    watcher.subscribe(topics.down(clients[-1], "config"))
    watcher.start(wait=30)
    while watcher.inbox.empty():
        if server.poll() is not None:
            raise RuntimeError(f"the server exited: {(logs / 'server.log').read_text()[-2000:]}")
        time.sleep(0.1)
    watcher.stop()
    processes = [server] + [
        _edgefd(
            [
                "client",
                "--broker",
                client_urls[i % len(client_urls)],
                "--run",
                "bench",
                "--client-id",
                cid,
                "--state-dir",
                work / "state",
            ],
            logs / f"{cid}.log",
        )  # fmt: skip
        for i, cid in enumerate(clients)
    ]
    try:
        deadline = time.monotonic() + 900
        while server.poll() is None:  # a client that fails ends the run at once (the server would wait)
            failed = [p for p in processes[1:] if p.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                raise RuntimeError(
                    f"a client exited with {failed[0].returncode}" if failed else "the run took too long"
                )
            time.sleep(0.2)
        for process in processes:
            process.wait(timeout=60)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    if server.returncode != 0:
        raise RuntimeError(f"the server exited with {server.returncode}: {(logs / 'server.log').read_text()[-2000:]}")
    lines = _lines(out)
    return {
        "run_seconds": round(time.perf_counter() - started, 1),
        "round_seconds": round(statistics.mean(line["seconds"] for line in lines if line["round"] >= 1), 3),
        "lines": lines,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", default="fd")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", help="the run's --models (default: the method's)")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="a method parameter")
    parser.add_argument("--nodes", type=int, default=2, help="RabbitMQ nodes and bridged sites (default: 2)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per topology (default: 1)")
    parser.add_argument("--topologies", default="mosquitto,rabbitmq,bridge")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    config: dict[str, Any] = dict(
        algo=args.algo, dataset=args.dataset, clients=args.clients, rounds=args.rounds, seed=args.seed, threads=1
    )
    if args.models:
        config["models"] = args.models
    work = Path(tempfile.mkdtemp(prefix="edgefd-clustered-"))
    run(SimulationConfig(**config, params=parse_param_assignments(args.param), out=str(work / "sim")), progress=False)
    expected = [{k: line[k] for k in KEYS} for line in _lines(work / "sim")]
    rows = []
    for repeat in range(args.repeat):  # topologies in turn: a drift of the machine's load hits them alike
        for topology in args.topologies.split(","):
            folder = work / f"{topology}-{repeat}"
            started = time.perf_counter()
            if topology == "mosquitto":
                single = start_broker(kind="mosquitto", workdir=folder / "broker")
                running: Any = single
                server_url, client_urls = single.url, [single.url]
                memory = lambda peak, b=single: {"mosquitto": rss_mb(b.process.pid, peak)}  # noqa: E731
            elif topology == "rabbitmq":
                running = start_rabbitmq_cluster(args.nodes, folder / "rabbitmq")
                server_url, client_urls = running.urls[0], running.urls
                memory = running.memory_mb
            elif topology == "bridge":
                running = start_mosquitto_bridge(args.nodes, folder / "bridge")
                server_url, client_urls = running.central_url, running.site_urls
                memory = running.memory_mb
            else:
                raise SystemExit(f"unknown topology {topology!r}")
            start_seconds = round(time.perf_counter() - started, 1)
            try:
                rtt = round_trip_ms(client_urls[-1], server_url)
                idle = memory(False)
                figures = deploy(config, args.param, server_url, client_urls, folder)
                rss, peak = memory(False), memory(True)
            finally:
                running.stop()
            same = [{k: line[k] for k in KEYS} for line in figures.pop("lines")] == expected
            row = dict(
                topology=topology,
                start_seconds=start_seconds,
                round_trip_ms=rtt,
                **figures,
                idle_mb=idle,
                rss_mb=rss,
                peak_mb=peak,
                same=same,
                load=round(os.getloadavg()[0], 1),
            )
            rows.append(row)
            print(json.dumps(row), flush=True)
    print()
    print(
        "| topology | start s | request-answer ms | run s | s / round | broker RSS MB idle | at the end | peak "
        "| same as simulate | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        idle, rss, peak = (", ".join(f"{v:.0f}" for v in row[k].values()) for k in ("idle_mb", "rss_mb", "peak_mb"))
        print(
            f"| {row['topology']} | {row['start_seconds']} | {row['round_trip_ms']} | {row['run_seconds']} | "
            f"{row['round_seconds']} | {idle} | {rss} | {peak} | {'yes' if row['same'] else 'NO'} | {row['load']} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
