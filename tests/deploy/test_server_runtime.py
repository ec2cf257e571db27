"""The deployed server's own figures: its global model scored on a held-out set it holds."""

from dataclasses import replace

import pytest
import torch
from mqtt_helpers import write_holdout

from edgefd.deploy.mqtt_channel import DeploymentSettings
from edgefd.deploy.mqtt_transport import BrokerSettings
from edgefd.deploy.server_runtime import ServerRuntime, holdout_scorer
from edgefd.runtime.build import build
from edgefd.runtime.config import SimulationConfig

CONFIG = SimulationConfig(algo="fedavg", dataset="digits", clients=3, rounds=1, seed=0)


def settings(holdout_dir=None):
    return DeploymentSettings(run="holdout", broker=BrokerSettings("mqtt://127.0.0.1:1"), holdout_dir=holdout_dir)


def test_the_server_scores_the_global_model_on_its_held_out_set_every_evaluation(tmp_path):
    """The loop's scorer of server models, given the held-out rows: each record's
    server_model_accuracy is the global model's accuracy on them, which no client's claim moves."""
    x, y = write_holdout(tmp_path)
    sim = build(replace(CONFIG, out=str(tmp_path / "run")))
    sim.federation.score_server_models = holdout_scorer(settings(str(tmp_path)), sim.server)
    records = sim.federation.run()
    model = sim.server.server_models()["global_model"]
    with torch.no_grad():
        by_hand = float((model.eval()(x).argmax(1) == y).double().mean())
    assert records[-1].server_model_accuracy == {"global_model": pytest.approx(by_hand)}
    assert all(set(record.server_model_accuracy) == {"global_model"} for record in records)


def test_edgefd_server_with_a_holdout_dir_scores_its_models_and_refuses_a_method_without_one(tmp_path):
    write_holdout(tmp_path)
    config = replace(CONFIG, out=str(tmp_path / "run"))
    assert ServerRuntime(config, settings(str(tmp_path))).federation.score_server_models is not None
    assert ServerRuntime(config, settings()).federation.score_server_models is None
    with pytest.raises(ValueError, match="holdout_dir: FDServer holds no model of its own"):
        ServerRuntime(replace(config, algo="fd"), settings(str(tmp_path)))
    empty = tmp_path / "empty"
    empty.mkdir()
    write_holdout(empty, slice(0, 0))
    with pytest.raises(ValueError, match="no test_x, test_y rows"):
        ServerRuntime(config, settings(str(empty)))


def test_a_server_without_matplotlib_ends_its_run_with_its_figures_and_no_curves(tmp_path, monkeypatch, caplog):
    """A server installed from a device's requirements has no matplotlib: the run's summary is written
    and the run ends well, without curves.png, saying why."""
    import logging
    import sys

    from edgefd.metrics.results import RunWriter

    runtime = ServerRuntime(replace(CONFIG, out=str(tmp_path / "run")), settings())
    runtime.writer = RunWriter(runtime.out)
    monkeypatch.setitem(sys.modules, "edgefd.metrics.plots", None)  # import fails as without matplotlib
    with caplog.at_level(logging.WARNING, logger="edgefd.deploy.server_runtime"):
        summary = runtime._summary(1.0)
    assert summary["algo"] == "fedavg" and (runtime.out / "summary.json").is_file()
    assert not (runtime.out / "curves.png").exists()
    assert "pip install matplotlib draws it" in caplog.text
