"""`edgefd reproduce`: the table is computed from the runs it made."""

import json
import statistics
from dataclasses import asdict, replace

import pytest

from edgefd import results_page
from edgefd.recipes import RECIPES, Arm, Recipe
from edgefd.reproduce.runs import changed_params, run_recipe
from edgefd.reproduce.table import (
    arm_settings,
    bytes_to_reach,
    command_text,
    read_per_seed,
    rounds_to_reach,
    settings_text,
)
from edgefd.reproduce.verify import CROSS_PLATFORM_POINTS, cross_platform_tolerance, verify, verify_rule
from edgefd.runtime.build import local_training_of
from edgefd.runtime.config import SimulationConfig


def test_bytes_to_reach_counts_cumulative_bytes_at_the_first_round_at_target():
    lines = [
        {"accuracy": 0.1, "bytes_up_cumulative": 5, "bytes_down_cumulative": 0},
        {"accuracy": 0.7, "bytes_up_cumulative": 10, "bytes_down_cumulative": 4},
        {"accuracy": 0.9, "bytes_up_cumulative": 20, "bytes_down_cumulative": 8},
    ]
    assert bytes_to_reach(lines, 0.6) == 14
    assert bytes_to_reach(lines, 0.95) is None


def test_a_tiny_recipe_writes_its_table(tmp_path):
    recipe = Recipe(
        "tiny",
        "test",
        SimulationConfig(dataset="digits", clients=3, rounds=1, models="mlp"),
        [Arm("Local", "local"), Arm("FD", "fd")],
        target_from=["FD"],
        seeds=(0,),
    )
    table = run_recipe(recipe, tmp_path, recipe.seeds)
    assert (tmp_path / "tiny" / "results.md").read_text() == table
    assert "| Local |" in table and "| FD |" in table
    assert (tmp_path / "tiny" / "fd-s0" / "summary.json").is_file()
    assert "fedcache" in RECIPES


def test_the_table_names_what_the_arms_share_and_where_they_differ(tmp_path):
    base = SimulationConfig(dataset="digits", clients=3, rounds=1, models="mlp", samples_per_client=30)
    arms = [Arm("Local", "local"), Arm("FedAvg", "fedavg")]
    unfair = run_recipe(Recipe("unfair", "test", base, arms, target_from=["Local"], seeds=(0,)), tmp_path, (0,))
    assert "Common to all arms: dataset digits, clients 3, rounds 1," in unfair
    assert "batch_size 32" in unfair and "models mlp" in unfair
    # each method's own optimiser lifecycle: Local keeps its optimiser, FedAvg's code makes one per round
    assert "Differences between arms: Local: optimizer_lifecycle kept; FedAvg: optimizer_lifecycle fresh." in unfair

    fair = replace(base, optimizer_lifecycle="fresh", batch_order="fixed", score_full_test=True)
    table = run_recipe(Recipe("fair", "test", fair, arms, target_from=["Local"], seeds=(0,)), tmp_path, (0,))
    assert "optimizer_lifecycle fresh, batch_order fixed" in table
    assert "The arms differ only in the method and its params." in table
    assert "| best % whole test set | final % whole test set |" in table
    rows = [line for line in table.splitlines() if line.startswith("| Local |") or line.startswith("| method |")]
    assert len(rows[1].split("|")) == len(rows[0].split("|"))  # a full row under the main table's header


def test_every_recipe_gives_all_its_arms_one_optimiser_lifecycle_batch_order_and_epochs():
    for recipe in RECIPES.values():
        assert recipe.base.optimizer_lifecycle in ("fresh", "kept"), recipe.name
        assert recipe.base.batch_order in ("fixed", "reshuffle"), recipe.name
        # a recipe that leaves --epochs to the methods must not mix papers with different epochs
        epochs = {local_training_of(replace(recipe.base, algo=arm.algo))["epochs"] for arm in recipe.arms}
        assert len(epochs) == 1, (recipe.name, epochs)


