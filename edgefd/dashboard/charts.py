"""The page's two charts, drawn here as SVG: accuracy against round and against the bytes moved.

Drawn by the server rather than by a chart library in the browser: a few hundred lines of a
library (and its licence) shipped for two line charts would be most of the page, while an SVG
string is testable here, works in the static page without a script, and carries only numbers and
fixed labels (no device-supplied text reaches it; it is escaped all the same).

Each chart shows the clients' mean accuracy (a line), their median (dashed) and their spread,
lowest to highest (a band), one point per evaluated round.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any
from xml.sax.saxutils import escape

WIDTH, HEIGHT = 520, 240
LEFT, RIGHT, TOP, BOTTOM = 52, 16, 14, 40
"""The plot area's margins, in pixels: room for the axes' labels."""


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round numbers spanning [low, high] (1, 2 or 5 times a power of ten apart)."""
    if not math.isfinite(low) or not math.isfinite(high):
        raise ValueError(f"nice_ticks: the range [{low}, {high}] is not finite")
    if high <= low:
        high = low + 1.0
    raw = (high - low) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first, last = math.floor(low / step), math.ceil(high / step)
    return [round(i * step, 12) for i in range(first, last + 1)]


def bytes_label(value: float) -> str:
    """1.5 MB, 320 kB, 12 B: the bytes axis's labels."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"


def chart_svg(points: Sequence[dict[str, Any]], x: str) -> str:
    """The chart of ``points`` (`edgefd.dashboard.state.curve_of`) against ``x``: "round" or "bytes"."""
    if x not in ("round", "bytes"):
        raise ValueError(f"chart_svg: x must be 'round' or 'bytes', not {x!r}")
    title = "accuracy against round" if x == "round" else "accuracy against bytes moved (up + down)"
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" class="chart" '
        f'data-points="{len(points)}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>"
    )
    if not points:
        return head + f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" class="empty">no evaluated round yet</text></svg>'
    xs = [float(p[x]) for p in points]
    x_ticks = nice_ticks(min(xs) if len(xs) > 1 else 0.0, max(xs))
    y_ticks = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    x_low, x_high = x_ticks[0], x_ticks[-1]
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(value: float) -> float:
        return LEFT + (value - x_low) / (x_high - x_low) * plot_w

    def py(value: float) -> float:
        return TOP + (1.0 - min(max(value, 0.0), 1.0)) * plot_h

    def path(key: str) -> str:
        return " ".join(f"{px(float(p[x])):.1f},{py(float(p[key])):.1f}" for p in points)

    parts = [head]
    for tick in y_ticks:
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{py(tick):.1f}" y2="{py(tick):.1f}" class="grid"/>'
            f'<text x="{LEFT - 6}" y="{py(tick) + 4:.1f}" class="tick" text-anchor="end">{tick * 100:.0f}%</text>'
        )
    for tick in x_ticks:
        label = f"{tick:g}" if x == "round" else bytes_label(tick)
        parts.append(
            f'<line x1="{px(tick):.1f}" x2="{px(tick):.1f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}" class="grid"/>'
            f'<text x="{px(tick):.1f}" y="{HEIGHT - BOTTOM + 16}" class="tick" text-anchor="middle">'
            f"{escape(label)}</text>"
        )
    band = path("high") + " " + " ".join(reversed(path("low").split(" ")))
    parts.append(f'<polygon points="{band}" class="spread"><title>lowest to highest client</title></polygon>')
    parts.append(f'<polyline points="{path("median")}" class="median"><title>median client</title></polyline>')
    parts.append(f'<polyline points="{path("accuracy")}" class="mean"><title>mean over clients</title></polyline>')
    for p in points:
        parts.append(
            f'<circle cx="{px(float(p[x])):.1f}" cy="{py(float(p["accuracy"])):.1f}" r="2.5" class="mean">'
            f"<title>round {int(p['round'])}: {100 * float(p['accuracy']):.2f}%</title></circle>"
        )
    axis = "round" if x == "round" else "bytes moved"
    parts.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 6}" class="axis" text-anchor="middle">{axis}</text>')
    parts.append("</svg>")
    return "".join(parts)
