"""Every module, option and file the docs name exists: a reader who follows a page never meets
"No module named", "unrecognized arguments" or a missing file.

Read: the Markdown pages (README.md, docs/**, the READMEs of benchmarks/, device/, export/ and
server/), the package's comments and strings (docstrings, help texts, messages) and pyproject.toml's
comments. Checked:

- **modules**: a dotted name ``edgefd.x.y``, in code or prose, is a module or an attribute of one
  (``edgefd.protocol.Payload``, a dataclass's field);
- **options**: in a page's shell blocks and inline code, an option after ``edgefd COMMAND``
  (``edgefd bench NAME``, ``python -m edgefd.cli COMMAND``) is one that command's parser takes, and
  the command exists; after ``python -m edgefd.MODULE``, one that module declares; after a script of
  the repository (``bash scripts/install.sh``, ``python3 benchmarks/poisoning.py``), one its file
  names. Inline code that is an option alone (`--threads 1`) is an option of some edgefd command or
  script of the repository, or one of `OTHER_PROGRAMS_FLAGS`;
- **paths**: in inline code, a shell block or a link, a path that starts at a top-level folder of the
  repository (`edgefd/deploy/broker.py`, `docs/RAY.md`, `scripts/`) or is a Markdown page is a file
  or folder of the repository, from its root or from the page's folder. Placeholders
  (`docs/methods/NAME.md`, `runs/<run>`) and the files a page asks its reader to create (its
  ``# PATH.py`` blocks) are not looked for.

Only lines that invoke edgefd or a script of the repository are read for options, so other
programs' options (pip, pytest, mosquitto, ray) need no exception there.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest
from command_flags import command_flags
from doc_pages import REPO, blocks

PAGE_PATTERNS = ("README.md", "docs/**/*.md", "benchmarks/*.md", "device/*.md", "export/*.md", "server/*.md")
PAGES = sorted({path for pattern in PAGE_PATTERNS for path in REPO.glob(pattern)})
PACKAGE = REPO / "edgefd"
TOP_LEVEL = {"edgefd", "docs", "tests", "scripts", "server", "device", "export", "benchmarks", "csrc"}
"""The repository's folders: a path that starts with one of them names a file of the repository."""
SCRIPT_FOLDERS = ("scripts", "benchmarks", "device")