def test_the_table_names_a_difference_in_local_epochs():
    base = SimulationConfig(dataset="digits", clients=3, rounds=1, models="mlp", samples_per_client=30)
    summaries = {
        label: {"config": asdict(replace(base, algo=algo)), "models": {"client-0": "mlp"}}
        | {"local_training": local_training_of(replace(base, algo=algo))}
        for label, algo in (("FedAvg", "fedavg"), ("DFL", "dfl"))
    }
    lines = settings_text({label: arm_settings(s) for label, s in summaries.items()})
    assert "Differences between arms: FedAvg: epochs 1; DFL: epochs 5." in lines


def test_arms_of_one_recipe_never_share_a_run_folder():
    import pytest

    with pytest.raises(ValueError, match=r"share the run folder\(s\) \['fedict'\]"):
        Recipe(
            "x",
            "test",
            SimulationConfig(),
            [Arm("a", "fedict"), Arm("b", "fedict", {"lka": "balanced"})],
            target_from=["a"],
        )


def test_an_isolated_recipe_runs_each_arm_in_its_own_process_and_reports_memory_and_rounds(tmp_path):
    base = SimulationConfig(dataset="digits", clients=2, rounds=2, models="mlp", samples_per_client=30, threads=1)
    recipe = Recipe("iso", "test", base, [Arm("Local", "local"), Arm("FD", "fd")], ["FD"], seeds=(0,), isolated=True)
    table = run_recipe(recipe, tmp_path, recipe.seeds)
    assert "| start-up s | s / round | peak memory MiB |" in table
    assert (tmp_path / "iso" / "fd-s0" / "run.toml").is_file()  # the config the process ran
    summary = json.loads((tmp_path / "iso" / "fd-s0" / "summary.json").read_text())
    assert 50 < summary["peak_rss_mb"] < 4096 and summary["startup_seconds"] >= 0
    assert "Mean client accuracy (%) after every round" in table
    assert "| round | Local | FD |" in table and "\n| 2 | " in table


def test_a_finished_run_of_the_same_config_is_kept_and_a_changed_one_is_run_again(tmp_path, capsys):
    base = SimulationConfig(dataset="digits", clients=2, rounds=1, models="mlp", samples_per_client=30, threads=1)
    recipe = Recipe("again", "test", base, [Arm("Local", "local")], ["Local"], seeds=(0,))
    first = run_recipe(recipe, tmp_path, (0,))
    metrics = tmp_path / "again" / "local-s0" / "metrics.jsonl"
    written = metrics.stat().st_mtime_ns
    assert run_recipe(recipe, tmp_path, (0,)) == first  # kept: the same table from the same run
    assert metrics.stat().st_mtime_ns == written
    assert "kept the finished run" in capsys.readouterr().out

    run_recipe(recipe, tmp_path, (0,), rerun=True)
    assert metrics.stat().st_mtime_ns > written
    rerun = metrics.stat().st_mtime_ns
    run_recipe(recipe, tmp_path, (0,), rounds=2)  # another config: run again, never the old summary
    assert metrics.stat().st_mtime_ns > rerun
    assert len(metrics.read_text().splitlines()) == 3  # rounds 0, 1 and 2


def test_a_finished_run_is_kept_only_while_the_code_it_depends_on_is_unchanged(tmp_path, capsys):
    from edgefd.reproduce.code_record import code_record

    base = SimulationConfig(dataset="digits", clients=2, rounds=1, models="mlp", samples_per_client=30, threads=1)
    recipe = Recipe("code", "test", base, [Arm("FD", "fd")], ["FD"], seeds=(0,))
    run_recipe(recipe, tmp_path, (0,))
    recorded = tmp_path / "code" / "fd-s0" / "code.json"
    assert json.loads(recorded.read_text()) == code_record(["fd"])
    capsys.readouterr()
    run_recipe(recipe, tmp_path, (0,))
    assert "kept the finished run" in capsys.readouterr().out

    record = json.loads(recorded.read_text())
    record["edgefd/algorithms/fd.py"] = "made by other code"
    recorded.write_text(json.dumps(record))
    run_recipe(recipe, tmp_path, (0,))
    said = capsys.readouterr().out
    assert "the code it depends on changed since (1 file(s), e.g. edgefd/algorithms/fd.py): running it again" in said
    assert json.loads(recorded.read_text()) == code_record(["fd"])  # the new run's

    record = json.loads(recorded.read_text())
    del record["edgefd/runtime/loop.py"]  # as if the run was made before the code imported it
    recorded.write_text(json.dumps(record))
    run_recipe(recipe, tmp_path, (0,))
    said = capsys.readouterr().out
    assert "the code it depends on changed since (1 file(s), e.g. edgefd/runtime/loop.py): running it again" in said

    recorded.unlink()
    run_recipe(recipe, tmp_path, (0,))
    assert "no code.json (a run made before runs recorded their code): running it again" in capsys.readouterr().out


