"""The server of a deployed run: the round loop of a simulation, with the clients behind MQTT.

`edgefd server` runs `edgefd.runtime.loop.Federation`, the loop `edgefd simulate` runs, over the
MQTT channel (`edgefd.deploy.mqtt_channel`): the same selection RNG, straggler draws, downlinks,
aggregation, evaluation and results files. What is left here is the deployment's own: the
broker connection, the retained configs, a checkpoint after every round (atomically) and
`--resume`, which continues from it: the round after the last one written, with the RNG and the
method's state as they were.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import MISSING, asdict, fields
from pathlib import Path
from typing import Any

import numpy as np

from edgefd.algorithms.base import ServerRole
from edgefd.deploy.device_data import load_device_data
from edgefd.deploy.mqtt_channel import DeployedRoundRecord, DeploymentSettings, MqttChannel
from edgefd.deploy.mqtt_transport import Topics
from edgefd.metrics.results import RunWriter, run_summary
from edgefd.runtime import checkpoint
from edgefd.runtime.build import build_server, local_training_of, prepare, scorer_on, selection_rng
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.limits import method_bounds
from edgefd.runtime.loop import Federation, ScoreServerModels
from edgefd.runtime.process import peak_rss_mb
from edgefd.runtime.records import RoundRecord
from edgefd.training import device_choice

__all__ = ["CHECKPOINT_FILE", "DeployedRoundRecord", "DeploymentSettings", "ServerRuntime"]

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "server.ckpt"


class ServerRuntime:
    """Runs one method's server role against clients on a broker."""

    def __init__(self, config: SimulationConfig, settings: DeploymentSettings, resume: bool = False) -> None:
        settings.validate()
        self.config = config
        self.settings = settings
        self.resume = resume
        self.pieces = prepare(config, on_demand=True)  # the server takes shapes and classes, no rows
        if note := device_choice(config.device):
            log.info("server: %s", note)
        role = build_server(config, self.pieces)
        if config.score_full_test:
            raise ValueError(
                "score_full_test: a deployed client holds only its own data, so it cannot be scored on the whole "
                "test set; this measurement is for `edgefd simulate`"
            )
        self.client_ids = list(self.pieces.client_ids)
        self.channel = MqttChannel(config, settings, self.client_ids, Topics(settings.run), self._bounds)
        self.federation = Federation(
            role, self.channel, config.loop_config(), selection_rng(config), holdout_scorer(settings, role)
        )
        self.out = config.out_dir()
        self.checkpoint_path = self.out / CHECKPOINT_FILE
        self.writer: RunWriter | None = None
        self.resumed_from: int | None = None
        self.finished = False
        """Whether the run has ended (its summary written): what a dashboard says of it."""

    @property
    def role(self):
        return self.federation.server

    @property
    def stats(self):
        return self.channel.stats

    # ------------------------------------------------------------------ the run
    def run(self) -> dict[str, Any]:
        started = time.perf_counter()
        self.channel.endpoint.start(wait=self.settings.connect_timeout)
        try:
            self.channel.clear_stops()
            self.channel.publish_configs()
            resume_at = self._restore() if self.resume else None
            if resume_at is None:
                self.writer = RunWriter(self.out)
            self.federation.run(self._record, resume_at=resume_at)  # ends with every client's stop
            summary = self._summary(time.perf_counter() - started)
            self.finished = True
            self.channel.clear_configs()
        finally:
            self.channel.close()
        return summary

    def _record(self, record: RoundRecord) -> None:
        """Each round as it ends: its line in metrics.jsonl (with what the wire carried), then the checkpoint."""
        assert self.writer is not None  # made by run() or _restore()
        self.writer.add(self.channel.deployed_record(record))
        self._save(record.round)

    def _summary(self, seconds: float) -> dict[str, Any]:
        assert self.writer is not None  # the run has started
        lines = self.writer.lines
        stats = self.channel.endpoint.stats
        summary = {
            **run_summary(
                self.config,
                lines,
                dict(zip(self.pieces.client_ids, self.pieces.model_names)),
                self.role.params,
                seconds,
                self_reported=True,
            ),
            "local_training": local_training_of(self.config),
            "deployment": {
                "run": self.settings.run,
                "broker": self.settings.broker.shown_url,
                "settings": {
                    **{k: v for k, v in asdict(self.settings).items() if k != "broker"},
                    "chunk_size": self.settings.broker.chunk_size,  # how this side talked: a broker setting
                },
                "resumed_from_round": self.resumed_from,
                "peak_rss_mb": peak_rss_mb(),
                "wire_bytes_up_total": sum(line["wire"]["up"] for line in lines if "wire" in line),
                "wire_bytes_down_total": sum(line["wire"]["down"] for line in lines if "wire" in line),
                "wire": stats.snapshot(),
                "rejected": dict(stats.rejected),
                "uplink_latency_seconds": latency_percentiles(
                    [t for s in self.stats.values() for t in s.latency_seconds]
                ),
                "clients": {cid: s.summary() for cid, s in self.stats.items()},
            },
        }
        self.writer.write_summary(summary)
        try:
            from edgefd.metrics.plots import plot_curves  # matplotlib: imported only at the end
        except ImportError as error:  # a server installed from a device's requirements: the run is done all the same
            log.warning("no %s: %s (pip install matplotlib draws it)", self.out / "curves.png", error)
        else:
            plot_curves({f"{self.config.algo} over MQTT (seed {self.config.seed})": lines}, self.out / "curves.png")
        return summary

    def _bounds(self, cid: str) -> dict[str, int | None]:
        """The largest content the method accepts from ``cid`` now, per up verb (None: open):
        `edgefd.runtime.limits.method_bounds`, which a simulation asks too."""
        return method_bounds(self.federation.server, cid)

    # ------------------------------------------------------------------ checkpoints
    def _references(self) -> dict[str, Any]:
        return {"build_model": self.role.context.build_model, "dataset": self.pieces.dataset}

    def _save(self, round: int) -> None:
        assert self.writer is not None  # the run has started
        state = {
            "round": round,
            "role": self.role,
            "rng": self.federation.rng.bit_generator.state,
            "lines": self.writer.lines,
            "stats": self.stats,
            "config": asdict(self.config),
        }
        checkpoint.save(self.checkpoint_path, state, self._references())

    def _restore(self) -> int | None:
        """Load the checkpoint; returns the first round to run (None: no checkpoint, start afresh)."""
        if not self.checkpoint_path.exists():
            log.warning("--resume: no checkpoint at %s; starting from the beginning", self.checkpoint_path)
            return None
        saved = checkpoint.load(self.checkpoint_path, self._references())
        if not same_run_config(saved.value("config"), self.config):
            raise ValueError(f"--resume: {self.checkpoint_path} is from a run with another config")
        saved.restore("role", self.federation.server)  # into the role this process built from the config
        self.federation.rng.bit_generator.state = saved.value("rng")
        self.channel.stats = saved.restore("stats", self.channel.stats)
        for stats in self.channel.stats.values():
            stats.online = False  # the clients say it again when they get their configs (published above)
        round = saved.value("round")
        self.writer = _restored_writer(self.out, saved.value("lines"))
        self.resumed_from = round
        log.info("resumed from the checkpoint of round %d", round)
        return round + 1


