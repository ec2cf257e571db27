"""The run's settings as command-line flags, shared by `edgefd simulate`, `edgefd server` and
`edgefd deploy-local`: one flag per `SimulationConfig` field, `--config run.toml` with the same
keys, and `--param NAME=VALUE` for the method's hyperparameters (`edgefd.settings.CONFIG_RULE`: a
flag given wins over the file)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Collection
from typing import Any

from edgefd.runtime.config import SimulationConfig
from edgefd.settings import add_config_argument, given_over_file
from edgefd.short_help import add_help_all, fold


def config_fields() -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(SimulationConfig) if f.name != "params"}


METAVAR_OF_KIND: dict[Any, str] = {int: "N", float: "X"}
METAVARS = {
    "data_root": "DIR",
    "out": "DIR",
    "partition": "SCHEME",
    "kernels": "BACKEND",
    "lr": "LR",
    "score_full_test": "BOOL",
    "channels_last": "BOOL",
    "optimizer_lifecycle": "WHEN",
    "batch_order": "ORDER",
    "max_message_bytes": "BYTES",
}


FLAG_GROUPS = {
    **dict.fromkeys(("data_root", "samples_per_client", "test_fraction"), "data"),
    **dict.fromkeys(
        ("participation", "straggler_rate", "eval_every", "score_full_test", "precision", "max_message_bytes"),
        "rounds and the wire",
    ),
    **dict.fromkeys(
        (
            "epochs", "batch_size", "lr", "momentum", "weight_decay", "optimizer", "optimizer_lifecycle",
            "batch_order", "channels_last",
        ),
        "local training (default: the method's paper's)",
    ),
    **dict.fromkeys(("threads", "kernels", "device"), "compute"),
    **dict.fromkeys(("attack", "attackers"), "robustness experiments"),
    **dict.fromkeys(("backend", "workers", "ray_address", "gpus_per_worker"), "Ray (docs/RAY.md)"),
}  # fmt: skip
"""The help's groups of the run's flags; a flag in none (the method, the data set, the clients, the
rounds, the split, the models, the seed, the folder) comes first, among the command's own."""


RAY_FLAGS = tuple(name for name, title in FLAG_GROUPS.items() if title.startswith("Ray"))
"""The flags of `--backend ray`: a deployment's clients are its devices, so `server` and
`deploy-local` take them only to refuse them (`SimulationConfig.check_in_process`), out of their help."""


def add_config_arguments(
    parser: argparse.ArgumentParser,
    hidden: Collection[str] = (),
    own_groups: Callable[[argparse.ArgumentParser], None] | None = None,
) -> None:
    """The run's settings as flags, shared by `simulate`, `server`, `deploy-local` and `compare`;
    those named in ``hidden`` (and ``param``) are taken but left out of the help (`compare` refuses
    them with its own words). ``own_groups`` adds the command's own groups (a deployment's broker
    and timeouts), so that its help shows them right after the common flags, before the run's."""
    add_help_all(parser)
    add_config_argument(parser, "the same keys as these flags and a [params] table")
    if own_groups is not None:
        own_groups(parser)
    defaults = SimulationConfig()
    groups = {title: parser.add_argument_group(title) for title in dict.fromkeys(FLAG_GROUPS.values())}
    for name, f in config_fields().items():
        flag = "--" + name.replace("_", "-")
        kinds: dict[str, Callable[[str], Any]] = {"int": int, "float": float, "bool": parse_bool}
        kind = kinds.get(str(f.type).split(" ")[0], str)
        default = getattr(defaults, name)
        shown = "" if default is None else f" (default: {default})"
        metavar = METAVARS.get(name) or METAVAR_OF_KIND.get(kind, name.upper())
        if default is None and kind is not str:
            kind, shown = or_none(kind), "; `none` restores the default, overriding --config"
        title = FLAG_GROUPS.get(name, "")
        action = groups.get(title, parser).add_argument(  # the common flags: the first, ungrouped
            flag,
            dest=name,
            type=kind,
            default=argparse.SUPPRESS,
            metavar=metavar,
            help=argparse.SUPPRESS if name in hidden else f.metadata["help"] + shown,
        )
        if title in groups:  # `edgefd COMMAND --help`: the groups as names, --help-all in full
            fold(parser, title, [action])
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=argparse.SUPPRESS
        if "param" in hidden
        else "a hyperparameter of the method, repeatable, e.g. --param beta=1.5 (edgefd methods NAME lists them)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars, only the final line")


def or_none(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    """A flag whose default is None (e.g. ``--epochs``: the method's) takes ``none`` for it, so that
    a flag can undo a ``--config`` file's value."""

    def parse(text: str) -> Any:
        return None if text.strip().lower() == "none" else kind(text)

    parse.__name__ = getattr(kind, "__name__", "value")  # argparse names it in "invalid int value"
    return parse


def parse_bool(text: str) -> bool:
    """A true/false flag value (true, false, yes, no, on, off, 1, 0)."""
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def config_from_args(args: argparse.Namespace) -> SimulationConfig:
    """The run the flags and the `--config` file give (`given_over_file`: a flag given wins); the
    file's [params] under the ``--param`` flags."""
    from edgefd.algorithms.params import parse_param_assignments  # torch: not for building the flags

    values = given_over_file(args, config_fields(), tables=("params",))
    params = values.pop("params", {}) | parse_param_assignments(getattr(args, "param", []))
    return SimulationConfig(**values, params=params)
