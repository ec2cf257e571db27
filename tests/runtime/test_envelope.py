"""The envelope the runtime puts on every method message: the sender and round it stamps, and the
wire precision it gives the arrays a role names as knowledge (and only those)."""

from types import SimpleNamespace

import numpy as np
import pytest

from edgefd.algorithms.base import ClientRole, ServerRole
from edgefd.protocol import Payload, decode, encode
from edgefd.runtime import envelope
from edgefd.runtime.records import HELLO_ROUND


class Talker(ClientRole):
    """A client whose messages carry knowledge ("logits") beside lossless arrays, and say the wrong
    sender and round (the envelope must not believe them)."""

    knowledge = ("logits", "absent")

    def __init__(self, precision: str) -> None:
        self.client_id = "c1"
        self.context = SimpleNamespace(precision=precision)

    def message(self) -> Payload:
        arrays = {
            "logits": np.linspace(-3, 3, 20, dtype=np.float32).reshape(2, 10),
            "weights": np.linspace(-1, 1, 6, dtype=np.float32),
            "ids": np.arange(2, dtype=np.int64),
        }
        return Payload("talk", "someone-else", 99, arrays)

    def hello(self):
        return self.message()

    def train_round(self, round, downlink):
        return self.message()

    def train_steps(self, round):
        reply = yield self.message()
        self.replies = [reply]
        reply = yield self.message()
        self.replies.append(reply)
        return self.message()


class Teller(ServerRole):
    knowledge = ("knowledge",)

    def __init__(self, precision: str) -> None:
        self.context = SimpleNamespace(precision=precision)

    def downlink(self, round, client_id):
        return None

    def aggregate(self, round, uplinks):
        return {}


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_knowledge_travels_at_the_run_precision_and_nothing_else_does(precision):
    sealed = envelope.train_round(Talker(precision), 4, None)
    assert sealed.precision == {"logits": precision}
    received = decode(encode(sealed))
    original = Talker(precision).message()
    assert np.array_equal(received.arrays["weights"], original.arrays["weights"])  # lossless
    assert np.array_equal(received.arrays["ids"], original.arrays["ids"])
    error = np.abs(received.arrays["logits"] - original.arrays["logits"]).max()
    assert 0 < error < 0.05  # rounded, and only a little


def test_fp32_sends_the_methods_arrays_themselves():
    client = Talker("fp32")
    built = client.message()
    sealed = envelope.from_client(client, built, 4)
    assert sealed.precision == {}
    assert all(sealed.arrays[name] is built.arrays[name] for name in built.arrays)  # not even copied


def test_the_runtime_stamps_sender_and_round():
    client, server = Talker("fp16"), Teller("fp16")
    uplink = envelope.train_round(client, 7, None)
    assert (uplink.sender, uplink.round) == ("c1", 7)
    hello = envelope.hello(client)
    assert (hello.sender, hello.round) == ("c1", HELLO_ROUND)
    down = envelope.from_server(server, Payload("k", "c1", 3, {"knowledge": np.ones((2, 2), np.float32)}), 5)
    assert (down.sender, down.round, down.precision) == (envelope.SERVER, 5, {"knowledge": "fp16"})
    assert envelope.from_server(server, None, 5) is None


def test_a_step_exchange_is_sealed_both_ways_and_the_answers_pass_unchanged():
    client = Talker("int8")
    steps = envelope.train_steps(client, 2)
    first = next(steps)
    answer = Payload("answer", "server", 2, {"knowledge": np.zeros((2, 3), np.float32)})
    second = steps.send(answer)
    with pytest.raises(StopIteration) as finished:
        steps.send(answer)
    final = finished.value.value
    for message in (first, second, final):
        assert (message.sender, message.round, message.precision) == ("c1", 2, {"logits": "int8"})
    assert client.replies == [answer, answer]
