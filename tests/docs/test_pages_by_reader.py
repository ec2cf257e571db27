"""docs/ by reader: the pages give the current figures in the present tense; what changed for a user
from one version to the next is the changelog's.

No page carries a run date or a commit id: a page says what the code does and the command that
gives each figure, not the day or the revision it was measured at. The one exception is
docs/RESULTS.md, whose generated tables are stamped with the revision that made them (`edgefd
reproduce --check-docs` reads the stamp). docs/CHANGELOG.md is by release: "## Unreleased", then
"## VERSION - YYYY-MM-DD" for each released version, newest first, none newer than the package's
version. METHODS.md cites the papers and docs/methods/, never the specs, which are not in the
repository.

One part of a page is not scanned: ```json blocks (examples of a tool's output, which may hold any
hex). The block ``scripts/default_runs.py --write`` writes into METHODS.md is scanned like the rest:
it names the machine and the command, not the day or the revision.
"""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

import pytest

import edgefd

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
STAMPED = {"docs/RESULTS.md"}
"""Pages whose generated tables are stamped with the revision that made them."""
USER_PAGES = sorted(
    str(path.relative_to(REPO))
    for pattern in ("README.md", "docs/**/*.md", "benchmarks/*.md", "device/*.md", "export/*.md", "server/*.md")
    for path in REPO.glob(pattern)
)

_JSON_BLOCK = re.compile(r"^```json[ \t]*\n.*?^```[ \t]*$", re.S | re.M)
_WRITTEN_BY_SCRIPT = re.compile(r"<!-- default-runs: start -->.*?<!-- default-runs: end -->", re.S)
"""The table `scripts/default_runs.py --write` rewrites."""
# A calendar date, 2026-11-25; not a range of counts (1,000-2,000) or a time (20:53-21:01).
_DATE = re.compile(r"(?<![\w.-])(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])(?![\w-])")
# A commit id as git abbreviates it: 7 to 40 lowercase hex digits standing alone, with at least
# one digit and one letter (so neither a count nor a word such as "defaced" or "effaced").
_HEXLIKE = re.compile(r"(?<![\w./-])[0-9a-f]{7,40}(?![\w/-])")
# The specs: "§9", "spec §6.2", "specs/x.md", "the spec's recipe".
_SPEC = re.compile(r"§|\bspecs?\b", re.I)
_RELEASE = re.compile(r"## (?:Unreleased|(\d+)\.(\d+)\.(\d+) - (\d{4}-\d{2}-\d{2}))")
"""A changelog section: what is not released yet, or a release and its day."""


def scanned(text: str) -> str:
    """The page's text less its ```json blocks."""
    return _JSON_BLOCK.sub("", text)


def run_dates(text: str) -> list[str]:
    return _DATE.findall(scanned(text))


def commit_ids(text: str) -> list[str]:
    return [word for word in _HEXLIKE.findall(scanned(text)) if re.search(r"\d", word) and re.search(r"[a-f]", word)]


def spec_references(text: str) -> list[str]:
    return [line.strip() for line in scanned(text).splitlines() if _SPEC.search(line)]


# Lines of the pages as they were (a lab notebook), which the checks must catch ...
NOTEBOOK = [
    ("Measured 2026-11-26 at 20:53-21:01 with code of 961e10c, on a VM", ["2026-11-26"], ["961e10c"]),
    ("## Training step layout: `edgefd bench step` (2026-11-25)", ["2026-11-25"], []),
    ("since\n8c37830 the first load stores `digits`", [], ["8c37830"]),
    ("(code of a8f5672: clients keep 8-bit images as bytes", [], ["a8f5672"]),
    ("A third round (2026-11-25, this VM) worked on `sl_loss` only.", ["2026-11-25"], []),
    ("the table recorded on 2026-11-24 (copy 33.0 GB/s)", ["2026-11-24"], []),
    ("full id 0dbee40f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f here", [], ["0dbee40f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f"]),
]
# ... and figures and words that look like them but are not.
NOT_DATES_OR_COMMITS = [
    "| labelwise_mean | N=1000000 C=10 | 3.929 | 35.077 | 8.9x | 12.2 | 52% |  |",
    "recall@16 0.992; 1,000,000 samples; 20:53-21:01; 2.6-3.4 s; 0.842x; 1.5 * 2^23; 1e4",
    "ef_construction = ef = 1000, x86-64-v3, sm_90, `zkt_tiny_a` .. `zkt_tiny_e`, fedict_c1",
    "a defaced or effaced word, deadbeef, 0x1f2e3d4c, docs/bench-kernels.json, 1234567 samples",
    "`--param z0=3 dropping_set=4`, 2026 clients, 11-26 rounds, 1437-2026",
]


@pytest.mark.parametrize("line, dates, commits", NOTEBOOK)
def test_the_checks_catch_the_notebook(line, dates, commits):
    assert run_dates(line) == dates
    assert commit_ids(line) == commits


@pytest.mark.parametrize("line", NOT_DATES_OR_COMMITS)
def test_the_checks_pass_figures_and_words(line):
    assert run_dates(line) == []
    assert commit_ids(line) == []


def test_the_checks_skip_json_examples_only():
    page = 'Figures.\n\n```json\n{"commit": "b1737d0", "date": "2026-11-27"}\n```\n\n'
    assert run_dates(page) == [] and commit_ids(page) == []
    block = "<!-- default-runs: start -->\nMeasured 2026-11-27 at b1737d0.\n<!-- default-runs: end -->\n"
    assert run_dates(block) == ["2026-11-27"] and commit_ids(block) == ["b1737d0"]
    assert run_dates(page + "\nRun 2026-11-27 at b1737d0.\n") == ["2026-11-27"]


@pytest.mark.parametrize("name", USER_PAGES)
def test_user_pages_carry_no_run_dates(name):
    assert run_dates((REPO / name).read_text()) == [], (
        f"{name} names the day of a run: give the current figures and the command that gives them "
        "(what changed for a user goes to docs/CHANGELOG.md, under the release)"
    )


@pytest.mark.parametrize("name", sorted(set(USER_PAGES) - STAMPED))
def test_user_pages_carry_no_commit_ids(name):
    assert commit_ids((REPO / name).read_text()) == [], (
        f"{name} names a commit: describe the code as it is, with the command that gives each figure"
    )


def test_methods_page_cites_no_spec():
    assert spec_references((DOCS / "METHODS.md").read_text()) == [], (
        "the specs are not in the repository: cite the paper (Eq., Alg., Table, Sec.) or docs/methods/<name>.md"
    )


def test_the_default_runs_block_is_still_there():
    """The table the script rewrites, between its markers."""
    text = (DOCS / "METHODS.md").read_text()
    assert len(_WRITTEN_BY_SCRIPT.findall(text)) == 1


def test_changelog_is_by_release_newest_first():
    text = (DOCS / "CHANGELOG.md").read_text()
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    releases = [_RELEASE.fullmatch(line) for line in sections]
    assert sections and all(releases), (
        "every section of docs/CHANGELOG.md is '## Unreleased' or '## VERSION - YYYY-MM-DD', not " + repr(sections)
    )
    released = [match for match in releases if match[1]]
    assert [match[0] for match in releases if not match[1]] in ([], [sections[0]]), "Unreleased comes first, once"
    versions = [tuple(int(part) for part in match.groups()[:3]) for match in released]
    days = [date.fromisoformat(match[4]) for match in released]
    assert versions == sorted(versions, reverse=True) and days == sorted(days, reverse=True), "newest first"
    current = tuple(int(part) for part in edgefd.__version__.split("."))
    assert all(version <= current for version in versions), "a release newer than the package's version"
