"""The step exchange's message handling without a broker, on the server's channel and on a device:
numbering, repeats, refusals, a server that moves on (the end-to-end run over Mosquitto is in
test_mqtt_deployment.py)."""

import time
from types import SimpleNamespace

import numpy as np
import pytest

from edgefd.deploy import mqtt_channel
from edgefd.deploy.client_runtime import ClientRuntime, ClientSettings, _Interrupted
from edgefd.deploy.mqtt_channel import DeploymentSettings, MqttChannel, _Phase
from edgefd.deploy.mqtt_transport import BrokerSettings, Incoming, Topics
from edgefd.protocol import Message, Payload
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.verbs import VERBS, ClientApp


@pytest.fixture
def channel():
    channel = MqttChannel(
        SimulationConfig(clients=2, rounds=3),
        DeploymentSettings(run="u", broker=BrokerSettings("mqtt://127.0.0.1:1883")),
        ["client-0", "client-1"],
        Topics("u"),
    )
    channel.published, channel.rejected = [], []
    channel.endpoint.publish = lambda topic, message, retain=False: channel.published.append((topic, message))
    channel.endpoint.reject = lambda reason, topic, detail, nbytes=0: channel.rejected.append(reason)
    return channel


def step(k, x, cid="client-0", round=1):
    request = Payload("fedcache.request", {"x": np.array([x], np.float32)})
    return Incoming("up", cid, "step", Message("step", cid, "server", round, request, k, "u"), nbytes=0)


def serving(answer):
    """The loop's answer to a step request: the method's answer to its content."""
    return lambda request: request.answer(answer(request.content))


def test_steps_are_answered_once_in_order_and_a_repeat_gets_the_same_answer(channel):
    asked = []

    def answer(request):
        asked.append(float(request.arrays["x"][0]))
        return Payload("fedcache.answer", {"y": 2 * request.arrays["x"]})

    channel.phase = _Phase("steps", 1, ["client-0"], {}, time.monotonic(), serve=serving(answer))
    channel._handle(step(1, 5.0))
    channel._handle(step(1, 5.0))  # its answer was lost: the same answer again, not a second ask
    channel._handle(step(3, 9.0))  # a gap: refused
    channel._handle(step(2, 7.0))
    assert asked == [5.0, 7.0]
    assert channel.rejected == ["step-out-of-order"]
    topics = {topic for topic, _ in channel.published}
    assert topics == {"edgefd/u/down/client-0/step"}
    answers = [m for _, m in channel.published]
    assert [(m.step, m.is_answer, m.receiver) for m in answers] == [
        (1, True, "client-0"),
        (1, True, "client-0"),
        (2, True, "client-0"),
    ]
    assert [float(m.content.arrays["y"][0]) for m in answers] == [10.0, 10.0, 14.0]


def test_steps_nobody_asked_for_and_bad_ones_are_refused_without_a_crash(channel):
    def answer(request):
        if float(request.arrays["x"][0]) < 0:
            raise ValueError("unknown sample ids")
        return Payload("fedcache.answer")

    channel.phase = _Phase("steps", 1, ["client-0"], {}, time.monotonic(), serve=serving(answer))
    channel._handle(step(1, 1.0, cid="client-1"))  # not this client's turn
    channel._handle(step(1, 1.0, round=3))  # a future round
    channel._handle(step(0, 1.0))  # unnumbered
    channel._handle(step(1, -1.0))  # the method refuses it
    channel.phase = None
    channel._handle(step(1, 1.0))  # no steps phase open
    assert channel.rejected == ["unrequested", "future-round", "bad-step", "bad-request", "unrequested"]
    assert channel.published == []


