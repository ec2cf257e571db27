"""The in-process transport counts exactly the encoded bytes and hands over decoded copies."""

import numpy as np

from edgefd.protocol import Payload, encode
from edgefd.runtime.transport import DOWN, UP, InProcessTransport


def test_counted_bytes_equal_encoded_lengths_and_copies_are_independent():
    transport = InProcessTransport()
    arrays = {"w": np.arange(12, dtype=np.float32).reshape(3, 4)}
    up = Payload("weights", "client-1", 3, arrays, {"samples": 7})
    down = Payload("knowledge", "server", 3, {"z": np.ones((2, 10), np.float32)}).with_precision("int8")
    got_up = transport.upload(up, 3, "client-1")
    got_down = transport.download(down, 3, "client-1")
    assert transport.ledger.total(UP, 3) == len(encode(up))
    assert transport.ledger.total(DOWN, 3) == len(encode(down))
    assert transport.ledger.per_client(UP) == {"client-1": len(encode(up))}
    np.testing.assert_array_equal(got_up.arrays["w"], arrays["w"])
    got_up.arrays["w"][0, 0] = 99  # the receiver's copy is its own
    assert arrays["w"][0, 0] == 0
    assert got_down.precision == {"z": "int8"}


def test_nothing_sent_counts_nothing():
    transport = InProcessTransport()
    assert transport.upload(None, 1, "c") is None
    assert transport.ledger.total(UP) == 0
