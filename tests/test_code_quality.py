"""The linter, the formatter, the type checker and the layer contracts, as CI runs them (configured in pyproject.toml):
part of the test suite so that the README's test command is the whole check."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ["edgefd", "tests", "benchmarks", "scripts"]


def _run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: `pip install -e '.[test]'` (scripts/install.sh --test) brings it")
    return path


def test_ruff_lint_is_clean():
    result = _run(_tool("ruff"), "check", *CHECKED)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean():
    result = _run(_tool("ruff"), "format", "--check", *CHECKED)
    assert result.returncode == 0, f"run `ruff format {' '.join(CHECKED)}`:\n" + result.stdout + result.stderr


def test_mypy_is_clean_on_the_package():
    _tool("mypy")
    result = _run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_imports_follow_the_layers():
    """The contracts in pyproject.toml ([tool.importlinter]): imports only point down, no cycles."""
    result = _run(_tool("lint-imports"))
    assert result.returncode == 0, result.stdout + result.stderr
