"""Every `edgefd` command's options, read from its real parser: for the tests that check what the
docs and the messages name."""

from __future__ import annotations

import argparse
import functools

from edgefd import cli


def _walk(parser: argparse.ArgumentParser, name: str, found: dict[str, set[str]]) -> None:
    found[name] = {flag for action in parser._actions for flag in action.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                _walk(sub, f"{name} {sub_name}".strip(), found)


@functools.cache
def command_flags() -> dict[str, set[str]]:
    """{"simulate": {"--algo", ...}, "bench kernels": {...}, "": the top level's}, from `edgefd`'s parser."""
    found: dict[str, set[str]] = {}
    _walk(cli.build_parser(), "", found)
    return found
