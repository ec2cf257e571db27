"""`edgefd methods`: what can be passed to `--algo`, and each method's `--param`s with defaults."""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import TYPE_CHECKING

# The functions below import the methods (and so torch) when they run: `--help` needs neither.
if TYPE_CHECKING:
    from edgefd.algorithms.base import MethodSpec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name",
        nargs="?",
        metavar="METHOD",
        help="show only this method, e.g. fedcache (default: list them all, with their names)",
    )


#: Data shapes to show each method's ``--models auto`` choice for: the bundled datasets and CIFAR's.
EXAMPLE_SHAPES: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("digits, 8x8 grey", (1, 8, 8)),
    ("fmnist / mnist5k, 28x28 grey", (1, 28, 28)),
    ("cifar10 / svhn, 32x32 colour", (3, 32, 32)),
    ("watch, 100 x 6 sensor windows", (100, 6)),
)


def model_lines(method: MethodSpec) -> list[str]:
    """What ``--models auto`` gives ``method`` on each example data shape, as model names."""
    from edgefd.models import assign_models

    lines = []
    for label, shape in EXAMPLE_SHAPES:
        try:
            names = list(dict.fromkeys(assign_models(method.models(shape), 12, input_shape=shape)))
            lines.append(f"{label:<32} {', '.join(names)}")
        except ValueError as error:
            lines.append(f"{label:<32} (not supported: {error})")
    return lines


LIFECYCLE_TEXT = {"fresh": "a new optimiser every round (fresh)", "kept": "one optimiser kept for the run (kept)"}
ORDER_TEXT = {
    "fixed": "one random batch order per client, drawn once (fixed)",
    "reshuffle": "batches reshuffled every epoch (reshuffle)",
}


def method_page(name: str) -> str:
    """The method's page in the repository's docs/methods/: the paper's algorithm as edgefd runs it,
    its ambiguities with edgefd's choices, and its params."""
    return f"docs/methods/{name}.md"


def describe(method: MethodSpec) -> str:
    """Everything a user needs to run ``method``: summary, paper, models, params, a command line."""
    from edgefd.algorithms.params import describe_params

    lines = [f"{method.name}: {method.summary}"]
    if method.paper:
        lines.append(f"paper: {method.paper}")
    lines.append(f"how edgefd runs it, and every choice where the paper is silent: {method_page(method.name)}")
    lines.append("")
    lines.append("client models (--models auto picks these; --models NAME,NAME,... overrides):")
    lines += ["  " + line for line in model_lines(method)]
    training = method.client.local_training
    lines.append("")
    lines.append("local training, as the paper does it (the default; --epochs, --optimizer-lifecycle, --batch-order):")
    epochs = f"{training.epochs} local epoch{'s' if training.epochs > 1 else ''} a round"
    lines.append(f"  {epochs}; {LIFECYCLE_TEXT[training.optimizer_lifecycle]}; {ORDER_TEXT[training.batch_order]}")
    lines.append("")
    params = describe_params(method.params)
    lines.append("params (--param NAME=VALUE, defaults shown):" if params else "params: none")
    for name, default, doc in params:
        lines += wrapped(f"  {f'{name}={default}':<30} {doc}", indent=33)
    lines.append("")
    lines.append("try:")
    lines.append(f"  edgefd simulate --algo {method.name}                      # bundled digits, 10 clients, 10 rounds")
    lines.append(f"  edgefd simulate --algo {method.name} --dataset fmnist --samples-per-client 200 --rounds 20")
    return "\n".join(out for line in lines for out in (wrapped(line, indent=4) if len(line) > WIDTH else [line]))


def run(args: argparse.Namespace) -> int:
    from edgefd.algorithms.base import list_methods
    from edgefd.algorithms.params import describe_params

    methods = [m for m in list_methods() if args.name in (None, m.name)]
    if not methods:
        known = ", ".join(m.name for m in list_methods())
        print(f"edgefd methods: unknown method {args.name!r}; known: {known}", file=sys.stderr)
        return 2
    if args.name is not None:
        print(describe(methods[0]))
        return 0
    for method in methods:
        print("\n".join(wrapped(f"{method.name:<10} {method.summary}", indent=11)))
        params = " ".join(f"{name}={default}" for name, default, _ in describe_params(method.params))
        print("\n".join(wrapped(f"{'':<10} params: {params or 'none'}", indent=19)))
    print("\nedgefd methods NAME: one method's paper, client models, and each param with what it does")
    return 0


WIDTH = 100
"""Columns `edgefd methods` fills: its longest line was 486 characters."""


def wrapped(line: str, indent: int) -> list[str]:
    """``line`` in lines of at most `WIDTH` columns, each after the first indented by ``indent``."""
    return textwrap.wrap(
        line, WIDTH, subsequent_indent=" " * indent, break_long_words=False, break_on_hyphens=False
    ) or [""]
