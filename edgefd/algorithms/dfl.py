"""DFL (Liu et al., "Efficient Federated Learning for AIoT Applications Using Knowledge Distillation",
IEEE IoT-J 2023): FedAvg plus a per-class soft-target table.

Every selected client receives the global model ``w`` and the global soft-target table ``Y``
(``C x C``, row ``c`` = the mean model output over samples of class ``c``), trains with

    loss = rho_r * CE(z, y) + (1 - rho_r) * kappa * KL(teacher(Y[y]) || softmax(z / tau))

(Eq. 3; the ``weighted_kl`` kernel, teacher row looked up by the sample's hard label), with the
dynamic weight ``rho_r = max(1 - r / R, threshold)`` (paper Eq. 6, 1-based round r, R the
``horizon``), then runs its updated model over its whole training set and uploads its model together
with its label-wise mean table (the ``labelwise_mean`` kernel) and per-class counts. The server
averages the models by sample count (Eq. 1) and the tables per row (Eq. 2, with the masking of
docs/methods/dfl.md#absent-classes), replacing ``Y``. ``threshold=1`` is FedAvg, bit for bit, at the
same ``--epochs`` (DFL's default is its paper's 5 local epochs a round). The deliverable is the
global model, evaluated like FedAvg's.

The method, its choices where the paper is silent and its messages: docs/methods/dfl.md. The
choices, all followed here:

- tau = 1 and kappa = 1 by default; with tau != 1, kappa defaults to tau^2
  (docs/methods/dfl.md#temperature-and-kappa).
- ``Y`` holds averaged raw logits and a row's teacher is ``softmax(Y[c] / tau)``
  (``soft_targets="logits"``); ``"probs"`` averages softmax outputs instead
  (docs/methods/dfl.md#logits-or-probabilities).
- KL(teacher || student) (docs/methods/dfl.md#kl-direction), averaged over the batch ("batchmean",
  docs/methods/dfl.md#kl-reduction); ``kl_reduction="torch_mean"`` divides the KL term by C as well
  (PyTorch's ``KLDivLoss()`` default).
- rho is constant within a round and r is 1-based; with rho == 1 the KL term is skipped entirely, so
  the loss is the very CE FedAvg computes (docs/methods/dfl.md#round-indexing).
- R of Eq. 6 is the param ``horizon``, 200 rounds by default: the paper never gives R
  (docs/methods/dfl.md#horizon). Alg. 1 reads R as the run's length (``horizon=none``: the run's
  ``--rounds``, what the recipes use), but then a short run compresses the ramp: at 3 rounds a third
  of round 1's loss is KL towards uniform teachers and 40% from round 2 on, while the clients'
  models are still too unsure for their label-wise means to teach anything (their table's diagonal
  softmax is 0.11-0.14), and DFL ended 4-16 points below FedAvg. With the horizon fixed, the KD
  weight grows by 1/200 a round whatever the run's length: a short run stays almost pure CE, as the
  paper wants of the early rounds (Sec. III-C, before Eq. 6: early on "the soft targets will make
  the model optimize in the wrong direction, which will slow down the model training").
- ``Y`` starts at zeros (uniform teachers) in logits mode, 1/C in probs mode
  (docs/methods/dfl.md#initial-soft-targets).
- Classes a client lacks: the client sends zero rows plus its per-class counts, and the server
  weights row c of client k by ``n_k * [n_kc > 0]`` ("masked", the default,
  docs/methods/dfl.md#absent-classes); a row nobody reported keeps its previous value.
  ``aggregation="paper"`` is Eq. 2 verbatim (``n_k``, absent rows count as zeros); ``"class_count"``
  weights by ``n_kc`` (docs/methods/dfl.md#row-weights, extension).
- ``n_k`` (and ``n_kc``) in Eq. 1 and 2 are at most ``weight_cap`` times the median of the other
  clients' (docs/ROBUSTNESS.md#bounded-weights); an uplink whose class counts do not sum to its
  ``samples`` is refused (``counts-disagree``).
- ``Y`` is replaced every round, no EMA (docs/methods/dfl.md#no-memory-of-soft-targets).
- Soft targets are computed after local training, in eval mode, without gradients, over all of the
  client's training samples, grouped by true label (docs/methods/dfl.md#soft-targets-in-eval-mode).
  This pass uses no RNG and does not touch BatchNorm statistics, so it cannot change the weights.
- Plain SGD, fresh each round, batch reshuffled every epoch (docs/methods/dfl.md#batches-and-epochs,
  docs/methods/dfl.md#optimiser): the shared trainer, called exactly as FedAvg calls it, for the
  paper's E = 5 local epochs a round (Sec. IV-A) unless the run sets ``--epochs``. The optimiser
  settings are the run's (``--momentum 0 --weight-decay 0 --batch-size 50`` gives the paper's plain
  SGD at its batch; the run's defaults are not the paper's).
- Partial participation and stragglers are the runtime's; the server renormalises over the uploads
  that arrived (docs/methods/dfl.md#stragglers). The paper's 80/20 split is
  ``--partition dominant:0.8`` (docs/methods/dfl.md#non-iid-split).

Where this module departs from the letter of the paper, and why:

- The uplink carries the client's updated model ``w_k`` instead of ``delta = w_k - w`` (Eq. 5,
  Alg. 2 step 9). Same number of floats, same bytes; the server computes Eq. 1 as
  ``sum_k n_k w_k / sum_k n_k``, which equals ``w + sum_k n_k delta_k / sum_k n_k`` with the global
  step of 1 (docs/methods/dfl.md#model-or-delta-upload). This is FedAvg's own arithmetic
  (``toolkit.average_states``), and it is what makes ``threshold=1`` bit-identical to
  ``--algo fedavg``: a float32 delta loses low bits to cancellation, and ``w + mean(delta)`` rounds
  differently from ``mean(w_k)``.
- Integer buffers (BatchNorm's ``num_batches_tracked``) are averaged and rounded as FedAvg does, not
  copied from the server, for the same bit-identity (docs/methods/dfl.md#integer-buffers); BatchNorm
  only reads that counter when its momentum is None.
- ``class_counts`` travel as int32 (the codec has no uint32; same 4 bytes), and ``n_k`` as the int64
  scalar ``samples`` FedAvg also sends; the round is in the codec header.

Wire (docs/methods/dfl.md#messages; bytes = the payload plus the codec's header and table entries):
downlink ``weights`` (every state entry, float32) + ``dfl/soft_targets`` (C x C); uplink the same +
``dfl/class_counts`` (C, int32) + scalar ``samples``. The soft-target table is float32 by default,
float64 with ``soft_target_dtype=float64`` (the paper's 8 bytes per element, Sec. IV-B3,
docs/methods/dfl.md#soft-target-dtype), and travels at the run's ``--precision`` when that is fp16
or int8 (model weights are always sent losslessly).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from edgefd import kernels
from edgefd.algorithms import schema
from edgefd.algorithms.base import ClientContext, ClientRole, ServerContext, ServerRole, register_method
from edgefd.algorithms.params import check_choices
from edgefd.algorithms.schema import DeclaredCounts, MessageSchema
from edgefd.algorithms.toolkit import (
    AGGREGATORS,
    average_states,
    bounded_updates,
    capped_label_counts,
    capped_metric,
    capped_weights,
    check_trim,
    check_update_cap,
    check_weight_cap,
    one_architecture_model,
    robust_rows,
    robust_states,
    sent_back,
    sent_back_metric,
    too_few_to_combine,
    update_cap_setting,
    weight_cap_setting,
)
from edgefd.protocol import Payload
from edgefd.settings import setting
from edgefd.training import (
    LocalTraining,
    load_state_arrays,
    predict_logits,
    state_arrays,
)

SOFT_TARGETS = "dfl/soft_targets"
CLASS_COUNTS = "dfl/class_counts"
_RESERVED = (SOFT_TARGETS, CLASS_COUNTS)
KIND = "dfl"

SOFT_TARGET_SPACES = ("logits", "probs")
AGGREGATIONS = ("masked", "paper", "class_count")
KL_REDUCTIONS = ("batchmean", "torch_mean")
SCHEDULES = ("dynamic", "fixed")
SOFT_TARGET_DTYPES = {"float32": np.float32, "float64": np.float64}


@dataclass
class DFLParams:
    """DFL's hyperparameters; defaults from the paper, or edgefd's choice where the paper is silent
    (docs/methods/dfl.md#switchable-choices)."""

    threshold: float = setting(
        0.6,
        "lower bound of the CE weight rho = max(1 - r/R, threshold) (paper Eq. 6, "
        "Sec. IV-C); 1 = FedAvg, 0 = DFL-DRw/T",
    )
    temperature: float = setting(
        1.0, "softmax temperature tau of the KD term (not in the paper: 1, docs/methods/dfl.md#temperature-and-kappa)"
    )
    kappa: float | None = setting(
        None, "factor on the KL term; None = tau^2 (1 at tau = 1, docs/methods/dfl.md#temperature-and-kappa)"
    )
    soft_targets: str = setting(
        "logits",
        "what the table averages: 'logits' (teacher = softmax(row/tau)) or 'probs' (softmax outputs) "
        "(docs/methods/dfl.md#logits-or-probabilities)",
        choices=SOFT_TARGET_SPACES,
    )
    aggregation: str = setting(
        "masked",
        "soft-target row weights: 'masked' (n_k if the client has the class), "
        "'paper' (n_k, Eq. 2), 'class_count' (n_kc) (docs/methods/dfl.md#absent-classes)",
        choices=AGGREGATIONS,
    )
    kl_reduction: str = setting(
        "batchmean",
        "'batchmean' (KL per sample) or 'torch_mean' (also / C, the KLDivLoss() default) "
        "(docs/methods/dfl.md#kl-reduction)",
        choices=KL_REDUCTIONS,
    )
    schedule: str = setting(
        "dynamic",
        "'dynamic' (Eq. 6) or 'fixed' (rho = threshold every round: the DFL-FR ablation, Sec. IV-C, "
        "docs/methods/dfl.md#dfl-fr-fixed-ratio)",
        choices=SCHEDULES,
    )
    horizon: int | None = setting(
        200,
        "R of Eq. 6, the rounds over which the KD weight ramps up to 1 - threshold (the paper never "
        "gives R; edgefd: 200, docs/methods/dfl.md#horizon); none = the run's --rounds (Alg. 1 read literally)",
    )
    soft_target_dtype: str = setting(
        "float32",
        "wire dtype of the table: 'float32' (edgefd) or 'float64' (the paper's 8 B/element, Sec. IV-B3, "
        "docs/methods/dfl.md#soft-target-dtype)",
        choices=tuple(SOFT_TARGET_DTYPES),
    )
    aggregator: str = setting(
        "mean",
        "how the server combines the clients' weights and soft-target rows: mean (Eq. 1 and 2, weighted), or the "
        "coordinate-wise median or trimmed mean, unweighted, which one poisoning client cannot drag far "
        "(docs/methods/dfl.md#robust-aggregation)",
        choices=AGGREGATORS,
    )
    trim: float = setting(0.2, "aggregator=trimmed: fraction of clients dropped at each end of every coordinate")
    weight_cap: float = weight_cap_setting()
    update_cap: float = update_cap_setting()

    def __post_init__(self) -> None:
        check_choices(self)
        check_trim(self.trim)
        check_weight_cap(self.weight_cap)
        check_update_cap(self.update_cap)
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"param threshold: must be in [0, 1], got {self.threshold}")
        if not (self.temperature > 0 and np.isfinite(self.temperature)):
            raise ValueError(f"param temperature: must be a finite number > 0, got {self.temperature}")
        if self.kappa is not None and not (self.kappa >= 0 and np.isfinite(self.kappa)):
            raise ValueError(f"param kappa: must be a finite number >= 0, got {self.kappa}")
        if self.horizon is not None and self.horizon < 1:
            raise ValueError(f"param horizon: must be >= 1 (or none: the run's --rounds), got {self.horizon}")

    @property
    def kl_factor(self) -> float:
        """kappa; None means tau^2."""
        return self.temperature**2 if self.kappa is None else float(self.kappa)

    def rho(self, round: int, run_rounds: int) -> float:
        """The CE weight of ``round`` in a run of ``run_rounds`` (R = ``horizon``, or the run's length)."""
        return rho(round, self.horizon or run_rounds, self.threshold, self.schedule)


