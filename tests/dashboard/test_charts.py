"""The charts: well-formed SVG with one point per evaluated round, on round and on bytes."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from edgefd.dashboard.charts import bytes_label, chart_svg, nice_ticks

SVG = "{http://www.w3.org/2000/svg}"


def _points(n: int) -> list[dict]:
    return [
        {"round": r, "accuracy": 0.1 * r, "median": 0.1 * r, "low": 0.05 * r, "high": 0.12 * r, "bytes": 1500 * r}
        for r in range(1, n + 1)
    ]


@pytest.mark.parametrize("x", ["round", "bytes"])
def test_a_chart_is_svg_with_a_marker_per_point_and_a_band(x: str):
    root = ET.fromstring(chart_svg(_points(6), x))
    assert root.tag == f"{SVG}svg" and root.get("data-points") == "6"
    assert len(root.findall(f"{SVG}circle")) == 6
    (band,) = root.findall(f"{SVG}polygon")
    assert len(band.get("points", "").split()) == 12  # highs there, lows back
    lines = {p.get("class"): p for p in root.findall(f"{SVG}polyline")}
    assert set(lines) == {"mean", "median"}
    # every point lies in the drawing
    for p in lines["mean"].get("points", "").split():
        px, py = map(float, p.split(","))
        assert 0 <= px <= 520 and 0 <= py <= 240


def test_an_empty_chart_says_so():
    root = ET.fromstring(chart_svg([], "round"))
    assert root.get("data-points") == "0"
    assert "no evaluated round yet" in "".join(root.itertext())


def test_one_point_is_drawn():
    root = ET.fromstring(chart_svg(_points(1), "bytes"))
    assert len(root.findall(f"{SVG}circle")) == 1


def test_the_x_axis_must_be_round_or_bytes():
    with pytest.raises(ValueError, match="x must be 'round' or 'bytes'"):
        chart_svg(_points(2), "seconds")


def test_ticks_are_round_numbers_covering_the_range():
    assert nice_ticks(0, 10) == [0, 2, 4, 6, 8, 10]
    ticks = nice_ticks(3, 1234)
    assert ticks[0] <= 3 and ticks[-1] >= 1234 and len(ticks) <= 8
    steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:])}
    assert len(steps) == 1
    with pytest.raises(ValueError, match="not finite"):
        nice_ticks(0, math.inf)


def test_bytes_labels():
    assert bytes_label(12) == "12 B"
    assert bytes_label(320_000) == "320 kB"
    assert bytes_label(1_500_000) == "1.5 MB"