def test_the_command_line_names_every_option_that_moved_the_table_off_the_recipe(tmp_path):
    base = SimulationConfig(dataset="digits", clients=2, rounds=1, models="mlp", samples_per_client=30, threads=2)
    recipe = Recipe("cmd", "test", base, [Arm("Local", "local")], ["Local"], seeds=(0, 1))
    assert command_text(recipe, (0, 1), None, None) == "edgefd reproduce cmd"
    assert command_text(recipe, (0, 1), 1, 2) == "edgefd reproduce cmd"  # the recipe's own values
    table = run_recipe(recipe, tmp_path, (0,), threads=1)
    assert "Command: `edgefd reproduce cmd --seeds 0 --threads 1`." in table
    assert "threads = 1" in (tmp_path / "cmd" / "local-s0" / "run.toml").read_text()
    assert "threads" not in table.split("Common to all arms:")[1].split("\n")[0]  # not part of the setting


def test_reproduce_refuses_a_thread_count_below_one(capsys):
    from edgefd.cli import main

    assert main(["reproduce", "fedcache", "--threads", "0"]) == 2
    assert "--threads must be >= 1, got 0" in capsys.readouterr().err


def test_the_old_spelling_of_parallel_is_an_error_that_names_the_new_one(capsys):
    """--parallel is the runs at a time; --workers (its old name) is simulate's Ray actors."""
    from edgefd.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["reproduce", "fedcache", "--backend", "ray", "--workers", "2"])
    assert exited.value.code == 2
    assert "--workers is now --parallel N: the runs at a time" in capsys.readouterr().err
    assert main(["reproduce", "fedcache", "--parallel", "0", "--backend", "ray"]) == 2
    assert "--parallel must be >= 1, got 0" in capsys.readouterr().err


def test_an_adam_recipe_does_not_list_sgds_momentum_among_its_settings():
    summary = {
        "config": {"dataset": "digits", "optimizer": "adam", "momentum": 0.9, "lr": 0.01},
        "models": {"client-0": "mlp"},
        "local_training": {"optimizer_lifecycle": "fresh", "batch_order": "reshuffle"},
    }
    assert "momentum" not in arm_settings(summary)
    assert arm_settings({**summary, "config": {**summary["config"], "optimizer": "sgd"}})["momentum"] == "0.9"


def test_a_finished_run_made_under_other_method_defaults_is_run_again(tmp_path, capsys):
    """The run.toml names only the params a recipe pins: a default changed since the run must not
    keep a run the current code would not make."""
    base = SimulationConfig(dataset="digits", clients=2, rounds=1, models="mlp", samples_per_client=30, threads=1)
    recipe = Recipe("defaults", "test", base, [Arm("FD", "fd")], ["FD"], seeds=(0,))
    run_recipe(recipe, tmp_path, (0,))
    summary_file = tmp_path / "defaults" / "fd-s0" / "summary.json"
    summary = json.loads(summary_file.read_text())
    assert changed_params(summary, replace(base, algo="fd")) == []
    name = next(name for name, value in summary["params"].items() if isinstance(value, float))
    summary["params"][name] += 1.0  # as if the run was made when this param's default was another
    summary_file.write_text(json.dumps(summary))
    written = summary_file.stat().st_mtime_ns

    run_recipe(recipe, tmp_path, (0,))
    assert f"params changed since this run ({name}): running it again" in capsys.readouterr().out
    assert summary_file.stat().st_mtime_ns > written
    assert json.loads(summary_file.read_text())["params"][name] == summary["params"][name] - 1.0