def rho(round: int, total_rounds: int, threshold: float, schedule: str = "dynamic") -> float:
    """The CE weight of round ``round`` (1-based) of ``total_rounds``: ``max(1 - r/R, threshold)``
    (Eq. 6), or ``threshold`` itself for the fixed-ratio ablation. The KD weight is ``1 - rho``."""
    if total_rounds < 1:
        raise ValueError(f"total_rounds: must be >= 1, got {total_rounds}")
    if schedule == "fixed":
        return float(threshold)
    if schedule != "dynamic":
        raise ValueError(f"schedule: expected one of {', '.join(SCHEDULES)}, got {schedule!r}")
    return max(1.0 - round / total_rounds, float(threshold))


def initial_soft_targets(num_classes: int, space: str) -> np.ndarray:
    """docs/methods/dfl.md#initial-soft-targets: zeros in logits mode (uniform teachers), 1/C in probs mode."""
    fill = 0.0 if space == "logits" else 1.0 / num_classes
    return np.full((num_classes, num_classes), fill, dtype=np.float64)


def aggregate_soft_targets(
    tables: list[np.ndarray], counts: list[np.ndarray], samples: list[float], previous: np.ndarray, mode: str = "masked"
) -> np.ndarray:
    """Eq. 2 with the row weights of docs/methods/dfl.md#absent-classes:
    ``Y[c] = sum_k a_kc Y_k[c] / sum_k a_kc`` in float64, clients in the given order, with ``a_kc`` =
    ``n_k [n_kc > 0]`` (masked), ``n_k`` (paper) or ``n_kc`` (class_count); a row whose weights sum to
    0 keeps ``previous[c]``. Returns float64."""
    if mode not in AGGREGATIONS:
        raise ValueError(f"mode: expected one of {', '.join(AGGREGATIONS)}, got {mode!r}")
    previous = np.asarray(previous, dtype=np.float64)
    acc = np.zeros_like(previous)
    den = np.zeros(previous.shape[0], dtype=np.float64)
    for table, count, n in zip(tables, counts, samples):
        count = np.asarray(count, dtype=np.float64)
        if mode == "paper":
            weight = np.full_like(count, float(n))
        elif mode == "masked":
            weight = float(n) * (count > 0)
        else:
            weight = count
        acc += weight[:, None] * np.asarray(table, dtype=np.float64)
        den += weight
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den[:, None] > 0, acc / np.where(den > 0, den, 1.0)[:, None], previous)


