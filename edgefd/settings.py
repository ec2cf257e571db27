"""`setting()`: the one way edgefd declares a setting. A setting is a dataclass field with its help
(what it does, what values it takes); the command-line flags, the TOML keys of `--config` and the
lines of `edgefd methods` are all made from these fields. A run's `SimulationConfig`, each method's
params and the deployment settings are declared with it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


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
