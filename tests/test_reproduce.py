"""`edgefd reproduce`: the table is computed from the runs it made."""

from edgefd import reproduce
from edgefd.reproduce import Arm, Recipe, bytes_to_reach, run_recipe
from edgefd.simulate import SimulationConfig


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
    assert "fedcache" in reproduce.RECIPES


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
