"""The live page's server: its routes, read-only, its token, and a snapshot that fails."""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from edgefd.dashboard.http import SNAPSHOT_SECONDS, DashboardServer, parse_address, read_token

TOKEN = "a-token-of-some-length"


def _get(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, dict(reply.headers), reply.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def _state() -> dict:
    return {"run": {"round": 1}, "devices": [], "strangers": [], "curve": []}


@pytest.mark.parametrize(
    "text,expected",
    [
        ("8080", ("127.0.0.1", 8080)),
        (":0", ("127.0.0.1", 0)),
        ("0.0.0.0:80", ("0.0.0.0", 80)),
        ("[::1]:9000", ("::1", 9000)),
        ("localhost:1", ("localhost", 1)),
    ],
)
def test_addresses(text: str, expected: tuple[str, int]):
    assert parse_address(text) == expected


@pytest.mark.parametrize("text,said", [("host:http", "expected HOST:PORT"), ("70000", "not between 0 and 65535")])
def test_bad_addresses_are_named(text: str, said: str):
    with pytest.raises(ValueError, match=said):
        parse_address(text)


def test_an_address_beyond_this_machine_needs_a_token():
    with pytest.raises(ValueError, match="needs a token: --dashboard-token-file"):
        DashboardServer("0.0.0.0:0", _state)
    DashboardServer("0.0.0.0:0", _state, token=TOKEN).close()


def test_a_token_file_must_hold_a_token(tmp_path: Path):
    (tmp_path / "short").write_text("abc\n")
    with pytest.raises(ValueError, match="16 characters or more"):
        read_token(tmp_path / "short")
    with pytest.raises(ValueError, match="--dashboard-token-file .*missing"):
        read_token(tmp_path / "missing")
    (tmp_path / "good").write_text(f"  {TOKEN}\n")
    assert read_token(tmp_path / "good") == TOKEN


def test_a_port_in_use_is_named():
    with DashboardServer("127.0.0.1:0", _state) as first:
        port = first.url.rsplit(":", 1)[1].strip("/")
        with pytest.raises(ValueError, match=f"--dashboard 127.0.0.1:{port}: cannot serve there"):
            DashboardServer(f"127.0.0.1:{port}", _state)


def test_the_page_its_assets_and_its_state():
    with DashboardServer("127.0.0.1:0", _state) as server:
        status, headers, body = _get(server.url)
        assert status == 200 and b'<script src="dashboard.js">' in body
        assert "script-src 'self'" in headers["Content-Security-Policy"]
        for asset in ("dashboard.js", "dashboard.css"):
            assert _get(server.url + asset)[0] == 200
        status, headers, body = _get(server.url + "state.json")
        assert status == 200 and json.loads(body) == _state() and headers["Cache-Control"] == "no-store"
        status, _, body = _get(server.url + "charts.json")
        assert status == 200 and set(json.loads(body)) == {"round", "bytes"}
        assert _get(server.url + "secrets")[0] == 404
        assert _get(server.url + "../pyproject.toml")[0] == 404


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_it_is_read_only(method: str):
    with DashboardServer("127.0.0.1:0", _state) as server:
        status, headers, _ = _get(server.url + "state.json", method=method)
        assert status == 405 and headers["Allow"] == "GET"


def test_the_data_needs_the_token_and_the_page_does_not():
    with DashboardServer("127.0.0.1:0", _state, token=TOKEN) as server:
        assert _get(server.url)[0] == 200  # the page holds nothing of the run
        assert _get(server.url + "state.json")[0] == 401
        assert _get(server.url + "state.json?token=wrong")[0] == 401
        assert _get(server.url + "charts.json", {"Authorization": "Bearer " + TOKEN[:-1]})[0] == 401
        assert _get(server.url + f"state.json?token={TOKEN}")[0] == 200
        assert _get(server.url + "charts.json", {"Authorization": "Bearer " + TOKEN})[0] == 200


def test_the_state_is_made_at_most_once_a_second_for_many_readers():
    calls = []

    def snapshot() -> dict:
        calls.append(1)
        return _state()

    with DashboardServer("127.0.0.1:0", snapshot) as server:
        for _ in range(10):
            assert _get(server.url + "state.json")[0] == 200
    assert len(calls) <= 2


def test_a_snapshot_that_fails_is_a_503_and_the_server_goes_on():
    failures = iter([True, False])

    def snapshot() -> dict:
        if next(failures):
            raise RuntimeError("dictionary changed size during iteration")
        return _state()

    with DashboardServer("127.0.0.1:0", snapshot) as server:
        assert _get(server.url + "state.json")[0] == 503
        assert _get(server.url + "state.json")[0] == 200


def test_what_the_page_cost_is_counted_and_said_when_it_closes(caplog):
    """Each request's CPU time (its thread's own clock) adds to the page's cost, which the server
    logs when it stops serving: the figure a run's log gives of what its open page took from it."""

    def slow_state() -> dict:
        deadline = time.thread_time() + 0.02  # 20 ms of CPU for each state made
        while time.thread_time() < deadline:
            pass
        return _state()

    caplog.set_level(logging.INFO, logger="edgefd.dashboard.http")
    with DashboardServer("127.0.0.1:0", slow_state) as server:
        _get(server.url)
        _get(server.url + "state.json")
        time.sleep(SNAPSHOT_SECONDS)
        _get(server.url + "state.json")
    assert server.requests == 3
    assert 0.04 <= server.cpu_seconds < 5
    assert f"dashboard: 3 requests served in {server.cpu_seconds:.3f} s of CPU" in caplog.text