def test_a_finished_run_made_under_other_local_training_defaults_is_run_again(tmp_path, capsys):
    """A recipe that leaves --epochs to the method: a method whose paper's epochs changed since the
    run must not keep it; a summary from before epochs were recorded is kept (its run.toml named them)."""
    base = SimulationConfig(dataset="digits", clients=2, rounds=1, models="mlp", samples_per_client=30, threads=1)
    recipe = Recipe("epochs", "test", base, [Arm("FD", "fd")], ["FD"], seeds=(0,))
    run_recipe(recipe, tmp_path, (0,))
    summary_file = tmp_path / "epochs" / "fd-s0" / "summary.json"
    summary = json.loads(summary_file.read_text())
    assert summary["local_training"]["epochs"] == 1
    del summary["local_training"]["epochs"]
    summary_file.write_text(json.dumps(summary))
    written = summary_file.stat().st_mtime_ns
    capsys.readouterr()
    run_recipe(recipe, tmp_path, (0,))
    assert "running it again" not in capsys.readouterr().out
    assert summary_file.stat().st_mtime_ns == written  # kept

    summary["local_training"]["epochs"] = 3  # as if FD's paper had said 3 when the run was made
    summary_file.write_text(json.dumps(summary))
    written = summary_file.stat().st_mtime_ns
    run_recipe(recipe, tmp_path, (0,))
    assert "local training changed since this run (epochs): running it again" in capsys.readouterr().out
    assert summary_file.stat().st_mtime_ns > written


def test_a_recipe_ends_with_each_claims_verdict_computed_from_its_runs(tmp_path):
    from edgefd.claims import Claim, judge

    claim = Claim("FD", "above", "Local", "final", "a test's claim")
    recipe = Recipe(
        "claimed",
        "test",
        SimulationConfig(dataset="digits", clients=3, rounds=1, models="mlp", samples_per_client=40),
        [Arm("Local", "local"), Arm("FD", "fd")],
        target_from=["FD"],
        seeds=(0, 1),
        claims=[claim],
    )
    table = run_recipe(recipe, tmp_path, recipe.seeds)

    def run_of(folder):
        return json.loads((tmp_path / "claimed" / folder / "summary.json").read_text()), []

    runs = {label: {seed: run_of(f"{label.lower()}-s{seed}") for seed in (0, 1)} for label in ("Local", "FD")}
    test_split = runs["FD"][0][0]["test_samples"]
    assert sorted(test_split) == ["client-0", "client-1", "client-2"] and all(n > 0 for n in test_split.values())
    verdict = judge(claim, runs)
    row = (
        f"| FD above Local | a test's claim | final accuracy | {verdict.difference_text()} | "
        f"{100 * verdict.floor:.2f} | **{verdict.outcome}** | {verdict.per_seed_text()} | no Local arm | - |"
    )
    assert row in table


def claims_runs(differences_by_arm, reference=0.80):
    """Synthetic runs: arm -> its paired differences to "FedAvg", seed by seed (10 clients of 1,000 images)."""
    sizes = {f"c{k}": 1000 for k in range(10)}

    def run(value):
        return {"best_accuracy": value, "final_accuracy": value, "test_samples": sizes}, []

    seeds = range(len(next(iter(differences_by_arm.values()))))
    runs = {"FedAvg": {seed: run(reference) for seed in seeds}}
    for arm, differences in differences_by_arm.items():
        runs[arm] = {seed: run(reference + d) for seed, d in zip(seeds, differences)}
    return runs


