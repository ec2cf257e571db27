"""The contract every registered method keeps on its default path (a sixth method gets it for free):
with its default params and the models `--models auto` gives it, a few rounds on the bundled digits

- stored in label order (every sample of class 0 first, then class 1, ...), split by the default
  Dirichlet partition: the setting in which a "fixed order" that walks the stored order makes every
  mini-batch one class;
- split IID;

end above chance and not more than `TOLERANCE` below the baseline trained the same way (as many local
epochs a round) on the same models: Local for methods whose deliverable is each client's own model,
FedAvg for methods whose deliverable is a global model. And none of its honest messages is refused
by its own schemas."""

from __future__ import annotations

import json

import pytest
from label_order import label_ordered

import edgefd.runtime.build as run_build
import edgefd.simulate as simulate
from edgefd.algorithms.base import get_method, list_methods
from edgefd.data import load_dataset
from edgefd.models import assign_models
from edgefd.simulate import SimulationConfig

ROUNDS = 3
CLIENTS = 5
TOLERANCE = 0.10
"""Accuracy points (as a fraction) a method may trail its baseline by after `ROUNDS` rounds."""
CHANCE = 0.10
SETTINGS = {"label-ordered": "dirichlet:0.5", "iid": "iid"}


def test_label_ordered_digits_are_sorted():
    data = label_ordered(load_dataset("digits"))
    assert bool((data.train_y[1:] >= data.train_y[:-1]).all())


def _final_accuracy(setting: str, algo: str, models: str, out, epochs: int | None = None) -> float:
    config = SimulationConfig(
        algo=algo,
        clients=CLIENTS,
        rounds=ROUNDS,
        partition=SETTINGS[setting],
        models=models,
        out=str(out),
        epochs=epochs,
    )
    original = run_build.load_dataset
    try:
        if setting == "label-ordered":
            run_build.load_dataset = lambda name, root=None, **kw: label_ordered(original(name, root=root, **kw))
        accuracy = float(simulate.run(config, progress=False)["final_accuracy"])
    finally:
        run_build.load_dataset = original
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    refused = {line["round"]: line["rejected"] for line in lines if line["rejected"]}
    assert not refused, f"{algo} ({setting}): the method's own schemas refused honest messages: {refused}"
    return accuracy


_BASELINES: dict[tuple[str, str, str, int], float] = {}


def _baseline(setting: str, algo: str, models: str, epochs: int, tmp_path_factory) -> float:
    """Each baseline runs once per session, shared by the methods that compare against it. It trains
    as many local epochs a round as the method does on its default path (its paper's)."""
    key = (setting, algo, models, epochs)
    if key not in _BASELINES:
        out = tmp_path_factory.mktemp(f"{algo}-{setting}-e{epochs}")
        _BASELINES[key] = _final_accuracy(setting, algo, models, out, epochs=epochs)
    return _BASELINES[key]


@pytest.mark.parametrize(("algo", "setting"), [(m.name, s) for m in list_methods() for s in SETTINGS])
def test_default_path_is_sane(algo, setting, tmp_path_factory):
    method = get_method(algo)
    models = ",".join(dict.fromkeys(simulate.resolve_models("auto", method, (1, 8, 8)).split(",")))
    if models in ("homo", "hetero"):
        models = ",".join(dict.fromkeys(assign_models(models, 3, input_shape=(1, 8, 8))))
    accuracy = _final_accuracy(setting, algo, "auto", tmp_path_factory.mktemp(f"{algo}-{setting}"))
    reference = "fedavg" if method.global_model else "local"
    baseline = _baseline(setting, reference, models, method.client.local_training.epochs, tmp_path_factory)
    assert accuracy > CHANCE + 0.05, f"{algo} ({setting}): {accuracy:.3f}, chance is {CHANCE}"
    assert accuracy >= baseline - TOLERANCE, (
        f"{algo} ({setting}, models {models}): {accuracy:.3f} against {reference}'s {baseline:.3f}"
    )
