"""`edgefd methods`: what can be passed to `--algo`, and each method's `--param`s with defaults."""

from __future__ import annotations

import argparse

from edgefd.algorithms.base import describe_params, list_methods


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="show only this method")


def run(args: argparse.Namespace) -> int:
    methods = [m for m in list_methods() if args.name in (None, m.name)]
    if not methods:
        print(f"edgefd methods: unknown method {args.name!r}")
        return 2
    for method in methods:
        print(f"{method.name:<10} {method.summary}")
        for name, default, doc in describe_params(method.params):
            print(f"    --param {f'{name}={default}':<28} {doc}")
    return 0
