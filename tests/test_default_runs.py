"""Every registered method's default `edgefd simulate` (as `--models auto` resolves it) finishes on the
bundled data: a user who passes only `--algo` gets a run that ends, with the models the method needs."""

from __future__ import annotations

import json
import math

import pytest

from edgefd.algorithms.base import list_methods
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run

METHODS = [method.name for method in list_methods()]


@pytest.mark.parametrize("algo", METHODS)
def test_default_simulation_finishes(algo, tmp_path):
    defaults = SimulationConfig(algo=algo)
    assert defaults.models == "auto" and defaults.dataset == "digits" and not defaults.params
    config = SimulationConfig(algo=algo, rounds=2, out=str(tmp_path / algo))
    summary = run(config, progress=False)

    lines = [json.loads(line) for line in (tmp_path / algo / "metrics.jsonl").read_text().splitlines()]
    assert [line["round"] for line in lines] == [0, 1, 2]
    assert math.isfinite(summary["final_accuracy"]) and 0.0 <= summary["final_accuracy"] <= 1.0
    family = next(m for m in list_methods() if m.name == algo).models((1, 8, 8))
    names = summary["models"]
    assert len(names) == config.clients
    if family not in ("homo", "hetero"):
        assert set(names.values()) == set(family.split(","))
