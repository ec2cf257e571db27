"""Helpers of the MQTT integration tests: edgefd processes, results files, waiting."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from run_settings import flags as flags  # a run's settings as flags, for the deploy tests

from edgefd.deploy.broker import mosquitto_path

needs_mosquitto = pytest.mark.skipif(mosquitto_path() is None, reason="mosquitto not installed (scripts/install.sh)")

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def skip_unless_ci(missing: str) -> None:
    """Skip a test whose system package is missing; under CI (which installs it) fail instead."""
    if IN_CI:
        pytest.fail(f"{missing}; under CI it must be there (scripts/install.sh --test)")
    pytest.skip(missing)


ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def edgefd(*args, log: Path) -> subprocess.Popen:
    handle = open(log, "ab")
    return subprocess.Popen(
        [sys.executable, "-m", "edgefd.cli", *map(str, args)], stdout=handle, stderr=subprocess.STDOUT, env=ENV
    )


def server(broker, run_name, config, out, *extra, log):
    return edgefd(
        "server", "--broker", broker.url, "--run", run_name, *flags(config), "--out", out, "--quiet", *extra, log=log
    )


def client(broker, run_name, cid, state, log, *extra):
    return edgefd(
        "client", "--broker", broker.url, "--run", run_name, "--client-id", cid, "--state-dir", state, *extra, log=log
    )


def lines_of(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_for(condition, timeout: float, what: str, processes=()):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        for process in processes:
            assert process.poll() in (None, 0), f"a process exited with {process.returncode} while waiting for {what}"
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def finish(processes, timeout=120):
    try:
        for process in processes:
            process.wait(timeout=timeout)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def comparable(line: dict) -> dict:
    keys = ("round", "accuracy", "accuracy_std", "accuracy_median", "suspect_scores", "client_accuracy")
    keys += ("bytes_up", "bytes_down", "selected", "late")
    return {k: line[k] for k in keys}


HELD_OUT = slice(0, 150)
"""The server's held-out rows: a part of digits' test set, so that its score differs from the whole set's."""


def write_holdout(folder: Path, rows: slice = HELD_OUT) -> tuple:
    """A device's data.npz of digits' test rows ``rows`` only (no training rows: the server trains
    nothing), for `edgefd server --holdout-dir`; returns the rows (x, y)."""
    import numpy as np  # torch and data: the helpers of the tests that start processes import neither
    import torch

    from edgefd.data import load_dataset

    whole = load_dataset("digits")
    x, y = whole.test_rows(torch.arange(len(whole.test_y)))[rows], whole.test_y[rows]
    np.savez(
        folder / "data.npz",
        train_x=np.zeros((0, *x.shape[1:]), np.float32),
        train_y=np.zeros(0, np.int64),
        test_x=x.numpy(),
        test_y=y.numpy(),
        num_classes=np.array(whole.num_classes),
    )
    return x, y
