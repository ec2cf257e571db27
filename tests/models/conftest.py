"""Model-zoo tests run tiny tensors: one intra-op thread is faster than two on a loaded 2-core box.
The setting is restored after every test so other folders keep theirs."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