def dfl_loss(
    logits: torch.Tensor, labels: torch.Tensor, teacher_table: torch.Tensor, rho_value: float, params: DFLParams
) -> torch.Tensor:
    """Eq. 3: ``rho CE(z, y) + (1 - rho) kappa KL(teacher(Y[y]) || softmax(z / tau))``, batch-averaged.

    With ``rho == 1`` this is exactly ``F.cross_entropy(logits, labels)`` (the KL term is not
    computed), so DFL at threshold 1 takes FedAvg's gradient path bit for bit."""
    ce = nn.functional.cross_entropy(logits, labels)
    if rho_value == 1.0:
        return ce
    kl = kernels.weighted_kl(
        logits, teacher_table[labels], temperature=params.temperature, teacher_is_prob=params.soft_targets == "probs"
    )
    # the kernel already multiplies by tau^2; rescale to kappa
    factor = params.kl_factor / params.temperature**2
    if params.kl_reduction == "torch_mean":
        factor /= logits.shape[1]
    if rho_value == 0.0:
        return factor * kl
    return rho_value * ce + (1.0 - rho_value) * factor * kl


def _check_state_names(state: dict[str, np.ndarray]) -> None:
    clash = sorted(set(state) & set(_RESERVED))
    if clash:
        raise ValueError(f"dfl: the model has state entries named {clash}, reserved for the soft-target table")


