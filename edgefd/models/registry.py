"""Model registry: build any model of the zoo by name.

Every builder is a plain function ``builder(*, in_channels, num_classes, input_shape, **options)``,
named in the catalogue (`edgefd.models.zoo`) and looked up here (no ``eval`` of strings). ``input_shape``
is the per-sample shape of the *data*, without the batch dimension: ``(C, H, W)`` (or ``(H, W)``) for
images, ``(T, F)`` for sensor windows, ``(D,)`` for feature vectors. Server models that consume client
features (FedICT) take the image shape too and derive their feature shape from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from torch import nn

from .zoo import ENTRIES, ModelEntry

__all__ = [
    "build_model",
    "list_models",
    "describe_models",
    "model_entry",
    "count_parameters",
    "count_bn_buffers",
    "assign_models",
    "default_model",
    "DEFAULT_HETERO",
]

_REGISTRY: dict[str, ModelEntry] = {e.name: e for e in ENTRIES}
assert len(_REGISTRY) == len(ENTRIES), "duplicate model name"

#: default heterogeneous assignment for images (FedCache's A^C_1..A^C_3, round-robin)
DEFAULT_HETERO: tuple[str, ...] = ("resnet8", "resnet16", "resnet20")
#: default heterogeneous assignment for sensor windows / feature vectors
DEFAULT_HETERO_SENSOR: tuple[str, ...] = ("mlp", "cnn1d")


def list_models() -> list[str]:
    """Names of all registered models, sorted. ``describe_models()`` gives the one-line descriptions."""
    return sorted(_REGISTRY)


def describe_models() -> dict[str, str]:
    """``{name: one-line description}`` for every registered model, sorted by name."""
    return {name: _REGISTRY[name].description for name in sorted(_REGISTRY)}


def _unknown(name: str) -> ValueError:
    return ValueError(f"unknown model {name!r}; known models: {', '.join(list_models())}")


def model_entry(name: str) -> ModelEntry:
    """The registry entry of ``name`` (``ValueError`` listing the known names if unknown)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise _unknown(name) from None


def build_model(
    name: str, *, in_channels: int, num_classes: int, input_shape: Sequence[int] | tuple[int, ...], **options
) -> nn.Module:
    """Build the registered model ``name`` on the CPU.

    Args:
        name: a name from ``list_models()``.
        in_channels: channels of the data (1 or 3 for images; for ``cnn1d`` 1 or F).
        num_classes: output width (ignored by generators).
        input_shape: per-sample data shape without batch dimension, e.g. ``(3, 32, 32)``,
            ``(1, 28, 28)``, ``(28, 28)``, ``(T, F)`` or ``(D,)``.
        **options: builder-specific extras (e.g. ``hidden=(128,)`` for ``mlp``, ``nz=100`` for
            ``zkt_generator``); unknown options raise ``TypeError``.

    The result is deterministic given ``torch.manual_seed`` and carries ``model.model_name``.
    """
    entry = model_entry(name)
    if int(in_channels) < 1:
        raise ValueError(f"in_channels must be >= 1, got {in_channels}")
    if int(num_classes) < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    shape = tuple(int(s) for s in input_shape)
    if not shape or min(shape) < 1:
        raise ValueError(f"input_shape must be a non-empty tuple of positive ints, got {input_shape!r}")
    model = entry.builder(in_channels=int(in_channels), num_classes=int(num_classes), input_shape=shape, **options)
    model.model_name = name  # type: ignore[assignment]  # torch types Module attributes as Tensor | Module
    return model


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) parameter scalars: weights, biases, BN affine gamma/beta."""
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only))


def count_bn_buffers(model: nn.Module) -> int:
    """Float BN running-statistics scalars (running mean + var), R_k of FedZKT's byte formula."""
    total = 0
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats:
            assert m.running_mean is not None and m.running_var is not None  # tracked: they exist
            total += m.running_mean.numel() + m.running_var.numel()
    return int(total)


def default_model(input_shape: Sequence[int] | None = None) -> str:
    """A sensible homogeneous default for a data shape: ``cnn2`` for images (C,H,W), ``cnn1d`` for
    sensor windows (T,F), ``mlp`` for vectors."""
    if input_shape is None:
        return "cnn2"
    n = len(tuple(input_shape))
    return {3: "cnn2", 2: "cnn1d"}.get(n, "mlp")


def assign_models(
    choice: str,
    num_clients: int,
    *,
    default: str | None = None,
    hetero: Iterable[str] | None = None,
    input_shape: Sequence[int] | None = None,
) -> list[str]:
    """Per-client model names from a `--models` value.

    ``choice``:
      - ``"homo"``: every client gets ``default`` (or ``default_model(input_shape)`` if not given);
      - ``"hetero"``: ``hetero`` (default ``DEFAULT_HETERO``: resnet8,resnet16,resnet20 for images,
        ``DEFAULT_HETERO_SENSOR`` for (T,F)/(D,) shapes) assigned round-robin;
      - ``"NAME,NAME,..."``: those names assigned round-robin (client k gets names[k % len]).

    Unknown names raise ``ValueError`` listing the known ones.
    """
    if not isinstance(choice, str):
        raise ValueError(f"--models must be a string, got {type(choice).__name__}")
    if isinstance(num_clients, bool) or int(num_clients) != num_clients or num_clients < 1:
        raise ValueError(f"num_clients must be a positive integer, got {num_clients!r}")
    key = choice.strip().lower()
    if not key:
        raise ValueError("--models is empty; use 'homo', 'hetero' or a comma list of model names")
    if key == "homo":
        names = [default if default is not None else default_model(input_shape)]
    elif key == "hetero":
        if hetero is not None:
            names = list(hetero)
        elif input_shape is not None and len(tuple(input_shape)) != 3:
            names = list(DEFAULT_HETERO_SENSOR)
        else:
            names = list(DEFAULT_HETERO)
    else:
        names = [n.strip() for n in key.split(",")]
        if any(not n for n in names):
            raise ValueError(f"--models {choice!r} has an empty model name")
    if not names:
        raise ValueError("empty heterogeneous model list")
    for n in names:
        if n not in _REGISTRY:
            raise _unknown(n)
    return [names[k % len(names)] for k in range(int(num_clients))]


def in_channels_of(input_shape: tuple[int, ...]) -> int:
    """Images are (C, H, W), sensor windows (T, F): channels are C, or F."""
    return int(input_shape[0]) if len(input_shape) == 3 else int(input_shape[-1])
