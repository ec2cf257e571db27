"""Local training and evaluation, shared by every method.

Batches are drawn from in-memory tensors with the client's own generator (no DataLoader worker
processes: the models are small and a device has few cores), so a client's batch order depends
only on its seed.

Devices: a model may live on a GPU (``TrainConfig.device``) while a method keeps its data and
knowledge on the CPU. ``forward`` is the boundary: it moves a batch to the model's device and
brings the output back to the batch's device, inside autograd, so a method's losses and lookups
stay where its tensors are and its code does not depend on where the model runs. On the CPU both
moves are no-ops and results are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


@dataclass
class TrainConfig:
    """Local optimisation settings shared by every method (a method may ignore some): the run's
    settings of these names, declared once with their defaults and help in
    `edgefd.runtime.config.SimulationConfig`, which makes this (`SimulationConfig.train_config`).
    Checked when made, so that one built otherwise with a bad choice is refused by name too."""

    epochs: int | None
    """None: the method's paper's (`LocalTraining.epochs`), resolved by `for_method` before a client
    is built."""
    batch_size: int
    lr: float
    momentum: float
    weight_decay: float
    optimizer: str
    device: str
    """Resolved from the run's ``--device`` by `resolve_device`: "cpu", "cuda" or "cuda:N"."""
    optimizer_lifecycle: str
    """"method": what the method's paper code does (`LocalTraining`), resolved by `for_method`."""
    batch_order: str
    """"method": what the method's paper code does, resolved by `for_method`."""
    channels_last: bool
    """Models with 2-D convolutions keep their weights, and so their activations, channels-last (NHWC):
    oneDNN's convolutions run about 12% faster so on a CPU at batch 8 (`edgefd bench step`)."""
    eval_batch_size: int = 256
    """Samples per forward pass when evaluating or extracting (not a run setting): no faster on a CPU
    when larger, and a 1,024-image batch of a ResNet at 28x28 held about 800 MB more memory at its
    peak than 256."""
    recompute_activations: bool = False
    """Training recomputes the residual blocks' activations in the backward pass instead of keeping
    them (`recomputing`): a device's own choice (`edgefd client --recompute-activations`), not a run
    setting. Less memory for more compute, the same results."""

    def __post_init__(self) -> None:
        check_choice("optimizer_lifecycle", self.optimizer_lifecycle, OPTIMIZER_LIFECYCLES)
        check_choice("batch_order", self.batch_order, BATCH_ORDERS)
        check_epochs(self.epochs)


OPTIMIZER_LIFECYCLES = ("method", "fresh", "kept")
BATCH_ORDERS = ("method", "fixed", "reshuffle")


@dataclass(frozen=True)
class LocalTraining:
    """What a method's paper (and its code) does with the local optimiser, the batch order and the
    local epochs of a round, declared by its client role (``ClientRole.local_training``). A run keeps
    it (``--optimizer-lifecycle method``, ``--batch-order method`` and no ``--epochs``: the defaults)
    or sets one choice for every method, so that compared arms differ only in the method."""

    optimizer_lifecycle: str = "kept"
    batch_order: str = "reshuffle"
    epochs: int = 1
    """Local epochs per round in the paper's experiments (1 where the paper gives none)."""

    def __post_init__(self) -> None:
        check_choice("optimizer_lifecycle", self.optimizer_lifecycle, OPTIMIZER_LIFECYCLES[1:])
        check_choice("batch_order", self.batch_order, BATCH_ORDERS[1:])
        check_epochs(self.epochs)


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(choices)}, got {value!r}")


def check_epochs(epochs: int | None) -> None:
    """Local epochs must be a whole number >= 1 (None: not chosen yet)."""
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1):
        raise ValueError(f"epochs: must be an integer >= 1, got {epochs!r}")


def local_epochs(config: TrainConfig) -> int:
    """The local epochs a round of a resolved config (`for_method` replaces None by the method's)."""
    if config.epochs is None:
        raise ValueError("local epochs are not resolved: pass the config through for_method first")
    return config.epochs


def for_method(config: TrainConfig, method: LocalTraining) -> TrainConfig:
    """``config`` with "method" (and epochs None) replaced by the method's own choices: what a client
    trains with."""
    return replace(
        config,
        optimizer_lifecycle=method.optimizer_lifecycle
        if config.optimizer_lifecycle == "method"
        else config.optimizer_lifecycle,
        batch_order=method.batch_order if config.batch_order == "method" else config.batch_order,
        epochs=method.epochs if config.epochs is None else config.epochs,
    )