class DFLClient(ClientRole):
    # as FedAvg: the weights are replaced (docs/methods/dfl.md#optimiser); E = 5 local epochs (paper Sec. IV-A)
    local_training = LocalTraining(optimizer_lifecycle="fresh", epochs=5)
    knowledge = (SOFT_TARGETS,)  # the weights stay lossless

    def __init__(self, context: ClientContext, params: DFLParams) -> None:
        super().__init__(context, params)
        self.optimizer = self.round_optimizer()
        _check_state_names(self.model.state_dict())
        self.last_rho: float | None = None

    def rho(self, round: int) -> float:
        return self.params.rho(round, self.context.total_rounds)

    def train_round(self, round: int, downlink: Payload | None) -> Payload:
        y = self.data.train_y
        rho_value = 1.0
        if downlink is not None:
            arrays = dict(downlink.arrays)
            table = arrays.pop(SOFT_TARGETS)
            load_state_arrays(self.model, arrays)
            rho_value = self.rho(round)
            teacher = torch.from_numpy(np.ascontiguousarray(table, dtype=np.float32))
        self.last_rho = rho_value
        if rho_value == 1.0:  # pure CE: FedAvg's loss, literally
            loss_fn = lambda logits, idx: nn.functional.cross_entropy(logits, y[idx])  # noqa: E731
        else:
            loss_fn = lambda logits, idx: dfl_loss(logits, y[idx], teacher, rho_value, self.params)  # noqa: E731
        self.train_local(loss_fn)

        means, counts = self.label_wise_outputs()
        arrays = state_arrays(self.model)
        arrays[SOFT_TARGETS] = means.astype(SOFT_TARGET_DTYPES[self.params.soft_target_dtype])
        arrays[CLASS_COUNTS] = counts.astype(np.int32)
        return Payload(KIND, arrays, {"samples": len(y)})

    def label_wise_outputs(self) -> tuple[np.ndarray, np.ndarray]:
        """Alg. 2 steps 7-8 (docs/methods/dfl.md#soft-targets-in-eval-mode): per-class mean output of
        the updated model over all local training samples (eval mode, no grad, no RNG), grouped by
        true label; absent classes give zero rows."""
        classes = self.data.num_classes
        if self.data.num_train == 0:
            return np.zeros((classes, classes), np.float32), np.zeros(classes, np.int64)
        logits = predict_logits(self.model, self.data.train_x, self.context.train.eval_batch_size)
        if self.params.soft_targets == "probs":
            logits = torch.softmax(logits / self.params.temperature, dim=1)
        means, counts = kernels.labelwise_mean(logits.contiguous(), self.data.train_y, classes)
        return means.numpy(), counts.numpy()


