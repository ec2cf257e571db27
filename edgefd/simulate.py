"""`edgefd simulate`: run one method on one machine and write its results.

    edgefd simulate                          # FD on digits, 10 clients, Dirichlet 0.5: ~10 s
    edgefd simulate --algo fedavg --dataset fmnist --clients 20 --rounds 50 --out runs/fedavg
    edgefd simulate --config run.toml --param beta=2

Settings come from, in increasing priority: the defaults of `SimulationConfig`, a TOML file
(`--config`, same keys, method hyperparameters in a `[params]` table), then the command line.
The out folder receives `metrics.jsonl`, `summary.json`, `curves.png` and `models/<client>.pt`
(each client's final model, for `edgefd export`).

Exit status: 0 when the run completed; 2 for a setting it cannot run with; 4 (REFUSED_EXIT) when
it completed but every round refused something a selected client sent (too large for what the run
takes, or not what the method accepts): the last line and summary.json's ``refused_clients`` name
the clients.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from edgefd import progress as progress_bars
from edgefd.dashboard.flags import add_dashboard_arguments, dashboard_of
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.flags import add_config_arguments, config_from_args

__all__ = ["add_arguments", "run", "run_cli", "unlike_local_note"]


def run(
    config: SimulationConfig,
    progress: bool = True,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    said: set[str] | None = None,
    watch: SimulationView | None = None,
) -> dict[str, Any]:
    """Builds and runs the simulation, writes its results, and returns the summary. ``said``: the
    notes already printed by the runs it belongs to (`edgefd compare`'s), not printed again;
    ``watch``: the run's page, given every line as it is written (`--dashboard`)."""
    started = time.perf_counter()
    progress_bars.set_enabled(progress)  # for this run; `finally` below puts the default back
    try:
        return _run(config, progress, on_round, started, set() if said is None else said, watch)
    finally:
        progress_bars.set_enabled(True)


class SimulationView:
    """A simulation as its page shows it (`edgefd.dashboard.state`): its lines so far. In-process
    clients have no network, so no status, last sighting or bytes of their own."""

    def __init__(self, config: SimulationConfig) -> None:
        from edgefd.runtime.build import client_ids_of

        self.config = config
        self.client_ids = client_ids_of(config.clients)
        self.lines: list[dict[str, Any]] = []
        self.finished = False
        self._history: Any = None
        """The page's `RunLines`, made on its first poll (the dashboard is imported only then)."""

    def add(self, line: dict[str, Any]) -> None:
        self.lines.append(line)

    def state(self) -> dict[str, Any]:
        from edgefd.dashboard.state import RunLines, device_row

        lines = list(self.lines)
        self._history = history = (self._history or RunLines()).update(lines)
        selected, late, scores = history.selected, history.late, history.scores
        devices = [
            device_row(
                cid,
                selected=selected[cid],
                on_time=selected[cid] - late[cid],
                late=late[cid],
                score=scores.get(cid),
            )
            for cid in self.client_ids
        ]
        done = lines[-1]["round"] if lines else None
        phase = "finished" if self.finished else ("starting" if done is None else f"round {done + 1}")
        return {
            "run": {
                "name": self.config.out_dir().name,
                "mode": "simulate",
                "method": self.config.algo,
                "dataset": self.config.dataset,
                "rounds": self.config.rounds,
                "clients": self.config.clients,
                "round": done,
                "phase": phase,
                "answered": None,
                "expected": None,
                "seconds_left": None,
                "finished": self.finished,
            },
            "devices": devices,
            "strangers": [],
            "curve": list(history.curve),
        }


def _run(
    config: SimulationConfig,
    progress: bool,
    on_round: Callable[[dict[str, Any]], None] | None,
    started: float,
    said: set[str],
    watch: SimulationView | None,
) -> dict[str, Any]:
    from edgefd.export.checkpoint import save_run_models
    from edgefd.metrics.results import RunWriter, run_summary
    from edgefd.runtime.build import build, local_training_of, peak_gpu_mb, round_seconds
    from edgefd.runtime.process import peak_rss_mb
    from edgefd.runtime.records import HELLO_ROUND, RoundRecord
    from edgefd.training import device_choice

    sim = build(config)
    if progress:
        for note in (sim.model_note, unlike_local_note(config, sim), device_choice(config.device)):
            if note and note not in said:  # a comparison says "device: cpu" once, not once a run
                said.add(note)
                print(note, file=sys.stderr)
    out = config.out_dir()
    writer = RunWriter(out)
    bar = progress_bars.round_bar(config.rounds, f"{config.algo} on {config.dataset}")

    def record(round_record: RoundRecord) -> None:
        line = writer.add(sim.end_round(round_record))
        if watch is not None:
            watch.add(line)
        if round_record.round == HELLO_ROUND:
            return
        if on_round is not None:
            on_round(line)
        progress_bars.show_round(bar, line)

    try:
        sim.federation.run(record)
        if bar is not None:
            bar.close()
        save_run_models(sim, writer.lines[-1]["client_accuracy"], out)
    finally:
        sim.close()

    summary = {
        **run_summary(config, writer.lines, sim.model_names, sim.server.params, time.perf_counter() - started),
        "startup_seconds": round_seconds(writer.lines[0]["seconds"]),
        "peak_rss_mb": peak_rss_mb(),
        **({} if (gpu_mb := peak_gpu_mb()) is None else {"peak_gpu_mb": gpu_mb}),
        "local_training": local_training_of(config),
        "test_samples": {cid: len(split.test_indices) for cid, split in sim.splits.items()},
        "test_samples_full": len(sim.dataset.test_y),
    }
    writer.write_summary(summary)
    from edgefd.metrics.plots import plot_curves  # matplotlib: ~1 s to import, only needed here

    plot_curves({f"{config.algo} (seed {config.seed})": writer.lines}, out / "curves.png")
    if watch is not None:
        watch.finished = True
    return summary


def unlike_local_note(config: SimulationConfig, sim: Any) -> str | None:
    """One line when this run trains otherwise than Local would with the same flags (other models,
    optimiser lifecycle, batch order or epochs): two default runs then differ in more than the
    method, and `edgefd compare` runs them on one footing. None when they train alike."""
    from edgefd.algorithms.base import get_method
    from edgefd.models import assign_models
    from edgefd.runtime.build import local_training_of, resolve_models

    if config.algo == "local":
        return None
    shape = tuple(sim.dataset.input_shape)
    local = replace(config, algo="local", params={})
    ours_models = list(dict.fromkeys(sim.model_names.values()))
    local_models = resolve_models(config.models, get_method("local"), shape)
    theirs_models = list(dict.fromkeys(assign_models(local_models, config.clients, input_shape=shape)))
    ours, theirs = local_training_of(config), local_training_of(local)
    differences = []
    if ours_models != theirs_models:
        differences.append(f"models {', '.join(ours_models)} (Local: {', '.join(theirs_models)})")
    differences += [
        f"{name.replace('_', ' ')} {ours[name]} (Local: {theirs[name]})" for name in ours if ours[name] != theirs[name]
    ]
    if not differences:
        return None
    return (
        f"note: {config.algo} trains otherwise than Local by default: {'; '.join(differences)}; "
        f"to compare them on one footing: edgefd compare {config.algo} local"
    )


# ----------------------------------------------------------------------------------------------
# Command line


EXAMPLES = """examples:
  edgefd simulate                                    # FD on digits, 10 clients, 10 rounds
  edgefd simulate --algo fedcache --dataset fmnist --samples-per-client 200 --rounds 20
  edgefd simulate --algo fedict --partition dirichlet:0.1 --precision fp16 --out runs/fedict
  edgefd simulate --algo fd --param beta=2 --param temperature=3
  edgefd simulate --config run.toml                  # the same keys in TOML, method params in [params]

methods: `edgefd methods` lists them, `edgefd methods NAME` gives one's --param NAME=VALUE

exit status: 0 when the run completed; 2 for a setting it cannot run with; 4 when every round
  refused something a selected client sent, e.g. an uplink larger than --max-message-bytes (the last
  line and summary.json's refused_clients name the clients)"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`edgefd simulate`'s flags and its examples."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EXAMPLES
    add_config_arguments(parser)
    add_dashboard_arguments(parser)


def run_cli(args: argparse.Namespace) -> int:
    from edgefd.data import DatasetNotFoundError
    from edgefd.metrics.results import REFUSED_EXIT, REFUSED_NOTE, refusals_said

    try:
        config = config_from_args(args)
        if (config.out_dir() / "metrics.jsonl").exists():  # said before the run: its files go as it starts
            said = f"replacing the earlier run in {config.out_dir()} (another --out keeps it)"
            print(f"edgefd simulate: {said}", file=sys.stderr)
        view = SimulationView(config)
        with dashboard_of(args, view.state):
            summary = run(config, progress=not args.quiet, watch=view)
    except DatasetNotFoundError as error:
        print(f"edgefd simulate: {error}", file=sys.stderr)
        return 2
    except ValueError as error:
        print(f"edgefd simulate: {error}", file=sys.stderr)
        return 2
    final, best = summary["final_accuracy"], summary["best_accuracy"]
    print(
        f"{config.algo} on {config.dataset}: final accuracy {'none' if final is None else f'{100 * final:.2f}%'} "
        f"(best {'none' if best is None else f'{100 * best:.2f}%'}), "
        f"{progress_bars.byte_size(summary['bytes_up_total'])} up, "
        f"{progress_bars.byte_size(summary['bytes_down_total'])} down, "
        f"{summary['wall_seconds']:.1f} s -> {config.out_dir()}{refusals_said(summary)}"
    )
    if summary["refused_every_round"]:
        print(f"edgefd simulate: {REFUSED_NOTE}", file=sys.stderr)
        return REFUSED_EXIT
    return 0
