"""The contract every registered method keeps on its default path (a sixth method gets it for free):
with its default params and the models `--models auto` gives it, a few rounds (`ROUNDS`; more for a
method whose paper's algorithm starts slowly, `SLOW_STARTS`) on the bundled digits

- stored in label order (every sample of class 0 first, then class 1, ...), split by the default
  Dirichlet partition: the setting in which a "fixed order" that walks the stored order makes every
  mini-batch one class;
- split IID;

end above chance and not more than `TOLERANCE` below the baseline trained the same way (as many local
epochs a round, the method's own local optimiser) on the same models: Local for methods whose
deliverable is each client's own model, FedAvg for methods whose deliverable is a global model. And
none of its honest messages is refused by its own schemas."""

from __future__ import annotations

import json
from typing import Any

import pytest
from label_order import label_ordered

import edgefd.runtime.build as run_build
import edgefd.simulate as simulate
from edgefd.algorithms.base import MethodSpec, get_method, list_methods
from edgefd.algorithms.params import make_params
from edgefd.data import load_dataset
from edgefd.models import assign_models
from edgefd.runtime.config import SimulationConfig

ROUNDS = 3
"""Rounds of the test, except for the methods in `SLOW_STARTS`."""
CLIENTS = 5
TOLERANCE = 0.10
"""Accuracy points (as a fraction) a method may trail its baseline by at the end."""
CHANCE = 0.10
SETTINGS = {"label-ordered": "dirichlet:0.5", "iid": "iid"}


def test_label_ordered_digits_are_sorted():
    data = label_ordered(load_dataset("digits"))
    assert bool((data.train_y[1:] >= data.train_y[:-1]).all())


def _final_accuracy(setting: str, algo: str, models: str, out, **training: Any) -> float:
    """The run's final accuracy; ``training``: SimulationConfig fields (rounds too: `ROUNDS` by default)."""
    training = {"rounds": ROUNDS, **training}
    config = SimulationConfig(
        algo=algo, clients=CLIENTS, partition=SETTINGS[setting], models=models, out=str(out), **training
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


def baseline_training(method: MethodSpec) -> dict[str, Any]:
    """How the baseline trains so that it differs from ``method`` only in the method: the local
    epochs, optimiser lifecycle and batch order of the method's default path, and the method's own
    local optimiser where its params choose one the run does not (FedD2S: Adam with PyTorch's
    defaults, no weight decay, at the run's lr; docs/methods/fedd2s.md). Not matched: FedICT's and FedGKT's
    clients step SGD with Nesterov momentum, which the run's optimisers cannot express."""
    training = method.client.local_training
    chosen: dict[str, Any] = {
        "epochs": training.epochs,
        "optimizer_lifecycle": training.optimizer_lifecycle,
        "batch_order": training.batch_order,
    }
    if getattr(make_params(method.params, {}), "optimizer", None) == "adam":
        chosen.update(optimizer="adam", weight_decay=0.0)
    return chosen


_BASELINES: dict[tuple, float] = {}


def _baseline(setting: str, algo: str, models: str, training: dict[str, Any], tmp_path_factory) -> float:
    """Each baseline runs once per session, shared by the methods that compare against it."""
    key = (setting, algo, models, *sorted(training.items()))
    if key not in _BASELINES:
        out = tmp_path_factory.mktemp(f"{algo}-{setting}")
        _BASELINES[key] = _final_accuracy(setting, algo, models, out, **training)
    return _BASELINES[key]


def test_the_baseline_trains_as_the_method_does():
    plain = {"epochs": 1, "optimizer_lifecycle": "kept", "batch_order": "reshuffle"}
    assert baseline_training(get_method("fd")) == plain
    assert baseline_training(get_method("fedcache")) == {
        "epochs": 1,
        "optimizer_lifecycle": "fresh",
        "batch_order": "fixed",
    }
    assert baseline_training(get_method("fedzkt"))["epochs"] == 5
    assert baseline_training(get_method("fedd2s")) == {
        "epochs": 4,
        "optimizer_lifecycle": "fresh",
        "batch_order": "reshuffle",
        "optimizer": "adam",
        "weight_decay": 0.0,
    }


SLOW_STARTS = {
    # Methods whose paper's algorithm costs accuracy in its first rounds, and the rounds after which
    # they are held to the contract instead of `ROUNDS` (the baseline runs as many).
    #
    # FedD2S: every J step of phase B pulls a client towards the global model's reading of its
    # features, and the global model starts from theta^0, learning from the clients. Against a Local
    # trained as FedD2S trains (Adam without weight decay made anew every round, 4 epochs), seeds
    # 0 / 1 / 2, 5 clients, bundled digits, with phase B in the round of its upload (Alg. 1):
    # IID -16.1 / +8.4 / -17.9 points at 3 rounds, -14.6 / +1.1 / -22.0 at 6, -5.4 / +2.8 / -2.7 at
    # 10; label-ordered -16.0 / -0.7 / -3.4, -10.4 / -1.4 / -6.4, -0.4 / +2.0 / +1.8 (docs/METHODS.md).
    "fedd2s": 10,
}


@pytest.mark.parametrize(("algo", "setting"), [(m.name, s) for m in list_methods() for s in SETTINGS])
def test_default_path_is_sane(algo, setting, tmp_path_factory):
    method = get_method(algo)
    models = ",".join(dict.fromkeys(run_build.resolve_models("auto", method, (1, 8, 8)).split(",")))
    if models in ("homo", "hetero"):
        models = ",".join(dict.fromkeys(assign_models(models, 3, input_shape=(1, 8, 8))))
    rounds = SLOW_STARTS.get(algo, ROUNDS)
    accuracy = _final_accuracy(setting, algo, "auto", tmp_path_factory.mktemp(f"{algo}-{setting}"), rounds=rounds)
    reference = "fedavg" if method.global_model else "local"
    training = {**baseline_training(method), "rounds": rounds}
    baseline = _baseline(setting, reference, models, training, tmp_path_factory)
    assert accuracy > CHANCE + 0.05, f"{algo} ({setting}): {accuracy:.3f}, chance is {CHANCE}"
    assert accuracy >= baseline - TOLERANCE, (
        f"{algo} ({setting}, models {models}, {rounds} rounds): {accuracy:.3f} against {reference}'s {baseline:.3f}"
    )
