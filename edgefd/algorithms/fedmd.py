"""FedMD (Li & Wang, "FedMD: Heterogenous Federated Learning via Model Distillation", 2019), the
public-data baseline of FedZKT's experiments (Sec. IV-A5 and Table I of the FedZKT paper; ``docs/methods/fedmd.md``).

Every device and the server read the same public dataset through the data registry
(``public_dataset``, e.g. ``mnist5k`` for ``fmnist`` devices: the paper's FASHION/MNIST pairing).
It has no privacy issue, so both roles load it locally and only its *indices* are agreed on: the
server sends a seed, and each device draws the same alignment subset from it.

Per round r (runtime order: downlink, local work, uplink, aggregate):

1. downlink: the seed of this round's alignment subset ``A_r`` and, from round 2 on, the consensus
   of round r-1 (the devices' logits on ``A_{r-1}`` combined: FedMD's mean, or by default their
   coordinate-wise median, which one poisoning device cannot drag; ``aggregator``);
2. digest: the device trains ``digest_epochs`` epochs on ``A_{r-1}`` to match the consensus logits
   with mean absolute error (FedMD's loss);
3. revisit: ``T_l`` epochs of cross-entropy on its private data (the run's ``--epochs``);
4. communicate: it uploads its logits on ``A_r`` (eval mode); the server combines what arrived
   into the consensus.

Round 1 is FedMD's initial private training plus the first communication, so the sequence of
updates is FedMD's: private, then (communicate, aggregate, digest, revisit) per round. The run's
optimiser is used for both steps (the same optimiser, batch size, rounds and devices as FedZKT;
docs/methods/fedmd.md#fedmd-settings).
Public-label pretraining (FedMD's transfer-learning step, Algorithm 1 of the FedMD paper) runs by
default for ``AUTO_PRETRAIN_EPOCHS`` epochs when the public set has as many classes as the private
data, and cannot run otherwise; the FedZKT recipes keep it, as FedMD runs
(docs/methods/fedmd.md#public-label-pretraining). Without it, the consensus on public data comes from
models that never saw public labels: on the default digits run (10 clients, 10 rounds) FedMD sat at
35% against Local's 84% (with 2 epochs of it: 90%).
Public images of another size than the private ones are resized to the private size
(``resize_public``, on by default) and standardised again, so that the default public set (mnist5k,
28x28) also serves the bundled 8x8 digits: an edgefd choice, not the paper's (whose public and
private images share a size; docs/methods/fedmd.md#public-images-of-another-size). The digest step
trains at batch 256 (``digest_batch_size``, FedMD's reference code), the revisit at the run's batch
size. At the run's batch 32 instead,
a 5,000-sample digest is 157 steps against ~9 of revisit on a digits client: on the contract
test's label-ordered digits (3 rounds, seed 0, no transfer step) FedMD ended at 40.0% against
Local's 63.1%, at batch 256 with the resized pool re-standardised at 53.4%.

The consensus is the median by default, not the paper's mean (``aggregator=mean``; the FedZKT
recipes pin it): it costs a clean run under a point and holds one poisoning device of 3 or 5
(docs/ROBUSTNESS.md#what-each-option-costs-a-clean-run).

Wire: up ``N_a x C`` logits (float32, or the run's ``--precision``), down the same plus two int64
scalars; with ``alignment_size`` 5000 and C = 10 that is 200 kB each way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from edgefd.algorithms.base import ClientContext, ClientRole, ServerContext, ServerRole, register_method
from edgefd.algorithms.params import check_choices
from edgefd.algorithms.schema import MessageSchema, knowledge
from edgefd.algorithms.toolkit import aggregator_setting, check_trim, robust_mean, too_few_to_combine, trim_setting
from edgefd.data import load_dataset
from edgefd.protocol import Payload
from edgefd.protocol.payload import Scalar
from edgefd.settings import setting
from edgefd.training import LocalTraining, local_epochs, predict_logits, train_epochs

KIND = "fedmd"
CONSENSUS = "consensus"
LOGITS = "logits"
PUBLIC_SPLITS = ("all", "train")
AUTO_PRETRAIN_EPOCHS = 2
"""Public-label epochs when ``pretrain_epochs`` is left to the default and the class counts match."""


@dataclass
class FedMDParams:
    """FedMD's hyperparameters (FedMD reference code defaults where the FedZKT paper is silent)."""

    public_dataset: str = setting(
        "mnist5k", "registry name of the public dataset (FedZKT's pairing: mnist5k for fmnist devices)"
    )
    public_split: str = setting(
        "all", "which public samples may be drawn: 'all' (train + test) or 'train'", choices=PUBLIC_SPLITS
    )
    alignment_size: int = setting(5000, "public samples per round, N_a (FedMD: 5000; capped at the pool size)")
    digest_epochs: int = setting(1, "epochs on the alignment set per round (FedMD: 1)")
    digest_batch_size: int | None = setting(
        256,
        "batch size of the digest step (FedMD's reference code: 256); none = the run's --batch-size",
    )
    pretrain_epochs: int | None = setting(
        None,
        "epochs of public-label training before round 1 (FedMD's transfer step); none = "
        f"{AUTO_PRETRAIN_EPOCHS} when the public set has as many classes as the private data, else 0 (it cannot "
        "run: docs/methods/fedmd.md#public-label-pretraining)",
    )
    public_data_root: str | None = setting(None, "data folder for an on-disk public dataset (bundled ones ignore it)")
    resize_public: bool = setting(
        True,
        "public images of another size than the private ones (mnist5k's 28x28 for the 8x8 digits) are resized "
        "to the private size (bilinear, antialiased); false: refuse the mismatch",
    )
    aggregator: str = aggregator_setting(
        "the devices' logits into the consensus", "FedMD's, every device alike", default="median"
    )
    trim: float = trim_setting()

    def __post_init__(self) -> None:
        check_choices(self)
        check_trim(self.trim)
        if self.alignment_size < 1:
            raise ValueError(f"param alignment_size: must be >= 1, got {self.alignment_size}")
        for name in ("digest_epochs", "pretrain_epochs"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"param {name}: must be >= 0, got {value}")
        if self.digest_batch_size is not None and self.digest_batch_size < 1:
            raise ValueError(f"param digest_batch_size: must be >= 1 (or none), got {self.digest_batch_size}")


