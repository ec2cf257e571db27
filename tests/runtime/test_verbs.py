"""The verbs and the one client dispatcher: every verb routed to its handler, the wire precision
the runtime gives the arrays a role names as knowledge (and only those), and the metadata every
message carries apart from its content."""

from types import SimpleNamespace

import numpy as np
import pytest

from edgefd.algorithms.base import CLIENT_CONTENT, ClientRole, ServerRole
from edgefd.protocol import Payload, decode, encode
from edgefd.protocol.message import SERVER, Message
from edgefd.runtime.records import HELLO_ROUND
from edgefd.runtime.verbs import VERBS, ClientApp, UnknownVerb, server_at_precision


class Talker(ClientRole):
    """A client whose messages carry knowledge ("logits") beside lossless arrays, and whose content
    says another sender and round (the message's metadata is the runtime's, not the content's)."""

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
        return Payload("talk", arrays)

    def hello(self):
        return self.message()

    def train_round(self, round, downlink):
        return self.message()

    def train_steps(self, round):
        answer = yield self.message()
        self.answers = [answer]
        answer = yield self.message()
        self.answers.append(answer)
        return self.message()


class Teller(ServerRole):
    knowledge = ("knowledge",)

    def __init__(self, precision: str) -> None:
        self.context = SimpleNamespace(precision=precision)

    def downlink(self, round, client_id):
        return None

    def aggregate(self, round, uplinks):
        return {}


def request(verb: str, round: int, content=None) -> Message:
    return Message(verb, SERVER, "c1", round, content)


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_knowledge_travels_at_the_run_precision_and_nothing_else_does(precision):
    sealed = ClientApp(Talker(precision)).handle(request("train", 4)).content
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
    sealed = ClientApp(client).at_precision(built)
    assert sealed.precision == {}
    assert all(sealed.arrays[name] is built.arrays[name] for name in built.arrays)  # not even copied


def test_an_answer_carries_the_requests_metadata_back():
    app = ClientApp(Talker("fp16"))
    answer = app.handle(request("train", 7))
    assert (answer.verb, answer.sender, answer.receiver, answer.round, answer.is_answer) == (
        "train",
        "c1",
        SERVER,
        7,
        True,
    )
    hello = app.handle(request("hello", HELLO_ROUND))
    assert (hello.sender, hello.round) == ("c1", HELLO_ROUND)
    server = Teller("fp16")
    down = server_at_precision(server, Payload("k", {"knowledge": np.ones((2, 2), np.float32)}))
    assert down.precision == {"knowledge": "fp16"}
    assert server_at_precision(server, None) is None


def test_a_step_exchange_is_sealed_both_ways_numbered_and_the_answers_pass_unchanged():
    client = Talker("int8")
    asked = []
    answer = Payload("answer", {"knowledge": np.zeros((2, 3), np.float32)})

    def ask(step: Message) -> Message:
        asked.append(step)
        return step.answer(answer)

    final = ClientApp(client).handle(request("steps", 2), ask)
    assert [(m.verb, m.sender, m.receiver, m.round, m.step) for m in asked] == [
        ("step", "c1", SERVER, 2, 1),
        ("step", "c1", SERVER, 2, 2),
    ]
    for message in (*asked, final):
        assert message.content.precision == {"logits": "int8"}
    assert client.answers == [answer, answer]


def test_a_verb_the_table_does_not_hold_or_that_only_clients_send_is_refused():
    app = ClientApp(Talker("fp32"))
    with pytest.raises(UnknownVerb, match="unknown verb 'dance'"):
        app.handle(request("dance", 1))
    with pytest.raises(UnknownVerb, match="sent by clients"):
        app.handle(request("step", 1))


def test_the_table_holds_the_loops_verbs():
    assert list(VERBS) == ["hello", "train", "steps", "step", "reply", "evaluate", "stop"]
    assert [name for name, spec in VERBS.items() if not spec.counted] == ["evaluate", "stop"]


def test_every_verb_whose_answer_reaches_the_server_role_has_its_schema_hook():
    """The registration check (`edgefd.algorithms.base.CLIENT_CONTENT`) covers each verb on which a
    client's content reaches the server role: the clients' requests and every full answer (the
    others are empty, an evaluation's scores checked by the table, or none)."""
    reaching = [name for name, spec in VERBS.items() if spec.handle is None or (spec.answers and not spec.small_answer)]
    assert reaching == [content.verb for content in CLIENT_CONTENT] == ["hello", "train", "steps", "step"]
