"""FedICT's server: one shared predictor trained client by client with the LKA-weighted KL."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from edgefd.algorithms import schema
from edgefd.algorithms.base import ServerContext, ServerRole
from edgefd.algorithms.fedict.losses import KDLoss, global_distribution, server_loss
from edgefd.algorithms.fedict.params import FedICTParams
from edgefd.algorithms.fedict.split_models import is_split, not_split_error, optimizer
from edgefd.algorithms.toolkit import SampleIndex, capped_weights
from edgefd.protocol import Payload
from edgefd.training import (
    batches,
    forward,
    has_batchnorm,
    predict_logits,
)

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------
# Server


@dataclass
class _ClientState:
    index: SampleIndex
    labels: torch.Tensor
    distribution: np.ndarray
    feature_shape: tuple[int, ...]
    server_logits: np.ndarray
    """Z^S in the canonical order of the client's hello (zeros until the first server pass)."""
    has_logits: bool = False
    loss: KDLoss | None = None


class FedICTServer(ServerRole):
    knowledge = ("logits",)

    def __init__(self, context: ServerContext, params: FedICTParams) -> None:
        super().__init__(context, params)
        for cid, name in sorted(context.client_models.items()):
            if not is_split(name):
                raise not_split_error(f"client {cid}", name)
        self.model_name = self._server_model_name(context.input_shape)
        self.model = context.build_model(self.model_name)
        if not hasattr(self.model, "input_feature_shape"):
            raise ValueError(
                f"server_model {self.model_name!r} does not take client features; use "
                "fedict_server, fedict_server_small or fedict_fc_server"
            )
        self.optimizer = optimizer(self.model.parameters(), context.train, params.nesterov)
        self.batch_size = params.server_batch_size or context.train.batch_size
        seed = np.random.SeedSequence([int(context.seed), 0xFED1C7])
        self.generator = torch.Generator().manual_seed(int(seed.generate_state(1, dtype=np.uint64)[0] % 2**63))
        self.order_rng = np.random.default_rng(seed.spawn(1)[0])
        self.clients: dict[str, _ClientState] = {}
        self.global_distribution: np.ndarray | None = None
        self._warned_signed = False

    def _server_model_name(self, input_shape: tuple[int, ...]) -> str:
        name = self.params.server_model
        if name != "auto":
            return name
        if len(input_shape) != 3:
            return "fedict_fc_server"
        return "fedict_server" if min(input_shape[1:]) >= 16 else "fedict_server_small"

    @property
    def feature_shape(self) -> tuple[int, ...]:
        """Per-sample shape of the features the server model takes (H^k's shape on every client)."""
        server_model: Any = self.model  # torch types unknown Module attributes as Tensor | Module
        return tuple(int(s) for s in server_model.input_feature_shape)

    def hello_schemas(self, client_id: str) -> Sequence[schema.MessageSchema]:
        """d^k, the labels and ids of every sample, and H^k's shape (counts and values: `check_hello`)."""
        # None: the sample count is the hello's own news. Foreign ids cannot be caught here: the ids
        # the hello declares are what the client's uplinks are checked against.
        arrays = {
            "distribution": schema.ArraySpec(("float32",), (self.num_classes,), 0.0, 1.0),
            "labels": schema.labels(self.num_classes, ("int64",)),
            "ids": schema.ArraySpec(("int64",), (None,)),
            "feature_shape": schema.ArraySpec(("int64",), (len(self.feature_shape),)),
        }
        return (schema.MessageSchema("hello", arrays, {"samples": schema.samples()}),)

    def check_hello(self, client_id: str, payload: Payload) -> None:
        """The schema, then what `start` needs: one label and id per sample, no id twice, no more
        samples (of a class) than one client of the run can hold, d^k summing to 1 and, unless the
        Table VIII ablation replaces it, the histogram of the hello's own labels (``counts-disagree``:
        d^k weighs in the global distribution), and H^k of the shape the server model takes."""
        super().check_hello(client_id, payload)
        ids, labels, n = payload.arrays["ids"], payload.arrays["labels"], payload.scalars["samples"]
        shape = tuple(payload.arrays["feature_shape"].tolist())
        if not n == len(labels) == len(ids):
            raise schema.UplinkRejected("shape", f"{n} samples, {len(labels)} labels, {len(ids)} ids")
        if len(np.unique(ids)) != len(ids):
            raise schema.UplinkRejected("repeated-ids", "a sample id is declared twice")
        counts = np.bincount(np.asarray(labels, np.int64), minlength=self.num_classes)
        self.context.check_declared(counts=counts)
        distribution = payload.arrays["distribution"].astype(np.float64)
        if abs(float(distribution.sum()) - 1) > 1e-4:
            raise schema.UplinkRejected("out-of-range", "the distribution does not sum to 1")
        if self.params.dist_meta == "none" and n and np.abs(distribution - counts / n).max() > 1e-5:
            raise schema.UplinkRejected("counts-disagree", "d^k is not the histogram of the hello's own labels")
        if shape != self.feature_shape:
            raise schema.UplinkRejected(
                "shape",
                f"features of shape {shape}, but the server model {self.model_name!r} takes "
                f"{self.feature_shape}; choose --param server_model=... to match",
            )

    def uplink_schemas(self, client_id: str) -> Sequence[schema.MessageSchema]:
        """H^k (flattened), Z^k and the ids of the n samples the hello declared (and their labels
        with ``resend_labels``); nothing from a client without an accepted hello."""
        state = self.clients.get(client_id)
        if state is None:
            return ()
        n, C = len(state.index), self.num_classes
        arrays = {
            "ids": schema.sample_ids(state.index.ids, ("int64",), n),
            "features": schema.knowledge((n, int(np.prod(state.feature_shape)))),
            "logits": schema.knowledge((n, C)),
        }
        if self.params.resend_labels:
            arrays["labels"] = schema.labels(C, ("int64",), n)
        return (schema.MessageSchema("features", arrays),)

    def check_uplink(self, round: int, client_id: str, payload: Payload) -> None:
        """The schema, and resent labels that are the hello's for the same ids."""
        super().check_uplink(round, client_id, payload)
        if "labels" in payload.arrays:
            state = self.clients[client_id]
            hello_labels = state.labels.numpy()[state.index.rows(payload.arrays["ids"])]
            if not np.array_equal(payload.arrays["labels"], hello_labels):
                raise schema.UplinkRejected("labels-disagree", "labels differ from the hello's for the same ids")

    def start(self, hellos: dict[str, Payload]) -> None:
        C = self.num_classes
        expected = self.feature_shape
        for cid in sorted(hellos):
            p = hellos[cid]
            index = SampleIndex(p.arrays["ids"])
            labels = np.asarray(p.arrays["labels"]).reshape(-1).astype(np.int64)
            d = np.asarray(p.arrays["distribution"], dtype=np.float64).reshape(-1)
            shape = tuple(int(s) for s in np.asarray(p.arrays["feature_shape"]).reshape(-1))
            n = int(p.scalars["samples"])
            if len(labels) != n or len(index) != n:
                raise ValueError(f"hello of {cid}: {n} samples but {len(labels)} labels and {len(index)} ids")
            if n and (labels.min() < 0 or labels.max() >= C):
                raise ValueError(f"hello of {cid}: labels must lie in [0, {C})")
            if d.shape != (C,) or not np.isfinite(d).all() or (d < 0).any() or abs(d.sum() - 1) > 1e-4:
                raise ValueError(f"hello of {cid}: distribution must be {C} non-negative numbers summing to 1")
            if shape != expected:
                raise ValueError(
                    f"client {cid} extracts features of shape {shape}, but the server model "
                    f"{self.model_name!r} takes {expected}; choose --param server_model=... to match"
                )
            self.clients[cid] = _ClientState(
                index, torch.from_numpy(labels), d, shape, np.zeros((n, C), dtype=np.float32)
            )
        if not self.clients:
            return
        counts = np.array([len(s.index) for s in self.clients.values()], dtype=np.float64)
        # d^S weights each client by its sample count, at most weight_cap times the others' median
        weights = capped_weights(counts, self.params.weight_cap)
        if (weights < counts).any():
            log.info("fedict: %d client(s)' weight in d^S held to weight_cap", int((weights < counts).sum()))
        self.global_distribution = global_distribution([s.distribution for s in self.clients.values()], weights)
        total, k = counts.sum(), len(self.clients)
        for state in self.clients.values():
            scale = 1.0
            if self.params.lka_client_weighting == "client_uniform":
                scale = total / (k * max(len(state.index), 1))
            state.loss = server_loss(self.params, self.global_distribution, state.distribution, C, scale)
            if state.loss.signed and not self._warned_signed:
                self._warned_signed = True
                log.warning(
                    "fedict: the linear class-balanced LKA weights are signed; negative weights make "
                    "the server maximise KL on classes a client over-represents "
                    "(docs/methods/fedict.md#signed-balance-weights)"
                )

    def downlink(self, round: int, client_id: str) -> Payload | None:
        state = self.clients.get(client_id)
        if state is None:
            return None
        if not state.has_logits and self.params.first_round == "skip":
            return None
        return Payload("knowledge", {"ids": state.index.ids, "logits": state.server_logits})

    def aggregate(self, round: int, uplinks: dict[str, Payload]) -> dict[str, float]:
        arrived = [cid for cid in sorted(uplinks) if cid in self.clients]
        if not arrived:
            return {}
        if self.params.server_order == "shuffled":
            arrived = [arrived[i] for i in self.order_rng.permutation(len(arrived))]
        generation = self.params.generation
        totals = np.zeros(4)  # loss * n, ce * n, correct, n
        pending = []
        unpacked = {cid: self._unpack(cid, self.clients[cid], uplinks[cid]) for cid in arrived}
        clipped = self._clip(unpacked) if self.params.clip > 0 else 0
        for cid in arrived:
            state = self.clients[cid]
            rows, features, teacher = unpacked[cid]
            trained = self._train(state, rows, features, teacher, totals, capture=generation == "train_forward")
            if generation == "after_client_pass":
                self._generate(state, rows, features)
            elif generation == "two_phase":
                pending.append((state, rows, features))
            elif generation == "train_forward":
                missed = ~trained
                if missed.any():
                    self._generate(state, rows[missed.numpy()], features[missed])
                state.has_logits = True
        for state, rows, features in pending:
            self._generate(state, rows, features)
        n = max(totals[3], 1.0)
        return {
            "server_loss": totals[0] / n,
            "server_ce": totals[1] / n,
            "server_accuracy": totals[2] / n,
            "server_clients": float(len(arrived)),
            **({"clipped": float(clipped)} if clipped else {}),  # only then: an honest run's records stay as they were
        }

    def _clip(self, unpacked: dict[str, tuple[np.ndarray, torch.Tensor, torch.Tensor]]) -> int:
        """Scales down, in place, each sample's features and logits whose norm exceeds ``clip`` times
        the median of that norm over every sample of the round's uploads (one device of several
        cannot move the median far); returns how many vectors were scaled."""
        clipped = 0
        for part in ("features", "logits"):
            tensors = [features if part == "features" else logits for _, features, logits in unpacked.values()]
            norms = [t.reshape(len(t), -1).norm(dim=1) for t in tensors]
            bound = self.params.clip * float(torch.cat(norms).median())
            for tensor, norm in zip(tensors, norms):
                over = norm > bound
                clipped += int(over.sum())
                scale = torch.where(over, bound / norm.clamp(min=1e-12), torch.ones_like(norm))
                tensor.mul_(scale.reshape((-1,) + (1,) * (tensor.dim() - 1)))
        return clipped

    def _unpack(self, cid: str, state: _ClientState, payload: Payload) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
        rows = state.index.rows(payload.arrays["ids"])
        features = np.asarray(payload.arrays["features"], dtype=np.float32)
        logits = np.asarray(payload.arrays["logits"], dtype=np.float32)
        n = len(rows)
        flat = (n, int(np.prod(state.feature_shape, dtype=np.int64)))
        if features.shape not in (flat, (n,) + state.feature_shape):
            raise ValueError(
                f"uplink of {cid}: features of shape {features.shape}, expected {flat} "
                f"(or {(n,) + state.feature_shape})"
            )
        features = features.reshape((n,) + state.feature_shape)
        if logits.shape != (n, self.num_classes):
            raise ValueError(f"uplink of {cid}: logits of shape {logits.shape}, expected {(n, self.num_classes)}")
        if "labels" in payload.arrays and not np.array_equal(
            np.asarray(payload.arrays["labels"]).reshape(-1), state.labels.numpy()[rows]
        ):
            raise ValueError(f"uplink of {cid}: labels disagree with the hello's labels for the same sample ids")
        return rows, torch.from_numpy(features.copy()), torch.from_numpy(logits.copy())

    def _train(
        self,
        state: _ClientState,
        rows: np.ndarray,
        features: torch.Tensor,
        teacher: torch.Tensor,
        totals: np.ndarray,
        capture: bool,
    ) -> torch.Tensor:
        """``server_epochs`` passes of J^S_ICT over one client's uploaded samples; returns which
        samples got train-forward logits (``capture``: written into Z^S by id)."""
        labels = state.labels[torch.from_numpy(rows)]
        trained = torch.zeros(len(rows), dtype=torch.bool)
        skip_singletons = has_batchnorm(self.model)
        self.model.train()
        assert state.loss is not None  # start() sets every client's loss
        for _ in range(self.params.server_epochs):
            for idx in batches(len(rows), self.batch_size, self.generator):
                if len(idx) < 2 and skip_singletons:
                    continue  # BatchNorm cannot train on one sample (docs/methods/fedict.md#incomplete-minibatches)
                out = forward(self.model, features[idx])
                loss, ce = state.loss.components(out, teacher[idx], labels[idx])
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()
                b = len(idx)
                totals += (loss.item() * b, ce.item() * b, float((out.argmax(1) == labels[idx]).sum()), b)
                if capture:
                    state.server_logits[rows[idx.numpy()]] = out.detach().numpy()
                    trained[idx] = True
        return trained

    def _generate(self, state: _ClientState, rows: np.ndarray, features: torch.Tensor) -> None:
        """Z^S = f(H^k; W^S) (Eq. 3), eval mode, scattered into the canonical order by id."""
        if len(rows):
            state.server_logits[rows] = predict_logits(self.model, features, self.context.train.eval_batch_size).numpy()
        state.has_logits = True
