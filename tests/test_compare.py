"""`edgefd compare`: the arms differ only in the method, and the table is what their runs gave."""

import json
from dataclasses import replace

import pytest

from edgefd import cli
from edgefd.runtime.build import build
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import unlike_local_note

QUICK = ["--clients", "3", "--rounds", "1", "--samples-per-client", "40"]


def summary_of(folder):
    return json.loads((folder / "summary.json").read_text())


def test_every_arm_runs_the_first_methods_models_and_training_and_the_table_is_theirs(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert cli.main(["compare", "fedavg", "local", *QUICK, "--seeds", "1", "0", "--quiet", "--out", str(out)]) == 0
    printed = capsys.readouterr().out

    summaries = {(algo, seed): summary_of(out / f"{algo}-s{seed}") for algo in ("fedavg", "local") for seed in (0, 1)}
    for seed in (0, 1):
        fedavg, local = summaries[("fedavg", seed)], summaries[("local", seed)]
        assert fedavg["models"] == local["models"]
        assert fedavg["local_training"] == local["local_training"]
        assert local["local_training"]["optimizer_lifecycle"] == "fresh"  # FedAvg's, not Local's own "kept"
        assert fedavg["seed"] == local["seed"] == seed
    for metric in ("best", "final"):
        differences = [
            summaries[("fedavg", seed)][f"{metric}_accuracy"] - summaries[("local", seed)][f"{metric}_accuracy"]
            for seed in (0, 1)
        ]
        points = " / ".join(f"{100 * d:+.2f}" for d in differences)
        mean = 100 * sum(differences) / 2
        assert f"- fedavg - local, {metric} accuracy: {mean:+.2f} (" in printed
        assert f", per seed {points} (" in printed
    table = (out / "compare.md").read_text()
    assert table in printed
    assert "optimiser fresh" in table and "seeds 0, 1" in table


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["compare", "fd"], "two or more different methods"),
        (["compare", "fd", "fd"], "two or more different methods"),
        (["compare", "fd", "local", "--algo", "fedavg"], "--algo: not for compare"),
        (["compare", "fd", "local", "--param", "beta=2"], "--param: not for compare"),
        (["compare", "fd", "local", "--seed", "3"], "--seed: not for compare"),
        (["compare", "fd", "nothing"], "unknown method 'nothing'"),
    ],
)
def test_a_comparison_that_cannot_be_fair_or_run_is_refused_by_name(argv, message, capsys):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_simulate_says_when_a_method_trains_otherwise_than_local():
    config = SimulationConfig(algo="fedcache", clients=3, rounds=1, samples_per_client=40)
    note = unlike_local_note(config, build(config))
    assert note is not None
    assert "models resnet8, resnet16, resnet20 (Local: cnn2)" in note
    assert "optimizer lifecycle fresh (Local: kept)" in note and "edgefd compare fedcache local" in note
    alike = replace(config, models="cnn2", optimizer_lifecycle="kept", batch_order="reshuffle", epochs=1)
    assert unlike_local_note(alike, build(alike)) is None
    local = replace(config, algo="local")
    assert unlike_local_note(local, build(local)) is None


def test_compare_says_the_device_once_and_its_help_has_one_way_to_name_the_methods(tmp_path, capsys):
    """A comparison of 2 methods x 2 seeds printed "device: cpu" four times; its help listed --algo
    (and --seed, --param) beside the ALGO arguments, which it then refuses."""
    out = tmp_path / "cmp"
    assert cli.main(["compare", "fd", "local", *QUICK, "--seeds", "0", "1", "--out", str(out)]) == 0
    assert capsys.readouterr().err.count("device: cpu (--device auto") == 1
    with pytest.raises(SystemExit):
        cli.main(["compare", "--help"])
    shown = capsys.readouterr().out
    assert "ALGO [ALGO ...]" in shown and "--seeds" in shown
    assert "--algo" not in shown and "--param" not in shown and "--seed " not in shown
