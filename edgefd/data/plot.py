"""A picture of a partition: one stacked bar of label counts per client.

Uses matplotlib's object API with the Agg canvas directly, so it works headless and never touches
the global backend that other code (or a notebook) may have chosen.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np


def plot_label_counts(
    counts: np.ndarray,
    path: str | os.PathLike,
    title: str = "",
    class_names: Sequence[str] | None = None,
) -> None:
    """Save a stacked bar chart of ``counts`` (``[clients, classes]``) to ``path`` (PNG)."""
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    counts = np.asarray(counts)
    clients, classes = counts.shape
    fig = Figure(figsize=(max(6.0, min(0.25 * clients + 2.0, 24.0)), 4.0))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    cmap = colormaps["tab10" if classes <= 10 else "tab20" if classes <= 20 else "viridis"]
    colours = [cmap(c if classes <= 20 else c / max(classes - 1, 1)) for c in range(classes)]
    x = np.arange(clients)
    bottom = np.zeros(clients)
    for c in range(classes):
        label = class_names[c] if class_names is not None else str(c)
        ax.bar(x, counts[:, c], bottom=bottom, color=colours[c], width=0.85, label=label)
        bottom += counts[:, c]
    ax.set_xlabel("client")
    ax.set_ylabel("training samples")
    ax.set_xlim(-0.6, clients - 0.4)
    if clients <= 30:
        ax.set_xticks(x)
    if title:
        ax.set_title(title)
    if classes <= 20:
        ax.legend(title="label", fontsize="small", bbox_to_anchor=(1.01, 1.0), loc="upper left")
    fig.tight_layout()
    fig.savefig(os.fspath(path), dpi=100)
