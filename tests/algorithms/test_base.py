"""The method interface's shared parts: params from text and their allowed values."""

import dataclasses
from dataclasses import dataclass

import pytest

from edgefd.algorithms.base import check_choices, list_methods, make_params, param


@dataclass
class ToyParams:
    mode: str = param("fast", "fast | slow", choices=("fast", "slow"), aliases={"quick": "fast"})
    variant: str | None = param(None, "a | b; None: by mode", choices=("a", "b"))
    name: str = param("free", "any text")


def test_choices_are_normalised_aliased_and_refused_by_name():
    assert make_params(ToyParams, {"mode": " SLOW "}).mode == "slow"
    assert make_params(ToyParams, {"mode": "quick"}).mode == "fast"
    assert make_params(ToyParams, {"variant": "none"}).variant is None  # None passes where allowed
    assert make_params(ToyParams, {"name": "Anything"}).name == "Anything"  # no choices: untouched
    with pytest.raises(ValueError, match=r"param mode: expected one of fast, slow, got 'medium'"):
        make_params(ToyParams, {"mode": "medium"})
    params = ToyParams(variant="c")
    with pytest.raises(ValueError, match=r"param variant: expected one of a, b, got 'c'"):
        check_choices(params)


CHOICE_FIELDS = [
    (spec.name, f.name) for spec in list_methods() for f in dataclasses.fields(spec.params) if f.metadata.get("choices")
]


def test_every_method_declares_its_text_choices():
    methods = {name for name, _ in CHOICE_FIELDS}
    assert {"dfl", "fedcache", "fedd2s", "fedict", "fedgkt", "fedmd", "fedzkt"} <= methods


@pytest.mark.parametrize(("method", "field"), CHOICE_FIELDS)
def test_every_declared_choice_is_checked_by_the_method_itself(method, field):
    """Built directly (not from text), each method's params still refuse a value outside the choices."""
    spec = next(s for s in list_methods() if s.name == method)
    with pytest.raises(ValueError, match=rf"param {field}: expected one of"):
        spec.params(**{field: "no-such-choice"})
