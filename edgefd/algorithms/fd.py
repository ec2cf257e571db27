"""FD (Jeong et al. 2018, "Communication-efficient on-device machine learning"): federated
distillation by per-label average logits.

Each client uploads the mean logit vector of each label over its training data (the
`labelwise_mean` kernel) and how many samples each came from; the server averages them per label,
weighting by those counts, so a client that lacks a label does not dilute it; each client then
trains with cross-entropy plus ``beta`` times KL(softmax(global[y] / T) || softmax(student / T))
(the `weighted_kl` kernel), where ``global[y]`` is the global mean logit of the sample's label.

Method page: docs/methods/fd.md. Choices where the paper leaves room (documented, switchable):
- the client's own contribution is not removed from the global average (``exclude_self=False``);
  set ``exclude_self=true`` for the "global minus own" teacher (Eq. 2 of the FedCache paper;
  docs/methods/fd.md#own-logits-in-the-teacher);
- the clients' per-label means are weighted by their sample counts
  (docs/methods/fd.md#weighting-of-the-clients), a client's at most ``weight_cap`` times the
  others' median in all (docs/ROBUSTNESS.md#bounded-weights);
- the local logits are computed after local training, in eval mode, over all training samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from edgefd import kernels
from edgefd.algorithms import schema
from edgefd.algorithms.base import ClientContext, ClientRole, ServerRole, register_method
from edgefd.algorithms.schema import MessageSchema
from edgefd.algorithms.toolkit import RobustAggregation, capped_label_counts, capped_metric, robust_rows
from edgefd.protocol import Payload
from edgefd.settings import setting
from edgefd.training import predict_logits


@dataclass
class FDParams(RobustAggregation):
    beta: float = setting(
        1.0, "weight of the distillation term (docs/methods/fd.md#distillation-weight-and-temperature)"
    )
    temperature: float = setting(1.0, "softmax temperature of the distillation term")
    exclude_self: bool = setting(
        False,
        "teacher = global average without this client's own logits (docs/methods/fd.md#own-logits-in-the-teacher)",
    )


class FDClient(ClientRole):
    knowledge = ("logits",)

    def __init__(self, context: ClientContext, params: FDParams) -> None:
        super().__init__(context, params)
        self.optimizer = self.round_optimizer()
        self.last_means: np.ndarray | None = None
        self.last_counts: np.ndarray | None = None

    def _teacher_table(self, downlink: Payload) -> tuple[torch.Tensor, torch.Tensor]:
        """Global per-label logits [C, C] and whether each label has any knowledge."""
        means = downlink.arrays["logits"].astype(np.float64)
        counts = downlink.arrays["counts"].astype(np.float64)
        if self.params.exclude_self and self.last_means is not None and self.last_counts is not None:
            own = self.last_counts.astype(np.float64)
            rest = counts - own
            with np.errstate(invalid="ignore", divide="ignore"):
                means = np.where(
                    rest[:, None] > 0, (means * counts[:, None] - self.last_means * own[:, None]) / rest[:, None], 0.0
                )
            counts = rest
        return torch.from_numpy(means.astype(np.float32)), torch.from_numpy(counts > 0)

    def train_round(self, round: int, downlink: Payload | None) -> Payload:
        y = self.data.train_y
        if downlink is None:
            loss_fn = lambda logits, idx: nn.functional.cross_entropy(logits, y[idx])  # noqa: E731
        else:
            table, known = self._teacher_table(downlink)
            beta, temperature = self.params.beta, self.params.temperature

            def loss_fn(logits: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
                labels = y[idx]
                distill = kernels.weighted_kl(
                    logits, table[labels], temperature=temperature, sample_weight=known[labels].float()
                )
                return nn.functional.cross_entropy(logits, labels) + beta * distill

        self.train_local(loss_fn)
        logits = predict_logits(self.model, self.data.train_x, self.context.train.eval_batch_size)
        means, counts = kernels.labelwise_mean(logits, y, self.data.num_classes)
        self.last_means, self.last_counts = means.numpy().astype(np.float64), counts.numpy()
        return Payload("knowledge", {"logits": means.numpy(), "counts": counts.numpy()})


class FDServer(ServerRole):
    knowledge = ("logits",)

    def __init__(self, context, params: FDParams) -> None:
        super().__init__(context, params)
        self.global_logits: np.ndarray | None = None
        self.global_counts: np.ndarray | None = None
        self.declared = schema.DeclaredCounts()

    def uplink_schemas(self, client_id: str) -> Sequence[MessageSchema]:
        """Per-label mean logits (C, C) and the number of samples behind each row."""
        classes = self.num_classes
        arrays = {"logits": schema.knowledge((classes, classes)), "counts": schema.counts((classes,))}
        return (MessageSchema("knowledge", arrays),)

    def check_uplink(self, round: int, client_id: str, payload: Payload) -> None:
        """The schema, and the label counts the client declared first (they weight its logits),
        within what one client of the run can hold."""
        super().check_uplink(round, client_id, payload)
        self.context.check_declared(counts=payload.arrays["counts"])
        self.declared.check(client_id, counts=payload.arrays["counts"])

    def downlink(self, round: int, client_id: str) -> Payload | None:
        if self.global_logits is None or self.global_counts is None:  # set together in aggregate
            return None
        return Payload("knowledge", {"logits": self.global_logits, "counts": self.global_counts})

    def aggregate(self, round: int, uplinks: dict[str, Payload]) -> dict[str, float]:
        """Each label's logits averaged over the clients, weighted by their label counts, a client's
        counts scaled down where their total exceeds ``weight_cap`` times the others' median
        (`capped_label_counts`; ``weights_capped`` counts the clients held to it); or the robust
        statistic per label."""
        if not uplinks:
            return {}
        classes = self.num_classes
        sums = np.zeros((classes, classes), dtype=np.float64)
        counts = np.zeros(classes, dtype=np.int64)
        declared = [uplinks[client].arrays["counts"].astype(np.int64) for client in sorted(uplinks)]
        mean = self.params.aggregator == "mean"  # a robust statistic is unweighted
        weights = capped_label_counts(declared, self.params.weight_cap) if mean else declared
        for client, c in zip(sorted(uplinks), weights):
            sums += uplinks[client].arrays["logits"].astype(np.float64) * c[:, None]
            counts += c
        with np.errstate(invalid="ignore", divide="ignore"):
            means = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], 0.0)
        metrics: dict[str, float] = {}
        if mean:
            metrics = capped_metric(np.sum(declared, axis=1), np.sum(weights, axis=1))
        else:
            # a label fewer than 3 clients hold has no teacher this round (its count goes down as 0): of
            # one honest and one poisoned row, no statistic can tell which is which
            ordered = [uplinks[c] for c in sorted(uplinks)]
            means, quorum = robust_rows(
                [p.arrays["logits"] for p in ordered],
                [p.arrays["counts"] for p in ordered],
                self.params.aggregator,
                self.params.trim,
            )
            metrics["below_quorum"] = float(((counts > 0) & ~quorum).sum())
            counts = np.where(quorum, counts, 0)
        self.global_logits, self.global_counts = means.astype(np.float32), counts
        return {"labels_covered": float((counts > 0).sum()), **metrics}


register_method(
    "fd",
    "federated distillation by per-label average logits (Jeong et al.)",
    FDClient,
    FDServer,
    FDParams,
    paper="E. Jeong et al., Communication-Efficient On-Device Machine Learning: Federated Distillation and "
    "Augmentation under Non-IID Private Data, arXiv:1811.11479 (2018)",
)
