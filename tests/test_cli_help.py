"""`edgefd COMMAND --help` tells a new user what every flag does: each option has a help text that
says more than its default, and each command a description."""

import argparse
import functools
import re

import pytest

from edgefd import cli

DEFAULT_PARTS = [
    re.compile(r"\([^()]*\bdefault\b[^()]*\)", re.IGNORECASE),  # "(default: 10)", "(default 10)"
    re.compile(r"\bdefaults?\b\s*:?[^;,()]*", re.IGNORECASE),  # "default: 10", "default 10" up to ; or ,
]
MIN_WORDS = 2
"""A help text must keep at least this many words once its default is taken out ("seconds" or
"default: 10" alone say too little; "communication rounds" is enough)."""


SUBCOMMANDS = (
    [f"edgefd {item.name}" for item in cli.SUBCOMMANDS]
    + ["edgefd bench"]
    + [f"edgefd bench {name}" for name in cli.BENCHMARKS]
)
"""Named from cli's lists, so that one module that fails to import fails only its own tests."""


@functools.cache
def _parsers() -> dict[str, argparse.ArgumentParser]:
    """{"edgefd NAME": parser} for the top level, every subcommand and every `bench` benchmark,
    found by walking the parser that `edgefd` builds."""
    found = {}

    def walk(name: str, parser: argparse.ArgumentParser) -> None:
        found[name] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    walk(f"{name} {sub_name}", sub)

    walk("edgefd", cli.build_parser())
    return found


def _parser(command: str) -> argparse.ArgumentParser:
    """The parser of one command, with only its own module imported (as `edgefd COMMAND` does)."""
    words = command.split()[1:]
    # A first word that names no command loads no module: the top level alone.
    parser = cli.build_parser(words or ["(no command)"])
    for word in words:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
    return parser


def _flag(action: argparse.Action) -> str:
    return "/".join(action.option_strings) or action.metavar or action.dest


def _expanded_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help as --help prints it (%(default)s and friends filled in), on one line."""
    return " ".join(parser._get_formatter()._expand_help(action).split())


def _without_defaults(text: str) -> str:
    for pattern in DEFAULT_PARTS:
        text = pattern.sub(" ", text)
    return text


def test_the_walk_finds_every_command():
    # `edgefd` with every module loaded: no command is missing from (or added beyond) the lists.
    assert set(_parsers()) == {"edgefd", *SUBCOMMANDS}


def test_default_parts_are_recognised():
    assert _without_defaults("default: 10").strip(" ;,.") == ""
    assert _without_defaults("(default: 10)").strip() == ""
    assert len(_without_defaults("number of clients (default: 10)").split()) == 3
    assert _without_defaults("seconds (default 60); default: 10").split() == ["seconds", ";"]


RAY = {"--backend", "--workers", "--ray-address", "--gpus-per-worker"}
HIDDEN = {"edgefd compare": {"--algo", "--seed", "--param"}, "edgefd server": RAY, "edgefd deploy-local": RAY}
"""Options a command takes only to refuse them with its own words, and leaves out of its help:
compare's methods are its ALGO arguments, each with its own params, and its seeds --seeds; a
deployment's clients are its devices, never Ray actors."""


@pytest.mark.parametrize("command", ["edgefd", *SUBCOMMANDS])
def test_every_option_says_what_it_does(command):
    parser = _parser(command)
    problems = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            continue
        flag = _flag(action)
        if flag in HIDDEN.get(command, ()) and action.help == argparse.SUPPRESS:
            continue
        if action.help is None or action.help == argparse.SUPPRESS or not action.help.strip():
            problems.append(f"{command} {flag}: no help text")
            continue
        text = _expanded_help(parser, action)
        left = _without_defaults(text)
        if len(re.findall(r"[A-Za-z][\w-]*", left)) < MIN_WORDS:
            problems.append(f"{command} {flag}: help {text!r} gives little more than the default")
    assert not problems, "options without a useful help text:\n" + "\n".join(problems)


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_command_has_a_description(command):
    description = (_parser(command).description or "").strip()
    assert description, f"{command}: no description"


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_command_help_exits_0(command, capsys):
    argv = command.split()[1:] + ["--help"]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 0, f"{command} --help exited with {exit_info.value.code}"
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {command}"), f"{command} --help printed:\n{out}"


