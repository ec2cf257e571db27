"""How a simulation is built from its config: what each client holds."""

from __future__ import annotations

import numpy as np
import torch

from edgefd.algorithms.base import ClientData
from edgefd.runtime.build import build, client_data, prepare
from edgefd.runtime.config import SimulationConfig


def test_clients_keep_8bit_images_as_bytes_and_see_the_same_inputs(tmp_path):
    """Fashion-MNIST is stored as 8-bit images: a simulation's clients keep their shares as bytes (a
    quarter of float32's memory: what lets 20 clients hold the whole set in under 1 GiB) and
    normalise them when used, to the same numbers as a float32 load."""
    config = SimulationConfig("fd", dataset="fmnist", clients=3, samples_per_client=40, seed=1, out=str(tmp_path))
    sim = build(config)
    whole = prepare(config)  # the float32 load
    assert whole.dataset.raw is None and whole.dataset.train_x.dtype == torch.float32
    for index, cid in enumerate(sim.clients):
        kept, reference = sim.clients[cid].data, client_data(whole, index)
        pixels = (kept.num_train + len(kept.test_y)) * 28 * 28
        assert kept.input_bytes == pixels  # one byte per pixel
        assert kept.train_x.dtype == torch.float32
        assert torch.equal(kept.train_x, reference.train_x)
        assert torch.equal(kept.test_x, reference.test_x)
        assert torch.equal(kept.train_ids, reference.train_ids)


def test_float_inputs_are_kept_as_given():
    x, y = torch.randn(5, 1, 8, 8), torch.arange(5) % 2
    data = ClientData(x, y, x[:2], y[:2], torch.arange(5), 2)
    assert data.train_x is x and data.num_train == 5 and data.input_bytes == 7 * 64 * 4
    np.testing.assert_array_equal(data.test_x.numpy(), x[:2].numpy())
