"""Progress for the long steps inside a run: hashing a dataset, searching relations, a server's
distillation, exporting models; and the bar of a whole run's rounds (`simulate`, `deploy-local`).

A step that ends within a couple of seconds shows nothing; a longer one shows a bar with its rate
and an estimate of the time left (tqdm's), on standard error and only on a terminal, so services and
logs are not flooded. `edgefd simulate --quiet` switches every bar off.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from tqdm import tqdm

T = TypeVar("T")

_enabled = True
DELAY_SECONDS = 2.0
"""A step shows its bar only once it has run this long."""


def set_enabled(enabled: bool) -> None:
    """Switches every progress bar of this process on or off."""
    global _enabled
    _enabled = bool(enabled)


def enabled() -> bool:
    return _enabled


def track(items: Iterable[T], description: str, total: int | None = None, unit: str = "it") -> Iterator[T]:
    """``items``, with a progress bar named ``description`` if the loop turns out to be long."""
    if not _enabled:
        yield from items
        return
    # disable=None: no bar when standard error is not a terminal (a service, a pipe, a test).
    with tqdm(items, desc=description, total=total, unit=unit, leave=False, delay=DELAY_SECONDS, disable=None) as bar:
        yield from bar


def round_bar(total: int, description: str) -> tqdm | None:
    """The bar of a run's rounds, one step a round, on standard error (None when switched off)."""
    if not _enabled:
        return None
    return tqdm(total=total, desc=description, unit="round", file=sys.stderr)


def show_round(bar: tqdm | None, line: dict[str, Any]) -> None:
    """One finished round (a line of metrics.jsonl) on ``bar``: its accuracy and the bytes so far."""
    if bar is None:
        return
    bar.update(1)
    accuracy = "" if line.get("accuracy") is None else f"acc {100 * line['accuracy']:.1f}%  "
    bar.set_postfix_str(
        f"{accuracy}up {byte_size(line['bytes_up_cumulative'])}  down {byte_size(line['bytes_down_cumulative'])}"
    )


def byte_size(n: float) -> str:
    """``n`` bytes in the unit that shows it (5,337 bytes: "5.34 kB", not "0.01 MB"), decimal units."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"
