"""Local: every client trains on its own data and never communicates (the lower baseline)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from edgefd.algorithms.base import ClientContext, ClientRole, ServerRole, register_method
from edgefd.protocol import Payload


@dataclass
class LocalParams:
    """Local training has no hyperparameters of its own (see the shared training settings)."""


class LocalClient(ClientRole):
    def __init__(self, context: ClientContext, params: LocalParams) -> None:
        super().__init__(context, params)
        self.optimizer = self.round_optimizer()

    def train_round(self, round: int, downlink: Payload | None) -> None:  # sends nothing: no schema to declare
        y = self.data.train_y
        self.train_local(lambda logits, idx: nn.functional.cross_entropy(logits, y[idx]))
        return None


class LocalServer(ServerRole):
    def downlink(self, round: int, client_id: str) -> Payload | None:
        return None

    def aggregate(self, round: int, uplinks: dict[str, Payload]) -> dict[str, float]:
        return {}


register_method(
    "local",
    "no federation: each client trains alone",
    LocalClient,
    LocalServer,
    LocalParams,
    paper="(baseline: every client's own model, never federated)",
)