def holdout_scorer(settings: DeploymentSettings, role: ServerRole) -> ScoreServerModels | None:
    """What scores the server's own models on its held-out set (``--holdout-dir``: a device's
    data.npz, its test arrays), the scorer a simulation uses on its test set; None without one. A
    method whose server holds no model of its own is refused with it: there is nothing to score."""
    if settings.holdout_dir is None:
        return None
    if not role.server_models():
        raise ValueError(
            f"holdout_dir: {type(role).__name__} holds no model of its own to score (FedAvg, DFL and FedZKT do); "
            "its devices' accuracies are their own, self-reported"
        )
    data, _ = load_device_data(settings.holdout_dir)
    if not len(data.test_y):
        raise ValueError(f"holdout_dir: {settings.holdout_dir}'s data.npz has no test_x, test_y rows to score on")
    return scorer_on(data.test_x, data.test_y)


def same_run_config(saved: dict[str, Any], config: SimulationConfig) -> bool:
    """Whether a checkpoint's config is this run's. Local epochs left to the method count as the
    method's: a checkpoint written when ``epochs`` defaulted to 1 resumes under the same flags
    wherever the method's paper also trains one epoch a round. A setting the checkpoint's edgefd
    did not have yet counts as at its default (``max_message_bytes``: none)."""
    epochs = local_training_of(config)["epochs"]
    defaults = {f.name: f.default for f in fields(SimulationConfig) if f.default is not MISSING}

    def resolved(values: dict[str, Any]) -> dict[str, Any]:
        return {**defaults, **values, "epochs": epochs if values.get("epochs") is None else values["epochs"]}

    return resolved(saved) == resolved(asdict(config))


def latency_percentiles(seconds: list[float]) -> dict[str, float | int | None]:
    """p50, p95 and max of the run's request-to-uplink seconds over every on-time uplink."""
    if not seconds:
        return {"count": 0, "p50": None, "p95": None, "max": None}
    values = np.asarray(seconds)
    return {
        "count": len(values),
        "p50": round(float(np.percentile(values, 50)), 4),
        "p95": round(float(np.percentile(values, 95)), 4),
        "max": round(float(values.max()), 4),
    }


def _restored_writer(out: Path, lines: list[dict[str, Any]]) -> RunWriter:
    """A RunWriter whose metrics.jsonl holds exactly the checkpointed rounds (a round that was
    written after the checkpoint is run again and written once)."""
    writer = RunWriter(out)
    with writer.metrics_path.open("a") as handle:
        for line in lines:
            handle.write(json.dumps(line, sort_keys=True) + "\n")
    writer.lines = list(lines)
    writer._up = sum(line["bytes_up"] for line in lines)
    writer._down = sum(line["bytes_down"] for line in lines)
    return writer
