"""`edgefd simulate` end to end on digits: outputs, determinism, config file, errors."""

import json

import pytest

from edgefd import cli
from edgefd.runtime.build import build
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run

QUICK = dict(dataset="digits", clients=4, rounds=2, seed=3)


def read_lines(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def without_timing(lines):
    return [{k: v for k, v in line.items() if k != "seconds"} for line in lines]


def test_writes_metrics_summary_and_plot(tmp_path):
    summary = run(SimulationConfig(algo="fd", out=str(tmp_path), **QUICK), progress=False)
    lines = read_lines(tmp_path)
    assert [line["round"] for line in lines] == [0, 1, 2]
    for line in lines:
        assert {"round", "accuracy", "accuracy_std", "bytes_up", "bytes_down", "seconds"} <= line.keys()
    written = json.loads((tmp_path / "summary.json").read_text())
    for key in (
        "algo",
        "dataset",
        "clients",
        "rounds",
        "seed",
        "final_accuracy",
        "best_accuracy",
        "bytes_up_total",
        "bytes_down_total",
        "wall_seconds",
        "config",
    ):
        assert key in written
    assert written["final_accuracy"] == lines[-1]["accuracy"] == summary["final_accuracy"]
    assert written["bytes_up_total"] == sum(line["bytes_up"] for line in lines) > 0
    assert (tmp_path / "curves.png").stat().st_size > 1000


@pytest.mark.parametrize("algo", ["local", "fedavg", "fd"])
def test_same_seed_same_metrics(tmp_path, algo):
    run(SimulationConfig(algo=algo, out=str(tmp_path / "a"), **QUICK), progress=False)
    run(SimulationConfig(algo=algo, out=str(tmp_path / "b"), **QUICK), progress=False)
    assert without_timing(read_lines(tmp_path / "a")) == without_timing(read_lines(tmp_path / "b"))


def test_different_seed_differs(tmp_path):
    run(SimulationConfig(algo="fd", out=str(tmp_path / "a"), **QUICK), progress=False)
    run(SimulationConfig(algo="fd", out=str(tmp_path / "b"), **{**QUICK, "seed": 4}), progress=False)
    assert without_timing(read_lines(tmp_path / "a")) != without_timing(read_lines(tmp_path / "b"))


def test_cli_with_toml_config_and_param_override(tmp_path, capsys):
    config = tmp_path / "run.toml"
    config.write_text('algo = "fd"\ndataset = "digits"\nclients = 3\nrounds = 1\n[params]\nbeta = 0.5\n')
    out = tmp_path / "out"
    code = cli.main(["simulate", "--config", str(config), "--param", "temperature=2", "--out", str(out), "--quiet"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["params"] == {
        "beta": 0.5,
        "temperature": 2.0,
        "exclude_self": False,
        "aggregator": "mean",
        "trim": 0.2,
        "weight_cap": 2.0,
    }
    assert summary["clients"] == 3
    said = capsys.readouterr()
    assert "final accuracy" in said.out and "replacing" not in said.err
    # a second run into the same folder says that it replaces the first
    assert cli.main(["simulate", "--config", str(config), "--out", str(out), "--quiet"]) == 0
    assert f"edgefd simulate: replacing the earlier run in {out} (another --out keeps it)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--algo", "nope"], "unknown method 'nope'"),
        (["--dataset", "cifar10", "--data-root", "{tmp}"], "cifar10"),
        (["--param", "beta"], "expected NAME=VALUE"),
        (["--param", "gamma=1"], "unknown param(s) gamma"),
        (["--param", "beta=abc"], "param beta: expected float"),
        (["--rounds", "0"], "rounds: must be >= 1"),
    ],
)
def test_bad_input_gives_one_clear_error(tmp_path, capsys, argv, message):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert (
        cli.main(["simulate", "--quiet", "--clients", "2", "--rounds", "1", "--out", str(tmp_path / "o")] + argv) == 2
    )
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_report_compares_runs(tmp_path, capsys):
    """Each run by its folder's name (its method added where the name lacks it: "fd fd" repeated it),
    and a note where the runs differ in length."""
    run(SimulationConfig(algo="local", out=str(tmp_path / "local"), **QUICK), progress=False)
    run(SimulationConfig(algo="fd", out=str(tmp_path / "fd"), **QUICK), progress=False)
    run(SimulationConfig(algo="fd", out=str(tmp_path / "longer"), **{**QUICK, "rounds": QUICK["rounds"] + 1}))
    capsys.readouterr()
    plot = tmp_path / "cmp.png"
    assert cli.main(["report", str(tmp_path / "local"), str(tmp_path / "fd"), "--plot", str(plot)]) == 0
    table = capsys.readouterr().out
    rows = [line.split()[0] for line in table.splitlines()[1:3]]
    assert rows == ["local", "fd"] and "differ in length" not in table
    assert plot.stat().st_size > 1000
    assert cli.main(["report", str(tmp_path / "fd"), str(tmp_path / "longer"), "--plot", str(plot)]) == 0
    table = capsys.readouterr().out
    assert "longer (fd)" in table
    assert f"note: these runs differ in length ({QUICK['rounds']}, {QUICK['rounds'] + 1} rounds)" in table
    assert cli.main(["report", str(tmp_path / "missing")]) == 2


def test_report_draws_beside_the_first_run_by_default(tmp_path, capsys, monkeypatch):
    runs = tmp_path / "runs"
    run(SimulationConfig(algo="local", out=str(runs / "local"), **QUICK), progress=False)
    started_in = tmp_path / "checkout"
    started_in.mkdir()
    monkeypatch.chdir(started_in)
    assert cli.main(["report", str(runs / "local")]) == 0
    assert f"plot: {runs / 'report.png'}" in capsys.readouterr().out
    assert (runs / "report.png").stat().st_size > 1000
    assert list(started_in.iterdir()) == []  # nothing left where the command was started


def test_test_fraction_sizes_each_clients_test_split(tmp_path):
    sim = build(
        SimulationConfig(
            dataset="digits", clients=4, partition="iid", models="mlp", test_fraction=0.25, out=str(tmp_path)
        )
    )
    for client in sim.clients.values():
        train, test = len(client.data.train_y), len(client.data.test_y)
        assert abs(test - 0.25 * train) <= 2


def test_names_are_imported_from_edgefd_simulate_only_if_it_defines_them():
    """One import path per name: `edgefd.simulate` defines the command and `run`; the config and the
    build pieces are imported from edgefd.runtime, where they live."""
    import ast
    import subprocess
    from pathlib import Path

    import edgefd.simulate as simulate_module

    root = Path(__file__).resolve().parents[1]
    defined = {
        node.name for node in ast.parse(Path(simulate_module.__file__).read_text()).body if hasattr(node, "name")
    }
    assert set(simulate_module.__all__) <= defined
    files = subprocess.run(
        ["git", "grep", "-l", "from edgefd.simulate import"], cwd=root, capture_output=True, text=True
    )
    wrong = []
    for name in files.stdout.split():
        for line in (root / name).read_text().splitlines():
            if line.strip().startswith("from edgefd.simulate import"):
                imported = [item.split(" as ")[0].strip(" ()") for item in line.split("import", 1)[1].split(",")]
                wrong += [f"{name}: {item}" for item in imported if item and item not in defined]
    assert not wrong, "import these from the module that defines them:\n" + "\n".join(wrong)
