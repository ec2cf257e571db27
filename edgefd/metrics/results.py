"""Run results on disk: `metrics.jsonl` (one line per round, written as rounds finish, so a
crashed run keeps what it did) and `summary.json` (the whole run, with its resolved config)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.records import GLOBAL_MODEL, LOST_EVALUATION, RoundRecord

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
TIMING_FIELDS = ("seconds",)
REFUSED_EXIT = 4
"""The exit status of `edgefd simulate`, `edgefd server` and `edgefd deploy-local` for a run that
ended, but in none of whose rounds every selected client's uplink was taken for a reason other than
time: in each round something a selected client sent was refused (too large for what the run takes,
or not what the method accepts: summary.json's ``refused_every_round``, ``refused_clients``). Its
results are not those of the federation that was asked for."""
REFUSED_NOTE = (
    "every round refused something a selected client sent (too large for what the run takes: "
    "--max-message-bytes, docs/DEPLOYMENT.md#message-sizes; or not what the method accepts), "
    "so no round learnt from all the clients it selected (exit status 4)"
)
"""What those commands print for such a run, after the line that names the clients."""


def _clean(value: Any) -> Any:
    """JSON has no NaN: write null instead."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def record_line(record: RoundRecord, bytes_up_cumulative: int, bytes_down_cumulative: int) -> dict[str, Any]:
    line = asdict(record)
    line["bytes_up_cumulative"] = bytes_up_cumulative
    line["bytes_down_cumulative"] = bytes_down_cumulative
    return _clean(line)


class RunWriter:
    """Appends round lines to metrics.jsonl and writes summary.json atomically at the end."""

    def __init__(self, out_dir: str | os.PathLike) -> None:
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.out / METRICS_FILE
        self.metrics_path.write_text("")
        (self.out / SUMMARY_FILE).unlink(missing_ok=True)  # an earlier run's: it would pass for this one's
        self.lines: list[dict[str, Any]] = []
        self._up = 0
        self._down = 0

    def add(self, record: RoundRecord) -> dict[str, Any]:
        self._up += record.bytes_up
        self._down += record.bytes_down
        line = record_line(record, self._up, self._down)
        self.lines.append(line)
        with self.metrics_path.open("a") as handle:
            handle.write(json.dumps(line, sort_keys=True) + "\n")
        return line

    def write_summary(self, summary: dict[str, Any]) -> Path:
        path = self.out / SUMMARY_FILE
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(summary_text(summary))
        os.replace(tmp, path)
        return path


def summary_text(summary: dict[str, Any]) -> str:
    """summary.json's text: every run's is written so (a recipe's run on Ray is written again from
    the text it came back with, `edgefd.reproduce_ray`)."""
    return json.dumps(_clean(summary), indent=2, sort_keys=True) + "\n"


def summarise(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """Final and best accuracy, byte totals, the rounds that lost something entirely and the
    clients refused, over the round lines. The final accuracy is the last evaluation's: None when
    that evaluation got no scores (an earlier round's accuracy is not the final models'). Beside the
    clients' mean, their median (robust to one liar) and, where the server scored its own models,
    the global model's score; ``suspect_scores``: per client, the evaluations whose score was
    flagged (`edgefd.runtime.scores`)."""
    evaluated = [line for line in lines if line.get("accuracy") is not None or LOST_EVALUATION in lost_of(line)]
    last = evaluated[-1] if evaluated else {}
    scored = [line for line in evaluated if line.get("accuracy") is not None and line["round"] > 0]
    summary = {
        "final_accuracy": last.get("accuracy"),
        "final_accuracy_std": last.get("accuracy_std"),
        "final_accuracy_median": last.get("accuracy_median"),
        "final_server_accuracy": (last.get("server_model_accuracy") or {}).get(GLOBAL_MODEL),
        "best_accuracy": max(line["accuracy"] for line in scored) if scored else None,
        "bytes_up_total": sum(line["bytes_up"] for line in lines),
        "bytes_down_total": sum(line["bytes_down"] for line in lines),
        "lost_rounds": {str(line["round"]): lost_of(line) for line in lines if lost_of(line)},
        "refused_clients": refused_clients(lines),
        "refused_every_round": refused_every_round(lines),
        "suspect_scores": suspect_counts(lines),
    }
    full = [line for line in evaluated if line.get("accuracy_full") is not None]
    if full:  # the run scored every client on the whole test set too (--score-full-test)
        summary["final_accuracy_full"] = full[-1]["accuracy_full"]
        summary["best_accuracy_full"] = max((line["accuracy_full"] for line in full if line["round"] > 0), default=None)
    return summary


def suspect_counts(lines: list[dict[str, Any]]) -> dict[str, int]:
    """Per client, the evaluations whose score was flagged as not fitting (``suspect_scores``)."""
    counts: dict[str, int] = {}
    for line in lines:
        for cid in line.get("suspect_scores") or {}:
            counts[cid] = counts.get(cid, 0) + 1
    return dict(sorted(counts.items()))


def _refused_in(line: dict[str, Any]) -> list[str]:
    """The clients selected in a training round whose message of that round was refused (its
    ``rejected``: too large, or not what the method accepts), not those that were only late."""
    selected = set(line.get("selected") or [])
    return [cid for cid in line.get("rejected") or {} if cid in selected] if line["round"] > 0 else []


def refused_clients(lines: list[dict[str, Any]]) -> dict[str, int]:
    """Per client, the training rounds in which something it sent was refused."""
    counts: dict[str, int] = {}
    for line in lines:
        for cid in _refused_in(line):
            counts[cid] = counts.get(cid, 0) + 1
    return dict(sorted(counts.items()))


def refused_every_round(lines: list[dict[str, Any]]) -> bool:
    """Whether every training round refused some selected client (`REFUSED_EXIT`): no round
    aggregated all it selected for a reason other than time."""
    rounds = [line for line in lines if line["round"] > 0]
    return bool(rounds) and all(_refused_in(line) for line in rounds)


def refusals_said(summary: dict[str, Any]) -> str:
    """The clients refused and in how many rounds, for a run's last line ("" when none was)."""
    refused = summary.get("refused_clients") or {}
    if not refused:
        return ""
    said = ", ".join(f"{cid} in {n}/{summary['rounds']} rounds" for cid, n in refused.items())
    return f"; refused: {said} (metrics.jsonl's rejected says why)"


def lost_of(line: dict[str, Any]) -> list[str]:
    """What a round line says its round lost entirely (``RoundRecord.lost``; none in older files)."""
    return list(line.get("lost") or [])


def load_run(run_dir: str | os.PathLike) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(summary, round lines) of a finished run directory; a clear error if it is not one."""
    run = Path(run_dir)
    summary_path, metrics_path = run / SUMMARY_FILE, run / METRICS_FILE
    if not metrics_path.is_file():
        raise FileNotFoundError(f"{run}: no {METRICS_FILE} (is this an `edgefd simulate --out` folder?)")
    lines = [json.loads(text) for text in metrics_path.read_text().splitlines() if text.strip()]
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {"run": str(run), **summarise(lines)}
    return summary, lines


SELF_REPORTED_SUMMARY = ("final_accuracy", "final_accuracy_std", "final_accuracy_median", "best_accuracy")
"""A deployment's summary figures made of the devices' own scores (summary.json's ``self_reported``)."""


def headline_of(summary: dict[str, Any], self_reported: bool) -> str:
    """The summary field that is the run's accuracy (``headline_accuracy_of``). A simulation: the
    clients' mean, the figure the papers report. A deployment, whose scores are the devices' own
    claims: the server's score of its global model on its held-out set where it has one (no device
    can move it), else the devices' median (one liar among three or more cannot move it past the
    honest devices; the mean moves by a third of the lie with three devices)."""
    if not self_reported:
        return "final_accuracy"
    return "final_server_accuracy" if summary.get("final_server_accuracy") is not None else "final_accuracy_median"


def final_accuracy_said(summary: dict[str, Any]) -> str:
    """The run's final accuracy as a command's last line says it: the headline first, and what it
    is where it is not the clients' mean."""
    of = summary.get("headline_accuracy_of", "final_accuracy")
    value = summary.get(of)
    if value is None:
        return "none (its last evaluation got no scores)"
    said = f"{100 * value:.2f}%"
    if of == "final_accuracy":
        return said
    mean: float = summary["final_accuracy"]  # a deployment's headline is never one without the devices' mean
    if of == "final_server_accuracy":
        return (
            f"{said} (the server's global model on its held-out set; devices' self-reported: {_devices_said(summary)})"
        )
    return f"{said} (the devices' median, self-reported; mean {100 * mean:.2f}%)"


def _devices_said(summary: dict[str, Any]) -> str:
    """The devices' median and mean of a run, or "none" where its last evaluation got no scores."""
    mean, median = summary.get("final_accuracy"), summary.get("final_accuracy_median")
    if mean is None or median is None:
        return "none"
    return f"median {100 * median:.2f}%, mean {100 * mean:.2f}%"


def run_summary(
    config: SimulationConfig,
    lines: list[dict[str, Any]],
    models: dict[str, str],
    params: Any,
    seconds: float,
    self_reported: bool = False,
) -> dict[str, Any]:
    """What summary.json says of any run, simulated or deployed: the run, its accuracies and bytes
    (round 0 is the one-time uploads), its models, the method's params as the server resolved
    them (FedZKT's preset), the kernel backend, the device this process trained on (what `auto`
    resolved to) and the whole config, its device resolved too. ``self_reported``: the clients'
    scores are their own claims (a deployment): ``self_reported`` names the figures made of them,
    and ``headline_accuracy`` is one they cannot move alone (`headline_of`)."""
    from edgefd import kernels  # torch: `edgefd report` reads runs without it
    from edgefd.training import resolve_device

    device = resolve_device(config.device)
    figures = summarise(lines)
    headline = headline_of(figures, self_reported)
    return {
        "algo": config.algo,
        "dataset": config.dataset,
        "clients": config.clients,
        "rounds": config.rounds,
        "seed": config.seed,
        **figures,
        "headline_accuracy": figures[headline],
        "headline_accuracy_of": headline,
        "self_reported": list(SELF_REPORTED_SUMMARY) if self_reported else [],
        "bytes_hello": lines[0]["bytes_up"] if lines else 0,
        "wall_seconds": round(seconds, 3),
        "models": models,
        "params": asdict(params),
        "kernels": kernels.get_backend(),
        "device": device,
        "config": {**asdict(config), "device": device},
    }
