"""Every `--flag` that edgefd's code names in a string (an error, a hint, a help text, a command it
builds) is a flag that exists: a user who follows a hint never meets "unrecognized arguments"."""

import ast
import re
from pathlib import Path

import pytest
from command_flags import command_flags

import edgefd
from edgefd.data import DatasetNotFoundError, load_dataset

PACKAGE = Path(edgefd.__file__).resolve().parent
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
COMMAND = re.compile(r"\bedgefd ((?:bench )?[a-z][a-z-]*)([^`\n]*)")
"""`edgefd NAME ...` in a string, and what follows it up to a backquote or the end of the line."""

OTHER_PROGRAMS = {
    ("edgefd/results_page.py", "--short"): "git rev-parse's, for a table's revision",
    ("edgefd/results_page.py", "--porcelain"): "git status's, for uncommitted code under a table",
    ("edgefd/results_page.py", "--name-only"): "git diff's, for the code changed since a table",
    ("edgefd/reproduce/verify.py", "--show-toplevel"): "git rev-parse's, for the repository of the results page",
}
"""(file, flag) of flags that belong to other programs, each with its reason."""


def module_program_flags() -> set[str]:
    """The flags of the package's own `python -m edgefd...` programs (the embedded broker and the ACL
    generator): every literal `add_argument("--x", ...)`."""
    flags = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                flags |= {arg.value for arg in node.args if isinstance(arg, ast.Constant)}
    return {flag for flag in flags if isinstance(flag, str) and flag.startswith("--")}


def strings_naming_flags() -> list[tuple[str, int, str]]:
    """(file, line, text) of every string literal in the package (f-strings' literal parts included)
    that names a `--flag`."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = str(path.relative_to(PACKAGE.parent))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and FLAG.search(node.value):
                found.append((name, node.lineno, node.value))
    return found


def flags_by_command(text: str) -> tuple[list[tuple[str, str]], list[str]]:
    """([(command, flag)] named after `edgefd COMMAND` in ``text``, [the other flags it names])."""
    qualified = []
    for match in COMMAND.finditer(text):
        qualified += [(match.group(1), flag) for flag in FLAG.findall(match.group(2))]
    rest = COMMAND.sub(" ", text)
    return qualified, FLAG.findall(rest)


def test_the_walk_finds_the_strings_it_checks():
    files = {name for name, _, _ in strings_naming_flags()}
    assert "edgefd/runtime/config.py" in files  # the settings' help texts name --data-root and others
    assert "edgefd/data/dataset.py" in files  # the missing-dataset hint
    assert flags_by_command("run `edgefd partition --dataset x --download`, or pass --data-root") == (
        [("partition", "--dataset"), ("partition", "--download")],
        ["--data-root"],
    )


def test_every_named_flag_exists():
    commands = command_flags()
    anywhere = set().union(*commands.values()) | module_program_flags()
    wrong = []
    for name, line, text in strings_naming_flags():
        qualified, rest = flags_by_command(text)
        for command, flag in qualified:
            # `edgefd NAME --flag`: that command must take the flag ("edgefd on a device" is prose)
            if command in commands and flag not in commands[command]:
                wrong.append(f"{name}:{line}: `edgefd {command}` has no {flag}: {text[:120]!r}")
        rest += [flag for command, flag in qualified if command not in commands]
        for flag in rest:
            if flag not in anywhere and (name, flag) not in OTHER_PROGRAMS:
                wrong.append(f"{name}:{line}: no edgefd command takes {flag}: {text[:120]!r}")
    assert not wrong, "\n".join(wrong)


def test_the_allow_list_is_still_needed():
    named = {(name, flag) for name, _, text in strings_naming_flags() for flag in FLAG.findall(text)}
    assert set(OTHER_PROGRAMS) <= named


@pytest.mark.parametrize("dataset", ["mnist", "kmnist", "cifar10", "svhn"])
def test_a_missing_dataset_names_flags_of_the_commands_that_load_it(dataset, tmp_path):
    """The error reaches `simulate`, `server`, `deploy-local` and `partition`: a flag it names
    without a command must be on each of them, and one it names with a command on that one."""
    with pytest.raises(DatasetNotFoundError) as error:
        load_dataset(dataset, root=tmp_path)
    commands = command_flags()
    qualified, rest = flags_by_command(str(error.value))
    assert ("partition", "--download") in qualified  # how to fetch it, as a command that takes it
    for command, flag in qualified:
        assert flag in commands[command], (command, flag)
    for command in ("simulate", "server", "deploy-local", "partition"):
        assert set(rest) <= commands[command], (command, rest)
