"""The run's wire precision on a payload's knowledge: a property of the wire, applied by the runtime to
every message it sends (``--precision``), never by a method."""

from __future__ import annotations

from collections.abc import Iterable

from .payload import Payload


def at_precision(payload: Payload, precision: str, names: Iterable[str] | None = None) -> Payload:
    """``payload`` with the run's wire precision (``--precision``: fp32, fp16 or int8) on its
    knowledge: the float arrays in ``names`` (those absent from the payload are skipped), or every
    float array. fp32 leaves the payload as it is, so what is not knowledge (model weights, a
    float64 table, labels and ids) always travels losslessly."""
    if precision == "fp32":
        return payload
    if names is not None:
        names = [name for name in names if name in payload.arrays]
    return payload.with_precision(precision, names)
