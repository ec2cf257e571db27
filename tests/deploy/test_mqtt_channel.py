"""The MQTT channel's message handling without a broker: the step exchange's numbering, repeats
and refusals (the end-to-end run over Mosquitto is in test_mqtt_deployment.py)."""

import time

import numpy as np
import pytest

from edgefd.deploy import messages as wire
from edgefd.deploy.mqtt_channel import DeploymentSettings, MqttChannel, _Phase
from edgefd.deploy.mqtt_transport import Incoming, Topics
from edgefd.protocol import Payload, encoded_size
from edgefd.runtime.config import SimulationConfig


@pytest.fixture
def channel():
    channel = MqttChannel(
        SimulationConfig(clients=2, rounds=3), DeploymentSettings(run="u"), ["client-0", "client-1"], Topics("u")
    )
    channel.published, channel.rejected = [], []
    channel.endpoint.publish = lambda topic, payload, retain=False: channel.published.append((topic, payload))
    channel.endpoint.reject = lambda reason, topic, detail, nbytes=0: channel.rejected.append(reason)
    return channel


def step(k, x, cid="client-0", round=1):
    request = Payload("fedcache.request", cid, round, {"x": np.array([x], np.float32)})
    return Incoming("up", cid, "step", wire.numbered(request, cid, round, k), nbytes=0)


def test_steps_are_answered_once_in_order_and_a_repeat_gets_the_same_answer(channel):
    asked = []

    def answer(request):
        asked.append(float(request.arrays["x"][0]))
        assert wire.STEP not in request.scalars  # the method sees its own payload, not the numbering
        return Payload("fedcache.answer", "server", 1, {"y": 2 * request.arrays["x"]})

    channel.phase = _Phase("steps", 1, ["client-0"], {}, time.monotonic(), answer=answer)
    channel._handle(step(1, 5.0))
    channel._handle(step(1, 5.0))  # its answer was lost: the same answer again, not a second ask
    channel._handle(step(3, 9.0))  # a gap: refused
    channel._handle(step(2, 7.0))
    assert asked == [5.0, 7.0]
    assert channel.rejected == ["step-out-of-order"]
    topics = {topic for topic, _ in channel.published}
    assert topics == {"edgefd/u/down/client-0/step"}
    answers = [wire.step_of(p) for _, p in channel.published]
    assert [k for k, _ in answers] == [1, 1, 2]
    assert [float(p.arrays["y"][0]) for _, p in answers] == [10.0, 10.0, 14.0]
    request_bytes = sum(encoded_size(wire.step_of(step(k, x).payload)[1]) for k, x in ((1, 5.0), (2, 7.0)))
    answer_bytes = sum(encoded_size(p) for _, p in (answers[0], answers[2]))
    assert channel.round_bytes(1) == (request_bytes, answer_bytes)  # each step counted once, as simulate does


def test_steps_nobody_asked_for_and_bad_ones_are_refused_without_a_crash(channel):
    def answer(request):
        if float(request.arrays["x"][0]) < 0:
            raise ValueError("unknown sample ids")
        return Payload("fedcache.answer", "server", 1)

    channel.phase = _Phase("steps", 1, ["client-0"], {}, time.monotonic(), answer=answer)
    channel._handle(step(1, 1.0, cid="client-1"))  # not this client's turn
    channel._handle(step(1, 1.0, round=3))  # a future round
    unnumbered = Payload("fedcache.request", "client-0", 1, {"x": np.ones(1, np.float32)})
    channel._handle(Incoming("up", "client-0", "step", unnumbered, nbytes=0))
    channel._handle(step(1, -1.0))  # the method refuses it
    channel.phase = None
    channel._handle(step(1, 1.0))  # no steps phase open
    assert channel.rejected == ["unrequested", "future-round", "bad-step", "bad-request", "unrequested"]
    assert channel.published == []