def test_every_claim_shows_local_in_its_place_and_says_when_local_alone_passes():
    from edgefd.claims import Claim
    from edgefd.reproduce.table import claims_table

    recipe = Recipe(
        "controlled",
        "test",
        SimulationConfig(),
        [Arm("Local", "local"), Arm("FD", "fd"), Arm("FedX", "fd", folder="fedx"), Arm("FedAvg", "fedavg")],
        target_from=["FedAvg"],
        claims=[Claim("FedX", "above", "FedAvg", "best", "FedX, Table 1")],
    )
    gain = [0.05, 0.06, 0.04, 0.05, 0.055]
    text = "\n".join(claims_table(recipe, claims_runs({"FedX": gain, "Local": gain, "FD": [0.0] * 5})))
    assert "| FedX above FedAvg | FedX, Table 1 | best accuracy (MAUA) | +5.10 (" in text
    assert "| **reproduced** |" in text and text.count("reproduced") == 2  # the claim and its control
    assert "- FedX above FedAvg: Local alone passes the same test." in text
    assert "below Local" not in text  # said once, by the control

    text = "\n".join(claims_table(recipe, claims_runs({"FedX": gain, "Local": [0.0] * 5, "FD": gain})))
    assert "Local alone" not in text and "| no difference |" in text  # the control ties with FedAvg
    assert "- FedX above FedAvg: the baseline FedAvg is below FD here." in text

    below = replace(recipe, claims=[Claim("FedAvg", "below", "FedX", "best", "FedX, Table 2")])
    text = "\n".join(claims_table(below, claims_runs({"FedX": gain, "Local": gain, "FD": gain})))
    assert "| no control (a below claim) | - |" in text and "Local alone" not in text


def test_a_sweeps_weak_baseline_is_named_at_its_point():
    from edgefd.claims import Claim
    from edgefd.reproduce.table import claims_table

    recipe = Recipe(
        "swept",
        "test",
        SimulationConfig(),
        [Arm("FedX (a 1)", "fd", folder="x"), Arm("FD (a 1)", "fd", folder="fd"), Arm("FedAvg (a 1)", "fedavg")],
        target_from=["FedAvg (a 1)"],
        claims=[Claim("FedX (a 1)", "above", "FedAvg (a 1)", "best", "FedX, Table 1")],
    )
    gain = [0.05, 0.06, 0.04, 0.05, 0.055]
    runs = claims_runs({"FedX (a 1)": gain, "FD (a 1)": gain})
    runs["FedAvg (a 1)"] = runs.pop("FedAvg")
    text = "\n".join(claims_table(recipe, runs))
    assert "- FedX (a 1) above FedAvg (a 1): the baseline FedAvg (a 1) is below FD (a 1) here." in text


def test_a_claim_must_name_arms_of_its_recipe():
    import pytest

    from edgefd.claims import Claim

    with pytest.raises(ValueError, match=r"claim 'FedAvg above Local' names no arm \['FedAvg'\]"):
        Recipe(
            "x",
            "test",
            SimulationConfig(),
            [Arm("Local", "local")],
            target_from=["Local"],
            claims=[Claim("FedAvg", "above", "Local", "best", "paper")],
        )


def test_the_papers_claims_name_their_table_or_figure_and_their_recipes_arms():
    import re

    claimed = {name: recipe.claims for name, recipe in RECIPES.items() if recipe.claims}
    assert {"fedcache-fmnist", "fedict-a0.5", "dfl-noniid", "fedd2s", "fedzkt-dir0.5"} <= set(claimed)
    for name, claims in claimed.items():
        labels = {arm.label for arm in RECIPES[name].arms}
        for claim in claims:
            assert {claim.method, claim.baseline} <= labels
            assert re.match(r"(FedCache|FedICT|DFL|FedD2S|FedZKT), (Table|Fig\.) ", claim.source), claim.source
    # FD is no baseline of the FedICT paper: no FedICT claim names it
    assert all("FD" not in (c.method, c.baseline) for c in RECIPES["fedict-a0.5"].claims)


def test_rounds_to_reach_is_the_first_trained_round_at_target():
    lines = [{"round": 0, "accuracy": 0.9}, {"round": 1, "accuracy": 0.5}, {"round": 2, "accuracy": 0.8}]
    assert rounds_to_reach(lines, 0.7) == 2  # round 0 (before training) never counts
    assert rounds_to_reach(lines, 0.95) is None


