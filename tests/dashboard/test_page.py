"""The static page: one file, its script allowed by hash, and a device's markup kept as data."""

from __future__ import annotations

import base64
import hashlib
import json
import re

from edgefd.dashboard.page import ASSETS, live_page, static_page
from edgefd.dashboard.state import device_row

HOSTILE = '</script><img src=x onerror="window.hacked=1"><!--'


def _state() -> dict:
    return {
        "run": {"name": HOSTILE, "round": 1, "finished": True},
        "devices": [device_row(HOSTILE, score=0.5)],
        "strangers": [{"id": HOSTILE, "refused": 3}],
        "curve": [{"round": 1, "accuracy": 0.5, "median": 0.5, "low": 0.4, "high": 0.6, "bytes": 10}],
    }


def test_the_static_page_keeps_device_strings_as_data():
    page = static_page(_state())
    assert "<img" not in page and HOSTILE not in page
    block = re.search(r'<script type="application/json" id="edgefd-state">(.*?)</script>', page, re.S)
    assert block is not None
    assert json.loads(block.group(1))["devices"][0]["id"] == HOSTILE


def test_the_static_page_allows_only_its_own_script():
    page = static_page(_state())
    digest = base64.b64encode(hashlib.sha256(ASSETS["dashboard.js"].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in page
    assert f"<script>{ASSETS['dashboard.js']}</script>" in page
    assert 'src="' not in page.split("<body>")[1].split("<svg")[0]  # nothing loaded from elsewhere


def test_the_static_page_has_its_charts_and_no_placeholders():
    page = static_page(_state())
    assert page.count("<svg") == 2 and "{{" not in page


def test_the_live_page_loads_its_assets_from_its_server():
    page = live_page()
    assert '<script src="dashboard.js"></script>' in page and "{{" not in page
