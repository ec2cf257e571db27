"""Progress for the long steps inside a run: hashing a dataset, searching relations, a server's
distillation, exporting models.

A step that ends within a couple of seconds shows nothing; a longer one shows a bar with its rate
and an estimate of the time left (tqdm's), on standard error and only on a terminal, so services and
logs are not flooded. `edgefd simulate --quiet` switches every bar off.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

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
