"""What both sides need of FedICT's split models (extractor + predictor), and their optimiser."""

from __future__ import annotations

from typing import Protocol

import torch

from edgefd.training import (
    TrainConfig,
)


def optimizer(parameters, config: TrainConfig, nesterov: bool) -> torch.optim.Optimizer:
    if config.optimizer == "sgd":
        return torch.optim.SGD(
            parameters,
            lr=config.lr,
            momentum=config.momentum,
            weight_decay=config.weight_decay,
            nesterov=bool(nesterov and config.momentum > 0),
        )
    if config.optimizer == "adam":
        return torch.optim.Adam(parameters, lr=config.lr, weight_decay=config.weight_decay)
    raise ValueError(f"optimizer: expected 'sgd' or 'adam', got {config.optimizer!r}")


def not_split_error(who: str, name: str) -> ValueError:
    return ValueError(
        f"fedict/fedgkt need client models split into a feature extractor and a predictor "
        f"(extract/predict); {who} has {name!r}. Pass --models fedict_c1 (or fedict_c1,...,fedict_c5, "
        f"resnet8) for images, or --models fedict_fc6,fedict_fc7,fedict_fc8 for sensor windows"
    )


class SplitLike(Protocol):
    """What a client model offers on top of nn.Module (checked in FedICTClient.__init__)."""

    def extract(self, x: torch.Tensor) -> torch.Tensor: ...

    def predict(self, features: torch.Tensor) -> torch.Tensor: ...


def is_split(name: str) -> bool:
    from edgefd.models import model_entry

    try:
        return model_entry(name).split
    except ValueError:
        return True  # not a zoo name (a custom model): the client checks for extract/predict
