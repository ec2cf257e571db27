"""Method tests build simulations, which set the process-wide thread count; put it back after each."""

import pytest
import torch

from edgefd import kernels


@pytest.fixture(autouse=True)
def restore_threads():
    threads = torch.get_num_threads()
    yield
    kernels.set_num_threads(threads)
