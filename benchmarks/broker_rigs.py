"""Past one broker: clustered broker topologies on this machine, rigs for tests and benchmarks
(benchmarks/fleet.py --topology, benchmarks/clustered_brokers.py, tests/deploy/test_clustered_brokers.py),
never part of a deployment, so not part of the package.

    python3 benchmarks/broker_rigs.py rabbitmq --nodes 2     # or: bridge --sites 2

Two existing ways to spread a fleet over several brokers, started on loopback like
:func:`edgefd.deploy.broker.start_broker` starts one Mosquitto:

- :func:`start_rabbitmq_cluster`: N RabbitMQ nodes (Debian's ``rabbitmq-server``) joined into one
  cluster, each with its MQTT plugin on its own port. A message published on any node reaches the
  subscribers of every node. Each node has its own name (``edgefd-a@localhost``, ...), data and log
  folders, AMQP, distribution and MQTT ports, and they share an Erlang cookie (``HOME`` is the work
  folder) and an epmd of their own (``ERL_EPMD_PORT``), so nothing of a system-wide RabbitMQ is used
  or disturbed. Caveat: the MQTT plugin of RabbitMQ 3.10 keeps a retained message on the node that
  received it, for subscriptions of its exact topic (docs/DEPLOYMENT.md, "Past one broker").
- :func:`start_mosquitto_bridge`: one central Mosquitto and N site Mosquittos, each bridged to the
  central one (the server on the central broker, devices on their site's). Retained messages and last
  wills cross the bridge.

Both return an object with the brokers' URLs and ``stop()``, which ends every process they started
(nodes, epmd, brokers), also when the start failed half-way (the start then stops what it started
before raising).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import signal
import socket
import string
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import paho.mqtt.client as mqtt

from edgefd.deploy.broker import RunningBroker, free_port, start_broker

log = logging.getLogger(__name__)

RABBITMQ_FOLDERS = ("/usr/lib/rabbitmq/bin", "/usr/local/lib/rabbitmq/bin")
"""Where the RabbitMQ scripts themselves live (Debian's /usr/sbin/rabbitmq-server is a wrapper that
switches to user rabbitmq and its folders, which a node of its own must not use)."""
NOT_INSTALLED = "rabbitmq-server is not installed (apt-get install rabbitmq-server)"
PROBE_TOPIC = "edgefd/_probe"
"""The topics the readiness checks publish on (under the bridged ``edgefd/`` tree; no run uses them)."""


def rabbitmq_folder() -> Path | None:
    """The folder with ``rabbitmq-server`` and ``rabbitmqctl``, or None if RabbitMQ is not installed."""
    for folder in RABBITMQ_FOLDERS:
        if os.access(Path(folder) / "rabbitmq-server", os.X_OK) and os.access(Path(folder) / "rabbitmqctl", os.X_OK):
            return Path(folder)
    return None


def _epmd_path() -> str | None:
    return shutil.which("epmd") or next(
        (str(p) for p in sorted(Path("/usr/lib/erlang").glob("erts-*/bin/epmd")) if os.access(p, os.X_OK)), None
    )


# ---------------------------------------------------------------------------------------- ports
PORTS_FROM = 10000
"""Ports for the brokers are drawn from here up to the kernel's ephemeral range."""


