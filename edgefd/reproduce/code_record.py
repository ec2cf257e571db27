"""What a reproduction's numbers depend on, file by file, so that a results table goes stale only when
code its runs execute changed.

A run of method M depends on the modules that `edgefd simulate` (and `edgefd`, which starts it in a
process of its own) imports; its table, also on those of the code that makes the table and judges
the claims. They are found statically and followed to the end (an import inside a function counts;
importing a package counts with every module in it, since packages here import their parts lazily),
with one exception: a method's module (the module or package of `edgefd.algorithms` that registers
it) counts only for its own runs. A run imports every method's module (the registry does), but the
import only defines the method's classes and registers them: only its own method's code runs. The
recipes (`edgefd.recipes`) count as the recipe itself (its settings, arms and claims, and the notes
its table takes from the other recipes), and the kernels' C++ sources and build file count wherever
the kernels are imported.

Each file counts by its fingerprint: a Python file's syntax tree without its string-only statements
(docstrings, attribute docstrings), written out the same way by every Python version from 3.10 on,
so a docstring, a comment or a layout change moves nothing; any other file's bytes.
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

RUN_MODULES = ("edgefd.simulate", "edgefd.cli")
"""Where a run starts: what a run's numbers depend on (a run folder's code.json)."""
TABLE_MODULES = ("edgefd.reproduce.table", "edgefd.claims", "edgefd.recipes.recipe")
"""Where a table starts from its runs: the code that turns them into the table and the verdicts (a
change here makes the table stale, never a run)."""
METHODS_PACKAGE = "edgefd.algorithms"
RECIPES_PACKAGE = "edgefd.recipes"
RECIPE_TYPE = "edgefd.recipes.recipe"
"""What a recipe is (`Recipe`, and what its table lists as shared): the one recipes module a table
depends on as code."""
KERNELS_PACKAGE = "edgefd.kernels"
NATIVE_SOURCES = ("csrc", "CMakeLists.txt")
"""The kernels' C++ sources and build file, beside the package (absent from an installed copy)."""

Record = dict[str, str]
"""A path relative to the repository's root -> its fingerprint."""


def fingerprint(path: Path) -> str:
    """A file's fingerprint: for Python, the hash of its syntax tree less its docstrings; else of its bytes."""
    data = path.read_bytes()
    return _python_fingerprint(data, str(path)) if path.suffix == ".py" else hashlib.sha256(data).hexdigest()[:16]


