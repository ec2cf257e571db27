"""`edgefd report DIR...`: a comparison table of finished runs and one plot of all of them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from edgefd.dashboard import finished_state, static_page
from edgefd.metrics.results import load_run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="DIR",
        help="one or more run folders written by `edgefd simulate --out` (or `server` / `deploy-local`), "
        "each holding metrics.jsonl and, once finished, summary.json; e.g. runs/fedavg runs/fd",
    )
    parser.add_argument(
        "--plot",
        metavar="FILE",
        default=None,
        help="image file for the plot of every run's accuracy against round and against cumulative MB; "
        "the suffix picks the format, e.g. compare.png or compare.pdf (default: report.png beside the first "
        "run folder: runs/report.png for runs/fedavg)",
    )
    parser.add_argument(
        "--html",
        metavar="FILE",
        default=None,
        help="also write the run's page (what --dashboard shows live) as one self-contained HTML file, for "
        "one run folder; e.g. --html run.html",
    )


SELF_REPORTED_NOTE = (
    "self-reported: final %, median % and best % of {runs} are the devices' own scores (the median: one liar "
    "among three or more cannot move it); server %: the server's score of its global model on its held-out set"
)
"""Said under the table where a run is a deployment (summary.json's ``self_reported``)."""


def _pct(value) -> str:
    return "   n/a" if value is None else f"{100 * value:6.2f}"


def run(args: argparse.Namespace) -> int:
    if args.html is not None and len(args.runs) != 1:
        print(f"edgefd report: --html writes the page of one run; {len(args.runs)} were given", file=sys.stderr)
        return 2
    runs = {}
    rows = []
    for folder in args.runs:
        try:
            summary, lines = load_run(folder)
        except (FileNotFoundError, ValueError) as error:
            print(f"edgefd report: {error}", file=sys.stderr)
            return 2
        name, algo = Path(folder).resolve().name, str(summary.get("algo", "?"))
        label = name if algo in name else f"{name} ({algo})"  # fd-digits-s0, not "fd fd-digits-s0"
        runs[label] = lines
        rows.append((label, summary))
    print(
        f"{'run':<36} {'final %':>8} {'median %':>8} {'server %':>8} {'best %':>8} {'MB up':>10} {'MB down':>10} "
        f"{'seconds':>8}"
    )
    for label, s in rows:
        print(
            f"{label:<36} {_pct(s.get('final_accuracy')):>8} {_pct(s.get('final_accuracy_median')):>8} "
            f"{_pct(s.get('final_server_accuracy')):>8} {_pct(s.get('best_accuracy')):>8} "
            f"{s.get('bytes_up_total', 0) / 1e6:>10.3f} {s.get('bytes_down_total', 0) / 1e6:>10.3f} "
            f"{s.get('wall_seconds', float('nan')):>8.1f}"
        )
    lengths = sorted({s["rounds"] for _, s in rows if isinstance(s.get("rounds"), int)})
    if len(lengths) > 1:
        print(
            f"note: these runs differ in length ({', '.join(map(str, lengths))} rounds): their final accuracies "
            "come at different points of training"
        )
    deployed = [label for label, s in rows if s.get("self_reported")]
    if deployed:
        print(SELF_REPORTED_NOTE.format(runs=", ".join(deployed)))
    from edgefd.metrics.plots import plot_curves  # matplotlib: a device install has none

    plot = Path(args.plot) if args.plot else default_plot(args.runs[0])
    plot_curves(runs, plot)
    print(f"plot: {plot}")
    if args.html is not None:
        (_, summary), lines = rows[0], next(iter(runs.values()))
        page = static_page(finished_state(summary, lines, Path(args.runs[0]).resolve().name))
        Path(args.html).write_text(page, encoding="utf-8")
        print(f"page: {args.html}")
    return 0


def default_plot(first_run: str | Path) -> Path:
    """report.png beside the first run folder (runs/report.png for runs/fedavg): with the runs it
    compares, never in whatever folder the command was started from (a checkout, say)."""
    folder = Path(first_run)
    if folder.name in ("", ".", ".."):
        folder = folder.resolve()
    return folder.parent / "report.png"
