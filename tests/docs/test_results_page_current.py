"""docs/RESULTS.md holds what the code produces: one cheap recipe run again at one seed must give the
page's per-seed numbers, and every table on the page is the code's, with a place for every recipe."""

from __future__ import annotations

import re
from pathlib import Path

from edgefd import results_page
from edgefd.recipes import RECIPES
from edgefd.reproduce.verify import verify

PAGE = Path(__file__).resolve().parents[2] / "docs" / "RESULTS.md"
CHECKED = "fedict-watch"
"""About 30 s for its six arms at seed 0 on one thread: the cheapest recipe with real data and claims."""


def test_a_cheap_recipe_run_again_gives_the_pages_numbers(tmp_path):
    """Exactly on the table's numeric platform, within the stated tolerance on another
    (docs/REPRODUCIBILITY.md): CI never fails for running on another CPU."""
    assert results_page.read_blocks(PAGE)[CHECKED].platform is not None, "the table names the platform it ran on"
    differences = verify(RECIPES[CHECKED], PAGE, (0,), tmp_path)
    assert differences == [], (
        f"docs/RESULTS.md's {CHECKED} table is not what this code produces; run "
        f"`edgefd reproduce {CHECKED} --write-docs` (and the other recipes whose numbers moved):\n"
        + "\n".join(differences)
    )


def test_every_recipe_has_one_place_on_the_page():
    for name in RECIPES:
        results_page.check_markers(PAGE, name)


def test_no_verdict_is_typed_outside_the_generated_tables():
    blocks = re.sub(
        r"<!-- reproduce ([\w.-]+): start -->.*?<!-- reproduce \1: end -->", "", PAGE.read_text(), flags=re.S
    )
    typed = [
        line
        for line in blocks.splitlines()
        if re.search(r"\*\*(reproduced|not reproduced|opposite|no difference|inconclusive)\*\*", line)
    ]
    assert typed == [], "a verdict belongs to the generated tables (edgefd/claims.py), not to the prose:\n" + "\n".join(
        typed
    )


def test_every_table_written_with_a_record_is_current():
    """`edgefd reproduce --check-docs`'s rule for the tables that carry a record (docs/RESULTS.code.json):
    none may be stale, i.e. no file its runs depend on and no recipe changed since it was written.
    The tables written before records were kept are judged by their revision and are being
    written again (the page's "Is a table current?")."""
    from edgefd.reproduce.code_record import read_records, record_staleness

    records = read_records(PAGE)
    assert CHECKED in records, f"{CHECKED}'s table carries its record"
    root = PAGE.parents[1]
    stale = {
        name: "no such recipe" if name not in RECIPES else why
        for name, record in records.items()
        if name not in RECIPES or (why := record_staleness(record, RECIPES[name], root / "edgefd"))
    }
    assert stale == {}, f"tables whose code or recipe changed since they were written (run --write-docs): {stale}"