def test_an_arm_may_move_a_point_of_a_sweep_and_the_table_lists_it_as_a_difference(tmp_path):
    base = SimulationConfig(dataset="digits", clients=3, rounds=1, models="mlp", samples_per_client=30)
    arms = [
        Arm("FD (20)", "fd", folder="fd-20", config={"samples_per_client": 20}),
        Arm("FD (30)", "fd", folder="fd-30"),
    ]
    table = run_recipe(Recipe("sweep", "test", base, arms, target_from=["FD (30)"], seeds=(0,)), tmp_path, (0,))
    assert "Differences between arms: FD (20): samples_per_client 20; FD (30): samples_per_client 30." in table
    config = json.loads((tmp_path / "sweep" / "fd-20-s0" / "summary.json").read_text())["config"]
    assert config["samples_per_client"] == 20
    with pytest.raises(ValueError, match=r"arm 'FD' sets \['seed'\], which an arm cannot move"):
        Recipe("bad", "test", base, [Arm("FD", "fd", config={"seed": 3})], target_from=["FD"])


def test_a_claim_whose_metric_needs_more_rounds_than_ran_is_not_judged(tmp_path):
    from edgefd.claims import Claim

    recipe = Recipe(
        "short",
        "test",
        SimulationConfig(dataset="digits", clients=3, rounds=1, models="mlp", samples_per_client=30),
        [Arm("Local", "local"), Arm("FD", "fd")],
        target_from=["FD"],
        seeds=(0,),
        claims=[Claim("FD", "above", "Local", "last-5-rounds", "a test's claim")],
    )
    table = run_recipe(recipe, tmp_path, (0,))
    judged = "| FD above Local | a test's claim | mean accuracy of the last 5 rounds | not judged: the mean of the last"
    assert judged in table
    assert "| FD | " in table.split("Per seed (0), accuracy %:")[1]  # the per-seed row, its window "-"


def test_verify_reruns_a_recipe_and_names_every_per_seed_value_the_page_does_not_hold(tmp_path):
    recipe = Recipe(
        "checked",
        "test",
        SimulationConfig(dataset="digits", clients=3, rounds=2, models="mlp", samples_per_client=30),
        [Arm("Local", "local"), Arm("FD", "fd")],
        target_from=["FD"],
        seeds=(0, 1),
    )
    page = tmp_path / "RESULTS.md"
    page.write_text(f"# Results\n\n{results_page.start_marker('checked')}\n{results_page.end_marker('checked')}\n")
    assert verify(recipe, page, (0,), tmp_path / "verify") == [f"{page} has no generated table for checked"]

    table = run_recipe(recipe, tmp_path / "runs", recipe.seeds)
    here = results_page.numeric_platform()
    results_page.write_block(
        page, "checked", results_page.block_text("edgefd reproduce checked", "abc", 1, table, here)
    )
    values = read_per_seed(table)
    assert set(values) == {
        (arm, metric, seed)
        for arm in ("Local", "FD")
        for metric in ("best accuracy (MAUA)", "final accuracy")
        for seed in (0, 1)
    }
    assert verify(recipe, page, (1,), tmp_path / "verify") == []  # afresh: the same numbers

    best = values[("FD", "best accuracy (MAUA)", 1)]
    page.write_text(
        page.read_text().replace(
            f"| FD | {values[('FD', 'best accuracy (MAUA)', 0)]} / {best} |",
            f"| FD | {values[('FD', 'best accuracy (MAUA)', 0)]} / 1.00 |",
        )
    )
    assert verify(recipe, page, (1,), tmp_path / "verify") == [
        f"FD, best accuracy (MAUA), seed 1: the page says 1.00, this code gives {best}"
    ]
    assert verify(recipe, page, (7,), tmp_path / "verify") == [f"{page}'s table for checked has no seed 7"]

    # Made on another numeric platform: a value within the rule's tolerance is the page's, one past it is not.
    other = page.read_text().replace(f"on `{here}`", "on `GenuineIntel AVX512, torch 0`")
    near = f"{float(best) + 1.5:.2f}"
    page.write_text(other.replace("/ 1.00 |", f"/ {near} |", 1))
    assert "GenuineIntel AVX512, torch 0" in verify_rule(recipe, page)
    assert verify(recipe, page, (1,), tmp_path / "verify") == []
    far = f"{float(best) + 30:.2f}"
    page.write_text(other.replace("/ 1.00 |", f"/ {far} |", 1))
    (difference,) = verify(recipe, page, (1,), tmp_path / "verify")
    assert difference.startswith(f"FD, best accuracy (MAUA), seed 1: the page says {far}, this code gives {best}")


