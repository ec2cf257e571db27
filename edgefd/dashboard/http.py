"""The live page's web server: the standard library's, in a thread of its own, read-only.

Why the standard library: the page has four routes and a handful of viewers, so a threading HTTP
server is enough, adds no dependency to a workstation or a device, and cannot pull a web framework's
attack surface into a process that holds a fleet's run.

Routes (GET only; anything else is refused):
- ``/``, ``/dashboard.js``, ``/dashboard.css``: the page and its assets, which hold nothing of the
  run;
- ``/state.json``: the run's state (`edgefd.dashboard.state`), made by the command's snapshot
  function at most once a second however many pages are open;
- ``/charts.json``: the two charts as SVG (`edgefd.dashboard.charts`), drawn again only when the
  curve gains a point.

Safe by default: it binds 127.0.0.1 unless told otherwise, and an address beyond this machine
needs a token (a file's contents), which the data routes then ask for (``Authorization: Bearer``
or ``?token=``), compared in constant time. The page sets every device-supplied string as text,
never as markup, and a Content-Security-Policy allows only the page's own script.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from edgefd.dashboard.charts import chart_svg
from edgefd.dashboard.page import ASSETS, LIVE_CSP, live_page

log = logging.getLogger(__name__)

SNAPSHOT_SECONDS = 1.0
"""The state is made again at most this often: a page polls every 2 s, several pages share it."""

LOOPBACK_NAMES = ("localhost",)


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``PORT`` (host 127.0.0.1); ``[::1]:PORT`` for IPv6. Port 0: any free one."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"--dashboard {text!r}: expected HOST:PORT, :PORT or PORT, e.g. 127.0.0.1:8080") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"--dashboard {text!r}: port {number} is not between 0 and 65535")
    return host, number


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve beyond this machine


def read_token(path: str | Path) -> str:
    """The token in ``path`` (surrounding whitespace dropped); an empty or unreadable file is an error."""
    try:
        token = Path(path).read_text().strip()
    except OSError as error:
        raise ValueError(f"--dashboard-token-file {path}: {error.strerror or error}") from None
    if len(token) < 16:
        raise ValueError(
            f"--dashboard-token-file {path}: a token of 16 characters or more is needed (it has {len(token)})"
        )
    return token


class DashboardServer:
    """Serves the page of one run from ``snapshot`` (a callable that returns the run's state)."""

    def __init__(self, address: str, snapshot: Callable[[], dict[str, Any]], token: str | None = None) -> None:
        host, port = parse_address(address)
        if not is_loopback(host) and token is None:
            raise ValueError(
                f"--dashboard {address}: an address beyond this machine needs a token: "
                "--dashboard-token-file FILE (the page is then opened as http://HOST:PORT/?token=TOKEN)"
            )
        self.snapshot = snapshot
        self.token = token
        self._lock = threading.Lock()
        self._state: tuple[float, bytes, list[dict[str, Any]]] | None = None
        """When the state was taken, its JSON, and its curve (what the charts are drawn from)."""
        self._charts: tuple[int, bytes] | None = None
        self.requests = 0
        self.cpu_seconds = 0.0
        """CPU time the page's connections took in all (their threads' own clocks): what the page
        cost the process it runs in (a server's rounds share its interpreter)."""
        try:
            self._http = (_IPv6Server if ":" in host else ThreadingHTTPServer)((host, port), _Handler)
        except OSError as error:
            raise ValueError(f"--dashboard {address}: cannot serve there: {error.strerror or error}") from None
        self._http.daemon_threads = True
        self._http.dashboard = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._http.serve_forever, name="edgefd-dashboard", daemon=True)

    @property
    def url(self) -> str:
        host, port = str(self._http.server_address[0]), int(self._http.server_address[1])
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/"

    def start(self) -> DashboardServer:
        self._thread.start()
        log.info("dashboard: %s%s", self.url, " (?token=... from the token file)" if self.token else "")
        return self

    def close(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for a serve_forever() that never started
            self._http.shutdown()
        self._http.server_close()
        if self.requests:
            log.info("dashboard: %d requests served in %.3f s of CPU", self.requests, self.cpu_seconds)

    def count(self, requests: int, cpu_seconds: float) -> None:
        with self._lock:
            self.requests += requests
            self.cpu_seconds += cpu_seconds

    def __enter__(self) -> DashboardServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ what the routes send
    def authorised(self, header: str | None, query_token: str | None) -> bool:
        if self.token is None:
            return True
        given = query_token or (header[len("Bearer ") :] if header and header.startswith("Bearer ") else "")
        return hmac.compare_digest(given.encode(), self.token.encode())

    def state_json(self) -> bytes:
        return self._current()[1]

    def _current(self) -> tuple[float, bytes, list[dict[str, Any]]]:
        with self._lock:
            now = time.monotonic()
            if self._state is None or now - self._state[0] >= SNAPSHOT_SECONDS:
                state = self.snapshot()
                self._state = (now, json.dumps(state, allow_nan=False).encode(), state["curve"])
            return self._state

    def charts_json(self) -> bytes:
        curve = self._current()[2]
        with self._lock:
            if self._charts is None or self._charts[0] != len(curve):
                drawn = {"round": chart_svg(curve, "round"), "bytes": chart_svg(curve, "bytes")}
                self._charts = (len(curve), json.dumps(drawn).encode())
            return self._charts[1]


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server_version = "edgefd-dashboard"
    sys_version = ""

    def handle_one_request(self) -> None:
        """One request, its CPU time (its thread's own clock) counted in the dashboard's."""
        started = time.thread_time()
        try:
            super().handle_one_request()
        finally:
            dashboard: DashboardServer = self.server.dashboard  # type: ignore[attr-defined]
            dashboard.count(1 if getattr(self, "raw_requestline", b"") else 0, time.thread_time() - started)

    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        dashboard: DashboardServer = self.server.dashboard  # type: ignore[attr-defined]
        url = urlsplit(self.path)
        if url.path == "/":
            self._send(200, "text/html; charset=utf-8", live_page().encode(), csp=True)
        elif url.path.lstrip("/") in ASSETS:
            name = url.path.lstrip("/")
            kind = "text/javascript" if name.endswith(".js") else "text/css"
            self._send(200, f"{kind}; charset=utf-8", ASSETS[name].encode())
        elif url.path in ("/state.json", "/charts.json"):
            query = parse_qs(url.query).get("token", [None])[0]
            if not dashboard.authorised(self.headers.get("Authorization"), query):
                self._send(401, "application/json", b'{"error": "this dashboard needs its token"}')
                return
            try:
                body = dashboard.state_json() if url.path == "/state.json" else dashboard.charts_json()
            except Exception:  # the run's snapshot must never take the server down with the page
                log.exception("dashboard: the run's state could not be made")
                self._send(503, "application/json", b'{"error": "the state could not be made: see the log"}')
                return
            self._send(200, "application/json", body)
        else:
            self._send(404, "text/plain; charset=utf-8", b"not found")

    def _refuse_method(self) -> None:
        self._send(405, "text/plain; charset=utf-8", b"this page is read-only", allow="GET")

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse_method  # noqa: N815

    def _send(self, status: int, kind: str, body: bytes, *, csp: bool = False, allow: str | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        if csp:
            self.send_header("Content-Security-Policy", LIVE_CSP)
        if allow:
            self.send_header("Allow", allow)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("dashboard: " + format, *args)
