"""`setting()`: the one way edgefd declares a setting. A setting is a dataclass field with its help
(what it does, what values it takes); the command-line flags, the TOML keys of `--config` and the
lines of `edgefd methods` are all made from these fields. A run's `SimulationConfig`, each method's
params, the deployed server's and a device's settings (`DeploymentSettings`, `ClientSettings`), and
the broker settings and flags (`BrokerSettings`, `edgefd.deploy.flags.BrokerFlags`) are declared
with it."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import tomllib


def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    default_factory: Callable[[], Any] | None = None,
    choices: tuple[str, ...] | None = None,
    aliases: dict[str, str] | None = None,
) -> Any:
    """A dataclass field with its one-line help. ``default_factory``: a default computed when the
    dataclass is made (one from the environment, a fresh list). ``choices``: the values a text
    setting allows (``aliases`` maps other spellings to them), checked by the owner (a method's
    params: `check_choices`)."""
    if not help:
        raise ValueError("a setting needs its help: what it does and what values it takes")
    metadata: dict[str, Any] = {"help": help}
    if choices is not None:
        metadata["choices"] = tuple(choices)
        metadata["aliases"] = dict(aliases or {})
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


METAVAR_OF_TYPE = {"int": "N", "float": "X", "str": "TEXT"}


def add_setting_arguments(
    group: Any,
    owner: type | tuple[type, ...],
    names: tuple[str, ...],
    metavars: dict[str, str] | None = None,
    *,
    required: tuple[str, ...] = (),
    helps: dict[str, str] | None = None,
    given_only: bool = False,
) -> list[argparse.Action]:
    """One flag per setting ``names`` of the dataclass ``owner`` (or of one of several dataclasses)
    (`round_timeout` gives --round-timeout); its help and default come from the field (`setting()`),
    so the flag cannot say another thing than the dataclass. ``group``: an argparse parser or
    argument group.

    The help ends with the default, except where there is none to show: a required flag
    (``required``), a setting without a default (None: its command requires it or says what
    leaving it out means) or with None, a true/false setting (a flag without a value, off by
    default) and a help that says its default itself ("(default: ..."). A setting with choices
    takes one of them. ``helps``: another help for some flags, for a command where they mean more.
    ``given_only``: the parsed arguments hold only the flags given, for a command that reads a
    `--config` file under them (`given_over_file`); the dataclass gives the defaults. Returns the
    flags' actions."""
    fields = _fields_of(owner)
    kinds: dict[str, Callable[[str], Any]] = {"int": int, "float": float}
    actions = []
    for name in names:
        kind = str(fields[name].type).split(" ")[0]
        default = _default_of(fields[name])
        flag = "--" + name.replace("_", "-")
        help = (helps or {}).get(name) or fields[name].metadata["help"]
        parsed_default = argparse.SUPPRESS if given_only else default
        if kind == "bool":
            if default is not False:
                raise ValueError(f"setting {name}: a true/false flag is off by default")
            actions.append(group.add_argument(flag, dest=name, action="store_true", default=parsed_default, help=help))
            continue
        shown = f"{default:g}" if isinstance(default, float) else str(default)
        if name not in required and default is not None and "(default:" not in help:
            help = f"{help} (default: {shown})"
        choices = fields[name].metadata.get("choices")
        metavar = (metavars or {}).get(name) or (None if choices else METAVAR_OF_TYPE.get(kind, name.upper()))
        action = group.add_argument(
            flag,
            dest=name,
            type=kinds.get(kind, str),
            default=parsed_default,
            required=name in required,
            choices=choices,
            metavar=metavar,
            help=help,
        )
        actions.append(action)
    return actions


def setting_flags(owner: type | tuple[type, ...], values: Any, names: tuple[str, ...]) -> list[str]:
    """The flags `add_setting_arguments` made, with the values ``values`` has (an argparse namespace
    or an ``owner``), for a child process: a true/false setting as its flag when on, a setting at
    None left out."""
    fields = _fields_of(owner)
    flags: list[str] = []
    for name in names:
        value = getattr(values, name)
        flag = "--" + name.replace("_", "-")
        if str(fields[name].type).split(" ")[0] == "bool":
            flags += [flag] if value else []
        elif value is not None:
            flags += [flag, str(value)]
    return flags


def settings_from_args(owner: type, args: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """The values of the flags `add_setting_arguments` made, as keyword arguments of ``owner``."""
    known = {f.name for f in dataclasses.fields(owner)}
    unknown = sorted(set(names) - known)
    if unknown:
        raise ValueError(f"{owner.__name__} has no setting(s) {unknown}")
    return {name: getattr(args, name) for name in names}


def help_of(owner: type, name: str) -> str:
    """The help of setting ``name`` of ``owner``: for a command that says more about its flag."""
    return _fields_of(owner)[name].metadata["help"]


def _fields_of(owner: type | tuple[type, ...]) -> dict[str, dataclasses.Field]:
    owners = owner if isinstance(owner, tuple) else (owner,)
    return {f.name: f for one in owners for f in dataclasses.fields(one)}


def _default_of(field: dataclasses.Field) -> Any:
    """The field's default; None for a setting without one (a flag its command requires, or whose
    absence the command gives a meaning: `edgefd deploy-local` without --broker starts one)."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


CONFIG_RULE = "a flag given on the command line wins over the file, and the file over the flag's default"
"""How every command that takes `--config` merges the file with its flags (`given_over_file`)."""


def add_config_argument(parser: Any, keys: str) -> None:
    """``--config FILE``; ``keys``: what the file holds."""
    parser.add_argument("--config", metavar="FILE", help=f"TOML file with {keys}; {CONFIG_RULE}")


def read_config_file(path: Path) -> dict[str, Any]:
    """A `--config` file's table. Any problem with the file (missing, a directory, unreadable, not
    UTF-8, not TOML) is one ValueError that names the file and the problem, for the command's
    one-line error."""
    if path.is_dir():
        raise ValueError(f"--config {path}: a directory, not a file")
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ValueError(f"--config {path}: no such file") from None
    except UnicodeDecodeError as error:
        raise ValueError(
            f"--config {path}: not UTF-8 text (byte 0x{error.object[error.start]:02x} at offset {error.start}); "
            "save it as UTF-8"
        ) from None
    except OSError as error:  # permission denied, and the like
        raise ValueError(f"--config {path}: cannot be read ({error.strerror or error})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"--config {path}: not valid TOML ({error})") from None


def given_over_file(args: argparse.Namespace, names: Iterable[str], tables: tuple[str, ...] = ()) -> dict[str, Any]:
    """The one `--config` rule (`CONFIG_RULE`): the settings ``names`` that the command line gives,
    over those the file ``args.config`` gives; a setting in neither is left out, so that its
    dataclass gives its default. The flags of ``names`` have no default in ``args`` (argparse's
    SUPPRESS: ``given_only`` of `add_setting_arguments`), so that ``args`` holds the flags given and
    no others. ``tables``: other keys the file may hold (a run's [params])."""
    names = tuple(names)
    values: dict[str, Any] = {}
    if getattr(args, "config", None):
        path = Path(args.config)
        values = read_config_file(path)
        unknown = sorted(set(values) - set(names) - set(tables))
        if unknown:
            raise ValueError(f"--config {path}: unknown key(s) {', '.join(unknown)}")
    return values | {name: getattr(args, name) for name in names if name in vars(args)}
