"""No reference a reader cannot open. The project's implementation notes on each paper are not in the
repository, so nothing cites them ("§9 A5", "spec §6.2", "specs/fedcache.md", "the spec says"): the
package's prose, what `edgefd methods` prints and the pages of docs/ cite the papers' own numbers or
docs/methods/NAME.md; and every link to such a page names a page, and a heading in it, that exist."""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgefd.algorithms.base import list_methods
from edgefd.algorithms.describe import describe, method_page
from edgefd.algorithms.params import describe_params

REPO = Path(__file__).resolve().parents[2]
NOTES = re.compile(r"§|\bspecs?\b", re.IGNORECASE)
"""A reference to the notes: the section sign, or the word "spec" in prose (code is taken out first)."""
CODE = re.compile(r"``[^`]*``|`[^`\n]*`|\{[^{}\n]*\}")
"""Code in prose: ``spans``, `spans` and f-string fields, where `spec` may name a variable."""
PAGE_LINK = re.compile(r"docs/methods/([a-z0-9_]+)\.md(?:#([a-z0-9_-]+))?")
PROSE_FILES = ["README.md", "server/README.md", "benchmarks/README.md", "docs/*.md", "docs/methods/*.md"]


def python_prose(path: Path) -> Iterator[tuple[int, str]]:
    """The comments and strings of a Python file (docstrings, help texts, messages), by line."""
    prose = (tokenize.COMMENT, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING))
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type in prose:
            yield token.start[0], token.string


def markdown_prose(path: Path) -> Iterator[tuple[int, str]]:
    """A page's lines outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            yield number, line


def references_to_notes(lines: Iterator[tuple[int, str]]) -> list[str]:
    found = []
    for number, text in lines:
        for match in NOTES.finditer(CODE.sub("", text)):
            found.append(f"line {number}: ...{CODE.sub('', text)[max(0, match.start() - 40) : match.end() + 40]!r}...")
    return found


def package_files() -> list[Path]:
    return sorted((REPO / "edgefd").rglob("*.py"))


def pages() -> list[Path]:
    return sorted({path for pattern in PROSE_FILES for path in REPO.glob(pattern)})


@pytest.mark.parametrize("path", package_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_the_package_cites_no_notes(path):
    found = references_to_notes(python_prose(path))
    assert not found, f"{path.relative_to(REPO)} cites notes a reader cannot open:\n" + "\n".join(found)


@pytest.mark.parametrize("path", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_the_docs_cite_no_notes(path):
    found = references_to_notes(markdown_prose(path))
    assert not found, f"{path.relative_to(REPO)} cites notes a reader cannot open:\n" + "\n".join(found)


def test_edgefd_methods_prints_no_notes_and_names_each_page():
    for method in list_methods():
        text = describe(method)
        text += "\n".join(doc for _, _, doc in describe_params(method.params))
        found = references_to_notes(enumerate(text.splitlines(), 1))
        assert not found, f"edgefd methods {method.name} cites notes:\n" + "\n".join(found)
        assert method_page(method.name) in text
        assert (REPO / method_page(method.name)).is_file(), f"{method.name} has no page {method_page(method.name)}"


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, spaces to hyphens, punctuation dropped."""
    headings = [line.lstrip("#").strip() for _, line in markdown_prose(page) if line.startswith("#")]
    return {re.sub(r"[^a-z0-9 _-]", "", heading.lower()).replace(" ", "-") for heading in headings}


def test_every_link_to_a_method_page_lands_on_a_heading():
    sources = package_files() + pages() + sorted((REPO / "tests").rglob("*.py"))
    broken = []
    for source in sources:
        for match in PAGE_LINK.finditer(source.read_text()):
            page, anchor = REPO / "docs" / "methods" / f"{match[1]}.md", match[2]
            if not page.is_file() or (anchor and anchor not in anchors(page)):
                broken.append(f"{source.relative_to(REPO)}: {match[0]}")
    assert not broken, "links to no page or no heading:\n" + "\n".join(broken)


def test_the_checks_see_a_reference_and_a_broken_link(tmp_path):
    """The patterns above catch what they are for, and let code and f-string fields through."""
    lines = ["x = 1  # as in fedcache.md §6.2", '"""the spec says so"""', 'f"bad {spec.name!r}"', '"``spec``"']
    module = tmp_path / "module.py"
    module.write_text("\n".join(lines) + "\n")
    assert [entry.split(":")[0] for entry in references_to_notes(python_prose(module))] == ["line 1", "line 2"]
    page = tmp_path / "page.md"
    page.write_text("# FedX\n\n### C2S teacher, round start\n\n```\n# not a heading\n```\n")
    assert anchors(page) == {"fedx", "c2s-teacher-round-start"}
