"""Local training and evaluation, shared by every method.

Batches are drawn from in-memory tensors with the client's own generator (no DataLoader worker
processes: the models are small and a device has few cores), so a client's batch order depends
only on its seed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


@dataclass
class TrainConfig:
    """Local optimisation settings shared by every method (a method may ignore some)."""

    epochs: int = 1
    """Local epochs per round."""
    batch_size: int = 32
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    optimizer: str = "sgd"
    """"sgd" or "adam"."""
    eval_batch_size: int = 1024


# loss_fn(logits, batch_indices) -> loss; batch_indices index the client's training arrays so a
# method can look up per-sample knowledge by position in its own (stable) arrays.
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def make_optimizer(params, config: TrainConfig) -> torch.optim.Optimizer:
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)
    raise ValueError(f"optimizer: expected 'sgd' or 'adam', got {config.optimizer!r}")


def batches(n: int, batch_size: int, generator: torch.Generator, shuffle: bool = True) -> Iterator[torch.Tensor]:
    """Index batches over n samples; the last batch may be smaller."""
    order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    for start in range(0, n, batch_size):
        yield order[start : start + batch_size]


def epoch_batches(
    model: nn.Module, n: int, config: TrainConfig, generator: torch.Generator, shuffle: bool = True
) -> Iterator[torch.Tensor]:
    """The index batches of one local epoch over n samples, with the model in train mode.

    A one-sample batch is skipped for a model with BatchNorm, which cannot train on it."""
    model.train()
    skip_single = has_batchnorm(model)
    for idx in batches(n, config.batch_size, generator, shuffle):
        if len(idx) >= 2 or not skip_single:
            yield idx


def train_epochs(
    model: nn.Module,
    x: torch.Tensor,
    loss_fn: LossFn,
    optimizer: torch.optim.Optimizer,
    config: TrainConfig,
    generator: torch.Generator,
    epochs: int | None = None,
    shuffle: bool = True,
) -> float:
    """Runs `epochs` passes of minibatch training; returns the mean loss of the last epoch."""
    last = 0.0
    for _ in range(config.epochs if epochs is None else epochs):
        total, count = 0.0, 0
        for idx in epoch_batches(model, len(x), config, generator, shuffle):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx]), idx)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
            count += len(idx)
        last = total / max(count, 1)
    return last


def has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


@torch.no_grad()
def predict_logits(model: nn.Module, x: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
    model.eval()
    if len(x) == 0:
        return torch.empty(0)
    return torch.cat([model(x[i : i + batch_size]) for i in range(0, len(x), batch_size)])


@torch.no_grad()
def evaluate_model(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1024) -> dict[str, float]:
    """Accuracy and mean cross-entropy over all of (x, y) (every batch counts, not just the last)."""
    if len(x) == 0:
        return {"accuracy": float("nan"), "loss": float("nan"), "samples": 0}
    logits = predict_logits(model, x, batch_size)
    loss = nn.functional.cross_entropy(logits, y).item()
    accuracy = (logits.argmax(1) == y).double().mean().item()
    return {"accuracy": accuracy, "loss": loss, "samples": int(len(y))}


def state_arrays(model: nn.Module) -> dict[str, np.ndarray]:
    """The model's full state (weights and BatchNorm buffers) as numpy arrays, for a payload."""
    return {name: tensor.detach().cpu().numpy().copy() for name, tensor in model.state_dict().items()}


def load_state_arrays(model: nn.Module, arrays: dict[str, np.ndarray]) -> None:
    """Loads a full state sent as arrays; names and shapes must match the model exactly."""
    state = model.state_dict()
    missing = sorted(set(state) - set(arrays))
    unexpected = sorted(set(arrays) - set(state))
    if missing or unexpected:
        raise ValueError(f"model state mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.load_state_dict({name: torch.from_numpy(np.asarray(arrays[name])).to(state[name].dtype) for name in state})
