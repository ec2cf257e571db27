"""A client's work that asks the server, stepped as messages (`Conversation`), alone and inside the
in-process channel."""

from types import SimpleNamespace

import numpy as np

from edgefd import _kernels, kernels
from edgefd.protocol import Message, Payload
from edgefd.runtime.channel import InProcessChannel
from edgefd.runtime.conversation import Conversation
from edgefd.runtime.verbs import VERBS, ClientApp, StepRefused


class TwoAsks:
    """Asks the server twice during its training and uploads the answers' sum; notes the OpenMP
    threads its work ran with."""

    client_id = "c0"
    context = SimpleNamespace(precision="fp32")
    knowledge = ()
    model = None

    def __init__(self) -> None:
        self.threads: list[int] = []

    def train_steps(self, round):
        self.threads.append(_kernels.get_num_threads())
        first = yield Payload("ask", {"x": np.array([1.0], np.float32)})
        second = yield Payload("ask", {"x": np.array([2.0], np.float32)})
        return Payload("done", {"sum": first.arrays["y"] + second.arrays["y"]})

    @classmethod
    def done_sharing(cls):
        return None


def doubled(request: Message) -> Message:
    return request.answer(Payload("teachers", {"y": 2 * request.content.arrays["x"]}))


STEPS = Message("steps", "server", "c0", 1)


def test_each_request_comes_out_as_a_message_and_the_work_ends_with_its_answer():
    conversation = Conversation(ClientApp(TwoAsks()), STEPS)
    event = conversation.start()
    asked = []
    while event.kind == "ask":
        asked.append((event.message.verb, event.message.step, event.message.is_answer))
        event = conversation.resume(doubled(event.message))
    assert asked == [("step", 1, False), ("step", 2, False)]
    assert event.kind == "done" and not conversation.open
    assert event.message.verb == "steps" and event.message.is_answer
    assert float(event.message.content.arrays["sum"][0]) == 6.0


def test_a_refused_request_ends_the_work_unanswered():
    conversation = Conversation(ClientApp(TwoAsks()), STEPS)
    assert conversation.start().kind == "ask"
    event = conversation.abandon()
    assert event.kind == "missed" and isinstance(event.error, StepRefused)
    assert "step 1 of round 1: the server refused the request" in str(event.error)


def test_an_error_in_the_clients_code_comes_back_to_the_caller():
    class Broken(TwoAsks):
        def train_steps(self, round):
            raise KeyError("a bug")
            yield  # a generator

    event = Conversation(ClientApp(Broken()), STEPS).start()
    assert event.kind == "failed" and isinstance(event.error, KeyError)


def test_the_in_process_channel_carries_each_request_to_the_loop_and_its_answer_back_at_the_runs_threads():
    role = TwoAsks()
    channel = InProcessChannel({"c0": role})
    deadline = VERBS["steps"].deadline
    kernels.set_num_threads(2)  # the run's; a new thread starts at OpenMP's default (the suite's 1)
    try:
        came = channel.send_and_receive([STEPS], deadline).answers["c0"]
        while not came.is_answer:
            came = channel.send_and_receive([doubled(came)], deadline).answers["c0"]
    finally:
        kernels.set_num_threads(1)  # the suite's (tests/conftest.py)
    assert float(came.content.arrays["sum"][0]) == 6.0
    assert role.threads == [2]
