"""edgefd.results_page and `edgefd reproduce --write-docs / --check-docs`: a generated table carries
the revision that made it, and is stale exactly when the code changed since."""

import subprocess
from pathlib import Path

import pytest

from edgefd import cli, results_page
from edgefd.recipes import RECIPES

PAGE = """# Results

Hand-written prose stays.

<!-- reproduce fedcache: start -->
an old table
<!-- reproduce fedcache: end -->

More prose.
"""


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    """A repository with code (edgefd/) and docs (docs/RESULTS.md), one commit."""
    root = tmp_path / "repo"
    (root / "edgefd").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "edgefd" / "method.py").write_text("BETA = 1.5\n")
    (root / "docs" / "RESULTS.md").write_text(PAGE)
    git(root, "init", "-q")
    git(root, "-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
    git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "one")
    return root


def commit(root: Path, message: str) -> None:
    git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", message)


def test_a_block_is_written_between_its_markers_and_read_back_with_its_stamp(repo):
    page = repo / "docs" / "RESULTS.md"
    revision = results_page.code_revision(repo)
    assert revision == git(repo, "rev-parse", "--short=12", "HEAD")
    text = results_page.block_text(
        "edgefd reproduce fedcache --write-docs", revision, 2, "| a | b |\n|---|---|\n", "GenuineIntel AVX512, torch 9"
    )
    results_page.write_block(page, "fedcache", text)
    content = page.read_text()
    assert "an old table" not in content and "Hand-written prose stays." in content and "More prose." in content
    block = results_page.read_blocks(page)["fedcache"]
    assert (block.command, block.revision, block.threads, block.platform) == (
        "edgefd reproduce fedcache --write-docs",
        revision,
        2,
        "GenuineIntel AVX512, torch 9",
    )
    assert "| a | b |" in block.text


def test_a_table_goes_stale_when_the_code_changes_and_not_when_the_docs_do(repo):
    page = repo / "docs" / "RESULTS.md"
    text = results_page.block_text("cmd", results_page.code_revision(repo), 2, "| table |", "any")
    results_page.write_block(page, "fedcache", text)
    commit(repo, "table")
    block = results_page.read_blocks(page)["fedcache"]
    assert results_page.staleness(repo, block) is None

    page.write_text(page.read_text() + "\nA note.\n")
    commit(repo, "docs only")
    assert results_page.staleness(repo, block) is None

    (repo / "edgefd" / "method.py").write_text("BETA = 2.0\n")
    assert results_page.code_revision(repo).endswith(results_page.UNCOMMITTED)
    commit(repo, "code")
    assert results_page.staleness(repo, block) == (
        f"the code changed since {block.revision}: 1 file(s), e.g. edgefd/method.py"
    )


def test_tables_that_cannot_be_current(repo):
    page = repo / "docs" / "RESULTS.md"
    assert results_page.staleness(repo, None) == "no generated table in the page"
    assert results_page.staleness(repo, results_page.read_blocks(page)["fedcache"]) == "its block has no stamp"
    dirty = results_page.read_blocks(page)["fedcache"].__class__("x", "cmd", "abc+uncommitted", 2, "")
    assert results_page.staleness(repo, dirty).startswith("made from uncommitted code")
    gone = dirty.__class__("x", "cmd", "0123456789ab", 2, "")
    assert results_page.staleness(repo, gone) == "revision 0123456789ab is not in this repository"


def test_a_page_without_the_recipes_markers_is_refused_before_anything_runs(tmp_path, capsys):
    page = tmp_path / "RESULTS.md"
    page.write_text("# Results\n")
    assert cli.main(["reproduce", "fedcache", "--write-docs", str(page), "--out", str(tmp_path / "runs")]) == 2
    assert "needs one pair of markers for fedcache" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    page.write_text(PAGE)
    assert cli.main(["reproduce", "fedcache", "--write-docs", str(page), "--rounds", "1"]) == 2
    assert "drop --rounds" in capsys.readouterr().err


def test_check_docs_names_every_recipe_and_fails_on_a_stale_one(repo, capsys):
    page = repo / "docs" / "RESULTS.md"
    assert cli.main(["reproduce", "--check-docs", str(page)]) == 1
    out = capsys.readouterr().out
    assert "fedcache             stale: its block has no stamp" in out
    assert f"{len(RECIPES)} of {len(RECIPES)} tables in {page} are stale" in out
    assert cli.main(["reproduce"]) == 2
    assert "give a RECIPE (or --check-docs)" in capsys.readouterr().err


def test_check_docs_judges_a_table_with_a_record_by_the_files_its_runs_depend_on(repo, capsys):
    """A table written with its record (RESULTS.code.json) is stale when a file its runs depend on
    changed, not when any code did; the others keep the revision rule."""
    from edgefd.reproduce.code_record import records_path, table_record, write_record

    page = repo / "docs" / "RESULTS.md"
    text = results_page.block_text("cmd", results_page.code_revision(repo), 1, "| table |", "any")
    results_page.write_block(page, "fedcache", text)
    method = repo / "edgefd" / "method.py"
    (repo / "edgefd" / "simulate.py").write_text("from edgefd import method  # noqa: F401\n")  # where runs start
    record = table_record(RECIPES["fedcache"], repo / "edgefd")
    assert set(record["files"]) == {"edgefd/simulate.py", "edgefd/method.py"}
    write_record(page, "fedcache", record)
    assert records_path(page) == repo / "docs" / "RESULTS.code.json"
    (repo / "edgefd" / "other.py").write_text("UNRELATED = 1\n")
    git(repo, "add", ".")
    commit(repo, "a table, its record and other code")
    cli.main(["reproduce", "--check-docs", str(page)])
    out = capsys.readouterr().out
    assert "fedcache             current" in out
    assert f"{len(RECIPES) - 1} of {len(RECIPES)} tables in {page} are stale" in out

    method.write_text('"""A docstring."""\n\nBETA = 1.5  # a comment\n')
    cli.main(["reproduce", "--check-docs", str(page)])
    assert "fedcache             current" in capsys.readouterr().out
    method.write_text("BETA = 2.0\n")
    cli.main(["reproduce", "--check-docs", str(page)])
    assert "fedcache             stale: 1 file(s) it depends on changed, e.g. edgefd/method.py" in (
        capsys.readouterr().out
    )
