"""What keeps `edgefd client` small on a device (docs/DEPLOYMENT.md, "Device memory"): it reports its
own peak RSS, loads only its share of the run's dataset as float, and imports nothing a device
never uses."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from edgefd.algorithms.base import ClientRole
from edgefd.data import clear_cache
from edgefd.data.idx import write_idx
from edgefd.deploy import control
from edgefd.deploy.client_runtime import ClientRuntime, ClientSettings
from edgefd.deploy.mqtt_transport import BrokerSettings, Incoming
from edgefd.protocol import Message
from edgefd.runtime.build import build_client, prepare
from edgefd.runtime.config import SimulationConfig

NEVER_ON_A_DEVICE = ("matplotlib", "hnswlib", "sklearn", "scipy", "onnx", "onnxruntime", "onnxscript", "torchvision")


def test_the_client_command_imports_nothing_a_device_never_uses():
    """Plots, the server's ANN index, export and the bundled-data packages stay out of a client
    (torchvision is imported only by the models and encoders that need it)."""
    probe = (
        "import sys, edgefd.cli, edgefd.deploy.client, edgefd.deploy.client_runtime; "
        f"print(sorted(m for m in {NEVER_ON_A_DEVICE!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_command_runs_without_the_workstation_packages():
    """A device install has no matplotlib or onnxscript: `edgefd --version` (which builds every
    subcommand's parser) and the device's own commands still run."""
    probe = """
import sys
sys.modules.update(matplotlib=None, onnxscript=None)
from edgefd.cli import main
for argv in (["--version"], ["client", "--help"], ["predict", "--help"], ["report", "--help"]):
    try:
        main(argv)
    except SystemExit as done:
        assert done.code == 0, argv
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("edgefd ")
    assert done.stdout.count("usage: edgefd") == 3


def fashion_like(folder: Path) -> None:
    rng = np.random.default_rng(0)
    folder.mkdir()
    for name, n in (("train", 120), ("t10k", 40)):
        write_idx(folder / f"{name}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
        write_idx(folder / f"{name}-labels-idx1-ubyte.gz", (np.arange(n) % 10).astype(np.uint8))


def test_a_client_takes_its_share_on_demand_and_reports_its_peak(tmp_path, monkeypatch, caplog):
    fashion_like(tmp_path / "fmnist")
    config = SimulationConfig(
        dataset="fmnist", data_root=str(tmp_path / "fmnist"), clients=3, rounds=1, samples_per_client=20, threads=1
    )
    device = ClientRuntime(ClientSettings("mem", "client-1", BrokerSettings("mqtt://127.0.0.1:1"), device="cpu"))
    for name in ("start", "stop", "publish"):
        monkeypatch.setattr(device.endpoint, name, lambda *a, **k: None)
    clear_cache()
    done_sharing = []  # the method's hook: what simulated clients share (FedCache's hash encoder) let go
    monkeypatch.setattr(ClientRole, "done_sharing", classmethod(lambda cls: done_sharing.append(cls.__name__)))
    with caplog.at_level(logging.INFO, logger="edgefd.deploy.client_runtime"):
        device._handle(
            Incoming("down", "client-1", "config", control.config_message(config, "client-1", "mem"), nbytes=0)
        )
        hello = Message("hello", "server", "client-1", 0, run="mem")
        device._handle(Incoming("down", "client-1", "hello", hello, nbytes=0))
        assert done_sharing == [type(device.role).__name__]  # once its hello was answered
        device.stopping.set()
        assert device.run() == 0
    built, stopped = (r.getMessage() for r in caplog.records if "peak_rss_mb=" in r.getMessage())
    assert "client-1: fd, model cnn2, 20 training samples" in built
    assert float(stopped.rsplit("peak_rss_mb=", 1)[1]) >= float(built.rsplit("peak_rss_mb=", 1)[1].split()[0]) > 0

    # the device's share is the simulation's, bit for bit, though only the share was made float
    clear_cache()
    simulated = build_client(config, prepare(config), 1).data
    assert torch.equal(device.role.data.train_x, simulated.train_x)
    assert torch.equal(device.role.data.test_x, simulated.test_x)
    assert torch.equal(device.role.data.train_ids, simulated.train_ids)
    clear_cache()


def test_the_device_install_takes_the_device_requirements_from_pyproject():
    """device/install.sh installs edgefd with --no-deps, then device/requirements.txt: a subset of
    pyproject's dependencies with the same bounds, without the workstation's plots and exporter."""
    import tomllib

    repo = Path(__file__).resolve().parents[2]
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["dependencies"]
    lines = (repo / "device" / "requirements.txt").read_text().splitlines()
    device = [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]
    assert device and set(device) <= set(project)
    names = {r.split(">")[0].split("=")[0] for r in device}
    assert {"numpy", "paho-mqtt", "onnxruntime"} <= names
    assert not names & {"matplotlib", "onnxscript", "torch", "torchvision"}  # torch: pinned by install.sh
    script = (repo / "device" / "install.sh").read_text()
    assert "--no-deps" in script and '-r "$here/requirements.txt"' in script


def test_a_device_that_recomputes_activations_builds_its_role_so(tmp_path, monkeypatch):
    """`edgefd client --recompute-activations` reaches the role's training settings; the run's
    config never carries it (it is the device's own choice, as its device is)."""
    fashion_like(tmp_path / "fmnist")
    config = SimulationConfig(
        dataset="fmnist", data_root=str(tmp_path / "fmnist"), clients=3, rounds=1, samples_per_client=20, threads=1
    )
    message = control.config_message(config, "client-1", "mem")
    assert "recompute_activations" not in control.config_from(message)
    for recompute in (True, False):
        settings = ClientSettings(
            "mem", "client-1", BrokerSettings("mqtt://127.0.0.1:1"), device="cpu", recompute_activations=recompute
        )
        device = ClientRuntime(settings)
        for name in ("start", "stop", "publish"):
            monkeypatch.setattr(device.endpoint, name, lambda *a, **k: None)
        device._handle(Incoming("down", "client-1", "config", message, nbytes=0))
        assert device.role.context.train.recompute_activations is recompute
        clear_cache()