class DFLServer(ServerRole):
    knowledge = (SOFT_TARGETS,)

    def __init__(self, context: ServerContext, params: DFLParams) -> None:
        super().__init__(context, params)
        names = set(context.client_models.values())
        if len(names) != 1:
            raise ValueError(f"dfl averages one architecture; clients have {sorted(names)} (use --models homo)")
        self.global_state = state_arrays(context.build_model(names.pop()))  # the same draw as FedAvg's
        _check_state_names(self.global_state)
        self.soft_targets = self._wire(initial_soft_targets(self.num_classes, params.soft_targets))
        self.declared = DeclaredCounts()
        classes = self.num_classes
        arrays = {
            **schema.model_state(self.global_state),
            SOFT_TARGETS: schema.knowledge((classes, classes), (params.soft_target_dtype,)),  # logits or probs
            CLASS_COUNTS: schema.counts((classes,), ("int32",)),
        }
        # samples >= 1: a client without data adds nothing to Eqs. 1-2 (and alone would divide by 0)
        self.uplink_schema = MessageSchema(KIND, arrays, {"samples": schema.samples(1)})

    def uplink_schemas(self, client_id: str) -> Sequence[MessageSchema]:
        """FedAvg's state and sample count, plus the client's soft-target table and class counts."""
        return (self.uplink_schema,)

    def check_uplink(self, round: int, client_id: str, payload: Payload) -> None:
        """The schema, and the sample and class counts the client declared first (they weight it),
        within what one client of the run can hold, and class counts that sum to the sample count
        (``counts-disagree``: both count the same samples)."""
        super().check_uplink(round, client_id, payload)
        samples, counts = int(payload.scalars["samples"]), payload.arrays[CLASS_COUNTS]
        self.context.check_declared(samples=samples, counts=counts)
        if int(counts.sum(dtype=np.int64)) != samples:
            raise schema.UplinkRejected(
                "counts-disagree", f"{samples} samples declared, but the class counts sum to {int(counts.sum())}"
            )
        self.declared.check(client_id, samples=payload.scalars["samples"], classes=payload.arrays[CLASS_COUNTS])

    def _wire(self, table: np.ndarray) -> np.ndarray:
        return table.astype(SOFT_TARGET_DTYPES[self.params.soft_target_dtype])

    def downlink(self, round: int, client_id: str) -> Payload:
        arrays = {**self.global_state, SOFT_TARGETS: self.soft_targets}
        return Payload(KIND, arrays)

    def aggregate(self, round: int, uplinks: dict[str, Payload]) -> dict[str, float]:
        metrics = {"rho": self.params.rho(round, self.context.total_rounds)}
        if not uplinks:
            return metrics
        ordered = [uplinks[c] for c in sorted(uplinks)]
        samples = [float(p.scalars["samples"]) for p in ordered]
        models = [{k: v for k, v in p.arrays.items() if k not in _RESERVED} for p in ordered]
        # each update at most update_cap times the others' median norm (docs/ROBUSTNESS.md#bounded-updates)
        models, clipped = bounded_updates(models, self.global_state, self.params.update_cap)
        if clipped:
            metrics["updates_capped"] = float(clipped)
        counts = [p.arrays[CLASS_COUNTS] for p in ordered]
        tables = [p.arrays[SOFT_TARGETS] for p in ordered]
        metrics["labels_covered"] = float((np.sum(counts, axis=0) > 0).sum())
        if self.params.aggregator != "mean":
            return {**metrics, **self._aggregate_robustly(round, models, tables, counts)}
        # a client's n_k (and n_kc) at most weight_cap times the others' median (docs/ROBUSTNESS.md#bounded-weights)
        weights = capped_weights(samples, self.params.weight_cap)
        class_weights = capped_label_counts(counts, self.params.weight_cap)
        metrics.update(capped_metric(np.array(samples), weights))
        # a model sent back untrained weighs nothing in Eq. 1 (docs/ROBUSTNESS.md#bounded-weights)
        empty = sent_back(models, self.global_state)
        if empty.any() and self.params.weight_cap:  # weight_cap 0: the paper's weights, a free rider's too
            metrics.update(sent_back_metric(empty))
            trained = [0.0 if out else n for n, out in zip(samples, empty)]
            self.global_state = average_states(models, capped_weights(trained, self.params.weight_cap).tolist())
        else:
            self.global_state = average_states(models, weights.tolist())  # Eq. 1, FedAvg's arithmetic
        table = aggregate_soft_targets(
            tables, class_weights, weights.tolist(), self.soft_targets, self.params.aggregation
        )  # Eq. 2, masked rows
        self.soft_targets = self._wire(table)
        return metrics

    def _aggregate_robustly(
        self, round: int, models: list[dict[str, np.ndarray]], tables: list[np.ndarray], counts: list[np.ndarray]
    ) -> dict[str, float]:
        """The robust statistic, unweighted: over the models (fewer than `ROBUST_MINIMUM`: the global
        model is kept), and per class over the soft-target rows of the clients that hold it (fewer:
        the row keeps its last value). ``below_quorum``: the model kept (1) plus the rows kept."""
        how, trim = self.params.aggregator, self.params.trim
        kept_model = too_few_to_combine(round, len(models), how)
        if not kept_model:
            self.global_state = robust_states(models, how, trim)
        rows, quorum = robust_rows(tables, counts, how, trim)
        table = np.where(quorum[:, None], rows, np.asarray(self.soft_targets, dtype=np.float64))
        kept_rows = int(((np.sum(counts, axis=0) > 0) & ~quorum).sum())
        self.soft_targets = self._wire(table)
        return {"below_quorum": float(kept_model) + kept_rows}

    def evaluation_state(self, client_id: str) -> Payload:
        return Payload("weights", self.global_state)

    def server_models(self) -> dict[str, nn.Module]:
        """The global model every client is measured with: the one figure of the run that the server
        can score itself (its test set in a simulation, `edgefd server --holdout-dir` deployed)."""
        return {"global_model": one_architecture_model(self.context, self.global_state)}


register_method(
    "dfl",
    "FedAvg plus label-wise soft targets with a dynamic CE/KD weight (Liu et al., DFL)",
    DFLClient,
    DFLServer,
    DFLParams,
    paper="T. Liu et al., Efficient Federated Learning for AIoT Applications Using Knowledge Distillation, "
    "IEEE Internet of Things Journal 2023",
    global_model=True,
)
