"""The page itself: live (its assets served beside it) or static (everything in one file).

The live page loads ``dashboard.js`` and ``dashboard.css`` from the server that serves it and polls
``state.json``; the static page (`edgefd report RUN --html FILE`) carries the same script and style
inline, the run's state as a JSON data block and its charts as SVG, so the one file opens anywhere,
offline, and can be attached to an e-mail. Both run the same script, which sets every string from
the state as text (``textContent``), never as markup.
"""

from __future__ import annotations

import base64
import hashlib
import json
from functools import cache
from importlib.resources import files
from typing import Any
from xml.sax.saxutils import escape

from edgefd.dashboard.charts import chart_svg

ASSET_NAMES = ("dashboard.js", "dashboard.css")

LIVE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""Only the page's own script and style run, and it talks only to its own server."""


def _asset(name: str) -> str:
    return files("edgefd.dashboard").joinpath("assets", name).read_text(encoding="utf-8")


class _Assets(dict):
    """The assets by name, read from the package once, when first asked for."""

    def __missing__(self, name: str) -> str:
        if name not in ASSET_NAMES:
            raise KeyError(name)
        self[name] = _asset(name)
        return self[name]

    def __contains__(self, name: object) -> bool:
        return name in ASSET_NAMES


ASSETS = _Assets()


@cache
def live_page() -> str:
    return (
        _asset("page.html")
        .replace("{{head}}", '<link rel="stylesheet" href="dashboard.css">')
        .replace("{{charts}}", "")
        .replace("{{tail}}", '<script src="dashboard.js"></script>')
    )


def static_page(state: dict[str, Any]) -> str:
    """The page of a finished run in one file: script, style, state and charts inline."""
    # Nothing in a <script> data block may read as markup ("</script>", "<!--"): every "<" in the
    # JSON (which can only be inside a string) is written as the escape \u003c.
    data = json.dumps(state, allow_nan=False).replace("<", "\\u003c")
    script = ASSETS["dashboard.js"]
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    csp = f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'"
    charts = chart_svg(state["curve"], "round") + chart_svg(state["curve"], "bytes")
    head = (
        f'<meta http-equiv="Content-Security-Policy" content="{escape(csp)}"><style>{ASSETS["dashboard.css"]}</style>'
    )
    tail = f'<script type="application/json" id="edgefd-state">{data}</script><script>{script}</script>'
    return _asset("page.html").replace("{{head}}", head).replace("{{charts}}", charts).replace("{{tail}}", tail)
