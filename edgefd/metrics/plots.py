"""Accuracy curves: against the round and against the cumulative bytes on the wire."""

from __future__ import annotations

import os
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

LOG_SPAN = 100.0
"""The bytes axis is logarithmic when the plotted byte counts span more than this factor (methods
that send 1000x less than FedAvg stay readable), else linear."""


def _megabytes(line: dict[str, Any]) -> float:
    return (line.get("bytes_up_cumulative", 0) + line.get("bytes_down_cumulative", 0)) / 1e6


def bytes_scale(megabytes: list[float]) -> str:
    """One scale for the whole axis, never a linear stretch near 0 joined to a log one: "log" when
    every value is above zero (a log axis has no 0) and they span more than LOG_SPAN, else "linear"."""
    if megabytes and min(megabytes) > 0 and max(megabytes) / min(megabytes) > LOG_SPAN:
        return "log"
    return "linear"


def curves_figure(runs: dict[str, list[dict[str, Any]]]) -> Figure:
    """One line per run; `runs` maps a label to that run's metrics.jsonl lines."""
    fig = Figure(figsize=(11, 4))
    FigureCanvasAgg(fig)
    by_round, by_bytes = fig.subplots(1, 2)
    every_megabytes = []
    for label, lines in runs.items():
        points = [line for line in lines if line.get("accuracy") is not None]
        rounds = [line["round"] for line in points]
        accuracy = [100 * line["accuracy"] for line in points]
        megabytes = [_megabytes(line) for line in points]
        every_megabytes += megabytes
        by_round.plot(rounds, accuracy, marker=".", label=label)
        by_bytes.plot(megabytes, accuracy, marker=".", label=label)
    scale = bytes_scale(every_megabytes)
    by_round.set(xlabel="round", ylabel="mean client accuracy (%)", title="accuracy per round")
    by_bytes.set(
        xlabel=f"cumulative bytes up + down (MB{', log scale' if scale == 'log' else ''})",
        ylabel="mean client accuracy (%)",
        title="accuracy per byte",
        xscale=scale,
    )
    for ax in (by_round, by_bytes):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_curves(runs: dict[str, list[dict[str, Any]]], path: str | os.PathLike) -> None:
    """Saves :func:`curves_figure` of ``runs`` to ``path`` (the suffix picks the format)."""
    curves_figure(runs).savefig(path, dpi=120)
