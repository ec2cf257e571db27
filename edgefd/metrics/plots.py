"""Accuracy curves: against the round and against the cumulative bytes on the wire."""

from __future__ import annotations

import os
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_curves(runs: dict[str, list[dict[str, Any]]], path: str | os.PathLike) -> None:
    """One line per run; `runs` maps a label to that run's metrics.jsonl lines."""
    fig, (by_round, by_bytes) = plt.subplots(1, 2, figsize=(11, 4))
    for label, lines in runs.items():
        points = [line for line in lines if line.get("accuracy") is not None]
        rounds = [line["round"] for line in points]
        accuracy = [100 * line["accuracy"] for line in points]
        megabytes = [(line["bytes_up_cumulative"] + line["bytes_down_cumulative"]) / 1e6 for line in points]
        by_round.plot(rounds, accuracy, marker=".", label=label)
        by_bytes.plot(megabytes, accuracy, marker=".", label=label)
    by_round.set(xlabel="round", ylabel="mean client accuracy (%)", title="accuracy per round")
    by_bytes.set(xlabel="cumulative bytes up + down (MB)", ylabel="mean client accuracy (%)", title="accuracy per byte")
    if any(
        line.get("bytes_up_cumulative", 0) + line.get("bytes_down_cumulative", 0) > 0
        for lines in runs.values()
        for line in lines
    ):
        by_bytes.set_xscale("symlog", linthresh=0.01)
    for ax in (by_round, by_bytes):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