def steps_phase(channel, monkeypatch, every: float, last: int, steps: int = 5) -> tuple[float, dict[str, str]]:
    """client-0's steps phase of round 1 on a clock of the test's, one second a wait: the client
    sends a step every ``every`` seconds, up to step ``last``, and never finishes. Returns the
    seconds the phase lasted and whom it held (`Delivery.held`); round_timeout 10, step_seconds 2:
    its hard deadline is 10 + 2 x steps."""
    clock = [0.0]
    monkeypatch.setattr(mqtt_channel, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    channel.settings.round_timeout, channel.settings.step_seconds = 10.0, 2.0
    channel.stats["client-0"].online = True  # a training phase waits first for --min-clients online
    sent = [0]

    def wait(timeout):
        clock[0] += 1.0
        assert clock[0] < 200, "the steps kept the phase open as long as they came"
        if sent[0] < last and clock[0] % every == 0:
            sent[0] += 1
            channel._handle(step(sent[0], 1.0))

    channel._pump = wait
    answer = serving(lambda request: Payload("fedcache.answer"))
    request = Message("steps", "server", "client-0", 1, run="u")
    delivery = channel.send_and_receive([request], VERBS["steps"].deadline, answer, steps)
    assert delivery.answers == {}
    return clock[0], delivery.held


def test_a_client_stepping_slowly_is_cut_at_its_hard_deadline_and_named(channel, monkeypatch):
    """A step every 4 s, each within the 10 s the phase waits after a step: without a deadline from
    the phase's start they would hold it as long as they came."""
    seconds, held = steps_phase(channel, monkeypatch, every=4, last=100)
    assert seconds == 10 + 2 * 5
    assert list(held) == ["client-0"]
    assert "cut at its hard deadline, 20 s after it began" in held["client-0"]
    assert "after 5 step(s)" in held["client-0"]  # steps at 4, 8, 12, 16 and 20 s were taken


def test_a_client_that_stops_sending_ends_its_phase_at_the_idle_timeout_unnamed(channel, monkeypatch):
    assert steps_phase(channel, monkeypatch, every=4, last=2) == (8 + 10, {})  # 10 s after its last step


class StepsRole:
    """A client role that asks the server twice during its training and uploads the answers' sum."""

    client_id = "client-0"
    context = SimpleNamespace(precision="fp32")
    knowledge = ()

    def train_steps(self, round):
        first = yield Payload("ask", {"x": np.array([1.0], np.float32)})
        second = yield Payload("ask", {"x": np.array([2.0], np.float32)})
        return Payload("done", {"sum": first.arrays["y"] + second.arrays["y"]})


@pytest.fixture
def device():
    runtime = ClientRuntime(ClientSettings("u", "client-0", BrokerSettings("mqtt://127.0.0.1:1")))
    runtime.app = ClientApp(StepsRole())
    runtime.sent = []
    runtime.endpoint.publish = lambda topic, message, retain=False: runtime.sent.append((topic, message))
    return runtime


def answer(k, y, round=1):
    request = Message("step", "client-0", "server", round, None, k, "u")
    content = Payload("teachers", {"y": np.array([y], np.float32)})
    return Incoming("down", "client-0", "step", request.answer(content), nbytes=0)


STEPS = Message("steps", "server", "client-0", 1, run="u")


def test_a_device_waits_for_each_numbered_answer_and_skips_stale_ones(device):
    for message in (answer(1, 10.0), answer(1, 10.0), answer(2, 20.0)):  # a repeated answer to step 1
        device.endpoint.inbox.put(message)
    final = device.app.handle(STEPS, device._ask).content
    assert float(final.arrays["sum"][0]) == 30.0
    assert [(topic, m.step) for topic, m in device.sent] == [
        ("edgefd/u/up/client-0/step", 1),
        ("edgefd/u/up/client-0/step", 2),
    ]


def test_a_device_abandons_its_steps_when_the_server_has_moved_on(device):
    evaluation = Incoming(
        "down", "client-0", "evaluate", Message("evaluate", "server", "client-0", 1, run="u"), nbytes=0
    )
    device.endpoint.inbox.put(answer(1, 10.0))
    device.endpoint.inbox.put(evaluation)  # the server gave up on this client's round 1
    with pytest.raises(_Interrupted):
        device.app.handle(STEPS, device._ask)
    assert device.endpoint.inbox.get_nowait() is evaluation  # left for the main loop to answer
