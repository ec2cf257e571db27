"""FedICT's client: local training with the FPKD-weighted KL towards the server's per-sample logits."""

from __future__ import annotations

import logging
from functools import partial
from typing import cast

import numpy as np
import torch
from torch import nn

from edgefd.algorithms.base import ClientContext, ClientRole
from edgefd.algorithms.fedict.losses import class_distribution, client_loss, softmax
from edgefd.algorithms.fedict.params import DIST_META_SCALE, FedICTParams
from edgefd.algorithms.fedict.split_models import SplitLike, not_split_error, optimizer
from edgefd.algorithms.toolkit import SampleIndex
from edgefd.protocol import Payload, at_precision
from edgefd.training import (
    forward,
    to_model,
)

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------
# Client


class FedICTClient(ClientRole):
    knowledge = ("logits",)  # the features travel at the method's own feature_precision

    def __init__(self, context: ClientContext, params: FedICTParams) -> None:
        super().__init__(context, params)
        if not (callable(getattr(self.model, "extract", None)) and callable(getattr(self.model, "predict", None))):
            raise not_split_error(f"client {context.client_id}", context.model_name)
        self.optimizer = self.round_optimizer(build=partial(optimizer, nesterov=params.nesterov))  # a partial pickles
        self.index = SampleIndex(self.data.train_ids.numpy())
        if len(self.index) != len(self.data.train_y):
            raise ValueError("train_ids and train_y differ in length")
        C = self.data.num_classes
        self.distribution = self._distribution(context.rng)
        self.loss = client_loss(params, self.distribution, C)
        self.feature_precision = params.feature_precision or context.precision

    def _distribution(self, rng: np.random.Generator) -> np.ndarray:
        """d^k (Eq. 7), or its random replacement of the Table VIII ablation (Sec. 6.1;
        docs/methods/fedict.md#random-distribution-ablation)."""
        C = self.data.num_classes
        meta = self.params.dist_meta
        if meta == "none":
            return class_distribution(self.data.train_y.numpy(), C)
        s = DIST_META_SCALE
        x = {
            "uniform": lambda: rng.uniform(0.0, s, C),
            "normal": lambda: rng.normal(0.0, s, C),
            "exponential": lambda: rng.exponential(s, C),
        }[meta]()
        return softmax(x)

    def hello(self) -> Payload:
        feature_shape = np.asarray(self.feature_shape(), dtype=np.int64)
        return Payload(
            "hello",
            {
                "distribution": self.distribution.astype(np.float32),
                "labels": self.data.train_y.numpy().astype(np.int64),
                "ids": self.index.ids,
                "feature_shape": feature_shape,
            },
            {"samples": len(self.index)},
        )

    @torch.no_grad()
    def feature_shape(self) -> tuple[int, ...]:
        """Per-sample shape of H^k (the server checks that its model takes it)."""
        if self.data.num_train == 0:
            return tuple(getattr(self.model, "feature_shape", ()))
        training = self.model.training
        self.model.eval()
        try:
            split = cast(SplitLike, self.model)
            return tuple(forward(split.extract, self.data.train_x[:1], on=self.model).shape[1:])
        finally:
            self.model.train(training)

    def teacher(self, downlink: Payload | None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Server logits in the local row order, gathered by sample id, and which rows have one.

        None: no KD this round (``first_round_kd=skip`` before any server logits)."""
        n, C = len(self.index), self.data.num_classes
        if downlink is None:
            if self.params.first_round == "skip":
                return None
            return torch.zeros(n, C), torch.ones(n, dtype=torch.bool)  # zeros: the uniform target
        ids = downlink.arrays["ids"]
        logits = np.asarray(downlink.arrays["logits"], dtype=np.float32)
        if logits.shape != (len(ids), C):
            raise ValueError(f"server logits: expected shape ({len(ids)}, {C}), got {logits.shape}")
        rows = torch.from_numpy(self.index.rows(ids))
        table = torch.zeros(n, C)
        known = torch.zeros(n, dtype=torch.bool)
        table[rows] = torch.from_numpy(logits.copy())
        known[rows] = True
        return table, known

    def train_round(self, round: int, downlink: Payload | None) -> Payload:
        y = self.data.train_y
        teacher = self.teacher(downlink)
        if teacher is None:
            loss_fn = lambda logits, idx: nn.functional.cross_entropy(logits, y[idx])  # noqa: E731
        else:
            table, known = teacher
            mask = None if bool(known.all()) else known.to(torch.float32)
            loss = self.loss

            def loss_fn(logits: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
                return loss(logits, table[idx], y[idx], None if mask is None else mask[idx].contiguous())

        self.train_local(loss_fn)
        features, logits = self.extract()
        # features travel as [N, D_H] (one int8 scale per sample); the server knows their shape from hello
        arrays = {
            "ids": self.index.ids,
            "features": features.reshape(len(features), -1).numpy(),
            "logits": logits.numpy(),
        }
        if self.params.resend_labels:
            arrays["labels"] = y.numpy().astype(np.int64)
        payload = Payload("features", arrays)
        return at_precision(payload, self.feature_precision, ["features"])  # the runtime sets the logits

    @torch.no_grad()
    def extract(self) -> tuple[torch.Tensor, torch.Tensor]:
        """H^k (Eq. 5) and Z^k (Eq. 6) of every training sample, eval-mode, in local row order."""
        self.model.eval()
        x = self.data.train_x
        step = self.context.train.eval_batch_size
        split = cast(SplitLike, self.model)
        # written batch by batch into tensors made once: the features are this upload's bulk (CIFAR-10,
        # 5,000 samples: 328 MB), so a list of batches and its concatenation would hold them twice
        features = logits = torch.empty(0)
        for start in range(0, len(x), step):
            h = split.extract(to_model(self.model, x[start : start + step]))
            z = split.predict(h)
            if start == 0:
                features = torch.empty((len(x), *h.shape[1:]), dtype=h.dtype, device=x.device)
                logits = torch.empty((len(x), *z.shape[1:]), dtype=z.dtype, device=x.device)
            features[start : start + len(h)].copy_(h)
            logits[start : start + len(z)].copy_(z)
        return features, logits
