"""Does a change leave every method's results as they were? Runs every registered method for two
rounds on digits at each wire precision (fp32, fp16, int8), seed 5, and saves the metrics without
the timings; given a second save, says which runs differ.

    python3 scripts/same_results.py /tmp/before.json            # on the old commit
    python3 scripts/same_results.py /tmp/after.json /tmp/before.json   # on the new one: compare

`--dataset fmnist` runs them on Fashion-MNIST (60 samples per client) instead: the path of a
dataset stored as 8-bit images, which clients keep as bytes.

About a minute on two cores. It is a quick net for refactors (a byte, a rounding or a random
stream that moved shows here), not a substitute for the recipes of docs/RESULTS.md.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from edgefd.algorithms.base import list_methods
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run

CONFIG: dict[str, Any] = dict(dataset="digits", clients=3, rounds=2, seed=5, threads=1, samples_per_client=80)
# the models and lighter settings some methods need on digits (as tests/deploy/light_settings.py)
SETTINGS: dict[str, dict[str, Any]] = {
    "fedcache": dict(params={"knn": "exact"}),
    "fedict": dict(models="fedict_c1"),
    "fedgkt": dict(models="fedict_c1"),
    "fedmd": dict(params={"public_dataset": "digits", "alignment_size": 50}),
    "fedd2s": dict(models="fedd2s_m1", params={"phase_epochs": 1}),
    "fedzkt": dict(
        models="zkt_tiny_a,zkt_tiny_e",
        epochs=1,
        params=dict(global_model="zkt_tiny_global", generator="zkt_generator_mlp", iterations=2, server_batch_size=16),
    ),
}


def without_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if "second" not in k and "share" not in k}
    return value


def metrics_of_every_method(dataset: str) -> dict[str, list[dict[str, Any]]]:
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for method in list_methods():
            for precision in ("fp32", "fp16", "int8"):
                settings = {**CONFIG, **SETTINGS.get(method.name, {})}
                params = dict(settings.pop("params", {}))
                if dataset != "digits":
                    settings.update(dataset=dataset, samples_per_client=60)
                    if "public_dataset" in params:
                        params["public_dataset"] = dataset
                out = Path(folder) / f"{method.name}-{precision}"
                config = SimulationConfig(method.name, **settings, params=params, precision=precision, out=str(out))
                run(config, progress=False)
                lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
                results[f"{method.name}-{precision}"] = [without_timings(line) for line in lines]
                print(f"{method.name:9s} {precision}: done", flush=True)
    return results


def main(argv: list[str]) -> int:
    dataset = "digits"
    if argv[:1] == ["--dataset"] and len(argv) > 1:
        dataset, argv = argv[1], argv[2:]
    if len(argv) not in (1, 2):
        print(__doc__)
        return 2
    results = metrics_of_every_method(dataset)
    Path(argv[0]).write_text(json.dumps(results, indent=1, sort_keys=True))
    if len(argv) == 1:
        return 0
    before = json.loads(Path(argv[1]).read_text())
    differ = sorted(name for name in set(before) | set(results) if before.get(name) != results.get(name))
    print(f"{len(results)} runs; {len(differ)} differ from {argv[1]}" + (f": {', '.join(differ)}" if differ else ""))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