def test_the_cross_platform_tolerance_is_two_points_or_twice_the_seed_spread():
    tight = {("A", "best", 0): "80.00", ("A", "best", 1): "80.50", ("A", "best", 2): "not reached"}
    assert cross_platform_tolerance(tight, "A", "best") == CROSS_PLATFORM_POINTS
    wide = {("A", "best", 0): "84.60", ("A", "best", 1): "83.11", ("A", "best", 2): "79.80"}
    assert cross_platform_tolerance(wide, "A", "best") == pytest.approx(2 * statistics.stdev([84.60, 83.11, 79.80]))


def test_every_recipe_runs_enough_seeds_for_the_rule():
    from edgefd.claims import MIN_SEEDS

    few = {name: recipe.seeds for name, recipe in RECIPES.items() if len(set(recipe.seeds)) < MIN_SEEDS}
    assert few == {}, f"the rule (edgefd/claims.py) needs at least {MIN_SEEDS} seeds a recipe"


def test_fedmd_pretrains_on_its_public_labels_in_every_recipe():
    """FedMD's transfer step is part of FedMD (its paper's Algorithm 1): no recipe's FedMD arm turns
    it off, so no verdict rests on a FedMD without it."""
    arms = [(name, arm) for name, recipe in RECIPES.items() for arm in recipe.arms if arm.algo == "fedmd"]
    assert arms
    assert [name for name, arm in arms if str(arm.params.get("pretrain_epochs", "none")) == "0"] == []


def test_a_sweeps_control_is_local_at_the_claims_point():
    from edgefd.claims import Claim
    from edgefd.reproduce.table import control_label

    labels = ["FedCache (alpha 1.0)", "FD (alpha 1.0)", "Local (alpha 1.0)", "Local (alpha 3.0)", "Local"]
    assert control_label(Claim("FedCache (alpha 1.0)", "above", "FD (alpha 1.0)", "best", "s"), labels) == (
        "Local (alpha 1.0)"
    )
    assert control_label(Claim("FedCache (R 4)", "above", "FD", "best", "s"), labels) == "Local"
    assert control_label(Claim("FedCache", "above", "Local", "best", "s"), labels) is None  # names Local already
    assert control_label(Claim("FedCache", "above", "FD", "best", "s"), ["FedCache", "FD"]) is None
    # an ablation or a handicap ("below") has no control: Local below the full method says nothing of it
    assert control_label(Claim("FedZKT (p 0.2)", "below", "FedZKT (p 1.0)", "best", "s"), labels) is None


def test_one_pair_of_runs_judged_in_several_tables_is_said_to_be_one_comparison():
    from edgefd.reproduce.table import claims_table, shared_evidence

    said = shared_evidence(RECIPES["fedcache-alpha"])
    assert f"- {said[0]}" in claims_table(RECIPES["fedcache-alpha"], {})
    assert len(said) == 1 and said[0].startswith("FedCache (alpha 1.0) above FD (alpha 1.0) judges the same runs as ")
    assert "fedcache-fmnist's FedCache above FD" in said[0] and "fedcache-r's FedCache (R 16) above FD" in said[0]
    assert shared_evidence(RECIPES["fedict-watch"]) == []


def test_the_choices_a_recipes_verdicts_rest_on_are_printed_under_its_claims():
    from edgefd.reproduce.table import claims_table

    recipe = RECIPES["fedzkt-prox"]
    text = "\n".join(claims_table(recipe, {}))
    assert "Choices these verdicts rest on:" in text
    assert "|D_k| times Eq. 9's literal weight" in text
    assert all(recipe.choices for recipe in RECIPES.values() if recipe.name.startswith(("fedict-a", "fedzkt")))
