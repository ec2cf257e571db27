"""FedCache's client and server roles, its params and its registration.

How edgefd runs the paper, and every choice where it is silent: docs/methods/fedcache.md. Once, each client uploads a
hash (embedding from a frozen, shared encoder), the label and the stable id of every training sample;
the server relates each sample to its R most similar same-label samples (`cache`). Every round the
server sends each client the mean of its samples' neighbours' cached logits, the client trains with
``CE + beta * T^2 KL(softmax(teacher/T) + eps || softmax(student/T))`` (the `weighted_kl` kernel),
and uploads the logits its training forward passes produced, which overwrite its cache rows.

Choices, with the page's sections:
- ``exchange=batch`` (default, the faithful protocol of Alg. 1-2; docs/methods/fedcache.md#when-knowledge-is-exchanged):
  per mini-batch the client uploads its ids and the logits of its training forward pass; the server
  answers with the teachers of those samples from the live cache, then writes the logits in (fetch
  before update, sample by sample in message order, `KnowledgeCache.exchange`); the client takes its
  step. Clients train one after another (index order when all take part), each seeing the previous
  ones' logits, as in the authors' simulation.
- ``exchange=round`` (what the MQTT deployment runs): one download and one upload per client per
  round; the teachers come from the cache as it stood at the round's start, and all fetches come
  before all updates. Same payload bytes (one message header per round instead of one per batch);
  teachers are staler within a round, and clients train on the same snapshot.
- KL(teacher || student), CE at T = 1, KL at T = 3 with the T^2 factor, eps = 1e-7 added to the
  teacher probabilities without renormalising, beta = 1.5, R = 16 (Eq. 18, Sec. 5.1.4;
  docs/methods/fedcache.md#temperature, docs/methods/fedcache.md#kl-direction and
  docs/methods/fedcache.md#teacher-epsilon).
- Knowledge = train-mode logits of the forward pass before each step, detached
  (docs/methods/fedcache.md#which-logits-are-knowledge).
- Self excluded by id; a class with n <= R members uses its n - 1 others
  (docs/methods/fedcache.md#self-exclusion, docs/methods/fedcache.md#small-classes); the cache starts
  at zeros (Eq. 9); the mean counts every neighbour, filled or not (the paper's form), but a sample
  its client has not uploaded once a round of its uploads is over is nobody's teacher (a hello's
  claim checked against the uploads, docs/methods/fedcache.md#samples-never-uploaded). Switchable:
  ``exclude_same_client`` (neighbours from other clients only,
  docs/methods/fedcache.md#neighbours-from-the-same-client), ``mask_unfilled`` (skip neighbours never
  uploaded, docs/methods/fedcache.md#cache-initialisation), ``max_ensemble=10`` (the paper-era code's
  truncation to min(R, C) neighbours, docs/methods/fedcache.md#effective-r).
- The optimizer is re-created every round (docs/methods/fedcache.md#optimiser). Batches keep a fixed
  order, as in the authors' code (docs/methods/fedcache.md#batch-order). What that code *does* is a
  fixed random order: its partitioner
  shuffles each client's index list once, after the split. So the order here is one permutation per
  client, drawn once from the client's own generator, never the stored order (on data stored by label
  that would make every mini-batch one class). Both are the method's `local_training`; a run may set
  others for every method alike (``--optimizer-lifecycle kept``, ``--batch-order reshuffle``; a new
  order every epoch is safe because knowledge is keyed by stable sample id). No sample is dropped
  (docs/methods/fedcache.md#dropped-samples).
- Hash encoder (docs/methods/fedcache.md#hash-encoder): ``encoder=pixels`` by default (needs no weights), or
  ``encoder=projection:64`` (a fixed-seed random projection); the paper's is
  ``encoder=mobilenet:WEIGHTS`` with ImageNet weights from a file; ``encoder=onnx:PATH`` runs
  any ONNX encoder with onnxruntime (`encoders`). The costly ones keep their hashes on disk
  by sample content (``hash_cache``, `hash_cache`): a sample is hashed once, by whichever
  run meets it first.
- Relations (docs/methods/fedcache.md#hnsw-settings): hnswlib with the authors' M = 64, ef_construction = ef = 1000 by
  default; ``knn=exact`` computes the exact top-R instead. The server keeps each neighbour table on
  disk by what it was computed from (``relation_cache``, `relations.RelationStore`): a run on hashes
  met before loads it instead of searching again.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from edgefd import kernels
from edgefd.algorithms import schema
from edgefd.algorithms.base import ClientContext, ClientRole, ServerContext, ServerRole, register_method
from edgefd.algorithms.fedcache.cache import KnowledgeCache
from edgefd.algorithms.fedcache.encoders import HashEncoder, build_encoder
from edgefd.algorithms.fedcache.hash_cache import HashCache
from edgefd.algorithms.fedcache.relations import KNN_METHODS, RelationConfig, RelationStore
from edgefd.algorithms.params import check_choices
from edgefd.algorithms.toolkit import (
    AGGREGATORS,
    SampleIndex,
    check_trim,
    check_weight_cap,
    release_shared,
    weight_cap_setting,
)
from edgefd.data.disk_cache import cache_base
from edgefd.protocol import Payload
from edgefd.protocol.payload import Scalar
from edgefd.settings import setting
from edgefd.training import LocalTraining, epoch_batches, forward, has_batchnorm, local_epochs

log = logging.getLogger(__name__)

EXCHANGES = ("batch", "round")


@dataclass
class FedCacheParams:
    beta: float = setting(1.5, "weight of the distillation term (alpha in the paper's official code)")
    temperature: float = setting(3.0, "distillation temperature (KL only; CE at 1)")
    eps: float = setting(1e-7, "added to the teacher probabilities, not renormalised")
    neighbours: int = setting(16, "R: related same-label samples per sample")
    encoder: str = setting("pixels", "hash encoder: pixels | projection[:D] | mobilenet[:WEIGHTS] | onnx:PATH")
    knn: str = setting("hnsw", "relation search: hnsw | exact", choices=KNN_METHODS)
    hnsw_m: int = setting(64, "hnswlib M")
    hnsw_ef_construction: int = setting(1000, "hnswlib ef_construction")
    hnsw_ef: int = setting(1000, "hnswlib ef at query time")
    exclude_same_client: bool = setting(
        False,
        "relate samples only to other clients' samples (docs/methods/fedcache.md#neighbours-from-the-same-client)",
    )
    mask_unfilled: bool = setting(
        False,
        "average only neighbours already uploaded, not the zero rows (docs/methods/fedcache.md#cache-initialisation)",
    )
    max_ensemble: int = setting(
        0,
        "average only the nearest this many of R (0: all, Eq. 17; paper-era code: 10; "
        "docs/methods/fedcache.md#effective-r)",
    )
    aggregator: str = setting(
        "median",
        "how a sample's teacher combines its R neighbours' cached logits: the coordinate-wise median (the "
        "default), which the logits of one poisoning client cannot drag far, the trimmed mean, or the mean (Eq. "
        "17, the paper's); on a clean run the median costs under a point (docs/methods/fedcache.md#robust-teachers)",
        choices=AGGREGATORS,
    )
    trim: float = setting(0.2, "aggregator=trimmed: fraction of the neighbours dropped at each end of every logit")
    clip: float = setting(
        3.0,
        "a client's cached logits teach scaled down to at most this many times the median row norm of the other "
        "clients' (so one client's huge logits teach as ordinary ones); 0 = as uploaded, Eq. 17's "
        "(docs/methods/fedcache.md#bounded-rows)",
    )
    hash_cache: str = setting(
        "auto",
        "where hashes are kept by sample content so that no run hashes a sample twice: auto (for the mobilenet "
        "and onnx encoders, in $EDGEFD_CACHE_DIR/hashes or ~/.cache/edgefd/hashes) | off | a folder",
    )
    relation_cache: str = setting(
        "auto",
        "where the server keeps neighbour tables by the hashes and settings they came from, so that a run on "
        "hashes met before skips the search: auto (for knn=hnsw, in $EDGEFD_CACHE_DIR/relations or "
        "~/.cache/edgefd/relations) | off | a folder",
    )
    exchange: str = setting(
        "batch",
        "batch: teachers per mini-batch from the live cache, clients in sequence "
        "(the paper, Alg. 1-2) | round: one exchange per round from a snapshot (MQTT; "
        "docs/methods/fedcache.md#when-knowledge-is-exchanged)",
        choices=EXCHANGES,
    )

    weight_cap: float = weight_cap_setting()

    def __post_init__(self) -> None:
        check_choices(self)
        check_trim(self.trim)
        check_weight_cap(self.weight_cap)
        if not (math.isfinite(self.clip) and (self.clip == 0 or self.clip >= 1)):
            raise ValueError(f"param clip: must be 0 (off) or a finite number >= 1, got {self.clip!r}")


def fedcache_loss(
    logits: torch.Tensor, labels: torch.Tensor, teacher_logits: torch.Tensor, params: FedCacheParams
) -> torch.Tensor:
    """CE + beta * T^2 * KL(softmax(teacher/T) + eps || softmax(student/T)), batch mean (Eq. 18;
    docs/methods/fedcache.md#temperature)."""
    teacher = torch.softmax(teacher_logits / params.temperature, dim=1) + params.eps
    distill = kernels.weighted_kl(logits, teacher.contiguous(), temperature=params.temperature, teacher_is_prob=True)
    return nn.functional.cross_entropy(logits, labels) + params.beta * distill


def relation_store(params: FedCacheParams) -> RelationStore | None:
    """Where the server's neighbour table is kept (``relation_cache``), or None to always search."""
    if params.relation_cache == "off" or (params.relation_cache == "auto" and params.knn != "hnsw"):
        return None
    return RelationStore(cache_base() / "relations" if params.relation_cache == "auto" else params.relation_cache)


def hash_function(encoder: HashEncoder, cache: str) -> Callable[[torch.Tensor], np.ndarray]:
    """The encoder itself, or the encoder behind a `HashCache` (``hash_cache``)."""
    if cache == "off" or (cache == "auto" and not encoder.name.startswith(("mobilenet", "onnx:"))):
        return encoder
    return HashCache(encoder, None if cache == "auto" else cache)


MOBILENET_WIDTH = 576
"""Width of a mobilenet hash (MobileNetV3-Small's pooled features)."""


def hash_width(encoder: str, input_shape: tuple[int, ...]) -> int | None:
    """Per-sample width of the hashes the encoder ``encoder`` (its name string) makes from samples of
    ``input_shape`` (None for ``onnx:PATH``: only the file says, and the server need not have it)."""
    kind, _, arg = encoder.partition(":")
    if kind == "pixels":
        return int(np.prod(input_shape))
    if kind == "projection":
        return int(arg or 64)  # build_encoder's default dimension
    if kind == "mobilenet":
        return MOBILENET_WIDTH
    return None


def label_dtype(num_classes: int) -> type:
    """The labels' wire type (1 byte while it fits)."""
    return np.uint8 if num_classes <= 256 else np.int32


class FedCacheClient(ClientRole):
    local_training = LocalTraining(
        optimizer_lifecycle="fresh", batch_order="fixed"
    )  # docs/methods/fedcache.md#optimiser, docs/methods/fedcache.md#batch-order
    knowledge = ("logits",)

    def __init__(self, context: ClientContext, params: FedCacheParams) -> None:
        super().__init__(context, params)
        self.optimizer = self.round_optimizer()
        self.ids = self.data.train_ids.numpy()
        self.index = SampleIndex(self.ids)

    @classmethod
    def done_sharing(cls) -> None:
        release_shared()  # the hash encoder (mobilenet: an ONNX export and a session, ~100 MB)

    def hello(self) -> Payload:
        encoder = build_encoder(self.params.encoder)
        hashes = hash_function(encoder, self.params.hash_cache)(self.data.train_x)
        return Payload(
            "fedcache.hello",
            {
                "ids": self.ids.astype(np.int32),
                "labels": self.data.train_y.numpy().astype(label_dtype(self.data.num_classes)),
                "hashes": hashes,
            },
            {"encoder": encoder.name},
        )

    def _teachers(self, downlink: Payload) -> torch.Tensor:
        """Teacher logits in this client's own sample order, matched by id (never by position)."""
        ids = downlink.arrays["ids"]
        teachers = downlink.arrays["knowledge"]
        try:
            rows = self.index.permutation(ids)
        except ValueError:
            raise ValueError(f"{self.client_id}: the server's teachers are not for this client's samples") from None
        out = np.empty((len(self.ids), teachers.shape[1]), np.float32)
        out[rows] = teachers
        return torch.from_numpy(out)

    def train_round(self, round: int, downlink: Payload | None) -> Payload:
        """``exchange=round``: one epoch pass against the round-start teachers, then all logits up."""
        if self.params.exchange != "round":
            raise ValueError(
                "fedcache: train_round is the round-batched exchange; this run has exchange="
                f"{self.params.exchange!r} (train_steps)"
            )
        y = self.data.train_y
        teachers = self._teachers(downlink) if downlink is not None else None
        recorded = torch.zeros((len(y), self.data.num_classes))

        def loss_fn(logits: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            recorded[idx] = (
                logits.detach()
            )  # train-mode, before this step's update (docs/methods/fedcache.md#which-logits-are-knowledge)
            if teachers is None:
                return nn.functional.cross_entropy(logits, y[idx])
            return fedcache_loss(logits, y[idx], teachers[idx], self.params)

        self.train_local(loss_fn)
        return Payload("fedcache.logits", {"ids": self.ids.astype(np.int32), "logits": recorded.numpy()})

    def train_steps(self, round: int) -> Generator[Payload, Payload, None]:
        """``exchange=batch`` (Alg. 1 l.9-12): per batch, the train-mode logits go up, the
        teachers of the same samples come back, and the step is taken."""
        x, y = self.data.train_x, self.data.train_y
        optimizer = self.optimizer.for_round()
        for _ in range(local_epochs(self.context.train)):
            for idx in epoch_batches(
                self.model, len(y), self.context.train, self.context.torch_generator, self.batch_order
            ):
                logits = forward(self.model, x[idx])
                ids = self.ids[idx.numpy()]
                request = Payload(
                    "fedcache.logits",
                    {"ids": ids.astype(np.int32), "logits": logits.detach().numpy()},
                )
                answer = yield request
                if not np.array_equal(answer.arrays["ids"], ids):
                    raise ValueError(f"{self.client_id}: the server's teachers are not for the samples it was sent")
                teachers = torch.from_numpy(np.asarray(answer.arrays["knowledge"], np.float32))
                optimizer.zero_grad(set_to_none=True)
                fedcache_loss(logits, y[idx], teachers, self.params).backward()
                optimizer.step()
        return None


class FedCacheServer(ServerRole):
    knowledge = ("knowledge",)

    def __init__(self, context: ServerContext, params: FedCacheParams) -> None:
        super().__init__(context, params)
        self.cache = KnowledgeCache(
            context.num_classes,
            mask_unfilled=params.mask_unfilled,
            max_ensemble=params.max_ensemble,
            aggregator=params.aggregator,
            trim=params.trim,
            weight_cap=params.weight_cap,
            clip=params.clip,
        )
        self.relations = RelationConfig(
            params.neighbours,
            params.knn,
            params.hnsw_m,
            params.hnsw_ef_construction,
            params.hnsw_ef,
            seed=100,
            exclude_same_owner=params.exclude_same_client,
        )
        self.relations.validate()
        self.encoder_name: Scalar | None = None  # as the clients' hellos say (a str from edgefd clients)
        self.step_exchange = params.exchange == "batch"
        self.rows_answered = 0
        self.uploaded: set[str] = set()
        """Clients that sent logits in the round under way (step requests or an uplink)."""
        self.logit_schemas: dict[tuple[str, int | None], schema.MessageSchema] = {}
        self.batchnorm: dict[str, bool] = {}
        """Whether each client's model has BatchNorm (`untrainable`), once asked."""

    def start(self, hellos: dict[str, Payload]) -> None:
        """Register every client's samples and relate them. A client without a hello (none came, or
        it was refused), with another encoder than most, or whose samples the cache refuses is
        left out of the run: no knowledge goes to it and none is taken from it."""
        missing = sorted(set(self.client_ids) - set(hellos))
        if missing:
            log.warning("fedcache: no hashes from %s; the run goes on without them", missing)
        if not hellos:
            raise ValueError("fedcache: no client sent its hashes")
        names = [str(p.scalars.get("encoder")) for _, p in sorted(hellos.items())]
        self.encoder_name = max(sorted(set(names)), key=names.count)  # most clients', ties by name
        for client in sorted(hellos):
            arrays = hellos[client].arrays
            if hellos[client].scalars.get("encoder") != self.encoder_name:
                log.warning("fedcache: %s hashes with another encoder than %s; left out", client, self.encoder_name)
                continue
            try:
                self.cache.register(client, arrays["ids"], arrays["labels"], arrays["hashes"])
            except ValueError as error:
                log.warning("fedcache: %s's samples refused (%s); left out", client, error)
        self.cache.build(self.relations, relation_store(self.params))
        if self.cache.held_back:
            log.warning(
                "fedcache: %d sample(s) of clients holding more than weight_cap x the others' median are no "
                "sample's neighbour (docs/ROBUSTNESS.md#bounded-weights)",
                self.cache.held_back,
            )
        self.cross_client = self.cache.cross_client_fraction()

    def hello_schemas(self, client_id: str) -> Sequence[schema.MessageSchema]:
        """Ids (none twice), labels and hashes of every sample, one of each per sample, and the
        encoder's name."""
        # The sample count is known only from the hello itself, and the ids it declares are what the
        # client's later messages are checked against: foreign ids cannot be caught here.
        C = self.num_classes
        arrays = {
            "ids": schema.ArraySpec(("int32",), ("n",), unique=True),
            "labels": schema.labels(C, (np.dtype(label_dtype(C)).name,), "n"),
            "hashes": schema.knowledge(("n", hash_width(self.params.encoder, self.context.input_shape))),
        }
        return (schema.MessageSchema("fedcache.hello", arrays, {"encoder": schema.ScalarSpec(str)}),)

    def check_hello(self, client_id: str, payload: Payload) -> None:
        """The schema's checks, and what the run's settings let one client hold: no more samples than
        --samples-per-client (or the run's training set, when that is not set), and no more of a
        class than the run's training set holds of it (``too-many-samples``). So what one client
        declares adds at most one class's worth of samples to any class's relation search, whose
        cost grows with the square of the class's size (docs/methods/fedcache.md#hello-bounds)."""
        most = self.context.max_client_samples()
        declared = max((len(array) for array in payload.arrays.values() if array.ndim), default=0)
        if most is not None and declared > most:  # before the schema's checks, which read every value
            where = "--samples-per-client" if self.context.samples_per_client is not None else "its training set"
            raise schema.UplinkRejected(
                "too-many-samples",
                f"a hello of {declared} samples; one client of this run holds at most {most} ({where})",
            )
        super().check_hello(client_id, payload)
        counts = np.bincount(np.asarray(payload.arrays["labels"], np.int64), minlength=self.context.num_classes)
        self.context.check_declared(counts=counts)

    def untrainable(self, client_id: str) -> int:
        """How many of the client's samples an honest round may leave without logits: a last
        mini-batch of one sample, which a model with BatchNorm skips (`epoch_batches`). The server
        does not warn of so few (they are still nobody's teacher until uploaded)."""
        if client_id not in self.cache.slices:
            return 0
        if len(self.cache.sample_ids(client_id)) % self.context.train.batch_size != 1:
            return 0
        if client_id not in self.batchnorm:
            with torch.random.fork_rng(devices=[]):  # aside from the run's random stream
                model = self.context.build_model(self.context.client_models[client_id])
            self.batchnorm[client_id] = has_batchnorm(model)
        return int(self.batchnorm[client_id])

    def max_steps(self, client_id: str) -> int:
        """Its samples' mini-batches times the local epochs (0 for a client left out at the start)."""
        if client_id not in self.cache.slices:
            return 0
        samples = len(self.cache.sample_ids(client_id))
        return math.ceil(samples / self.context.train.batch_size) * local_epochs(self.context.train)

    def _logits(self, client_id: str, length: int | None) -> schema.MessageSchema:
        """Logits of ``length`` (None: any number) of this client's own samples (the ids its hello
        declared), each once, one row per id. Made once per client: the ids are fixed at the start,
        and a request is checked at every step."""
        key = (client_id, length)
        if key not in self.logit_schemas:
            rows = "n" if length is None else length
            arrays = {
                "ids": schema.sample_ids(self.cache.sample_ids(client_id), ("int32",), rows),
                "logits": schema.knowledge((rows, self.num_classes)),
            }
            self.logit_schemas[key] = schema.MessageSchema("fedcache.logits", arrays)
        return self.logit_schemas[key]

    def uplink_schemas(self, client_id: str) -> Sequence[schema.MessageSchema]:
        """``exchange=round``: the logits of all the client's samples (nothing without its hello)."""
        if self.step_exchange or client_id not in self.cache.slices:
            return ()  # exchange=batch: the logits went up with the requests; the round ends with no uplink
        return (self._logits(client_id, len(self.cache.sample_ids(client_id))),)

    def request_schemas(self, client_id: str) -> Sequence[schema.MessageSchema]:
        """``exchange=batch``: the logits of one mini-batch of the client's samples."""
        if not self.step_exchange or client_id not in self.cache.slices:
            return ()
        return (self._logits(client_id, None),)  # batches vary in length (an epoch's last is shorter)

    def downlink(self, round: int, client_id: str) -> Payload | None:
        if client_id not in self.cache.slices:  # left out at the start
            return None
        ids = self.cache.sample_ids(client_id)
        return Payload(
            "fedcache.knowledge",
            {"ids": ids.astype(np.int32), "knowledge": self.cache.fetch(client_id).numpy()},
        )

    def answer(self, round: int, client_id: str, request: Payload) -> Payload:
        """``exchange=batch``: the teachers of the request's samples, then their logits written in
        (the request fits `request_schemas`: this client's ids, each once, a row of logits each)."""
        ids = request.arrays["ids"]
        teachers = self.cache.exchange(self.cache.rows(client_id, ids), request.arrays["logits"])
        self.rows_answered += len(ids)
        self.uploaded.add(client_id)
        return Payload("fedcache.knowledge", {"ids": np.asarray(ids, np.int32), "knowledge": teachers.numpy()})

    def aggregate(self, round: int, uplinks: dict[str, Payload]) -> dict[str, float]:
        for client in sorted(uplinks):
            arrays = uplinks[client].arrays
            self.cache.update(self.cache.rows(client, arrays["ids"]), arrays["logits"])
        updated = self.rows_answered + sum(len(p.arrays["ids"]) for p in uplinks.values())
        self.rows_answered = 0
        first = self.uploaded.union(uplinks) - self.cache.uploaders
        for client, silent in self.cache.close_round(self.uploaded.union(uplinks)).items():
            if client in first and silent > self.untrainable(client):
                log.warning(
                    "fedcache: %s trained without uploading logits for %d of the samples its hello declared; "
                    "they are nobody's teacher until it does (docs/methods/fedcache.md#samples-never-uploaded)",
                    client,
                    silent,
                )
        self.uploaded = set()
        metrics = {"cache_rows_updated": float(updated), "neighbours_from_other_clients": self.cross_client}
        if self.cache.silent:  # only then: an honest run's records stay as they were
            metrics["cache_rows_never_uploaded"] = float(self.cache.silent)
        if clipped := self.cache.clipped_rows():
            metrics["cache_rows_clipped"] = float(clipped)
        return metrics


register_method(
    "fedcache",
    "per-sample knowledge cache related by hash similarity (Wu et al. 2024)",
    FedCacheClient,
    FedCacheServer,
    FedCacheParams,
    paper="Z. Wu et al., FedCache: A Knowledge Cache-driven Federated Learning Architecture for Personalized "
    "Edge Intelligence, IEEE TMC 2024, arXiv:2308.07816",
    models=lambda shape: "hetero",  # images: the paper's ResNet-8/16/20 round-robin
)
