"""edgefd.reproduce.code_record: a table goes stale when its recipe or code its runs depend on
changes, and only then: never for a docstring, and a method's change marks that method's tables."""

import shutil
from pathlib import Path

import pytest

from edgefd.recipes import RECIPES
from edgefd.reproduce.code_record import code_record, fingerprint, record_staleness, table_record

CHECKOUT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    """The package, its kernels' sources and build file, copied where a test may edit them."""
    root = tmp_path_factory.mktemp("checkout")
    shutil.copytree(CHECKOUT / "edgefd", root / "edgefd", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copytree(CHECKOUT / "csrc", root / "csrc")
    shutil.copy(CHECKOUT / "CMakeLists.txt", root)
    return root


@pytest.fixture(scope="module")
def records(copy):
    return {name: table_record(recipe, copy / "edgefd") for name, recipe in RECIPES.items()}


def stale(records, root):
    return {name for name, record in records.items() if record_staleness(record, RECIPES[name], root / "edgefd")}


def edit(path: Path, old: str, new: str) -> str:
    text = path.read_text()
    assert old in text, f"{path} has no {old!r}"
    path.write_text(text.replace(old, new, 1))
    return text


def test_a_fingerprint_ignores_docstrings_comments_and_layout(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""One."""\n\ndef f(x):\n    """Doubles."""\n    return 2 * x\n')
    before = fingerprint(module)
    module.write_text('"""Two, longer."""\n\n\ndef f(x):  # a comment\n    """Twice x."""\n    return 2*x\n')
    assert fingerprint(module) == before
    module.write_text('"""Two."""\n\ndef f(x):\n    """Twice x."""\n    return 3 * x\n')
    assert fingerprint(module) != before


def test_a_method_counts_for_its_own_runs_alone():
    fd, fedzkt = code_record(["fd"]), code_record(["fedzkt"])
    assert "edgefd/algorithms/fd.py" in fd and "edgefd/algorithms/fd.py" not in fedzkt
    assert "edgefd/algorithms/fedzkt.py" in fedzkt and "edgefd/algorithms/fedzkt.py" not in fd
    shared = {"edgefd/simulate.py", "edgefd/runtime/loop.py", "edgefd/algorithms/toolkit.py"}
    assert shared <= set(fd) & set(fedzkt)
    # the verdicts' and the table's code counts for the table, never for a run
    assert "edgefd/claims.py" not in fd and "edgefd/reproduce/table.py" not in fd
    assert {"edgefd/claims.py", "edgefd/reproduce/table.py"} <= set(code_record(["fd"], table=True))
    assert "csrc/weighted_kl.cpp" in fd  # the kernels' C++ counts wherever the kernels are imported
    assert not any(name.startswith("edgefd/recipes/") for name in fd)  # the recipe counts as itself


def test_a_docstring_edit_marks_nothing_stale(copy, records):
    assert stale(records, copy) == set()
    loop, fedzkt = copy / "edgefd" / "runtime" / "loop.py", copy / "edgefd" / "algorithms" / "fedzkt.py"
    kept = {path: path.read_text() for path in (loop, fedzkt)}
    try:
        edit(loop, '"""', '"""A docstring edited by a test. ')
        edit(fedzkt, "    def ", '    def _a_test_edit(self) -> None:\n        """Docstring only."""\n\n    def ')
        assert fingerprint(fedzkt) != fingerprint(CHECKOUT / "edgefd" / "algorithms" / "fedzkt.py")
        # a new method is code: put it back, and edit a docstring alone
        fedzkt.write_text(kept[fedzkt])
        edit(fedzkt, '"""', '"""Another docstring edit. ')
        assert stale(records, copy) == set()
    finally:
        for path, text in kept.items():
            path.write_text(text)


def test_a_change_in_one_methods_code_marks_exactly_that_methods_tables(copy, records):
    fedzkt = copy / "edgefd" / "algorithms" / "fedzkt.py"
    kept = fedzkt.read_text()
    try:
        fedzkt.write_text(kept + "\nA_TEST_CONSTANT = 1\n")
        with_fedzkt = {name for name, recipe in RECIPES.items() if any(arm.algo == "fedzkt" for arm in recipe.arms)}
        assert with_fedzkt and with_fedzkt != set(RECIPES)
        assert stale(records, copy) == with_fedzkt
        reason = record_staleness(records[sorted(with_fedzkt)[0]], RECIPES[sorted(with_fedzkt)[0]], copy / "edgefd")
        assert reason == "1 file(s) it depends on changed, e.g. edgefd/algorithms/fedzkt.py"
    finally:
        fedzkt.write_text(kept)
    loop = copy / "edgefd" / "runtime" / "loop.py"
    kept = loop.read_text()
    try:
        loop.write_text(kept + "\nA_TEST_CONSTANT = 1\n")
        assert stale(records, copy) == set(RECIPES)  # shared code: every table
    finally:
        loop.write_text(kept)


def test_a_new_module_that_runs_import_marks_their_tables_though_no_recorded_file_changed(copy, records):
    """A table compares the record the code gives now with its own, not only the files it recorded:
    a module new in a package that runs import whole (the methods' registry imports every module
    of `edgefd.algorithms`) counts though no file of the record changed."""
    helper = copy / "edgefd" / "algorithms" / "a_test_helper.py"
    try:
        helper.write_text("SCALE = 2\n")
        assert stale(records, copy) == set(RECIPES)
        reason = record_staleness(records["fedict-watch"], RECIPES["fedict-watch"], copy / "edgefd")
        assert reason == "1 file(s) it depends on changed, e.g. edgefd/algorithms/a_test_helper.py"
    finally:
        helper.unlink(missing_ok=True)
    assert stale(records, copy) == set()


def test_a_changed_recipe_is_stale(copy, records):
    from dataclasses import replace

    name = "fedict-watch"
    moved = replace(RECIPES[name], seeds=(0, 1, 2, 3, 4, 5))
    reason = record_staleness(records[name], moved, copy / "edgefd")
    assert reason == "the recipe changed (its settings, arms or claims)"


def test_attribute_docstrings_are_ignored_too_and_the_text_is_the_same_on_every_python(tmp_path):
    import ast

    from edgefd.reproduce.code_record import _canonical

    module = tmp_path / "m.py"
    module.write_text('RATE = 0.1\n"""The rate."""\n\nclass C:\n    x = 1\n    """An x."""\n')
    before = fingerprint(module)
    module.write_text('RATE = 0.1\n"""The rate, said otherwise."""\n\nclass C:\n    x = 1\n    """Another x."""\n')
    assert fingerprint(module) == before
    # Python 3.12 gives every function an empty type_params, 3.13 leaves empty fields out: one text
    function = ast.parse("def f(x):\n    return x\n").body[0]
    with_empty = ast.parse("def f(x):\n    return x\n").body[0]
    with_empty.type_params = []  # as 3.12 parses it
    with_empty._fields = (*function._fields, "type_params")
    assert _canonical(with_empty) == _canonical(function)


def test_a_new_shared_module_of_the_methods_package_counts_for_every_method(tmp_path):
    """Only the modules that register a method are one method's: a new helper beside them is shared."""
    root = tmp_path / "checkout"
    shutil.copytree(CHECKOUT / "edgefd", root / "edgefd", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    (root / "edgefd" / "algorithms" / "helper.py").write_text("SCALE = 2\n")
    fd = root / "edgefd" / "algorithms" / "fd.py"
    fd.write_text("from edgefd.algorithms.helper import SCALE  # noqa: F401\n" + fd.read_text())
    record = code_record(["fd"], root / "edgefd")
    assert "edgefd/algorithms/helper.py" in record
    assert "edgefd/algorithms/fedzkt.py" not in record
