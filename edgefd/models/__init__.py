"""edgefd.models: the papers' client / server architectures, built by name.

>>> from edgefd.models import build_model, count_parameters
>>> m = build_model("resnet8", in_channels=3, num_classes=10, input_shape=(3, 32, 32))
>>> count_parameters(m)
78042

See ``describe_models()`` for the catalogue and the per-paper modules (``fedcache``, ``fedict``,
``dfl``, ``fedd2s``, ``fedzkt``, ``generic``) for the architecture details and every place where a
paper's number needed an interpretation (each method's page in docs/methods/ says why).
"""

from ._common import BasicBlock, Bottleneck, SplitModel
from .fedd2s import LayeredCNN
from .registry import (
    DEFAULT_HETERO,
    assign_models,
    build_model,
    count_bn_buffers,
    count_parameters,
    default_model,
    describe_models,
    in_channels_of,
    list_models,
    model_entry,
)
from .zoo import ModelEntry

RESIDUAL_BLOCKS = (BasicBlock, Bottleneck)
"""The residual blocks of the zoo's ResNets and FedICT's clients: where a training step may
recompute activations instead of keeping them (`edgefd.training.recomputing`)."""

__all__ = [
    "DEFAULT_HETERO",
    "LayeredCNN",
    "ModelEntry",
    "RESIDUAL_BLOCKS",
    "SplitModel",
    "assign_models",
    "build_model",
    "count_bn_buffers",
    "count_parameters",
    "default_model",
    "describe_models",
    "in_channels_of",
    "list_models",
    "model_entry",
]
