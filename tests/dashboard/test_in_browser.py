"""The live page in a real browser: headless Chromium (Debian's package) driven by Selenium, on
`edgefd deploy-local --dashboard`, with a real Mosquitto broker and client processes.

It checks what an operator relies on: every client is in the devices table and online, the curve
gains a point as rounds end, a client killed with SIGKILL turns offline (its last will), and a
sender whose id is markup is listed as the characters it is, never run as markup. The page it
saw is saved as a screenshot; EDGEFD_DASHBOARD_SCREENSHOT=FILE saves it there too (how
docs/images/dashboard.png is made).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

from edgefd.deploy.broker import mosquitto_path, start_broker

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
HOSTILE = "<img src=x onerror=window.hacked=1>"
"""A device id that is markup: a topic level may hold it (no '/', '+' or '#')."""
RUN = "dashboard"
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def skip_unless_ci(missing: str) -> None:
    """Skip where a system package is missing; under CI (which installs it) fail instead."""
    if IN_CI:
        pytest.fail(f"{missing}; under CI it must be there (scripts/install.sh --test)")
    pytest.skip(missing)


@pytest.fixture(scope="module")
def browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        skip_unless_ci("Debian's chromium and chromium-driver are not installed (scripts/install.sh --test)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        skip_unless_ci("selenium is not installed (pip install -e '.[test]')")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # Headless, and none of Chromium's own calls home (this machine's network is closed).
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1280,1400",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, condition, timeout: float = 60.0):
    """The first truthy value of ``condition()`` within ``timeout`` seconds, or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = condition()
        except Exception:  # the page is being redrawn: a cell read mid-update
            value = None
        if value:
            return value
        time.sleep(0.25)
    pytest.fail(f"the page did not show {what} within {timeout:.0f} s")


def _rows(driver) -> dict[str, str]:
    """Device id -> its status cell, as the page shows them (text, as a person reads it)."""
    rows = driver.find_elements("css selector", "#devices tbody tr")
    return {row.find_elements("tag name", "td")[0].text: row.find_elements("tag name", "td")[1].text for row in rows}


def _client_pid(out: Path, cid: str) -> int:
    pattern = f"--client-id {cid} --state-dir {out}"
    found = subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True, text=True)
    pids = [int(p) for p in found.stdout.split()]
    assert len(pids) == 1, f"expected one process of {cid}, found {pids}"
    return pids[0]


def test_the_live_page_of_a_deployment(browser, tmp_path: Path):
    if mosquitto_path() is None:
        skip_unless_ci("mosquitto is not installed (scripts/install.sh)")
    port = _free_port()
    out = tmp_path / "run"
    with start_broker(workdir=tmp_path / "broker") as broker:
        deployment = subprocess.Popen(
            [
                sys.executable, "-m", "edgefd.cli", "deploy-local", "--broker", broker.url, "--run", RUN,
                "--algo", "fd", "--dataset", "digits", "--clients", "3", "--rounds", "2000", "--threads", "1",
                "--keepalive", "2", "--dashboard", f"127.0.0.1:{port}", "--out", str(out), "--quiet",
            ],
            stdout=open(tmp_path / "deploy-local.log", "wb"),
            stderr=subprocess.STDOUT,
            env=ENV,
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}/"
            _wait("the page", lambda: _page_loads(browser, url))
            ids = {"client-0", "client-1", "client-2"}
            _wait("every client online", lambda: _rows(browser) == dict.fromkeys(ids, "online"))

            def points() -> int:
                return int(browser.find_element("id", "curves").get_attribute("data-points") or 0)

            first = _wait("a first evaluated round", points)
            _wait("the curve gaining a point", lambda: points() > first)
            drawn = browser.find_elements("css selector", "#charts svg")
            assert len(drawn) == 2 and int(drawn[0].get_attribute("data-points")) >= first + 1

            os.kill(_client_pid(out, "client-2"), signal.SIGKILL)  # no goodbye: the broker's last will
            _wait("client-2 offline", lambda: _rows(browser).get("client-2") == "offline", timeout=30)
            assert _rows(browser)["client-0"] == "online"

            stranger = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="stranger")
            stranger.connect(broker.host, broker.port)
            stranger.loop_start()
            stranger.publish(f"edgefd/{RUN}/status/{HOSTILE}", b"not a message", qos=1).wait_for_publish(10)
            stranger.loop_stop()
            stranger.disconnect()

            def listed() -> list[str]:
                return [li.text for li in browser.find_elements("css selector", "#strangers li")]

            shown = _wait("the stranger's id", lambda: [t for t in listed() if t.startswith(HOSTILE)])
            assert shown == [f"{HOSTILE} (1 refused)"]  # its characters, as text
            assert browser.find_elements("css selector", "#strangers img") == []
            assert browser.execute_script("return window.hacked") is None

            shot = tmp_path / "dashboard.png"
            assert browser.save_screenshot(str(shot)) and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            if target := os.environ.get("EDGEFD_DASHBOARD_SCREENSHOT"):
                shutil.copy(shot, target)
        finally:
            deployment.send_signal(signal.SIGINT)  # deploy-local stops its server and clients
            try:
                deployment.wait(60)
            except subprocess.TimeoutExpired:
                deployment.kill()
                deployment.wait()
            subprocess.run(["pkill", "-KILL", "-f", "--", str(out)], check=False)  # anything left of the run


def _page_loads(driver, url: str) -> bool:
    driver.get(url)
    return "live" in driver.find_element("id", "status").text