def test_a_runs_help_gives_its_common_flags_first_and_groups_the_rest(capsys):
    """`simulate --help` was 146 lines of flags in one list: the method, data set, clients, rounds,
    split, models, seed and folder now come first, the rest under their groups' titles."""
    with pytest.raises(SystemExit):
        cli.main(["simulate", "--help-all"])
    text = capsys.readouterr().out
    first_group = text.index("\ndata:\n")
    for flag in ("--algo", "--dataset", "--clients", "--rounds", "--partition", "--models", "--seed", "--out"):
        assert text.index(f"\n  {flag} ") < first_group, flag
    titles = ["data", "rounds and the wire", "local training (default: the method's paper's)", "compute"]
    titles += ["robustness experiments", "Ray (docs/RAY.md)"]
    positions = [text.index(f"\n{title}:\n") for title in titles]
    assert positions == sorted(positions)
    assert text.index("\n  --lr ") > positions[2] and text.index("\n  --workers ") > positions[5]


@pytest.mark.parametrize("command", ["server", "deploy-local"])
def test_a_deployments_help_gives_the_broker_right_after_the_common_flags(command, capsys):
    """A deployment always needs its broker: its group came after five groups of training settings.
    It now follows the common flags, then the timeouts; the Ray flags, which a deployment refuses,
    are left out."""
    with pytest.raises(SystemExit):
        cli.main([command, "--help-all"])
    text = capsys.readouterr().out
    titles = ("options", "broker", "deployment (timeouts, holdout)", "data")
    positions = [text.index(f"\n{title}:\n") for title in titles]
    assert positions == sorted(positions)
    assert positions[1] < text.index("\n  --broker ") < text.index("\n  --ca-cert ") < positions[2]
    assert "--workers" not in text and "Ray (docs/RAY.md)" not in text
    if command == "deploy-local":
        assert positions[1] < text.index("\n  --broker-kind ") < positions[2]


def test_a_deployment_still_refuses_the_ray_flags_it_no_longer_lists(capsys):
    assert cli.main(["server", "--run", "x", "--broker", "mqtt://127.0.0.1:1", "--backend", "ray"]) == 2
    assert "--backend ray, --ray-address and --gpus-per-worker are for `edgefd simulate`" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["simulate", "compare", "server", "deploy-local"])
def test_help_folds_the_less_common_groups_to_their_names_and_help_all_explains_them(command, capsys):
    """`simulate --help` was 173 lines (146 before the groups). --help now explains the common flags
    (and a deployment's broker) and names the others, group by group, under one line that says
    how to see them in full; --help-all explains every flag."""
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    short = capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main([command, "--help-all"])
    full = capsys.readouterr().out
    assert len(short.splitlines()) < 0.65 * len(full.splitlines())
    assert f"more options, by group (edgefd {command} --help-all explains each):" in short
    assert "more options" not in full
    folded = short[short.index("more options") : short.index("\nexamples:")]
    assert "\n  local training (default: the method's paper's): --epochs, --batch-size, --lr," in folded
    assert "--score-full-test" in folded  # a flag's name is never broken at its hyphens
    for flag in ("--lr", "--epochs", "--threads", "--samples-per-client"):
        assert f"\n  {flag} " not in short and f"\n  {flag} " in full, flag
    for flag in ("--dataset", "--rounds", "--help-all"):
        assert f"\n  {flag} " in short, flag
    if command in ("server", "deploy-local"):
        assert "\n  --broker " in short and "\n  --round-timeout " not in short and "--round-timeout" in folded
    sub = _parser(f"edgefd {command}")
    sub.format_help()  # folds while it formats, and gives every help back after
    lr = next(action for action in sub._actions if "--lr" in action.option_strings)
    assert lr.help and lr.help.startswith("local learning rate"), lr.help
