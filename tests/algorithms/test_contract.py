"""The contract every registered method keeps on its default path (a sixth method gets it for free):
with its default params and the models `--models auto` gives it, a few rounds on the bundled digits

- stored in label order (every sample of class 0 first, then class 1, ...), split by the default
  Dirichlet partition: the setting in which a "fixed order" that walks the stored order makes every
  mini-batch one class;
- split IID;

end above chance and not more than `TOLERANCE` below the baseline trained the same way on the same
models: Local for methods whose deliverable is each client's own model, FedAvg for methods whose
deliverable is a global model. And none of its honest messages is refused by its own schemas."""

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


def _final_accuracy(setting: str, algo: str, models: str, out) -> float:
    config = SimulationConfig(
        algo=algo, clients=CLIENTS, rounds=ROUNDS, partition=SETTINGS[setting], models=models, out=str(out)
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


_BASELINES: dict[tuple[str, str, str], float] = {}


def _baseline(setting: str, algo: str, models: str, tmp_path_factory) -> float:
    """Each baseline runs once per session, shared by the methods that compare against it."""
    key = (setting, algo, models)
    if key not in _BASELINES:
        _BASELINES[key] = _final_accuracy(setting, algo, models, tmp_path_factory.mktemp(f"{algo}-{setting}"))
    return _BASELINES[key]


KNOWN_FAILURES = {
    # Open defects of the default path that this test found (measured 2026-11-26, 5 clients, 3 rounds;
    # the test runs seed 0; the issue "Trustworthy results" stays open until each is fixed). strict: a fix makes the
    # test pass, which fails the run until the entry is removed.
    ("fedzkt", "iid"): "FedZKT 0.455 / 0.440 / 0.476 vs Local 0.684 / 0.661 / 0.668 (seeds 0 / 1 / 2, the same "
    "zkt_tiny models). Each round's transfer back replaces every device by its copy of the global model F, learnt "
    "on generated data; after 1-3 rounds of 9 local steps F trails the device ensemble (seed 0, round 3: F 0.35, "
    "ensemble 0.80, devices 0.51 before and 0.46 after the transfer back). Spec §11's remedies (student_steps_per_iter "
    "5, n_D 200, server lr 0.1) raise F to 0.66-0.73 but the devices keep little of it: 0.51-0.60 after round 3, "
    "8-15 points short on every seed. Level with Local when local training per round is comparable to the "
    "transfer back (`edgefd reproduce fedzkt`: -0.41); the paper's Fig. 3 shows the same slow start",
}


def _cases():
    for algo in [method.name for method in list_methods()]:
        for setting in SETTINGS:
            reason = KNOWN_FAILURES.get((algo, setting))
            marks = [pytest.mark.xfail(reason=reason, strict=True, raises=AssertionError)] if reason else []
            yield pytest.param(algo, setting, marks=marks, id=f"{algo}-{setting}")


@pytest.mark.parametrize(("algo", "setting"), list(_cases()))
def test_default_path_is_sane(algo, setting, tmp_path_factory):
    method = get_method(algo)
    models = ",".join(dict.fromkeys(simulate.resolve_models("auto", method, (1, 8, 8)).split(",")))
    if models in ("homo", "hetero"):
        models = ",".join(dict.fromkeys(assign_models(models, 3, input_shape=(1, 8, 8))))
    accuracy = _final_accuracy(setting, algo, "auto", tmp_path_factory.mktemp(f"{algo}-{setting}"))
    reference = "fedavg" if method.global_model else "local"
    baseline = _baseline(setting, reference, models, tmp_path_factory)
    assert accuracy > CHANCE + 0.05, f"{algo} ({setting}): {accuracy:.3f}, chance is {CHANCE}"
    assert accuracy >= baseline - TOLERANCE, (
        f"{algo} ({setting}, models {models}): {accuracy:.3f} against {reference}'s {baseline:.3f}"
    )
