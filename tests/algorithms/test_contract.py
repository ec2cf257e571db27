"""The contract every registered method keeps on its default path (a sixth method gets it for free):
with its default params and the models `--models auto` gives it, a few rounds on the bundled digits

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
from edgefd.algorithms.base import MethodSpec, get_method, list_methods, make_params
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


def _final_accuracy(setting: str, algo: str, models: str, out, **training: Any) -> float:
    config = SimulationConfig(
        algo=algo, clients=CLIENTS, rounds=ROUNDS, partition=SETTINGS[setting], models=models, out=str(out), **training
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
    defaults, no weight decay, at the run's lr; spec §9-13). Not matched: FedICT's and FedGKT's
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


_FEDD2S_SLOW_START = (
    "FedD2S {} {} against Local {} (seeds 0 / 1 / 2; Local with FedD2S's local training: Adam without "
    "weight decay made anew every round, 4 epochs a round). Alg. 1's first participation uploads features "
    "of the untrained common init and trains nothing, edgefd's round loop applies a client's phase B at its "
    "next participation (one round later than the paper evaluates), and the KD step pulls the clients "
    "towards a global model still learning from them: -2 to -28 points at 3 rounds, -1 to -22 at 6, within "
    "5.1 at 10 (docs/METHODS.md). Until 2026-11-26 the test passed against a Local trained with the run's "
    "SGD, which barely trains fedd2s_m1 here"
)
KNOWN_GAP_LIMIT = 0.30
"""How far a known failure may trail its baseline (the worst measured, FedD2S's 28 points on seed 2,
plus a margin): further is a new regression, not the known defect."""
KNOWN_FAILURES = {
    # Open defects of the default path that this test found (5 clients, 3 rounds; the test runs
    # seed 0; the issue "Trustworthy results" stays open until each is fixed). Only the comparison
    # with the baseline is excused: the chance and schema checks still fail the test, and a fix
    # fails it too until the entry is removed.
    ("fedd2s", "iid"): _FEDD2S_SLOW_START.format("IID", "0.568 / 0.714 / 0.492", "0.791 / 0.735 / 0.772"),
    ("fedd2s", "label-ordered"): _FEDD2S_SLOW_START.format(
        "label-ordered", "0.673 / 0.808 / 0.724", "0.892 / 0.863 / 0.816"
    ),
}


@pytest.mark.parametrize(("algo", "setting"), [(m.name, s) for m in list_methods() for s in SETTINGS])
def test_default_path_is_sane(algo, setting, tmp_path_factory):
    method = get_method(algo)
    models = ",".join(dict.fromkeys(simulate.resolve_models("auto", method, (1, 8, 8)).split(",")))
    if models in ("homo", "hetero"):
        models = ",".join(dict.fromkeys(assign_models(models, 3, input_shape=(1, 8, 8))))
    accuracy = _final_accuracy(setting, algo, "auto", tmp_path_factory.mktemp(f"{algo}-{setting}"))
    reference = "fedavg" if method.global_model else "local"
    baseline = _baseline(setting, reference, models, baseline_training(method), tmp_path_factory)
    assert accuracy > CHANCE + 0.05, f"{algo} ({setting}): {accuracy:.3f}, chance is {CHANCE}"
    sane = accuracy >= baseline - TOLERANCE
    known = KNOWN_FAILURES.get((algo, setting))
    if known and not sane:
        assert accuracy >= baseline - KNOWN_GAP_LIMIT, (
            f"{algo} ({setting}): {accuracy:.3f} against {reference}'s {baseline:.3f}, worse than its known failure"
        )
        pytest.xfail(f"{accuracy:.3f} against {reference}'s {baseline:.3f}: {known}")
    assert sane, f"{algo} ({setting}, models {models}): {accuracy:.3f} against {reference}'s {baseline:.3f}"
    assert not known, f"{algo} ({setting}) is sane now ({accuracy:.3f} vs {baseline:.3f}): remove its known failure"
