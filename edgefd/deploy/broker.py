"""Starting an MQTT broker on this machine: Mosquitto when installed, else amqtt (pure Python).

Used by `edgefd deploy-local` and the integration tests. Mosquitto runs in the foreground from a
minimal config written to a work folder (listener on one address and port, no pid or log file,
no persistence), so it never needs a root-owned folder; `extra_config` adds lines (TLS, passwords,
ACL), or `config` replaces it whole (the tests run the shipped server/mosquitto/edgefd.conf).
amqtt, the fallback, runs as `python -m edgefd.deploy.broker --port N` in its own process, speaks
MQTT 3.1.1 only and ignores `extra_config` (anonymous, no TLS).
"""

from __future__ import annotations

import argparse
import getpass
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

KINDS = ("auto", "mosquitto", "amqtt")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def mosquitto_path() -> str | None:
    return shutil.which("mosquitto") or next(
        (p for p in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto") if os.access(p, os.X_OK)), None
    )


def mosquitto_config(port: int, host: str = "127.0.0.1", extra: str = "") -> str:
    """A minimal foreground config. `user` is the current user, so Mosquitto started as root does
    not drop to user `mosquitto` and can read files in private (0700) test folders."""
    # set_tcp_nodelay: answer small messages at once (Nagle's algorithm would hold each until the
    # previous one is acknowledged: ~40 ms per hop of a request-answer exchange).
    lines = [f"listener {port} {host}", f"user {getpass.getuser()}", "persistence false", "set_tcp_nodelay true"]
    if "allow_anonymous" not in extra:
        lines.append("allow_anonymous true")
    return "\n".join(lines) + "\n" + extra + ("\n" if extra and not extra.endswith("\n") else "")


@dataclass
class RunningBroker:
    """A broker process started by :func:`start_broker`; stop it with :meth:`stop`."""

    kind: str
    host: str
    port: int
    process: subprocess.Popen
    workdir: Path
    command: list[str] = field(default_factory=list)
    tls: bool = False

    @property
    def url(self) -> str:
        return f"{'mqtts' if self.tls else 'mqtt'}://{self.host}:{self.port}"

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then wait for it to exit (Mosquitto takes ~1 s)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def restart(self, down_seconds: float = 0.0) -> None:
        """Stop it, stay down for `down_seconds`, and start it again on the same port."""
        self.stop()
        time.sleep(down_seconds)
        self.process = _spawn(self.command, self.workdir)
        _wait_listening(self.host, self.port, self.process, self.workdir)

    def __enter__(self) -> RunningBroker:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _spawn(command: list[str], workdir: Path) -> subprocess.Popen:
    output = open(workdir / "broker.out", "ab")
    return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _wait_listening(host: str, port: int, process: subprocess.Popen, workdir: Path, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = (workdir / "broker.out").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the broker exited with code {process.returncode}:\n{output}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"the broker did not listen on {host}:{port} within {timeout:.0f} s")


def start_broker(
    port: int | None = None,
    *,
    kind: str = "auto",
    host: str = "127.0.0.1",
    extra_config: str = "",
    workdir: str | os.PathLike | None = None,
    tls: bool = False,
    config: str | None = None,
) -> RunningBroker:
    """Start a broker and wait until it accepts connections. `tls` only says which URL to give
    (the TLS listener itself comes from `extra_config` or `config`). `config`: a whole Mosquitto
    configuration to run instead of the minimal one, e.g. server/mosquitto/edgefd.conf with its
    paths replaced (its listener must be on `host`:`port`; `extra_config` must then be empty)."""
    if kind not in KINDS:
        raise ValueError(f"broker kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    if config is not None and (extra_config or kind == "amqtt"):
        raise ValueError("a whole config is for Mosquitto alone, without extra_config")
    port = port or free_port(host)
    folder = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="edgefd-broker-"))
    folder.mkdir(parents=True, exist_ok=True)
    binary = mosquitto_path()
    if (kind == "mosquitto" or config is not None) and binary is None:
        raise RuntimeError("mosquitto is not installed (apt-get install mosquitto)")
    if kind == "mosquitto" or (kind == "auto" and binary):
        assert binary is not None  # checked just above
        path = folder / "mosquitto.conf"
        path.write_text(mosquitto_config(port, host, extra_config) if config is None else config)
        command, chosen = [binary, "-c", str(path)], "mosquitto"
    else:
        if extra_config:
            raise ValueError("the embedded amqtt broker takes no extra config (TLS/passwords/ACL need Mosquitto)")
        command, chosen = [sys.executable, "-m", "edgefd.deploy.broker", "--host", host, "--port", str(port)], "amqtt"
    process = _spawn(command, folder)
    _wait_listening(host, port, process, folder)
    log.info("started %s on %s:%d", chosen, host, port)
    return RunningBroker(chosen, host, port, process, folder, command, tls)


def _serve_amqtt(host: str, port: int) -> None:
    """Run amqtt until SIGTERM/SIGINT (the entry of the fallback broker's process)."""
    import asyncio

    from amqtt.broker import Broker

    async def main() -> None:
        broker = Broker(
            {
                "listeners": {"default": {"type": "tcp", "bind": f"{host}:{port}"}},
                "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}},
            }
        )
        await broker.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await broker.shutdown()

    asyncio.run(main())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="the embedded amqtt broker")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=1883)
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    _serve_amqtt(options.host, options.port)