# loss_fn(logits, batch_indices) -> loss; batch_indices index the client's training arrays so a
# method can look up per-sample knowledge by position in its own (stable) arrays.
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def resolve_device(spec: str) -> str:
    """``--device``: ``auto`` is CUDA when torch sees a GPU, else the CPU; ``cuda`` / ``cuda:N`` must
    exist here (a clear error otherwise, never a silent fall-back to the CPU)."""
    text = str(spec).strip().lower()
    if text == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if text == "cpu":
        return "cpu"
    if text == "cuda" or text.startswith("cuda:"):
        index = text.partition(":")[2]
        if text.endswith(":") or (index and not index.isdigit()):
            raise ValueError(f"device {spec!r}: expected cuda or cuda:N with N a GPU index")
        if not torch.cuda.is_available():
            raise ValueError(f"device {spec!r}: torch sees no CUDA GPU here; use --device cpu (or auto)")
        if index and int(index) >= torch.cuda.device_count():
            raise ValueError(f"device {spec!r}: torch sees {torch.cuda.device_count()} GPU(s), numbered from 0")
        return text
    raise ValueError(f"device: expected auto, cpu, cuda or cuda:N, got {spec!r}")


def device_choice(spec: str) -> str | None:
    """The line that says what ``--device auto`` chose and why (None for a device the user named):
    whether a run used the GPU should not be a guess."""
    if str(spec).strip().lower() != "auto":
        return None
    device = resolve_device(spec)
    why = f"torch sees {torch.cuda.get_device_name(0)}" if device == "cuda" else "torch sees no CUDA GPU"
    return f"device: {device} (--device auto: {why})"


def model_device(model: nn.Module) -> torch.device:
    """Where ``model``'s parameters (or, without any, its buffers) live."""
    for parameter in model.parameters():
        return parameter.device
    for buffer in model.buffers():
        return buffer.device
    return torch.device("cpu")


def to_model(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``x`` on ``model``'s device (the same tensor when it is already there)."""
    return x.to(model_device(model))


def place_model(model: nn.Module, config: TrainConfig) -> nn.Module:
    """``model`` on the run's device, in the run's memory layout (``TrainConfig.channels_last``)."""
    model = model.to(config.device)
    if config.channels_last and any(isinstance(m, nn.Conv2d) for m in model.modules()):
        model = model.to(memory_format=torch.channels_last)
    return model


def forward(
    model: nn.Module | Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, on: nn.Module | None = None
) -> torch.Tensor:
    """``model(x)`` run on the model's device, the output returned on ``x``'s device (differentiably).
    ``on`` names the module whose device counts when ``model`` is a method of it (``split.extract``)."""
    owner = on if on is not None else model
    assert isinstance(owner, nn.Module)
    return model(to_model(owner, x)).to(x.device)


def make_optimizer(params, config: TrainConfig) -> torch.optim.Optimizer:
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)
    raise ValueError(f"optimizer: expected 'sgd' or 'adam', got {config.optimizer!r}")


class RoundOptimizer:
    """A client's local optimiser under the run's lifecycle: `for_round` builds a new one each round
    ("fresh") or the first time only ("kept"). ``build`` makes one from the parameters (default:
    `make_optimizer` with the run's settings); ``parameters`` is called at each build."""

    def __init__(
        self,
        parameters: Callable[[], Iterable[nn.Parameter]],
        config: TrainConfig,
        build: Callable[[Iterable[nn.Parameter], TrainConfig], torch.optim.Optimizer] = make_optimizer,
    ) -> None:
        check_choice("optimizer_lifecycle", config.optimizer_lifecycle, OPTIMIZER_LIFECYCLES[1:])
        self.parameters, self.config, self.build = parameters, config, build
        self.optimizer: torch.optim.Optimizer | None = None

    def for_round(self) -> torch.optim.Optimizer:
        if self.optimizer is None or self.config.optimizer_lifecycle == "fresh":
            self.optimizer = self.build(self.parameters(), self.config)
        return self.optimizer