def _ephemeral_start() -> int | None:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _can_bind(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_ports(count: int, host: str = "127.0.0.1", *, block: int = 1) -> list[int]:
    """`count` distinct ports nobody listens on (each the first of `block` free ports in a row).

    Drawn below the kernel's ephemeral range where it can be read: outgoing connections take their
    local ports from that range, and on a busy machine (a load test holding thousands of connections)
    a port :func:`free_port` found free is soon taken by one, before the broker binds it."""
    start = _ephemeral_start()
    if start is None or start - PORTS_FROM < 1000:
        ports: list[int] = []
        while len(ports) < count:
            if (port := free_port(host)) not in ports:
                ports.append(port)
        return ports
    chosen: list[int] = []
    draw = secrets.SystemRandom()
    while len(chosen) < count:
        first = draw.randrange(PORTS_FROM, start - block)
        candidates = range(first, first + block)
        if any(p in chosen for p in candidates) or not all(_can_bind(host, p) for p in candidates):
            continue
        chosen.append(first)
    return chosen


# ---------------------------------------------------------------------------------------- processes
def _started_at(pid: int) -> int | None:
    """The start time of a running process (clock ticks after boot), to tell it from a later one with
    its pid; None if there is none, or only its zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _children(pid: int) -> dict[int, int | None]:
    """Every process whose parent is `pid`, and theirs, with their start times (Linux /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = {}, [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found[child] = _started_at(child)
            todo.append(child)
    return found


def still_running(processes: dict[int, int | None]) -> list[int]:
    """The pids of `processes` (pid -> start time) that still run (the same processes, not later
    ones with the same pid)."""
    return [pid for pid, started in processes.items() if started is not None and _started_at(pid) == started]


def rss_mb(pid: int, peak: bool = False) -> float | None:
    """Resident memory of a process now (`peak`: its peak so far, VmHWM), in MiB; None if it is gone."""
    key = "VmHWM:" if peak else "VmRSS:"
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def _end_group(process: subprocess.Popen, timeout: float) -> None:
    """SIGTERM the process's group (it was started with start_new_session), wait, then SIGKILL the
    group and every process it had started that is still there: Erlang's helpers (erl_child_setup,
    inet_gethost) leave the group for sessions of their own."""
    helpers = _children(process.pid)
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid, started in helpers.items():
        if started is not None and _started_at(pid) == started:  # the same process, not a later one
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    process.wait()


# ---------------------------------------------------------------------------------------- MQTT probes
def _mqtt(url_host: str, port: int, client_id: str) -> mqtt.Client:
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv311)
    client.connect(url_host, port, keepalive=10)
    client.loop_start()
    return client


def check_route(source: tuple[str, int], target: tuple[str, int], topic: str, timeout: float = 30.0) -> float:
    """Publish on `source` (host, port) until a subscriber on `target` receives it (a bridge or a node
    may still be connecting); returns the seconds it took. Raises RuntimeError after `timeout`."""
    received = threading.Event()
    subscribed = threading.Event()
    tag = secrets.token_hex(4)
    started = time.monotonic()
    listener = _mqtt(*target, f"edgefd-probe-sub-{tag}")
    sender = None
    try:
        listener.on_message = lambda client, userdata, message: received.set()
        listener.on_subscribe = lambda *args: subscribed.set()
        listener.subscribe(topic, qos=1)
        if not subscribed.wait(timeout):
            raise RuntimeError(f"no subscription on 127.0.0.1:{target[1]} within {timeout:.0f} s")
        sender = _mqtt(*source, f"edgefd-probe-pub-{tag}")
        while not received.is_set():
            if time.monotonic() - started > timeout:
                raise RuntimeError(
                    f"a message published on port {source[1]} did not reach port {target[1]} within {timeout:.0f} s"
                )
            sender.publish(topic, b"probe", qos=1)
            received.wait(0.25)
    finally:
        for client in (listener, sender):
            if client is not None:
                client.disconnect()
                client.loop_stop()
    return time.monotonic() - started


# ---------------------------------------------------------------------------------------- RabbitMQ
@dataclass
class RabbitNode:
    """One node of a :class:`RunningCluster`."""

    name: str
    """Erlang node name, e.g. edgefd-a@localhost."""
    host: str
    mqtt_port: int
    amqp_port: int
    dist_port: int
    folder: Path
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"mqtt://{self.host}:{self.mqtt_port}"

    def beam_pid(self) -> int | None:
        """The Erlang VM (beam.smp) running the node, under its start script."""
        if self.process is None:
            return None
        for pid in [self.process.pid, *_children(self.process.pid)]:
            try:
                if Path(f"/proc/{pid}/exe").resolve().name.startswith("beam"):
                    return pid
            except OSError:
                continue
        return None


@dataclass
class RunningCluster:
    """RabbitMQ nodes started by :func:`start_rabbitmq_cluster`; stop them with :meth:`stop`."""

    nodes: list[RabbitNode]
    workdir: Path
    env: dict[str, str]
    """The environment the nodes and rabbitmqctl share (HOME with the cookie, ERL_EPMD_PORT)."""
    epmd: subprocess.Popen | None = None
    bin: Path = Path(RABBITMQ_FOLDERS[0])
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds of the start: "boot" (every node up), "join", "ready" (MQTT routes between nodes)."""

    @property
    def urls(self) -> list[str]:
        """One mqtt:// URL per node, node 1 first."""
        return [node.url for node in self.nodes]

    def ctl(self, node: RabbitNode, *args: str, timeout: float = 120.0) -> str:
        """Run ``rabbitmqctl -n NODE ARGS``; raises RuntimeError with its output if it fails."""
        command = [str(self.bin / "rabbitmqctl"), "-n", node.name, *args]
        try:
            done = subprocess.run(
                command, env=self.env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{' '.join(command[1:])}: no answer within {timeout:.0f} s") from None
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command[1:])} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-2000:]}"
            )
        return done.stdout

    def memory_mb(self, peak: bool = False) -> dict[str, float | None]:
        """Resident memory of each node's Erlang VM (beam.smp) now, or its peak so far, MiB."""
        return {node.name: (None if (pid := node.beam_pid()) is None else rss_mb(pid, peak)) for node in self.nodes}

    def processes(self) -> dict[int, int | None]:
        """Every process of the cluster now (start scripts, Erlang VMs and their helpers, epmd), pid ->
        start time: after :meth:`stop`, :func:`still_running` of it must be empty."""
        found: dict[int, int | None] = {}
        for process in [node.process for node in self.nodes] + [self.epmd]:
            if process is not None and process.poll() is None:
                found[process.pid] = _started_at(process.pid)
                found.update(_children(process.pid))
        return found

    def stop(self, timeout: float = 15.0) -> None:
        """End every node (SIGTERM, then SIGKILL after `timeout`) and the epmd, whatever state they are in."""
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                try:
                    os.killpg(node.process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for node in self.nodes:
            if node.process is not None:
                _end_group(node.process, timeout)
        if self.epmd is not None:
            _end_group(self.epmd, 5.0)

    def __enter__(self) -> RunningCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _rabbitmq_config(node: RabbitNode) -> str:
    # guest stays a loopback-only user (RabbitMQ's default): the MQTT clients here come from loopback.
    return "\n".join(
        [
            f"listeners.tcp.1 = {node.host}:{node.amqp_port}",
            f"mqtt.listeners.tcp.1 = {node.host}:{node.mqtt_port}",
            "mqtt.allow_anonymous = true",
            "mqtt.default_user = guest",
            "mqtt.default_pass = guest",
            "mqtt.vhost = /",
            "mqtt.exchange = amq.topic",
            "log.console = false",
            "log.file.level = info",
            "",
        ]
    )


def _node_env(cluster: RunningCluster, node: RabbitNode) -> dict[str, str]:
    return {
        **cluster.env,
        "RABBITMQ_NODENAME": node.name,
        "RABBITMQ_NODE_IP_ADDRESS": node.host,
        "RABBITMQ_NODE_PORT": str(node.amqp_port),
        "RABBITMQ_DIST_PORT": str(node.dist_port),
        "RABBITMQ_MNESIA_BASE": str(node.folder / "mnesia"),
        "RABBITMQ_LOG_BASE": str(node.folder / "log"),
        "RABBITMQ_CONFIG_FILE": str(node.folder / "rabbitmq.conf"),
        "RABBITMQ_ADVANCED_CONFIG_FILE": str(node.folder / "advanced.config"),  # absent: none
        "RABBITMQ_CONF_ENV_FILE": str(node.folder / "rabbitmq-env.conf"),  # absent: not /etc/rabbitmq's
        "RABBITMQ_PID_FILE": str(node.folder / "pid"),
        # the distribution listens on loopback only
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
    }


def _spawn(command: list[str], output: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start a process in a session of its own (so that its whole group can be ended), output to a file."""
    with open(output, "ab") as handle:
        return subprocess.Popen(
            command,
            env=env,
            cwd=output.parent,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _wait_port(what: str, host: str, port: int, process: subprocess.Popen, log_path: Path, deadline: float) -> None:
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{what} exited with code {process.returncode}:\n{output}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} does not listen on {host}:{port} in time; see {log_path}")


def start_rabbitmq_cluster(
    nodes: int = 2,
    workdir: str | os.PathLike | None = None,
    *,
    host: str = "127.0.0.1",
    timeout: float = 180.0,
    attempts: int = 2,
) -> RunningCluster:
    """Start `nodes` RabbitMQ nodes with the MQTT plugin on loopback and join nodes 2..N to node 1.

    The nodes boot in parallel, each from a ``rabbitmq.conf`` in its folder under `workdir`
    (``node-a``, ``node-b``, ...): listeners on `host` and free ports, anonymous MQTT mapped to the
    default ``guest`` user, the plugin enabled through the work folder's ``enabled_plugins`` file
    (offline: no management plugin). Then ``rabbitmqctl stop_app / join_cluster / start_app`` on
    each other node, ``await_startup`` on every node, and a message is routed from every node to
    node 1 and back. RuntimeError if something fails within `timeout` seconds (everything started
    is stopped first); a start that lost one of its ports to another program before binding it is
    tried again afresh, up to `attempts` times in all."""
    if nodes < 1:
        raise ValueError(f"nodes: expected >= 1, got {nodes}")
    folder = rabbitmq_folder()
    epmd = _epmd_path()
    if folder is None or epmd is None:
        raise RuntimeError(NOT_INSTALLED)
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="edgefd-rabbitmq-"))
    work.mkdir(parents=True, exist_ok=True)
    cookie = work / ".erlang.cookie"  # HOME is the work folder: the nodes and rabbitmqctl read it there
    if not cookie.exists():
        cookie.write_text("".join(secrets.choice(string.ascii_uppercase) for _ in range(32)))
    cookie.chmod(0o400)
    (work / "enabled_plugins").write_text("[rabbitmq_mqtt].\n")
    for attempt in range(1, attempts + 1):
        for old in work.glob("node-*"):  # an earlier attempt's data: its nodes knew other ports
            shutil.rmtree(old)
        try:
            return _start_cluster(nodes, work, host, folder, epmd, timeout)
        except RuntimeError as error:
            if "eaddrinuse" not in str(error) or attempt == attempts:
                raise
            log.warning("a RabbitMQ port was taken before its node bound it; starting again (%d/%d)", attempt, attempts)
    raise AssertionError("unreachable")


def _start_cluster(nodes: int, work: Path, host: str, folder: Path, epmd: str, timeout: float) -> RunningCluster:
    epmd_port, ctl_ports, *ports = free_ports(2 + 3 * nodes, host, block=11)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))},
        "HOME": str(work),
        "ERL_EPMD_PORT": str(epmd_port),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(work / "enabled_plugins"),
        # rabbitmqctl is an Erlang node too: its distribution listens on one of these 11 ports
        "RABBITMQ_CTL_DIST_PORT_MIN": str(ctl_ports),
        "RABBITMQ_CTL_DIST_PORT_MAX": str(ctl_ports + 10),
        "LC_ALL": "C.UTF-8",
    }
    cluster = RunningCluster([], work, env, bin=folder)
    started = time.monotonic()
    deadline = started + timeout
    try:
        cluster.epmd = _spawn([epmd, "-port", str(epmd_port), "-address", host], work / "epmd.out", env)
        _wait_port("epmd", host, epmd_port, cluster.epmd, work / "epmd.out", deadline)
        for index in range(nodes):
            letter = string.ascii_lowercase[index] if index < 26 else f"n{index}"
            mqtt_port, amqp_port, dist_port = ports[3 * index : 3 * index + 3]
            node = RabbitNode(
                f"edgefd-{letter}@localhost", host, mqtt_port, amqp_port, dist_port, folder=work / f"node-{letter}"
            )
            node.folder.mkdir()
            (node.folder / "rabbitmq.conf").write_text(_rabbitmq_config(node))
            node.process = _spawn(
                [str(folder / "rabbitmq-server")], node.folder / "server.out", _node_env(cluster, node)
            )
            cluster.nodes.append(node)
        for node in cluster.nodes:
            assert node.process is not None
            _wait_port(
                f"RabbitMQ node {node.name}", host, node.mqtt_port, node.process, node.folder / "server.out", deadline
            )
            cluster.ctl(node, "await_startup", "--timeout", str(max(1, int(deadline - time.monotonic()))))
        cluster.timings["boot"] = round(time.monotonic() - started, 2)
        first = cluster.nodes[0]
        for node in cluster.nodes[1:]:
            cluster.ctl(node, "stop_app")
            cluster.ctl(node, "join_cluster", first.name)
            cluster.ctl(node, "start_app")
        for node in cluster.nodes[1:]:
            cluster.ctl(node, "await_startup", "--timeout", str(max(1, int(deadline - time.monotonic()))))
        status = json.loads(cluster.ctl(first, "cluster_status", "--formatter", "json"))
        missing = sorted({node.name for node in cluster.nodes} - set(status.get("running_nodes", [])))
        if missing:
            raise RuntimeError(f"nodes not running in the cluster: {', '.join(missing)}: {status}")
        cluster.timings["join"] = round(time.monotonic() - started, 2)
        for node in cluster.nodes:
            for source, target in ((node, first), (first, node)):
                check_route(
                    (host, source.mqtt_port),
                    (host, target.mqtt_port),
                    f"{PROBE_TOPIC}/{source.name.split('@')[0]}",
                    timeout=max(1.0, deadline - time.monotonic()),
                )
        cluster.timings["ready"] = round(time.monotonic() - started, 2)
    except BaseException:
        cluster.stop()
        raise
    log.info("RabbitMQ cluster of %d node(s) ready in %.1f s: %s", nodes, time.monotonic() - started, cluster.urls)
    return cluster


# ---------------------------------------------------------------------------------------- Mosquitto
BRIDGE_TOPICS = ("edgefd/+/down/# in 1", "edgefd/+/up/# out 1", "edgefd/+/status/# out 1", "edgefd/_probe/# both 1")
"""What a site forwards: the server's messages come in, the devices' uplinks and statuses go out (a
device's uplink reaches the central broker, not the other sites)."""


def bridge_config(name: str, central: RunningBroker) -> str:
    """The lines that bridge a site Mosquitto to `central` (after the site's own listener lines)."""
    return "\n".join(
        [
            # a bridge is one session carrying a whole site: room for many queued QoS-1 messages
            "max_queued_messages 100000",
            f"connection {name}",
            f"address {central.host}:{central.port}",
            f"remote_clientid edgefd-bridge-{name}",
            # MQTT 3.1.1 like the devices; try_private marks the connection as a bridge, so the central
            # broker keeps the retain flag of what it forwards and sends nothing back where it came from
            "bridge_protocol_version mqttv311",
            "try_private true",
            # the central broker keeps the bridge's session (and queues for it) while the link is down
            "cleansession false",
            "notifications false",
            "start_type automatic",
            "restart_timeout 1 10",
            "keepalive_interval 10",
            *(f"topic {topic}" for topic in BRIDGE_TOPICS),
            "",
        ]
    )


@dataclass
class RunningBridge:
    """Mosquittos started by :func:`start_mosquitto_bridge`; stop them with :meth:`stop`."""

    central: RunningBroker | None
    sites: list[RunningBroker]
    workdir: Path
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def central_url(self) -> str:
        assert self.central is not None
        return self.central.url

    @property
    def site_urls(self) -> list[str]:
        return [site.url for site in self.sites]

    def memory_mb(self, peak: bool = False) -> dict[str, float | None]:
        """Resident memory of each Mosquitto now, or its peak so far, MiB."""
        brokers = [("central", self.central)] + [(f"site-{i + 1}", s) for i, s in enumerate(self.sites)]
        return {name: rss_mb(b.process.pid, peak) for name, b in brokers if b is not None}

    def stop(self) -> None:
        brokers = [*self.sites, *([self.central] if self.central is not None else [])]
        for broker in brokers:  # all at once: each takes ~1 s to exit
            if broker.process.poll() is None:
                broker.process.send_signal(signal.SIGTERM)
        for broker in brokers:
            broker.stop()

    def __enter__(self) -> RunningBridge:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_mosquitto_bridge(
    sites: int = 2, workdir: str | os.PathLike | None = None, *, host: str = "127.0.0.1", timeout: float = 30.0
) -> RunningBridge:
    """Start a central Mosquitto and `sites` site Mosquittos bridged to it (folders ``central``,
    ``site-1``, ... under `workdir`), and wait until a message goes from every site to the central
    broker and back. RuntimeError if Mosquitto is missing or a bridge does not carry messages."""
    if sites < 1:
        raise ValueError(f"sites: expected >= 1, got {sites}")
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="edgefd-bridge-"))
    started = time.monotonic()
    bridge = RunningBridge(None, [], work)
    try:
        central_port, *site_ports = free_ports(1 + sites, host)
        bridge.central = start_broker(
            central_port,
            kind="mosquitto",
            host=host,
            workdir=work / "central",
            extra_config="max_queued_messages 100000\n",
        )
        for index, port in enumerate(site_ports, 1):
            name = f"site-{index}"
            bridge.sites.append(
                start_broker(
                    port,
                    kind="mosquitto",
                    host=host,
                    workdir=work / name,
                    extra_config=bridge_config(name, bridge.central),
                )
            )
        central = (host, bridge.central.port)
        for index, site in enumerate(bridge.sites, 1):
            check_route((host, site.port), central, f"{PROBE_TOPIC}/up-{index}", timeout)
            check_route(central, (host, site.port), f"{PROBE_TOPIC}/down-{index}", timeout)
    except BaseException:
        bridge.stop()
        raise
    bridge.timings["ready"] = round(time.monotonic() - started, 2)
    log.info(
        "Mosquitto bridge ready in %.1f s: central %s, sites %s",
        bridge.timings["ready"],
        bridge.central_url,
        bridge.site_urls,
    )
    return bridge


def main(argv: list[str] | None = None) -> int:
    """``python3 benchmarks/broker_rigs.py rabbitmq|bridge``: start a topology, print its URLs, keep it
    up until Ctrl-C or SIGTERM, then stop it."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python3 benchmarks/broker_rigs.py",
        description="Start a clustered broker topology on loopback (for trying out and benchmarks) and keep it up "
        "until Ctrl-C: a RabbitMQ cluster with its MQTT plugin, or Mosquitto sites bridged to a central Mosquitto.",
    )
    parser.add_argument("topology", choices=("rabbitmq", "bridge"))
    parser.add_argument("--nodes", type=int, default=2, help="RabbitMQ nodes (default: %(default)s)")
    parser.add_argument("--sites", type=int, default=2, help="site Mosquittos of a bridge (default: %(default)s)")
    parser.add_argument("--workdir", help="folder for the brokers' configs, data and logs (default: a temporary one)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        running: RunningCluster | RunningBridge
        if args.topology == "rabbitmq":
            running = start_rabbitmq_cluster(args.nodes, args.workdir)
            print("nodes:", " ".join(running.urls), flush=True)
        else:
            running = start_mosquitto_bridge(args.sites, args.workdir)
            print("central:", running.central_url, "sites:", " ".join(running.site_urls), flush=True)
    except RuntimeError as error:
        print(f"benchmarks/broker_rigs.py: {error}")
        return 1
    try:
        stop.wait()
    finally:
        running.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
