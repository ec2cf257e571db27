"""Shared test settings: deterministic, quiet, two threads like the target machines."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import torch  # noqa: E402

torch.set_num_threads(2)