def public_pool(params: FedMDParams) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The public inputs and labels alignment subsets are drawn from, and their class count."""
    dataset = load_dataset(params.public_dataset, root=params.public_data_root)
    if params.public_split == "train":
        return dataset.train_x, dataset.train_y, dataset.num_classes
    return (
        torch.cat([dataset.train_x, dataset.test_x]),
        torch.cat([dataset.train_y, dataset.test_y]),
        dataset.num_classes,
    )


def resized_like(images: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """``images`` (N, C, H, W) resized to the (C, H', W') of ``shape`` when only the size differs,
    then standardised again (zero mean, unit std, as every dataset is when loaded): antialiasing
    shrinks the spread (mnist5k at 8x8 has std 0.68), which would leave the public inputs on another
    scale than the private ones. Anything else is returned as it is (the caller reports a mismatch)."""
    if images.dim() != 4 or len(shape) != 3 or images.shape[1] != shape[0] or tuple(images.shape[1:]) == shape:
        return images
    size = (int(shape[1]), int(shape[2]))
    resized = nn.functional.interpolate(images, size=size, mode="bilinear", antialias=True, align_corners=False)
    return (resized - resized.mean()) / resized.std().clamp_min(1e-12)


def alignment_indices(seed: int, pool_size: int, size: int) -> torch.Tensor:
    """The alignment subset of a round: ``size`` distinct pool indices (sorted) drawn from ``seed``.
    Server and devices call this with the same seed and get the same subset."""
    rng = np.random.default_rng(int(seed))
    chosen = rng.choice(pool_size, size=min(int(size), pool_size), replace=False)
    return torch.from_numpy(np.sort(chosen).astype(np.int64))


class FedMDClient(ClientRole):
    local_training = LocalTraining(optimizer_lifecycle="fresh")  # a new optimiser for each step (digest, revisit)
    knowledge = (LOGITS,)

    def __init__(self, context: ClientContext, params: FedMDParams) -> None:
        super().__init__(context, params)
        self.optimizer = self.round_optimizer()
        self.public_x, self.public_y, public_classes = public_pool(params)
        own_shape = tuple(context.data.train_x.shape[1:])
        if params.resize_public:
            self.public_x = resized_like(self.public_x, own_shape)
        if tuple(self.public_x.shape[1:]) != own_shape:
            raise ValueError(
                f"fedmd: public dataset {params.public_dataset!r} has samples of shape "
                f"{tuple(self.public_x.shape[1:])}, the private data {own_shape}"
            )
        same_classes = public_classes == context.data.num_classes
        if params.pretrain_epochs and not same_classes:
            raise ValueError(
                f"fedmd: pretrain_epochs needs the public dataset to have {context.data.num_classes} "
                f"classes, {params.public_dataset!r} has {public_classes}"
            )
        auto = AUTO_PRETRAIN_EPOCHS if same_classes else 0
        self.pretrain_epochs = auto if params.pretrain_epochs is None else params.pretrain_epochs
        self.pretrained = self.pretrain_epochs == 0
        self.last_digest_loss: float | None = None

    def _train(
        self,
        x: torch.Tensor,
        loss_fn,
        epochs: int,
        fixed_order: torch.Tensor | None = None,
        batch_size: int | None = None,
    ) -> float:
        """One step of FedMD (pretrain, digest or revisit), each with the optimiser for this step."""
        train = self.context.train if batch_size is None else replace(self.context.train, batch_size=batch_size)
        return train_epochs(
            self.model,
            x,
            loss_fn,
            self.optimizer.for_round(),
            train,
            self.context.torch_generator,
            epochs=epochs,
            fixed_order=fixed_order,
        )

    def digest(self, indices: torch.Tensor, consensus: torch.Tensor) -> float:
        """Train to match the consensus logits on the alignment subset (MAE on logits)."""
        x = self.public_x[indices]
        return self._train(
            x,
            lambda logits, idx: nn.functional.l1_loss(logits, consensus[idx]),
            self.params.digest_epochs,
            batch_size=self.params.digest_batch_size,
        )

    def train_round(self, round: int, downlink: Payload | None) -> Payload:
        if downlink is None:
            raise ValueError("fedmd: every round needs the server's downlink (the alignment seed)")
        if not self.pretrained:
            y = self.public_y
            self._train(
                self.public_x,
                lambda logits, idx: nn.functional.cross_entropy(logits, y[idx]),
                self.pretrain_epochs,
            )
            self.pretrained = True
        if CONSENSUS in downlink.arrays:
            indices = alignment_indices(
                int(downlink.scalars["consensus_seed"]), len(self.public_x), self.params.alignment_size
            )
            consensus = torch.from_numpy(np.ascontiguousarray(downlink.arrays[CONSENSUS], dtype=np.float32))
            if consensus.shape != (len(indices), self.data.num_classes):
                raise ValueError(
                    f"fedmd: consensus of shape {tuple(consensus.shape)}, expected "
                    f"{(len(indices), self.data.num_classes)}"
                )
            self.last_digest_loss = self.digest(indices, consensus)
        y = self.data.train_y
        self._train(
            self.data.train_x,
            lambda logits, idx: nn.functional.cross_entropy(logits, y[idx]),
            local_epochs(self.context.train),
            self.batch_order,  # a fixed order covers the private data; public subsets are reshuffled
        )
        seed = int(downlink.scalars["alignment_seed"])
        indices = alignment_indices(seed, len(self.public_x), self.params.alignment_size)
        logits = predict_logits(self.model, self.public_x[indices], self.context.train.eval_batch_size)
        return Payload(KIND, {LOGITS: logits.numpy().astype(np.float32)})


class FedMDServer(ServerRole):
    knowledge = (CONSENSUS,)

    def __init__(self, context: ServerContext, params: FedMDParams) -> None:
        super().__init__(context, params)
        self.pool_size = len(public_pool(params)[0])
        self.consensus: np.ndarray | None = None
        self.consensus_seed: int | None = None

    def uplink_schemas(self, client_id: str) -> Sequence[MessageSchema]:
        """The client's logits on this round's alignment subset (N_a, C)."""
        return (MessageSchema(KIND, {LOGITS: knowledge((self.alignment_size, self.num_classes))}),)

    @property
    def alignment_size(self) -> int:
        """Rows of an alignment subset: ``alignment_size``, capped at the public pool's size."""
        return min(self.params.alignment_size, self.pool_size)

    def round_seed(self, round: int) -> int:
        """The seed of round ``round``'s alignment subset (fixed by the run seed)."""
        return int(np.random.SeedSequence([self.context.seed, 11, round]).generate_state(1)[0])

    def downlink(self, round: int, client_id: str) -> Payload:
        scalars: dict[str, Scalar] = {"alignment_seed": self.round_seed(round)}
        arrays = {}
        if self.consensus is not None and self.consensus_seed is not None:  # set together in aggregate
            arrays[CONSENSUS] = self.consensus
            scalars["consensus_seed"] = self.consensus_seed
        return Payload(KIND, arrays, scalars)

    def aggregate(self, round: int, uplinks: dict[str, Payload]) -> dict[str, float]:
        """Consensus = plain mean of the received logits (FedMD), or their coordinate-wise median or
        trimmed mean (``aggregator``); nothing received, or fewer than `ROBUST_MINIMUM` devices for a
        robust statistic (``below_quorum`` 1), keeps the last consensus with its subset."""
        if not uplinks:
            return {"devices": 0.0}
        expected = (self.alignment_size, self.num_classes)
        tables = []
        for cid in sorted(uplinks):
            table = np.asarray(uplinks[cid].arrays.get(LOGITS))
            if table.shape != expected:
                raise ValueError(f"fedmd: {cid} sent logits of shape {table.shape}, expected {expected}")
            tables.append(table.astype(np.float64))
        how = self.params.aggregator
        if how == "mean":
            self.consensus = np.mean(tables, axis=0).astype(np.float32)
        elif too_few_to_combine(round, len(tables), how):
            return {"devices": float(len(tables)), "below_quorum": 1.0}
        else:
            self.consensus = robust_mean(np.stack(tables), how, self.params.trim).astype(np.float32)
        self.consensus_seed = self.round_seed(round)
        robust = {} if how == "mean" else {"below_quorum": 0.0}
        return {"devices": float(len(tables)), **robust}


register_method(
    "fedmd",
    "public-data logit consensus: digest then revisit (Li & Wang, FedMD; FedZKT's baseline)",
    FedMDClient,
    FedMDServer,
    FedMDParams,
    paper="D. Li and J. Wang, FedMD: Heterogenous Federated Learning via Model Distillation, arXiv:1910.03581",
)
