"""benchmarks/poisoning.py runs a clean and an attacked arm under every defence a method has, and
prints what the attack cost each: the command docs/ROBUSTNESS.md's tables come from."""

import importlib.util
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "poisoning.py"


def test_every_defence_of_a_method_is_an_arm_clean_and_attacked():
    command = [sys.executable, str(SCRIPT), "--methods", "fd", "local", "--attacks", "max-in-bounds"]
    command += ["--seeds", "0", "--clients", "3", "--rounds", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "| attack | the paper's | defaults | median | trimmed mean (20%) |" in out  # FD's defences
    assert "| attack | defaults |\n" in out  # Local's: no defence, nothing to poison
    rows = [line for line in out.splitlines() if line.startswith(("| clean |", "| max-in-bounds |"))]
    assert len(rows) == 4
    fd_mean_attacked = float(rows[1].split("|")[2].split("±")[0])
    fd_median_attacked = float(rows[1].split("|")[4].split("±")[0])
    assert fd_median_attacked > fd_mean_attacked  # what the median is for


def test_a_recipes_clean_arms_give_each_defences_cost_at_its_setting():
    """``--recipe`` runs the arms at a reproduction recipe's setting; ``--attacks`` with no attack runs
    the clean arms only, scored over every client. FedAvg has the paper's unbounded mean beside its
    default bounds."""
    command = [sys.executable, str(SCRIPT), "--recipe", "dfl-noniid", "--methods", "fedavg", "--attacks"]
    command += ["--seeds", "0", "--rounds", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "fmnist, 20 clients, dominant:0.8, 2 rounds, dfl-noniid's setting" in out
    assert "| attack | the paper's | defaults | median | trimmed mean (20%) |" in out
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert [row.split("|")[1].strip() for row in rows[1:]] == ["clean"]  # the header, then clean alone
    assert "unknown" not in done.stderr


def load_poisoning():
    """benchmarks/poisoning.py as a module (a script of the checkout, not of the package)."""
    spec = importlib.util.spec_from_file_location("poisoning", SCRIPT)
    assert spec is not None and spec.loader is not None
    poisoning = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(poisoning)
    return poisoning


def test_a_method_whose_defaults_are_its_papers_keeps_that_column_without_defaults_asked():
    """FedD2S's defaults are its paper's mean: `--defences paper median` ran its median alone (the
    paper's column collapsed into a defaults column nobody asked for). It now runs the defaults.
    FedMD's default is the median: its paper's column is the mean, and its median its defaults."""
    poisoning = load_poisoning()
    assert poisoning.arms("fedd2s", [], ["paper", "median"]) == [("none", "defaults"), ("none", "median")]
    assert poisoning.arms("fedmd", [], ["paper", "median"]) == [("none", "paper"), ("none", "defaults")]
    assert poisoning.arms("local", [], ["paper", "median"]) == [("none", "defaults")]
    assert poisoning.arms("fedmd", [], ["paper", "defaults"]) == [("none", "paper"), ("none", "defaults")]
    assert poisoning.arms("fedavg", [], ["paper", "median"]) == [("none", "paper"), ("none", "median")]


def test_under_a_recipes_params_a_defence_equal_to_the_methods_defaults_still_runs():
    """The FedCache recipe pins the paper's teacher (aggregator=mean, clip=0): its median with
    clipped rows, the method's defaults, is then a column of its own, not its defaults column
    (which there is the recipe's arm)."""
    poisoning = load_poisoning()
    recipe = {"knn": "exact", "aggregator": "mean", "clip": 0.0}
    assert poisoning.arms("fedcache", [], ["median-clip"]) == [("none", "defaults")]
    assert poisoning.arms("fedcache", [], ["median-clip"], recipe) == [("none", "median-clip")]
    assert poisoning.defence_params("fedcache", "median-clip", recipe) == {"aggregator": "median", "clip": 3.0}
