"""curves.png: each axis of the accuracy-per-byte panel has one scale, linear or log, never a
linear stretch around 0 joined to log decades (ticks 0, 10^-2, 10^-1 on one axis)."""

import pytest

from edgefd.metrics.plots import LOG_SPAN, curves_figure, plot_curves


def _lines(megabytes: list[float]) -> list[dict]:
    """metrics.jsonl lines: round 0 (the hellos, not evaluated), then one evaluated round per value."""
    hello = {"round": 0, "accuracy": None, "bytes_up_cumulative": 0, "bytes_down_cumulative": 0}
    return [hello] + [
        {
            "round": r,
            "accuracy": 0.5 + r / 100,
            "bytes_up_cumulative": int(mb * 1e6 / 2),
            "bytes_down_cumulative": int(mb * 1e6 / 2),
        }
        for r, mb in enumerate(megabytes, start=1)
    ]


def _bytes_axis(runs: dict[str, list[dict]]):
    by_round, by_bytes = curves_figure(runs).axes
    assert by_round.get_xscale() == by_round.get_yscale() == "linear"
    assert by_bytes.get_yscale() == "linear"
    return by_bytes


def test_one_run_growing_linearly_gets_a_linear_bytes_axis():
    axis = _bytes_axis({"fd": _lines([1.0, 2.0, 3.0, 4.0])})
    assert axis.get_xscale() == "linear"
    assert "log" not in axis.get_xlabel()


def test_runs_orders_of_magnitude_apart_get_a_log_axis_that_says_so():
    axis = _bytes_axis({"fedavg": _lines([50.0, 100.0, 150.0]), "fd": _lines([0.01, 0.02, 0.03])})
    assert 150.0 / 0.01 > LOG_SPAN
    assert axis.get_xscale() == "log"
    assert "log scale" in axis.get_xlabel()


def test_a_run_that_sends_nothing_keeps_the_axis_linear():
    # `local` sends no bytes: a log axis has no 0, and a symlog one mixes a linear 0 with log decades
    axis = _bytes_axis({"local": _lines([0.0, 0.0]), "fedavg": _lines([50.0, 100.0]), "fd": _lines([0.01, 0.02])})
    assert axis.get_xscale() == "linear"


@pytest.mark.parametrize("megabytes", [[0.0], [0.001, 10.0], [5.0, 5.0], []])
def test_the_bytes_axis_is_never_symlog(megabytes):
    assert _bytes_axis({"run": _lines(megabytes)}).get_xscale() in ("linear", "log")


def test_plot_curves_writes_the_figure(tmp_path):
    plot_curves({"fd": _lines([1.0, 2.0])}, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
