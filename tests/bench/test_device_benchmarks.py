"""benchmarks/device_memory.py and benchmarks/deploy_overhead.py run end to end (--quick: digits, a
few tiny processes) and report what they promise. Timings and sizes are not asserted on."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
needs_mosquitto = pytest.mark.skipif(
    shutil.which("mosquitto") is None, reason="needs Mosquitto (scripts/install.sh installs it)"
)


def run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


@needs_mosquitto
def test_device_memory_quick(tmp_path):
    out = run("device_memory.py", "--quick", "--json", str(tmp_path / "memory.json"))
    (row,) = json.loads((tmp_path / "memory.json").read_text())["rows"]
    assert (row["method"], row["model"], row["error"]) == ("fd", "cnn2", None)
    # the client logged its peak when built and when it stopped; predict ran without torch
    assert 0 < row["client_after_build_mb"] <= row["client_peak_mb"]
    assert row["predict_fp32_mb"] > 0 and row["predict_int8_mb"] > 0
    assert row["predict_imports_torch"] is False
    # the client's start-up to its hello, as it logged it: after the runtime's imports, within the run
    assert 0 < row["hello_after_s"] < row["run_seconds"]
    document = json.loads((tmp_path / "memory.json").read_text())
    assert document["dynamo_imported"] is True and document["dynamo_mb"] > 0  # torch.optim's, measured
    assert "| quick | fd | cnn2 |" in out


@needs_mosquitto
def test_deploy_overhead_quick(tmp_path):
    out = run("deploy_overhead.py", "--quick", "--arms", "fd", "--json", str(tmp_path / "overhead.json"))
    (arm,) = json.loads((tmp_path / "overhead.json").read_text())["arms"]
    assert arm["arm"] == "fd" and arm["same_accuracy"]  # one config, in-process and over MQTT
    # the control: the clients' own work in as many processes, without broker, server or messages
    for run_ in (arm["simulate"], arm["deploy"], arm["processes"]):
        assert len(run_["round_seconds"]) == 2 and len(run_["round_cpu_seconds"]) == 2
        assert 0 < run_["startup_seconds"] <= run_["total_seconds"]
    assert arm["wall_ratio_to_processes"] > 0
    assert arm["deploy"]["processes"] >= 1 + 1 + 1 + 2  # deploy-local, broker, server, two clients
    assert "| fd |" in out