def _is_string_statement(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def _canonical(node: Any) -> str:
    """A syntax tree written out field by field, leaving out the empty ones: Python versions add
    fields that are empty in code they already parsed (``type_params`` in 3.12)."""
    if isinstance(node, ast.AST):
        fields = [
            f"{name}={_canonical(value)}" for name, value in ast.iter_fields(node) if value is not None and value != []
        ]
        return f"{type(node).__name__}({','.join(fields)})"
    if isinstance(node, list):
        return "[" + ",".join(_canonical(item) for item in node) + "]"
    return repr(node)


@cache
def _python_fingerprint(source: bytes, filename: str) -> str:
    """The hash of ``source``'s syntax tree less every statement that is only a string (kept per
    text: a check reads the same files again and again)."""
    tree = ast.parse(source, filename=filename)
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            statements = getattr(node, name, None)
            if isinstance(statements, list) and statements and isinstance(statements[0], ast.stmt):
                setattr(node, name, [s for s in statements if not _is_string_statement(s)] or [ast.Pass()])
    return hashlib.sha256(_canonical(tree).encode()).hexdigest()[:16]


class ModuleFiles:
    """The package's modules, by dotted name, read from its folder."""

    def __init__(self, package_dir: Path) -> None:
        self.root = package_dir.parent
        self.files: dict[str, Path] = {}
        for path in sorted(package_dir.rglob("*.py")):
            parts = path.relative_to(self.root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            self.files[name] = path

    def is_package(self, name: str) -> bool:
        return self.files.get(name, Path()).name == "__init__.py"

    def subtree(self, name: str) -> list[str]:
        return [module for module in self.files if module == name or module.startswith(name + ".")]

    def imports_of(self, name: str) -> tuple[set[str], set[str]]:
        """The package's modules that ``name`` imports anywhere in its text: those it names (a
        package named for a name it holds counts whole) and their parent packages (their
        ``__init__`` alone)."""
        path = self.files[name]
        here = name if self.is_package(name) else name.rpartition(".")[0]
        named: set[str] = set()
        for base, names in _import_statements(path.read_bytes(), str(path), here):
            if not names:  # `import a.b`
                named.add(base)
                continue
            submodules = {f"{base}.{alias}" for alias in names} & set(self.files)
            named.update(submodules)
            if len(submodules) < len(names):  # a name the module (or package) itself holds
                named.add(base)
        named &= set(self.files)
        parents = {".".join(module.split(".")[:i]) for module in named for i in range(1, module.count(".") + 1)}
        return named, parents - named


@cache
def _import_statements(source: bytes, filename: str, here: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Every import in ``source`` as (the module, the names imported from it; none for `import m`),
    relative imports resolved against the package ``here`` (kept per text, as fingerprints are)."""
    found: list[tuple[str, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            found += [(alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.append((base, tuple(alias.name for alias in node.names)))
    return tuple(found)


def _top(module: str) -> str:
    """``edgefd.algorithms.fedict.client`` -> ``edgefd.algorithms.fedict``."""
    return ".".join(module.split(".")[: METHODS_PACKAGE.count(".") + 2])


@cache
def method_modules() -> frozenset[str]:
    """The modules (or packages) of `METHODS_PACKAGE` that register a method; the others are shared."""
    from edgefd.algorithms.base import list_methods  # torch: not for --help

    return frozenset(_top(cls.__module__) for spec in list_methods() for cls in (spec.client, spec.server))


def _method_of(name: str) -> str | None:
    """The method module ``name`` belongs to (``edgefd.algorithms.fd``), or None for shared code."""
    if not name.startswith(METHODS_PACKAGE + "."):
        return None
    top = _top(name)
    return top if top in method_modules() else None


def dependencies(modules: ModuleFiles, start: Iterable[str]) -> set[str]:
    """Every module reached from ``start`` by imports, less other methods' modules and the recipes."""
    allowed_methods = {method for name in start if (method := _method_of(name)) is not None}
    seen: set[str] = set()
    todo = [(name, True) for name in start]
    while todo:
        name, whole = todo.pop()
        method = _method_of(name)
        if name not in modules.files or (method is not None and method not in allowed_methods):
            continue
        if name.startswith(RECIPES_PACKAGE) and name != RECIPE_TYPE:
            continue
        if name not in seen:
            seen.add(name)
            named, parents = modules.imports_of(name)
            own_parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
            todo += [(module, True) for module in named] + [(module, False) for module in [*parents, *own_parents]]
        if whole and modules.is_package(name):
            todo += [(module, False) for module in modules.subtree(name) if module not in seen]
    return seen


def method_module(algo: str) -> str:
    """The module (or package) of ``METHODS_PACKAGE`` that registers ``algo``."""
    from edgefd.algorithms.base import get_method  # torch: not for --help

    return _top(get_method(algo).client.__module__)


def code_record(algos: Iterable[str], package_dir: Path | None = None, table: bool = False) -> Record:
    """The fingerprint of every file that runs of ``algos`` depend on (and, with ``table``, the
    table made of them)."""
    modules = ModuleFiles((package_dir or Path(__file__).resolve().parents[1]).resolve())
    start = [*RUN_MODULES, *(TABLE_MODULES if table else ()), *(method_module(algo) for algo in algos)]
    names = dependencies(modules, start)
    paths = [modules.files[name] for name in names]
    if any(name.startswith(KERNELS_PACKAGE) for name in names):
        for source in NATIVE_SOURCES:
            native = modules.root / source
            paths += sorted(p for p in native.rglob("*") if p.is_file()) if native.is_dir() else [native]
    return {
        path.relative_to(modules.root).as_posix(): fingerprint(path) for path in sorted(set(paths)) if path.is_file()
    }


def recipe_fingerprint(recipe: Any) -> str:
    """The recipe's settings, arms and claims (its dataclasses' text), and what its table says of
    the other recipes (the claims that judge the same runs as theirs)."""
    from edgefd.reproduce.table import shared_evidence

    text = "\n".join([repr(recipe), *shared_evidence(recipe)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def changed_files(recorded: Record, current: Record) -> list[str]:
    """The files whose fingerprint differs between ``recorded`` and ``current``, in order: changed
    ones, ones newly depended on (a new import) and ones no longer depended on."""
    return sorted(name for name in recorded.keys() | current.keys() if recorded.get(name) != current.get(name))


def table_record(recipe: Any, package_dir: Path | None = None) -> dict[str, Any]:
    """What a recipe's table depends on: the recipe itself and the code of every arm's runs."""
    return {
        "recipe": recipe_fingerprint(recipe),
        "files": code_record(dict.fromkeys(arm.algo for arm in recipe.arms), package_dir, table=True),
    }


def records_path(page: Path) -> Path:
    """Where a results page keeps its tables' records: beside it (docs/RESULTS.code.json)."""
    return page.with_name(f"{page.stem}.code.json")


def read_records(page: Path) -> dict[str, dict[str, Any]]:
    path = records_path(page)
    return json.loads(path.read_text()) if path.is_file() else {}


def write_record(page: Path, name: str, record: dict[str, Any]) -> None:
    """Keeps ``record`` as the one of ``name``'s table, beside ``page``."""
    records = read_records(page)
    records[name] = record
    records_path(page).write_text(json.dumps(dict(sorted(records.items())), indent=1, sort_keys=True) + "\n")


def record_staleness(record: dict[str, Any], recipe: Any, package_dir: Path | None = None) -> str | None:
    """Why a table made under ``record`` is not what the code in ``package_dir`` (default: this
    package) gives now (None: it is)."""
    current = table_record(recipe, package_dir)
    if record.get("recipe") != current["recipe"]:
        return "the recipe changed (its settings, arms or claims)"
    changed = changed_files(record.get("files", {}), current["files"])
    if changed:
        return f"{len(changed)} file(s) it depends on changed, e.g. {changed[0]}"
    return None
