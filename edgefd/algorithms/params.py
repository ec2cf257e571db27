"""A method's hyperparameters from text: ``--param NAME=VALUE`` and a run's TOML table become the
method's params dataclass, each value converted by its field's type and checked against the field's
``choices`` (the one place where a method's allowed values are enforced); and the fields described,
for `edgefd methods`."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any


def _convert(value: Any, annotation: Any, name: str) -> Any:
    if isinstance(annotation, str):
        annotation = eval_annotation(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:  # Optional[X] or X | None
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() == "none"):
            return None
        annotation = options[0]
    if annotation is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"param {name}: expected true/false, got {value!r}")
    if annotation in (int, float, str):
        try:
            converted = annotation(value)
        except (TypeError, ValueError):
            raise ValueError(f"param {name}: expected {annotation.__name__}, got {value!r}") from None
        if annotation is int and isinstance(value, float) and value != converted:
            raise ValueError(f"param {name}: expected an integer, got {value!r}")
        return converted
    return value


_ANNOTATIONS = {"int": int, "float": float, "str": str, "bool": bool}


def eval_annotation(text: str) -> Any:
    """Resolves the string annotations of `from __future__ import annotations` dataclasses."""
    parts = [p.strip() for p in text.split("|")]
    types = [type(None) if p == "None" else _ANNOTATIONS.get(p, str) for p in parts]
    return types[0] if len(types) == 1 else typing.Union[tuple(types)]  # noqa: UP007 (built at run time)


def make_params(params_type: type, values: dict[str, Any]) -> Any:
    """Build a params dataclass from name -> value (strings are converted by field type)."""
    fields = {f.name: f for f in dataclasses.fields(params_type)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(
            f"unknown param(s) {', '.join(unknown)} for {params_type.__name__}; known: {', '.join(fields) or '(none)'}"
        )
    converted = {name: _convert(value, fields[name].type, name) for name, value in values.items()}
    params = params_type(**converted)
    check_choices(params)
    return params


def parse_param_assignments(items: list[str]) -> dict[str, str]:
    """`["beta=1.5", "temperature=3"]` -> {"beta": "1.5", "temperature": "3"}."""
    values = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--param {item!r}: expected NAME=VALUE")
        values[name.strip()] = value.strip()
    return values


def describe_params(params_type: type) -> list[tuple[str, Any, str]]:
    """(name, default, help) of each field, for `edgefd methods` and docs."""
    out = []
    for f in dataclasses.fields(params_type):
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        )
        out.append((f.name, default, f.metadata.get("help", "")))
    return out


def check_choices(params: Any) -> None:
    """Normalise and check every field declared with ``choices`` (case and surrounding spaces do not
    matter; None passes where the field allows it): the one place where a method's allowed values
    are enforced. A params dataclass calls it first in ``__post_init__``; :func:`make_params` calls
    it for any params type."""
    for f in dataclasses.fields(params):
        choices = f.metadata.get("choices")
        value = getattr(params, f.name)
        if choices is None or value is None:
            continue
        text = str(value).strip().lower()
        text = f.metadata["aliases"].get(text, text)
        if text not in choices:
            raise ValueError(f"param {f.name}: expected one of {', '.join(choices)}, got {value!r}")
        setattr(params, f.name, text)
