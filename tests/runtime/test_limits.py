"""The largest message a run takes follows from the run: each method's bound for its data and models
(64 MiB where a size is open), under --max-message-bytes where an operator sets one; a client takes
whatever its server may send it."""

import numpy as np
import pytest
import torch
from torch import nn

from edgefd.algorithms.schema import MessageSchema, message_bound, model_state
from edgefd.runtime.build import build
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.limits import (
    OPEN_MESSAGE_BYTES,
    OVERSIZED,
    SMALL_ANSWER_MAX_BYTES,
    WRAPPING_BYTES,
    MessageLimits,
    client_limit,
    method_bounds,
)

BOUNDS = {"hello": None, "train": 700, "steps": 0, "step": 0}


def test_the_limit_is_the_methods_bound_and_a_cap_only_lowers_it():
    limits = MessageLimits(None, lambda cid: BOUNDS)
    assert limits.largest("c", "train") == OPEN_MESSAGE_BYTES  # before a round: the method said nothing yet
    limits.update(["c"])
    assert limits.largest("c", "train") == 700 + WRAPPING_BYTES
    assert limits.largest("c", "hello") == OPEN_MESSAGE_BYTES  # a size the schema leaves open
    assert limits.largest("c", "step") == WRAPPING_BYTES  # no content: an answer without any
    assert limits.largest("c", "evaluate") == limits.largest("c", "reply") == SMALL_ANSWER_MAX_BYTES
    assert limits.refusal("c", "train", 700 + WRAPPING_BYTES) is None
    assert limits.refusal("c", "train", 700 + WRAPPING_BYTES + 1) == (
        f"{OVERSIZED} (a train message of 1725 bytes; at most 1724 taken: the method's bound)"
    )

    capped = MessageLimits(1_500, lambda cid: BOUNDS)
    capped.update(["c"])
    assert capped.largest("c", "hello") == capped.largest("c", "evaluate") == 1_500
    assert capped.largest("c", "train") == 1_500  # under the bound's 1,724
    assert "--max-message-bytes" in capped.refusal("c", "train", 1_501)
    assert MessageLimits(10_000, lambda cid: BOUNDS).largest("c", "train") == 10_000  # before a round: the cap
    with pytest.raises(ValueError, match="max_message_bytes"):
        MessageLimits(WRAPPING_BYTES - 1)
    with pytest.raises(ValueError, match="max_message_bytes"):
        SimulationConfig(max_message_bytes=10).validate()


def test_fedicts_uplink_at_mnist5k_shares_is_over_64_mib_and_taken_by_default(tmp_path):
    """FedICT's features for ~1,380 MNIST samples weigh ~69 MB (the run of `edgefd simulate --algo fedict
    --dataset mnist5k --clients 3 --seed 2718`): by default each is taken, and a cap of 64 MiB, the old
    fixed limit, refuses two of the three."""
    config = SimulationConfig(algo="fedict", dataset="mnist5k", clients=3, seed=2718, threads=1, out=str(tmp_path))
    sim = build(config)
    try:
        sim.federation.hello()  # the server learns each client's samples: its uplink's size
        bounds = {cid: method_bounds(sim.server, cid)["train"] for cid in sim.federation.client_ids}
        features = {cid: role.data.num_train * 16 * 28 * 28 * 4 for cid, role in sim.clients.items()}
    finally:
        sim.close()
    assert all(bounds[cid] > features[cid] for cid in bounds)  # the features alone, as float32
    assert sum(bound > OPEN_MESSAGE_BYTES for bound in bounds.values()) == 2, bounds
    taken = MessageLimits(None, lambda cid: {"train": bounds[cid]})
    capped = MessageLimits(OPEN_MESSAGE_BYTES, lambda cid: {"train": bounds[cid]})
    for limits in (taken, capped):
        limits.update(bounds)
    largest = {cid: bound + WRAPPING_BYTES for cid, bound in bounds.items()}  # its uplink, at most
    assert all(taken.refusal(cid, "train", size) is None for cid, size in largest.items())
    assert [cid for cid, size in largest.items() if capped.refusal(cid, "train", size)] == ["client-0", "client-1"]


def test_a_client_takes_a_model_larger_than_64_mib_from_its_server():
    """FedAvg and DFL send the global model back, FedZKT the device's own: a model of the client's
    architecture with what rides along, whatever its size (VGG-16 for CIFAR-100 weighs ~514 MiB)."""
    model = nn.Linear(4096, 4200)  # ~66 MiB of weights
    state = {name: tensor.numpy() for name, tensor in model.state_dict().items()}
    soft_targets = {"soft_targets": np.zeros((100, 100), np.float32)}  # DFL's table rides with the model
    schema = MessageSchema("weights", {**model_state(state), **model_state(soft_targets)})
    downlink = message_bound([schema]) + WRAPPING_BYTES
    assert downlink > OPEN_MESSAGE_BYTES
    assert client_limit(model, None) >= downlink
    assert client_limit(model, 1_000_000) == 1_000_000  # the run's cap, on both sides
    assert client_limit(nn.Linear(2, 2), None) == OPEN_MESSAGE_BYTES + 2 * 6 * torch.float32.itemsize
