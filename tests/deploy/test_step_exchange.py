"""The step exchange's message handling without a broker, on the server's channel and on a device:
numbering, repeats, refusals, a server that moves on (the end-to-end run over Mosquitto is in
test_mqtt_deployment.py)."""

import time
from dataclasses import replace
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


def open_steps(channel, timeout: float = 60.0) -> _Phase:
    """client-0's steps phase of round 1, open, as `send_and_receive` opens it."""
    now = time.monotonic()
    phase = _Phase("steps", 1, ["client-0"], {}, now, timeout=timeout, asks=True, active_at=now, ends_at=now + timeout)
    channel.phase = phase
    return phase


def test_steps_are_taken_once_in_order_for_the_loop_to_answer_and_a_repeat_gets_the_same_answer(channel):
    phase = open_steps(channel)
    channel._handle(step(1, 5.0))
    channel._handle(step(1, 5.0))  # a repeat while the loop works on it: nothing more
    channel._handle(step(2, 7.0))  # the next before step 1 is answered: refused
    assert list(phase.pending) == ["client-0"] and phase.pending["client-0"].message.step == 1
    assert channel.rejected == ["step-out-of-order"] and channel.published == []

    ticks = iter([step(1, 5.0), step(3, 9.0), step(2, 7.0)])  # step 1's answer was lost; a gap; step 2
    channel._pump = lambda timeout: channel._handle(next(ticks))
    answer_1 = phase.pending["client-0"].message.answer(Payload("fedcache.answer", {"y": np.array([10.0])}))
    delivery = channel.send_and_receive([answer_1], VERBS["steps"].deadline)
    assert [(cid, m.verb, m.step, m.is_answer) for cid, m in delivery.answers.items()] == [
        ("client-0", "step", 2, False)
    ]
    assert channel.rejected == ["step-out-of-order", "step-out-of-order"]
    assert [(topic, m.step, m.is_answer) for topic, m in channel.published] == [
        ("edgefd/u/down/client-0/step", 1, True),
        ("edgefd/u/down/client-0/step", 1, True),  # the same answer again, not a second ask
    ]
    assert channel.phase is phase  # open while step 2 waits for the loop's answer


def test_steps_nobody_asked_for_and_bad_ones_are_refused_without_a_crash(channel):
    open_steps(channel)
    channel._handle(step(1, 1.0, cid="client-1"))  # not this client's turn
    channel._handle(step(1, 1.0, round=3))  # a future round
    channel._handle(step(0, 1.0))  # unnumbered
    channel.phase = None
    channel._handle(step(1, 1.0))  # no steps phase open
    assert channel.rejected == ["unrequested", "future-round", "bad-step", "unrequested"]
    assert channel.published == []
    with pytest.raises(ValueError, match="waits for no answer to step 1"):
        channel.send_and_receive([step(1, 1.0).message.answer(None)], VERBS["steps"].deadline)


def steps_phase(channel, monkeypatch, every: float, last: int, steps: int = 5) -> tuple[float, dict[str, str]]:
    """client-0's steps phase of round 1 on a clock of the test's, one second a wait: the client
    sends a step every ``every`` seconds, up to step ``last``, and never finishes; the loop answers
    each at once. Returns the seconds the phase lasted and whom it held (`Delivery.held`);
    round_timeout 10, step_seconds 2: its hard deadline is 10 + 2 x steps, at most 10 + step_grace."""
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
    deadline = replace(VERBS["steps"].deadline, steps=steps)
    delivery = channel.send_and_receive([Message("steps", "server", "client-0", 1, run="u")], deadline)
    while delivery.answers:  # a step request: the loop answers it
        (request,) = delivery.answers.values()
        assert not request.is_answer
        delivery = channel.send_and_receive([request.answer(Payload("fedcache.answer"))], deadline)
    return clock[0], delivery.held


def test_a_client_stepping_slowly_is_cut_at_its_hard_deadline_and_named(channel, monkeypatch):
    """A step every 4 s, each within the 10 s the phase waits after a step: without a deadline from
    the phase's start they would hold it as long as they came."""
    seconds, held = steps_phase(channel, monkeypatch, every=4, last=100)
    assert seconds == 10 + 2 * 5
    assert list(held) == ["client-0"]
    assert "cut at its hard deadline, 20 s after it began" in held["client-0"]
    assert "after 5 step(s)" in held["client-0"]  # steps at 4, 8, 12, 16 and 20 s were answered


def test_a_hello_claiming_45_steps_holds_a_round_no_longer_than_the_timeout_plus_the_grace(channel, monkeypatch):
    """The stall by claim: a hello declaring the whole training set makes 45 steps (13 for an honest
    share), and a step every 2 s would hold the phase 10 + 2 x 45 = 100 s. The server's grace, not
    the claim, bounds it: 10 + 30 s."""
    channel.settings.step_grace = 30.0
    seconds, held = steps_phase(channel, monkeypatch, every=2, last=45, steps=45)
    assert seconds == 10 + 30
    assert list(held) == ["client-0"]
    assert "cut at its hard deadline, 40 s after it began" in held["client-0"]
    assert "(--round-timeout 10 + --step-grace 30, less than its 45 step(s) x --step-seconds 2)" in held["client-0"]
    assert channel.step_allowance(5) == 2 * 5  # an honest share's steps still get their seconds each


def test_the_default_grace_bounds_a_claim_and_leaves_an_honest_share_its_seconds(channel):
    assert channel.settings.step_grace == 60.0
    assert channel.step_allowance(45) == 60.0  # the claim's 90 s: cut to the grace
    assert channel.step_allowance(13) == 26.0  # an honest digits share (13 steps): as before
    with pytest.raises(ValueError, match="step_grace"):
        DeploymentSettings(run="u", broker=channel.settings.broker, step_grace=-1.0).validate()


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
