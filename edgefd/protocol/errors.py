"""Exceptions of :mod:`edgefd.protocol`.

Every error the codec or the chunk reassembler raises is a :class:`ProtocolError`
(itself a :class:`ValueError`), so a receiver can catch exactly one class, count the
rejection by ``type(err).__name__`` and carry on with its state untouched.
"""

from __future__ import annotations

__all__ = [
    "ProtocolError",
    "PayloadError",
    "MalformedError",
    "MagicError",
    "VersionError",
    "UnsupportedVersionError",
    "TruncatedError",
    "ChecksumError",
    "OversizedError",
    "BudgetExhaustedError",
    "NonFiniteError",
    "InconsistentChunkError",
]


class ProtocolError(ValueError):
    """Base class of every error of this module.

    ``field`` names the header field, table entry or array the error is about (or ``None``),
    so callers can group rejections without parsing messages.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class PayloadError(ProtocolError):
    """A payload given to :func:`~edgefd.protocol.encode` (or built as :class:`Payload`) is invalid:
    bad kind/sender/name, unsupported dtype, rank, precision, scalar type, or a finite value that
    does not fit the chosen wire precision. Raised on the *sending* side."""


class MalformedError(ProtocolError):
    """Bytes whose structure is inconsistent: table entries, offsets, lengths, codes, strings."""


class MagicError(MalformedError):
    """The bytes do not start with the expected magic (not a payload / not a chunk frame)."""


class VersionError(ProtocolError):
    """Format version (or flag bits) this decoder does not understand."""


class UnsupportedVersionError(VersionError):
    """A message of a protocol version this side does not speak. ``version`` is the sender's,
    ``supported`` this side's; the text says which side is older and so which to upgrade."""

    def __init__(self, version: int, supported: tuple[int, ...]) -> None:
        older = version < min(supported)
        advice = (
            "the sender runs an older edgefd: upgrade edgefd on the sender"
            if older
            else "the sender runs a newer edgefd: upgrade edgefd on this side"
        )
        super().__init__(
            f"protocol version {version}: this edgefd speaks {versions_text(supported)}; {advice}", field="version"
        )
        self.version = version
        self.supported = tuple(supported)


def versions_text(versions: tuple[int, ...]) -> str:
    """ "version 3" or "versions 2-3": how a line names the versions a side speaks."""
    low, high = min(versions), max(versions)
    return f"version {low}" if low == high else f"versions {low}-{high}"


class TruncatedError(ProtocolError):
    """Fewer bytes than the header (or a table entry) says there are."""


class ChecksumError(ProtocolError):
    """CRC32 stored in the header does not match the bytes."""


class OversizedError(ProtocolError):
    """Larger than the receiver's configured limit (``max_bytes`` / reassembler limits)."""


class BudgetExhaustedError(OversizedError):
    """A frame that fits its message's limits, refused because the memory it would take is spoken
    for: its sender's share of a :class:`~edgefd.protocol.chunking.ReassemblyBudget`, or the
    whole budget. Its own class so that a receiver can tell a flood (this) from a message that is
    too large for its topic (:class:`OversizedError`)."""


class NonFiniteError(ProtocolError):
    """NaN or +/-Inf in a float array or float scalar of a kind that forbids non-finite values."""


class InconsistentChunkError(MalformedError):
    """A chunk frame that contradicts earlier frames of the same message (count, total length,
    or different bytes for an index already received)."""
