"""Shared test settings: deterministic, quiet, two threads like the target machines."""

import os
import tempfile

os.environ.setdefault("MPLBACKEND", "Agg")
# FedCache's hash cache (and anything else edgefd keeps between runs) in a folder of this session,
# never the user's ~/.cache.
os.environ["EDGEFD_CACHE_DIR"] = tempfile.mkdtemp(prefix="edgefd-test-cache-")

import torch  # noqa: E402

torch.set_num_threads(2)