DOTTED = re.compile(r"(?<![\w./-])edgefd(?:\.[A-Za-z_]\w*)+")
FILE_SUFFIXES = {"conf", "toml", "service", "md", "py", "sh", "json", "txt", "log", "pt", "onnx", "acl", "password"}
"""``edgefd.conf``, ``edgefd.toml``: a file's name, not a module's."""
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
EDGEFD = re.compile(r"(?<![\w./-])(?:edgefd|python3? -m edgefd\.cli)(?![\w.\[-])((?: [a-z][a-z0-9-]*)*)")
"""`edgefd simulate ...`, `edgefd bench kernels ...`: the lowercase words after it, which start with the
command; not `edgefd-client`, `edgefd.conf` or `edgefd[ray]`."""
MODULE_PROGRAM = re.compile(r"\bpython3? -m (edgefd(?:\.\w+)+)")
"""`python -m edgefd.deploy.acl ...`: a module of the package run as a program of its own."""
SCRIPT = re.compile(rf"(?<![\w./-])((?:{'|'.join(SCRIPT_FOLDERS)})/[\w./-]+\.(?:sh|py))\b")
"""`bash scripts/install.sh ...`, `python3 benchmarks/poisoning.py ...`: a script of the repository."""
COMMAND_END = re.compile(r"&&|\|\|?|;|\$\(|\s--\s")
"""Where one command of a shell line ends and the next begins (after ` -- `, another program's arguments)."""
SHELL_BLOCKS = {"", "bash", "sh", "shell", "console", "text"}
INLINE = re.compile(r"(?<!`)`([^`]+)`(?!`)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PATH = re.compile(r"(?<![\w.~/$:@-])((?:\.\./)*[\w.-]+/[\w./-]*)")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
FILE_NAME = re.compile(r"\.(?:md|py|sh|toml|json|txt|service|conf|cpp|h|cu)$")
PLACEHOLDER = re.compile(r"<|>|\*|\{|\.\.\.|(?<![A-Za-z])(?:[A-Z]+_)*[A-Z]{2,}(?:[_-][A-Z]+)*(?![a-z])")
"""A path with a placeholder in it (`docs/methods/NAME.md`, `runs/<run>/`, `tests/*.py`) names no one
file. A page's name in capitals (`docs/RAY.md`) is read as a name: see `placeholder`."""

OPTIONAL_MODULES = {
    "edgefd._kernels_cuda": "the CUDA kernels' extension, built only with EDGEFD_CUDA=ON",
}
"""Modules the package names that a build may lack, each with why."""
OTHER_PROGRAMS_FLAGS = {
    "--dist": "pytest-xdist's (`--dist loadfile`), in the suite's command line",
    "--durations": "pytest's, in docs/TESTING.md",
    "--ignore": "pytest's, in docs/TESTING.md",
}
"""Options of other programs that a page's inline code names alone (no command before them), each
with its program."""


# ---------------------------------------------------------------------- what the code has


@functools.cache
def program_flags(module: str) -> frozenset[str] | None:
    """The options a module of the package declares (its literal ``add_argument("--x", ...)``), for
    ``python -m MODULE``; None if there is no such module."""
    try:
        spec = importlib.util.find_spec(module)
    except ImportError:
        return None
    if spec is None or spec.origin is None:
        return None
    flags = set()
    for node in ast.walk(ast.parse(Path(spec.origin).read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            flags |= {arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)}
    return frozenset(flag for flag in flags if flag.startswith("--"))


@functools.cache
def script_flags(script: str) -> frozenset[str] | None:
    """The options a script of the repository names anywhere in its text (its parser, its `case`
    arms, its usage); None if there is no such file."""
    path = REPO / script
    return frozenset(FLAG.findall(path.read_text())) if path.is_file() else None


@functools.cache
def all_flags() -> frozenset[str]:
    """Every option of every edgefd command, module program and script of the repository."""
    flags = set().union(*command_flags().values())
    for path in PACKAGE.rglob("*.py"):
        flags |= program_flags(".".join(path.relative_to(REPO).with_suffix("").parts)) or set()
    for folder in SCRIPT_FOLDERS:
        for path in (REPO / folder).rglob("*"):
            if path.suffix in (".sh", ".py"):
                flags |= script_flags(str(path.relative_to(REPO))) or set()
    return frozenset(flags)


def resolves(name: str) -> bool:
    """``name`` is a module, or an attribute (a dataclass's field included) of the longest module it
    starts with. Modules are found with ``find_spec``, which imports the packages above them only."""
    if name in OPTIONAL_MODULES:
        return True
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        module = ".".join(parts[:end])
        try:
            if importlib.util.find_spec(module) is None:
                continue
        except ImportError:  # a part of the name is a module, not a package
            continue
        target = importlib.import_module(module) if end < len(parts) else None
        for attribute in parts[end:]:
            if hasattr(target, attribute):
                target = getattr(target, attribute)
            elif attribute in getattr(target, "__dataclass_fields__", {}):
                return attribute == parts[-1]  # a field's own attributes are not looked into
            else:
                return False
        return True
    return False


@functools.cache
def defined_names(path: Path) -> frozenset[str]:
    """Every name a Python file defines or imports, at any depth (classes, functions, methods, names
    and attributes it assigns, fields), and the identifiers among its strings (verbs, message kinds)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.rsplit(".", 1)[-1])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and IDENTIFIER.fullmatch(node.value):
            names.add(node.value)
    return frozenset(names)


# ---------------------------------------------------------------------- what the docs name
def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def prose(text: str) -> str:
    """A page with its fenced blocks blanked out, its line numbers kept."""
    return re.sub(r"^```.*?^```[ \t]*$", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)


def shell_lines(text: str) -> Iterator[tuple[int, str]]:
    """The lines of a page's shell blocks, ``\\`` continuations joined and comments cut, by line number."""
    for match in re.finditer(r"^```([\w-]*)[ \t]*\n(.*?)^```[ \t]*$", text, re.S | re.M):
        if match.group(1) not in SHELL_BLOCKS:
            continue
        first = _line(text, match.start(2))
        lines = match.group(2).split("\n")
        number = 0
        while number < len(lines):
            start, line = number, lines[number]
            while line.rstrip().endswith("\\") and number + 1 < len(lines):
                number += 1
                line = line.rstrip()[:-1] + " " + lines[number].strip()
            yield first + start, re.split(r"(?:^|\s)#", line, maxsplit=1)[0]
            number += 1


def inline_spans(text: str) -> Iterator[tuple[int, str]]:
    """The inline code of a page's prose (a span may run over a line break), by line number."""
    body = prose(text)
    for match in INLINE.finditer(body):
        yield _line(body, match.start()), match.group(1).replace("\n", " ")


def links(text: str) -> Iterator[tuple[int, str]]:
    body = prose(text)
    for match in LINK.finditer(body):
        yield _line(body, match.start()), match.group(1)


def python_prose(path: Path) -> Iterator[tuple[int, str]]:
    """The comments and strings of a Python file (docstrings, help texts, messages), by line."""
    kinds = (tokenize.COMMENT, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING))
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type in kinds:
            yield token.start[0], token.string


def toml_comments(path: Path) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if "#" in line:
            yield number, line[line.index("#") :]


def dotted_names(text: str) -> list[str]:
    return [name for name in DOTTED.findall(text) if name.rsplit(".", 1)[1] not in FILE_SUFFIXES]


def commands(code: str) -> Iterator[tuple[str, list[str]]]:
    """(what runs, the options given to it) for each command in a line or span of code that runs
    edgefd (``edgefd WORDS``), a module of it (``-m MODULE``) or a script of the repository (its path)."""
    for part in COMMAND_END.split(code):
        for pattern, name in (
            (EDGEFD, lambda m: ("edgefd" + m.group(1)).strip()),
            (MODULE_PROGRAM, lambda m: f"-m {m.group(1)}"),
            (SCRIPT, lambda m: m.group(1)),
        ):
            match = pattern.search(part)
            if match:
                yield name(match), FLAG.findall(part[match.end() :])
                break


def command_problems(command: str, flags: list[str]) -> list[str]:
    """What is wrong with running ``command`` with ``flags``: no such command, or an option it does not take."""
    if command.startswith("-m "):  # `python -m edgefd.cli ...` is read as `edgefd ...` (`EDGEFD`)
        module = command[3:]
        known = program_flags(module)
        if known is None:
            return [f"no module {module} to run"]
        return [f"`python -m {module}` takes no {flag}" for flag in flags if flag not in known]
    if not command.startswith("edgefd"):
        known = script_flags(command)
        if known is None:
            return [f"no script {command}"]
        return [f"{command} takes no {flag}" for flag in flags if flag not in known]
    parsers = command_flags()
    words = command.split()[1:]
    # The command is the longest run of the words that names a parser (`bench kernels`); the words
    # after it are its arguments (`edgefd methods fedict`, `edgefd report runs/a`).
    end = max(n for n in range(len(words) + 1) if " ".join(words[:n]) in parsers)
    name = " ".join(words[:end])
    if name == "" and words:
        return [f"`edgefd {words[0]}` is no command"]
    if name == "bench" and len(words) > 1:
        return [f"`edgefd bench {words[1]}` is no benchmark"]
    known = parsers[name] | parsers[""]  # and --help, --version
    return [f"`edgefd {name}` takes no {flag}" for flag in flags if flag not in known]


def placeholder(path: str) -> bool:
    """`docs/methods/NAME.md`, `runs/ALGO-DATASET-sSEED`, `tests/*.py`; not `docs/RAY.md`, `CMakeLists.txt`."""
    last = path.rstrip("/").rsplit("/", 1)[-1]
    if re.fullmatch(r"[A-Z][A-Z_]*[A-Z]\.md", last) and last not in ("NAME.md", "METHOD.md", "FILE.md"):
        path = path[: -len(last)]
    return bool(PLACEHOLDER.search(path))


def path_problems(path: str, page: Path, created: set[str]) -> list[str]:
    """Whether a path a page names is a file or folder of the repository (if it looks like one)."""
    path = path.split("#", 1)[0].rstrip(".,:;")
    if not path or "://" in path or path.startswith(("/", "~", "mailto:")):
        return []
    first = path.split("/", 1)[0]
    if first not in TOP_LEVEL and first != ".." and not path.endswith(".md"):
        return []
    if placeholder(path) or path in created:
        return []
    if (REPO / path).exists() or (page.parent / path).exists():
        return []
    return [f"no file or folder {path}"]


def table_problems(row: str) -> list[str]:
    """A table row that gives modules of the package (`edgefd/runtime/verbs.py`, then `client.py`
    beside the one before) and names things in code (`ClientApp`, `Message.answer`): each name is one
    those files define. Rows that give a folder (`edgefd/metrics/`) or no module are not checked."""
    files: list[Path] = []
    names: list[str] = []
    for cell in row.strip().strip("|").split("|"):
        spans = INLINE.findall(cell)
        paths = [span for span in spans if re.fullmatch(r"(?:edgefd/[\w/]+/)?\w+\.py", span)]
        for span in paths:
            if "/" in span or files:  # `client.py` after `edgefd/deploy/server.py`: beside it
                files.append(REPO / span if "/" in span else files[-1].parent / span)
        if not paths:
            names += [span for span in spans if re.fullmatch(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", span)]
    files = [path for path in files if path.is_file()]
    if not files:
        return []
    defined = set().union(*(defined_names(path) for path in files))
    where = ", ".join(str(path.relative_to(REPO)) for path in files)
    return [f"{where} defines no {name}" for name in names if not set(name.split(".")) <= defined]


def page_problems(page: Path) -> list[str]:
    """What in one page names a module, command, option or file that does not exist, by line."""
    text = page.read_text()
    where = str(page.relative_to(REPO)) if page.is_relative_to(REPO) else page.name
    created = {block.path for block in blocks(page) if block.path}
    found = []

    def report(number: int, problems: list[str], context: str) -> None:
        found.extend(f"{where}:{number}: {problem}: {context.strip()[:160]!r}" for problem in problems)

    for number, line in enumerate(text.splitlines(), 1):
        report(number, [f"no module or attribute {name}" for name in dotted_names(line) if not resolves(name)], line)
    for number, line in shell_lines(text):
        for command, flags in commands(line):
            report(number, command_problems(command, flags), line)
        for path in PATH.findall(line):
            report(number, path_problems(path, page, created), line)
    for number, span in inline_spans(text):
        ran = list(commands(span))
        for command, flags in ran:
            report(number, command_problems(command, flags), span)
        if not ran and span.startswith("--"):
            flag = FLAG.match(span)
            if flag and flag.group(0) not in all_flags() and flag.group(0) not in OTHER_PROGRAMS_FLAGS:
                report(number, [f"no command or script of the repository takes {flag.group(0)}"], span)
        for path in PATH.findall(span):
            report(number, path_problems(path, page, created), span)
    for number, line in enumerate(prose(text).splitlines(), 1):
        if line.startswith("|"):
            report(number, table_problems(line), line)
    for number, target in links(text):
        report(number, path_problems(target, page, created), target)
    return found


def source_problems(path: Path) -> list[str]:
    """The same for the package's comments and strings, and pyproject.toml's comments: the modules
    and the repository's paths they name."""
    lines = toml_comments(path) if path.suffix == ".toml" else python_prose(path)
    where = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name
    found = []
    for number, text in lines:
        for name in dotted_names(text):
            if not resolves(name):
                found.append(f"{where}:{number}: no module or attribute {name}")
        for candidate in PATH.findall(text):
            if FILE_NAME.search(candidate.rstrip(".,:;")):  # not an MQTT topic (`edgefd/+/up/#`)
                found += [f"{where}:{number}: {problem}" for problem in path_problems(candidate, REPO / "x", set())]
    return found


# ---------------------------------------------------------------------- the checks
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_a_page_names_only_modules_options_and_files_that_exist(page):
    found = page_problems(page)
    assert not found, "\n".join(found)


def test_the_package_and_pyproject_name_only_modules_and_files_that_exist():
    found = []
    for path in [*sorted(PACKAGE.rglob("*.py")), REPO / "pyproject.toml"]:
        found += source_problems(path)
    assert not found, "\n".join(found)


def test_every_exception_is_still_needed():
    named = set()
    for page in PAGES:
        for _, span in inline_spans(page.read_text()):
            named |= set(FLAG.findall(span))
    assert set(OTHER_PROGRAMS_FLAGS) <= named
    assert not set(OTHER_PROGRAMS_FLAGS) & all_flags(), "an exception is now an option of the repository's own"


BROKEN = [
    # (a page's line, what the checks must say of it)
    ("See `edgefd.runtime.client_app`.", "no module or attribute edgefd.runtime.client_app"),
    ("`edgefd.protocol.NoSuchThing` and edgefd.nowhere", "no module or attribute edgefd.protocol.NoSuchThing"),
    ("```bash\nedgefd simulate --algo fd --params x=1\n```", "`edgefd simulate` takes no --params"),
    ("```bash\nedgefd simulate \\\n    --rounds 2 --no-such-flag\n```", "`edgefd simulate` takes no --no-such-flag"),
    ("Run `edgefd bench kernels --samples 10`.", "`edgefd bench kernels` takes no --samples"),
    ("Run `edgefd bench nothing`.", "`edgefd bench nothing` is no benchmark"),
    ("Run `edgefd simulation --rounds 2`.", "`edgefd simulation` is no command"),
    ("Run `python -m edgefd.deploy.acl --no-such`.", "`python -m edgefd.deploy.acl` takes no --no-such"),
    ("Run `bash scripts/install.sh --no-such`.", "scripts/install.sh takes no --no-such"),
    ("Pass `--no-such-option 3`.", "no command or script of the repository takes --no-such-option"),
    ("It lives in `edgefd/deploy/checkpoint.py`.", "no file or folder edgefd/deploy/checkpoint.py"),
    ("See [the guide](docs/NOPE.md).", "no file or folder docs/NOPE.md"),
    ("| the interface: `register`, `param` | `edgefd/algorithms/base.py` |", "algorithms/base.py defines no param"),
    ("| the codec: `encode_message` | `edgefd/protocol/codec.py` |", "codec.py defines no encode_message"),
]
FINE = [
    "`edgefd.protocol.Payload`, `edgefd.protocol.encode`, edgefd.runtime.verbs.ClientApp, `/etc/edgefd.conf`",
    "```bash\nedgefd simulate --rounds 2  # then --anything in a comment\npip install --upgrade pip\n```",
    "`edgefd methods fedict`, `edgefd report runs/a runs/b --plot x.png`, `edgefd bench kernels --quick`",
    "`python3 -m pytest -q --timeout 60`, `--dist loadfile`, `mosquitto -c server/mosquitto/edgefd.conf`",
    "`docs/methods/NAME.md`, `runs/ALGO-DATASET-sSEED`, `tests/*.py`, [RAY](docs/RAY.md), `docs/RAY.md#start`",
    "`runs/demo/models/`, `/var/lib/edgefd/state`, `~/.cache/edgefd`, https://example.org/a/b.md",
    "`pip install 'edgefd[ray]' --upgrade`, `sudo systemctl enable --now edgefd-client`",
    "| the verbs (`VERBS`, `ClientApp`, `Message.answer`) | `edgefd/runtime/verbs.py`, `edgefd/protocol/message.py` |",
    "| `edgefd server` | `edgefd/deploy/server.py`, `client.py`, `local.py` |",
]


@pytest.mark.parametrize("line, problem", BROKEN)
def test_the_checks_catch_a_broken_line(line, problem, tmp_path):
    page = tmp_path / "page.md"
    page.write_text(line + "\n")
    found = page_problems(page)
    assert any(problem in entry for entry in found), found


@pytest.mark.parametrize("line", FINE)
def test_the_checks_pass_names_that_exist(line, tmp_path):
    page = tmp_path / "page.md"
    page.write_text(line + "\n")
    assert page_problems(page) == []


def test_the_checks_catch_a_broken_docstring_and_comment(tmp_path):
    module = tmp_path / "module.py"
    module.write_text(
        '"""Built by ``edgefd.runtime.client_app``, as docs/NOPE.md says; on `edgefd/+/up/#`."""\n'
        "# edgefd.protocol.Payload and docs/RAY.md are fine\n"
    )
    toml = tmp_path / "pyproject.toml"
    toml.write_text('# The layers of shared/DESIGN.md\nname = "edgefd/x.md"\n')
    assert source_problems(module) == [
        "module.py:1: no module or attribute edgefd.runtime.client_app",
        "module.py:1: no file or folder docs/NOPE.md",
    ]
    assert source_problems(toml) == ["pyproject.toml:1: no file or folder shared/DESIGN.md"]
