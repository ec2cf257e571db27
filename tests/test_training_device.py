"""`--device`: models may train on a GPU while methods keep their tensors on the CPU. These machines
have no GPU, so what is checked here is the CPU path (unchanged results), the errors, and that the
device boundary (`forward`) moves batches and outputs inside autograd."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from edgefd.cli import main
from edgefd.runtime.build import build
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run
from edgefd.training import device_choice, forward, model_device, resolve_device, to_model


def test_auto_is_the_cpu_without_a_gpu_and_cpu_is_cpu():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "CUDA:1"])
def test_cuda_without_a_gpu_is_a_clear_error(spec):
    with pytest.raises(ValueError, match="sees no CUDA GPU here; use --device cpu"):
        resolve_device(spec)


@pytest.mark.parametrize("spec", ["gpu", "cuda:x", "", "tpu"])
def test_unknown_devices_are_refused(spec):
    with pytest.raises(ValueError, match="device"):
        resolve_device(spec)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_simulate_refuses_a_missing_gpu_before_loading_anything(capsys, tmp_path):
    assert main(["simulate", "--device", "cuda", "--rounds", "1", "--quiet", "--out", str(tmp_path / "run")]) == 2
    assert "sees no CUDA GPU" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_forward_moves_the_batch_to_the_model_and_the_output_back():
    model = nn.Linear(3, 2)
    x = torch.randn(4, 3, requires_grad=True)
    out = forward(model, x)
    assert out.device == x.device == model_device(model)
    out.sum().backward()
    assert x.grad is not None and model.weight.grad is not None
    assert to_model(model, x) is x  # already there: no copy


def test_models_and_server_models_are_placed_on_the_configured_device(monkeypatch):
    """Without a GPU, the meta device stands in for one: every model the run builds must land on
    the device the config resolves to (building moves nothing else, so meta tensors are enough)."""
    import edgefd.training as training

    monkeypatch.setattr(training, "resolve_device", lambda spec: "meta")  # the config imports it when used
    sim = build(SimulationConfig(algo="fd", clients=2, rounds=1))
    assert all(model_device(client.model).type == "meta" for client in sim.clients.values())
    server = build(SimulationConfig(algo="fedzkt", clients=2, rounds=1)).server
    assert sim.server.context.train.device == server.context.train.device == "meta"
    assert model_device(server.global_model).type == model_device(server.generator).type == "meta"
    assert server._noise().device.type == "meta"


def test_device_cpu_and_auto_give_the_same_metrics_here(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("auto is the GPU here")

    def metrics(device: str) -> list[dict]:
        out = tmp_path / device
        run(SimulationConfig(algo="fd", clients=3, rounds=2, device=device, out=str(out)), progress=False)
        lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in line.items() if "seconds" not in k} for line in lines]

    assert metrics("cpu") == metrics("auto")


def test_device_choice_names_what_auto_chose_and_nothing_for_a_named_device():
    chosen = resolve_device("auto")
    assert device_choice("auto") == f"device: {chosen} (--device auto: {_why(chosen)})"
    assert device_choice(" AUTO ") == device_choice("auto")
    assert device_choice("cpu") is None


@pytest.mark.parametrize("device", ["auto", "cpu"])
def test_simulate_says_what_auto_chose_and_the_summary_records_it(device, capsys, tmp_path):
    out = tmp_path / "run"
    args = ["simulate", "--device", device, "--clients", "2", "--rounds", "1", "--out", str(out)]
    assert main(args) == 0
    err = capsys.readouterr().err
    chosen = resolve_device(device)
    said = [line for line in err.splitlines() if line.startswith("device: ")]
    assert said == ([f"device: {chosen} (--device auto: {_why(chosen)})"] if device == "auto" else [])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["device"] == summary["config"]["device"] == chosen


def _why(device: str) -> str:
    return f"torch sees {torch.cuda.get_device_name(0)}" if device == "cuda" else "torch sees no CUDA GPU"