def draw_batch_order(n: int, config: TrainConfig, generator: torch.Generator) -> torch.Tensor | None:
    """The client's fixed batch order under ``batch_order="fixed"``: one permutation of its n rows,
    drawn once from its own generator (never the stored order, which may be sorted by label). None
    under "reshuffle" (a new order every epoch)."""
    check_choice("batch_order", config.batch_order, BATCH_ORDERS[1:])
    return torch.randperm(n, generator=generator) if config.batch_order == "fixed" else None


def batches(
    n: int, batch_size: int, generator: torch.Generator, fixed_order: torch.Tensor | None = None
) -> Iterator[torch.Tensor]:
    """Index batches over n samples; the last batch may be smaller.

    Without ``fixed_order`` the order is drawn anew from ``generator`` each call (each epoch). A
    method whose paper keeps one order passes the permutation it drew once (``fixed_order``): never
    the stored order, which may be sorted by label."""
    if fixed_order is None:
        order = torch.randperm(n, generator=generator)
    elif len(fixed_order) != n:
        raise ValueError(f"fixed_order has {len(fixed_order)} entries for {n} samples")
    else:
        order = fixed_order
    for start in range(0, n, batch_size):
        yield order[start : start + batch_size]


def epoch_batches(
    model: nn.Module,
    n: int,
    config: TrainConfig,
    generator: torch.Generator,
    fixed_order: torch.Tensor | None = None,
) -> Iterator[torch.Tensor]:
    """The index batches of one local epoch over n samples, with the model in train mode.

    A one-sample batch is skipped for a model with BatchNorm, which cannot train on it."""
    model.train()
    skip_single = has_batchnorm(model)
    for idx in batches(n, config.batch_size, generator, fixed_order):
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
    fixed_order: torch.Tensor | None = None,
) -> float:
    """Runs `epochs` passes of minibatch training (default: the config's, which `for_method` resolved);
    returns the mean loss of the last epoch."""
    last = 0.0
    for _ in range(local_epochs(config) if epochs is None else epochs):
        total, count = 0.0, 0
        for idx in epoch_batches(model, len(x), config, generator, fixed_order):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(forward(model, x[idx]), idx)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
            count += len(idx)
        last = total / max(count, 1)
    return last


@contextmanager
def recomputing(model: nn.Module, blocks: tuple[type[nn.Module], ...]) -> Iterator[None]:
    """Inside it, the modules of ``model`` that are ``blocks``, but the last, keep only their input
    for the backward pass and run their forward again there (activation checkpointing): memory for
    compute, with the same results. The last block's activations are the first that the backward
    pass needs: recomputing them would hold them again at once, for nothing.

    FedICT's fedict_c3 at batch 256 keeps 483 MB of activations for the backward pass, at full 32x32
    resolution; recomputing the first of its two residual blocks lowers a training step's peak by
    125 MB, for about a fifth more CPU time (benchmarks/device_memory.py measures the peak).

    Results are unchanged: the recomputation runs the same operations on the same input, and it
    puts the block's buffers back as they were before it, so that BatchNorm's running statistics
    count each batch once. Without grad (evaluation) the blocks run as they are."""
    wrapped = [m for m in model.modules() if isinstance(m, blocks)][:-1]
    for module in wrapped:
        module.forward = partial(_recomputed, module, module.forward)  # an instance attribute over the class's
    try:
        yield
    finally:
        for module in wrapped:
            del module.forward


def _recomputed(module: nn.Module, forward: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> torch.Tensor:
    if not torch.is_grad_enabled():
        return forward(*inputs)
    return checkpoint(forward, *inputs, use_reentrant=False, context_fn=lambda: (nullcontext(), _buffers_kept(module)))


@contextmanager
def _buffers_kept(module: nn.Module) -> Iterator[None]:
    """``module``'s buffers (BatchNorm's running statistics and batch count) as they were on entry,
    put back on exit."""
    buffers = list(module.buffers())
    saved = [b.clone() for b in buffers]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, value in zip(buffers, saved):
                buffer.copy_(value)


def has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


@torch.no_grad()
def predict_logits(model: nn.Module, x: torch.Tensor, batch_size: int = 256) -> torch.Tensor:
    model.eval()
    if len(x) == 0:
        return torch.empty(0)
    return torch.cat([forward(model, x[i : i + batch_size]) for i in range(0, len(x), batch_size)])


@torch.no_grad()
def evaluate_model(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 256) -> dict[str, float]:
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
