"""edgefd.settings: one declaration for every setting, its help always with it."""

import dataclasses

import pytest

from edgefd.algorithms.base import list_methods
from edgefd.runtime.config import SimulationConfig
from edgefd.settings import setting


def test_a_setting_without_help_is_refused():
    with pytest.raises(ValueError, match="needs its help"):
        setting(1)


def test_choices_and_a_computed_default_are_kept():
    @dataclasses.dataclass
    class Example:
        mode: str = setting("fast", "fast | slow", choices=("fast", "slow"), aliases={"quick": "fast"})
        items: list = setting(help="a fresh list each time", default_factory=list)

    mode, items = dataclasses.fields(Example)
    assert mode.metadata == {"help": "fast | slow", "choices": ("fast", "slow"), "aliases": {"quick": "fast"}}
    assert Example().items == [] and Example().items is not Example().items


def test_the_run_and_every_methods_params_declare_each_setting_with_its_help():
    owners = [SimulationConfig] + [method.params for method in list_methods()]
    missing = [
        f"{owner.__name__}.{f.name}"
        for owner in owners
        for f in dataclasses.fields(owner)
        if f.name != "params" and not f.metadata.get("help")
    ]
    assert not missing, f"declare these with edgefd.settings.setting(default, help): {missing}"
