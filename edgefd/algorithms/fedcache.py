"""FedCache (Wu et al., IEEE TMC 2024): a server-side cache of per-sample knowledge.

Follows `shared/specs/fedcache.md`. Once, each client uploads a hash (embedding from a frozen,
shared encoder), the label and the stable id of every training sample; the server relates each
sample to its R most similar same-label samples (`edgefd.cache`). Every round the server sends
each client the mean of its samples' neighbours' cached logits, the client trains with
``CE + beta * T^2 KL(softmax(teacher/T) + eps || softmax(student/T))`` (the `weighted_kl` kernel),
and uploads the logits its training forward passes produced, which overwrite its cache rows.

Choices, with the spec's sections:
- Round-batched exchange (spec §4.3): one download and one upload per client per round, the
  teachers fetched from the cache as it stood at the round's start (all fetches, then all
  updates: "fetch before update"). The paper's per-batch exchange has the same payload bytes;
  its teachers are fresher within a round. This is the mode the engine and MQTT run.
- Clients train on the same snapshot (the engine prepares every downlink before any client
  trains); the authors' demo trains clients in sequence against a live cache (spec §4.4).
- KL(teacher || student), CE at T = 1, KL at T = 3 with the T^2 factor, eps = 1e-7 added to the
  teacher probabilities without renormalising, beta = 1.5, R = 16 (spec §3.7, §5, §9 A1-A3).
- Knowledge = train-mode logits of the forward pass before each step, detached (§9 A25).
- Self excluded by id; a class with n <= R members uses its n - 1 others (§9 A4, A13); the cache
  starts at zeros (§9 A6); the mean counts every neighbour, filled or not (the paper's form).
  Switchable: ``exclude_same_client`` (neighbours from other clients only, §9 A5),
  ``mask_unfilled`` (skip neighbours never uploaded, §9 A6), ``max_ensemble=10`` (the paper-era
  code's truncation to min(R, C) neighbours, §9 A7).
- The optimizer is re-created every round (§9 A15). Batches are shuffled: knowledge is keyed by
  stable sample id, so order does not matter (§9 A17); no sample is dropped (§9 A18).
- Hash encoder: ``encoder=pixels`` by default (needs no weights; spec §11.2); the paper's is
  ``encoder=mobilenet:WEIGHTS`` with ImageNet weights from a file; ``encoder=onnx:PATH`` runs
  any ONNX encoder with onnxruntime (`edgefd.encoders`).
- Relations: hnswlib with the authors' M = 64, ef_construction = ef = 1000 by default;
  ``knn=exact`` computes the exact top-R instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from edgefd import kernels
from edgefd.algorithms.base import ClientContext, ClientRole, ServerContext, ServerRole, param, register
from edgefd.cache import KnowledgeCache, RelationConfig
from edgefd.encoders import build_encoder
from edgefd.protocol import Payload
from edgefd.runtime.training import make_optimizer, train_epochs


@dataclass
class FedCacheParams:
    beta: float = param(1.5, "weight of the distillation term (the code's --alpha)")
    temperature: float = param(3.0, "distillation temperature (KL only; CE at 1)")
    eps: float = param(1e-7, "added to the teacher probabilities, not renormalised")
    neighbours: int = param(16, "R: related same-label samples per sample")
    encoder: str = param("pixels", "hash encoder: pixels | mobilenet[:WEIGHTS] | onnx:PATH")
    knn: str = param("hnsw", "relation search: hnsw | exact")
    hnsw_m: int = param(64, "hnswlib M")
    hnsw_ef_construction: int = param(1000, "hnswlib ef_construction")
    hnsw_ef: int = param(1000, "hnswlib ef at query time")
    exclude_same_client: bool = param(False, "relate samples only to other clients' samples (spec §9 A5)")
    mask_unfilled: bool = param(False, "average only neighbours already uploaded, not the zero rows (§9 A6)")
    max_ensemble: int = param(0, "average only the nearest this many of R (0: all; paper-era code: 10, §9 A7)")


def fedcache_loss(logits: torch.Tensor, labels: torch.Tensor, teacher_logits: torch.Tensor,
                  params: FedCacheParams) -> torch.Tensor:
    """CE + beta * T^2 * KL(softmax(teacher/T) + eps || softmax(student/T)), batch mean (§3.7)."""
    teacher = torch.softmax(teacher_logits / params.temperature, dim=1) + params.eps
    distill = kernels.weighted_kl(logits, teacher.contiguous(), temperature=params.temperature,
                                  teacher_is_prob=True)
    return nn.functional.cross_entropy(logits, labels) + params.beta * distill


class FedCacheClient(ClientRole):
    def __init__(self, context: ClientContext, params: FedCacheParams) -> None:
        super().__init__(context, params)
        self.ids = self.data.train_ids.numpy()
        self._order = np.argsort(self.ids, kind="stable")
        self._sorted_ids = self.ids[self._order]

    def hello(self) -> Payload:
        encoder = build_encoder(self.params.encoder)
        hashes = encoder(self.data.train_x)
        label_dtype = np.uint8 if self.data.num_classes <= 256 else np.int32  # spec §2.3: b_y = 1
        return Payload("fedcache.hello", self.client_id, 0,
                       {"ids": self.ids.astype(np.int32), "labels": self.data.train_y.numpy().astype(label_dtype),
                        "hashes": hashes}, {"encoder": encoder.name})

    def _teachers(self, downlink: Payload) -> torch.Tensor:
        """Teacher logits in this client's own sample order, matched by id (never by position)."""
        ids = downlink.arrays["ids"]
        teachers = downlink.arrays["knowledge"]
        at = np.minimum(np.searchsorted(self._sorted_ids, ids), len(self.ids) - 1)
        if len(ids) != len(self.ids) or not np.array_equal(np.sort(ids), self._sorted_ids):
            raise ValueError(f"{self.client_id}: the server's teachers are not for this client's samples")
        out = np.empty((len(self.ids), teachers.shape[1]), np.float32)
        out[self._order[at]] = teachers
        return torch.from_numpy(out)

    def train_round(self, round: int, downlink: Payload | None) -> Payload:
        y = self.data.train_y
        teachers = self._teachers(downlink) if downlink is not None else None
        recorded = torch.zeros((len(y), self.data.num_classes))

        def loss_fn(logits: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            recorded[idx] = logits.detach()  # train-mode, before this step's update (§9 A25)
            if teachers is None:
                return nn.functional.cross_entropy(logits, y[idx])
            return fedcache_loss(logits, y[idx], teachers[idx], self.params)

        optimizer = make_optimizer(self.model.parameters(), self.context.train)  # re-created (§9 A15)
        train_epochs(self.model, self.data.train_x, loss_fn, optimizer, self.context.train,
                     self.context.torch_generator)
        payload = Payload("fedcache.logits", self.client_id, round,
                          {"ids": self.ids.astype(np.int32), "logits": recorded.numpy()})
        return payload.with_precision(self.context.precision, ["logits"])


class FedCacheServer(ServerRole):
    def __init__(self, context: ServerContext, params: FedCacheParams) -> None:
        super().__init__(context, params)
        self.cache = KnowledgeCache(context.num_classes, mask_unfilled=params.mask_unfilled,
                                    max_ensemble=params.max_ensemble)
        self.relations = RelationConfig(params.neighbours, params.knn, params.hnsw_m, params.hnsw_ef_construction,
                                        params.hnsw_ef, seed=100, exclude_same_owner=params.exclude_same_client)
        self.relations.validate()
        self.encoder_name: str | None = None

    def start(self, hellos: dict[str, Payload]) -> None:
        missing = sorted(set(self.client_ids) - set(hellos))
        if missing:
            raise ValueError(f"fedcache: no hashes from {missing}")
        names = {p.scalars.get("encoder") for p in hellos.values()}
        if len(names) != 1:
            raise ValueError(f"fedcache: clients use different encoders {sorted(map(str, names))}")
        self.encoder_name = names.pop()
        for client in sorted(hellos):
            arrays = hellos[client].arrays
            self.cache.register(client, arrays["ids"], arrays["labels"], arrays["hashes"])
        self.cache.build(self.relations)

    def downlink(self, round: int, client_id: str) -> Payload:
        ids = self.cache.sample_ids(client_id)
        payload = Payload("fedcache.knowledge", "server", round,
                          {"ids": ids.astype(np.int32), "knowledge": self.cache.fetch(client_id).numpy()})
        return payload.with_precision(self.context.precision, ["knowledge"])

    def aggregate(self, round: int, uplinks: dict[str, Payload]) -> dict[str, float]:
        for client in sorted(uplinks):
            arrays = uplinks[client].arrays
            self.cache.update(self.cache.rows(client, arrays["ids"]), arrays["logits"])
        return {"cache_rows_updated": float(sum(len(p.arrays["ids"]) for p in uplinks.values()))}


register("fedcache", "per-sample knowledge cache related by hash similarity (Wu et al. 2024)",
         FedCacheClient, FedCacheServer, FedCacheParams)
