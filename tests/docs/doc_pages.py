"""Run a documentation page the way a reader would: its Python blocks, then its commands, in a fresh folder.

- A ```python block whose first line is ``# PATH.py`` is a file the page asks the reader to create:
  it is written to PATH in the folder; under ``edgefd/`` it is imported as that module (a method in
  ``edgefd/algorithms/``), under ``tests/`` its ``test_*`` functions are called (``tmp_path`` is the
  one fixture they may take), anywhere else it is only written (importable: the folder is on
  ``sys.path``). Every other ```python block runs in one shared namespace, in page order.
- In ```bash blocks, ``edgefd ...`` lines run through ``edgefd.cli.main`` and ``python3 FILE.py ...``
  lines (FILE written by the page) in a subprocess; other lines (``pytest``, comments) are skipped.
  ``simulate`` commands run with ``--rounds 2 --quiet --threads 1`` instead of what the page says.
- Whatever the page registered (datasets, methods, modules) is removed afterwards.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from edgefd import cli, kernels

REPO = Path(__file__).resolve().parents[2]
_FENCE = re.compile(r"^```([\w-]*)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_HEADER = re.compile(r"#\s*([\w./-]+\.py)\s*$")
SIMULATE_OVERRIDES = {"--rounds": "2", "--threads": "1"}


@dataclass
class Block:
    lang: str
    text: str

    @property
    def path(self) -> str | None:
        """The file this block is meant to become (its ``# PATH.py`` first line), if any."""
        first = self.text.lstrip().splitlines()[0] if self.text.strip() else ""
        match = _HEADER.fullmatch(first.strip())
        return match.group(1) if match else None


def blocks(page: Path) -> list[Block]:
    return [Block(lang, text) for lang, text in _FENCE.findall(page.read_text())]


def commands(page: Path) -> list[list[str]]:
    """The ``edgefd`` and ``python3`` command lines of the page's bash blocks, split like a shell would."""
    out = []
    for block in blocks(page):
        if block.lang not in ("bash", "sh", "shell", "console"):
            continue
        for line in block.text.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv and argv[0] in ("edgefd", "python3"):
                out.append(argv)
    return out


def for_test(argv: list[str]) -> list[str]:
    """``simulate`` with the test's rounds and threads, and quiet; anything else unchanged."""
    if "simulate" not in argv:
        return list(argv)
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in SIMULATE_OVERRIDES:
            skip = True
        elif arg != "--quiet" and not any(arg.startswith(f"{flag}=") for flag in SIMULATE_OVERRIDES):
            kept.append(arg)
    for flag, value in SIMULATE_OVERRIDES.items():
        kept += [flag, value]
    return kept + ["--quiet"]


def out_folder(argv: list[str]) -> str | None:
    return argv[argv.index("--out") + 1] if "--out" in argv else None


@dataclass
class PageRun:
    """What running a page did, for the test's checks."""

    folder: Path
    namespace: dict = field(default_factory=dict)
    ran: list[list[str]] = field(default_factory=list)
    """The commands that ran, as run (after ``for_test``)."""
    output: dict[str, str] = field(default_factory=dict)
    """Each command's stdout + stderr, by the command line as the page wrote it (``python block N``
    for the N-th fenced block of the page)."""
    written: list[str] = field(default_factory=list)
    """Files the page's ``# PATH.py`` blocks became."""
    tests_called: list[str] = field(default_factory=list)


class PageRunner:
    """Runs one page in ``folder`` (cwd and ``sys.path``), then undoes what it registered: use as a context."""

    def __init__(self, page: Path, folder: Path, monkeypatch, capsys) -> None:
        self.page, self.folder, self.monkeypatch, self.capsys = page, folder, monkeypatch, capsys
        self.result = PageRun(folder)

    def __enter__(self) -> PageRunner:
        from edgefd.algorithms import base
        from edgefd.data import registry

        self._datasets = set(registry.REGISTRY)
        base.list_methods()  # the built-in methods first: only what the page adds is removed afterwards
        self._methods = {method.name for method in base.list_methods()}
        self._modules = set(sys.modules)
        self._threads = torch.get_num_threads()
        self.monkeypatch.chdir(self.folder)
        self.monkeypatch.syspath_prepend(str(self.folder))
        return self

    def __exit__(self, *exc) -> None:
        from edgefd.algorithms import base
        from edgefd.data import clear_cache, registry

        for name in set(registry.REGISTRY) - self._datasets:
            del registry.REGISTRY[name]
        for name in {method.name for method in base.list_methods()} - self._methods:
            base.unregister_method(name)
        for name in set(sys.modules) - self._modules:  # only the page's own files: edgefd's stay imported
            module = sys.modules[name]
            if str(getattr(module, "__file__", None) or "").startswith(str(self.folder)):
                del sys.modules[name]
                parent, _, child = name.rpartition(".")
                if parent in sys.modules and getattr(sys.modules[parent], child, None) is module:
                    delattr(sys.modules[parent], child)
        clear_cache()
        kernels.set_num_threads(self._threads)

    def run(self) -> PageRun:
        for index, block in enumerate(blocks(self.page)):
            if block.lang == "python":
                self._python(index, block)
        for argv in commands(self.page):
            self._command(argv)
        return self.result

    def _python(self, index: int, block: Block) -> None:
        path = block.path
        if path is None:
            code = compile(block.text, f"{self.page.name}, python block {index}", "exec")
            self.capsys.readouterr()
            exec(code, self.result.namespace)
            captured = self.capsys.readouterr()
            self.result.output[f"python block {index}"] = captured.out + captured.err
            return
        target = self.folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.text)
        self.result.written.append(path)
        if path.startswith("edgefd/"):
            self._import(path[: -len(".py")].replace("/", "."), target)
        elif path.startswith("tests/"):
            module = self._import(f"doc_{Path(path).stem}", target)
            self._call_tests(module)

    def _import(self, name: str, file: Path):
        spec = importlib.util.spec_from_file_location(name, file)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    def _call_tests(self, module) -> None:
        for name, function in vars(module).items():
            if not (name.startswith("test_") and callable(function)):
                continue
            parameters = list(inspect.signature(function).parameters)
            assert set(parameters) <= {"tmp_path"}, f"{name}: only the tmp_path fixture is supported here"
            kwargs = {}
            if parameters:
                kwargs["tmp_path"] = self.folder / f"tmp-{name}"
                kwargs["tmp_path"].mkdir()
            function(**kwargs)
            self.result.tests_called.append(name)

    def _command(self, argv: list[str]) -> None:
        line = shlex.join(argv)
        if argv[0] == "edgefd":
            run = for_test(argv)
            self.capsys.readouterr()
            code = cli.main(run[1:])
            captured = self.capsys.readouterr()
            output = captured.out + captured.err
            assert code == 0, f"`{line}` exited with {code}:\n{output}"
        else:
            if len(argv) < 2 or not (self.folder / argv[1]).is_file():
                return  # python3 -m pytest ..., or a script the page did not write
            run = ["python3", argv[1], *for_test(argv[2:])]
            env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(self.folder))
            done = subprocess.run(
                [sys.executable, *run[1:]], cwd=self.folder, env=env, capture_output=True, text=True, timeout=600
            )
            output = done.stdout + done.stderr
            assert done.returncode == 0, f"`{line}` exited with {done.returncode}:\n{output}"
        self.result.ran.append(run)
        self.result.output[line] = output


def check_run_folder(folder: Path, rounds: int = 2) -> list[dict]:
    """A finished run: metrics.jsonl with rounds 0..rounds, summary.json, curves.png."""
    import json

    assert (folder / "summary.json").is_file(), f"{folder}: no summary.json"
    assert (folder / "curves.png").is_file(), f"{folder}: no curves.png"
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [line["round"] for line in lines] == list(range(rounds + 1))
    return lines
