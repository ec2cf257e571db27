"""scripts/default_runs.py's table: the models column and its place in docs/METHODS.md."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def default_runs():
    spec = importlib.util.spec_from_file_location("default_runs", ROOT / "scripts" / "default_runs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_models_column_names_few_and_spans_many(default_runs):
    assert default_runs.models_of({"models": {"client-0": "cnn2", "client-1": "cnn2"}}) == "cnn2"
    three = {f"client-{i}": f"resnet{n}" for i, n in enumerate((8, 16, 20, 8))}
    assert default_runs.models_of({"models": three}) == "resnet8, resnet16, resnet20"
    five = {f"client-{i}": f"fedict_c{i + 1}" for i in range(5)}
    assert default_runs.models_of({"models": five}) == "fedict_c1 .. fedict_c5"


def test_the_table_goes_between_the_markers_of_the_page(default_runs, tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"before\n{default_runs.START}\nold table\n{default_runs.END}\nafter\n")
    default_runs.write_into(page, "| new |")
    assert page.read_text() == f"before\n{default_runs.START}\n| new |\n{default_runs.END}\nafter\n"
    (tmp_path / "bare.md").write_text("no markers")
    with pytest.raises(SystemExit, match="markers"):
        default_runs.write_into(tmp_path / "bare.md", "| new |")


def test_methods_page_has_the_markers(default_runs):
    text = (ROOT / "docs" / "METHODS.md").read_text()
    assert text.count(default_runs.START) == 1 and text.count(default_runs.END) == 1
