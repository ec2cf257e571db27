"""Is docs/RESULTS.md what this code produces? `edgefd reproduce --verify` runs a recipe again and
names every per-seed value the page does not hold (exactly on the page's numeric platform, within a
tolerance on another); `--check-docs` names the tables whose recipe or code changed since they were made."""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path

from edgefd import results_page
from edgefd.recipes import RECIPES, Recipe
from edgefd.reproduce.code_record import read_records, record_staleness
from edgefd.reproduce.runs import run_recipe
from edgefd.reproduce.table import read_per_seed
from edgefd.reproduce_ray import Cluster

CROSS_PLATFORM_POINTS = 2.0
"""On a machine of another numeric platform (`results_page.numeric_platform`) than the page's, a value
counts as the page's when it is within this many points of it, or within twice the spread (standard
deviation) of the page's seeds for that arm and metric where that is wider: rounding differences grow
over a run's rounds into differences of the size of a change of seed, never into a new result."""


def verify(recipe: Recipe, page: Path, seeds: tuple[int, ...], out: Path, cluster: Cluster | None = None) -> list[str]:
    """Runs ``recipe`` again at ``seeds`` (afresh, with the thread count its table in ``page`` names,
    as Ray tasks with ``cluster``) and returns every per-seed value that differs from the page's, as
    lines; none: the page holds what this code produces. On the page's numeric platform every value
    must be the page's exactly; on another, within `cross_platform_tolerance` (`verify_rule` says which)."""
    block = results_page.read_blocks(page).get(recipe.name)
    if block is None or block.revision == "none":
        return [f"{page} has no generated table for {recipe.name}"]
    expected = read_per_seed(block.text)
    missing = [seed for seed in seeds if not any(key[2] == seed for key in expected)]
    if missing:
        return [f"{page}'s table for {recipe.name} has no seed {', '.join(map(str, missing))}"]
    actual = read_per_seed(run_recipe(recipe, out, seeds, rerun=True, threads=block.threads, cluster=cluster))
    exact = block.platform == results_page.numeric_platform()
    differences = []
    for (label, metric, seed), value in actual.items():
        wanted = expected.get((label, metric, seed))
        if wanted == value:
            continue
        if not exact and wanted is not None:
            allowed = cross_platform_tolerance(expected, label, metric)
            try:
                if abs(float(value) - float(wanted)) <= allowed:
                    continue
            except ValueError:  # not a number ("not reached"): only the same text is the same
                pass
            differences.append(
                f"{label}, {metric}, seed {seed}: the page says {wanted}, this code gives {value} "
                f"(more than {allowed:.2f} points apart)"
            )
            continue
        differences.append(
            f"{label}, {metric}, seed {seed}: the page says {wanted or 'nothing'}, this code gives {value}"
        )
    return differences


def cross_platform_tolerance(expected: dict[tuple[str, str, int], str], label: str, metric: str) -> float:
    """How far a value of ``label``'s ``metric`` may be from the page's on another numeric platform:
    `CROSS_PLATFORM_POINTS`, or twice the standard deviation of the page's seeds where wider."""
    values = []
    for (arm, name, _), value in expected.items():
        if (arm, name) == (label, metric):
            try:
                values.append(float(value))
            except ValueError:
                pass
    spread = 2 * statistics.stdev(values) if len(values) > 1 else 0.0
    return max(CROSS_PLATFORM_POINTS, spread)


def verify_rule(recipe: Recipe, page: Path) -> str:
    """How `verify` compares ``recipe``'s values with ``page``'s on this machine, in words."""
    block = results_page.read_blocks(page).get(recipe.name)
    here = results_page.numeric_platform()
    if block is None or block.platform == here:
        return f"this machine ({here}) is the page's numeric platform: every value must be the page's exactly"
    made_on = f"on {block.platform}" if block.platform else "on a platform it does not record"
    return (
        f"the page's table was made {made_on}, this machine is {here}: values are compared within "
        f"{CROSS_PLATFORM_POINTS:g} points or twice the page's seed spread (docs/REPRODUCIBILITY.md)"
    )


def check_docs(page: Path) -> int:
    """One line per recipe: its table in ``page`` is current or why it is stale; 1 if any is stale.
    A table with a record (``page``'s code.json, written with the table) is stale when its recipe or
    a file it depends on (its runs' or the code that makes it) changed; one without, when any code
    changed since its revision."""
    root = Path(_git_toplevel(page.resolve().parent) or page.resolve().parent)
    blocks = results_page.read_blocks(page)
    records = read_records(page)
    stale = 0
    for name in sorted(RECIPES):
        block = blocks.get(name)
        if block is not None and block.revision != "none" and name in records:
            why = record_staleness(records[name], RECIPES[name], root / "edgefd")
        else:
            why = results_page.staleness(root, block)
        stale += why is not None
        revision = blocks[name].revision if name in blocks else "-"
        print(f"{name:<20} {'stale: ' + why if why else 'current'} (revision {revision})")
    print(f"{stale} of {len(RECIPES)} tables in {page} are stale" if stale else f"every table in {page} is current")
    return 1 if stale else 0


def _git_toplevel(folder: Path) -> str | None:
    done = subprocess.run(["git", "-C", str(folder), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None
