"""edgefd.protocol: typed payloads and the one binary codec.

>>> import numpy as np
>>> from edgefd.protocol import Payload, encode, decode
>>> p = Payload("logits", {"z": np.zeros((4, 10), np.float32)}, {"n": 4})
>>> q = decode(encode(p.with_precision("int8")))
>>> q.arrays["z"].dtype, q.scalars["n"], q.precision
(dtype('float32'), 4, {'z': 'int8'})

The bytes :func:`encode` returns are the bytes sent and counted. The wire layout is documented in
:mod:`edgefd.protocol.codec` (payloads) and :mod:`edgefd.protocol.chunking` (chunk frames).
Everything a receiver can be made to raise by the bytes it gets is a :class:`ProtocolError`.
"""

from .chunking import (
    CHUNK_HEADER_SIZE,
    CHUNK_MAGIC,
    FRAME_OVERHEAD,
    Chunk,
    Reassembler,
    ReassemblerStats,
    ReassemblyBudget,
    chunk_count,
    chunked_size,
    iter_split,
    new_message_id,
    parse_chunk,
    split,
)
from .codec import (
    DEFAULT_MAX_BYTES,
    HEADER_SIZE,
    MAGIC,
    VERSION,
    Header,
    decode,
    dequantise_int8,
    encode,
    encode_buffers,
    encoded_size,
    quantise_int8,
    read_header,
)
from .errors import (
    BudgetExhaustedError,
    ChecksumError,
    InconsistentChunkError,
    MagicError,
    MalformedError,
    NonFiniteError,
    OversizedError,
    PayloadError,
    ProtocolError,
    TruncatedError,
    UnsupportedVersionError,
    VersionError,
)
from .message import (
    MESSAGE_VERSION,
    MESSAGE_VERSIONS,
    SERVER,
    Message,
    decode_message,
    encode_message,
    encode_message_buffers,
    message_version,
)
from .payload import NONFINITE_OK_KINDS, PRECISIONS, Payload, finite_required
from .precision import at_precision

__all__ = [
    "Message",
    "SERVER",
    "encode_message",
    "encode_message_buffers",
    "decode_message",
    "message_version",
    "MESSAGE_VERSION",
    "MESSAGE_VERSIONS",
    "Payload",
    "PRECISIONS",
    "at_precision",
    "NONFINITE_OK_KINDS",
    "finite_required",
    "encode",
    "encode_buffers",
    "decode",
    "encoded_size",
    "read_header",
    "Header",
    "quantise_int8",
    "dequantise_int8",
    "MAGIC",
    "VERSION",
    "HEADER_SIZE",
    "DEFAULT_MAX_BYTES",
    "split",
    "iter_split",
    "parse_chunk",
    "chunk_count",
    "chunked_size",
    "new_message_id",
    "Chunk",
    "Reassembler",
    "ReassemblerStats",
    "ReassemblyBudget",
    "FRAME_OVERHEAD",
    "CHUNK_MAGIC",
    "CHUNK_HEADER_SIZE",
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
