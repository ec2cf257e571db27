"""FedD2S (Atapour et al., "FedD2S: Personalized Data-Free Federated Knowledge Distillation",
arXiv:2402.10846v1): per-sample mutual distillation between personalised client models and one
global model, with a deep-to-shallow distillation layer per client.

The method, its choices where the paper is silent and its messages: docs/methods/fedd2s.md. Clients
and server hold the same layered CNN (``fedd2s_m1`` / ``fedd2s_m2``,
:class:`edgefd.models.fedd2s.LayeredCNN`).

Round of one selected client n (Alg. 1):

- phase A (client): ``Z^n += 1``; ``l^n = max(L - floor((Z^n - 1) / Z0), L - |S|)`` (Eq. 6 and the
  dropping set's floor, docs/methods/fedd2s.md#dropping-set); with no gradient, in eval mode and in
  the fixed local order, upload the first-layer outputs ``H_1``, the outputs ``H_{l^n}`` at the
  distillation layer (the logits when ``l^n = L``, nothing when ``l^n = 1``) and the labels of *all*
  local training samples.
- C2S (server, per client, Eqs. 8-10): a copy of the round-start global model trains its layers 2..L
  on ``H_1``: per batch one step on ``KL(p || softmax(u / tau))`` with the teacher
  ``p = softmax(head_l(H_l; theta^g) / tau)`` (round-start global head, no gradient), then a fresh
  forward and one step on ``CE(u, y)``. The copies are averaged, unweighted, over the clients whose
  uploads arrived (Eq. 11 over U^rho, docs/methods/fedd2s.md#averaging-over-the-arrived-clients).
- downlink (server): the per-sample global logits ``t = head_1(H_1; theta^g)`` of the aggregated
  model and the parameters of the global layers ``l^n+1..L`` (the message Alg. 1 leaves out,
  docs/methods/fedd2s.md#head-weights-in-the-reply); ``v = head_l(H_l; theta^g)`` only with
  ``send_v`` (docs/methods/fedd2s.md#the-v-logits).
- phase B (client, Eqs. 12-13): per batch one step on ``KL(softmax(t / tau) || softmax(w / tau))``
  with ``w = frozen_global_head(trunk_l(x))`` (only layers 1..l^n get a gradient), then a fresh
  forward and one CE step on the whole local model. The local models are the deliverable: each is
  evaluated on its client's test split (docs/methods/fedd2s.md#evaluation).

How the protocol sits on edgefd's round loop: phase A is the round's uplink (``train_round``), C2S
is ``aggregate``, and the reply (kind ``fedd2s.knowledge``) goes to each client whose upload was
aggregated after aggregation, in the same round (``ServerRole.reply``), where phase B runs
(``receive_reply``) before the round is evaluated: the order of Alg. 1, whose evaluation sees every
phase B. The common initialisation (docs/methods/fedd2s.md#common-initialisation) is the first
downlink each client receives (kind ``fedd2s.init``, the full ``theta^0``, float32, 4 P_total bytes
plus the codec header): the client loads it before its first phase A. A deployed client that misses
the reply's deadline still runs phase B when the reply reaches it, before its next phase A; a reply
that never reaches it (the client was gone longer than its broker session) is lost, and the client's
next participation starts from its model as it was.

edgefd's resolutions where the paper is silent or ambiguous, all followed by default (each is a
heading of docs/methods/fedd2s.md):

- the head above layer l is layers l+1..L (docs/methods/fedd2s.md#head-model-layers); ``H_l`` is
  block l's output after ReLU and pool (docs/methods/fedd2s.md#layer-outputs); the global model's
  layer 1 is never used or trained (docs/methods/fedd2s.md#global-layer-1);
- tau = 1, CE always at tau = 1, no tau^2 factor on the KL terms unless ``kd_tau_sq_scale``
  (docs/methods/fedd2s.md#temperature); KL(teacher || student) in both phases, batch mean
  (docs/methods/fedd2s.md#kl-direction) (the ``weighted_kl`` kernel);
- the C2S teacher ``p`` is computed once per round with the round-start global model, detached
  (docs/methods/fedd2s.md#c2s-teacher; ``c2s_teacher=current`` recomputes it per batch with the copy
  being trained, detached);
- the server returns the global head's weights; the client keeps them frozen
  (docs/methods/fedd2s.md#head-weights-in-the-reply); ``v`` is off (``send_v``,
  docs/methods/fedd2s.md#the-v-logits); Eq. 13 is the S2C CE step
  (docs/methods/fedd2s.md#q-step-of-phase-b);
- averaging over the arrived uploads, unweighted
  (docs/methods/fedd2s.md#averaging-over-the-arrived-clients); replies only to those clients
  (docs/methods/fedd2s.md#replies-to-selected-clients-only);
- ``phase_epochs`` = 4 passes per phase, each pass a J-step and a Q-step per batch
  (docs/methods/fedd2s.md#epochs-per-phase); batch size is the run's ``--batch-size`` (the paper's
  B = 128 is a run setting);
- Adam (PyTorch defaults, no weight decay) at the run's ``--lr`` (the paper's 0.01 is edgefd's
  default), re-created per phase per round (server: per client copy), gradients cleared to None
  between the J and Q steps, so layers without a KD gradient are not moved by the J step
  (docs/methods/fedd2s.md#optimiser; ``optimizer=run`` uses the run's
  ``--optimizer/--momentum/--weight-decay`` instead);
- J and Q are sequential steps (docs/methods/fedd2s.md#sequential-j-and-q-steps; ``kd_mode=sum``
  takes one step on J + Q, not the paper);
- Eq. 6 is clamped at ``L - |S|`` with |S| = ``dropping_set`` = 4 (S = [C3, F1, F2, F3],
  docs/methods/fedd2s.md#dropping-set), Z0 = 3 (docs/methods/fedd2s.md#dropping-rate);
  ``schedule=floor`` is FedD2S* (l = L - |S| from the first round,
  docs/methods/fedd2s.md#fedd2s-star), ``schedule=none`` the no-dropping ablation (l = L always);
- the server does not mirror Z^n, because an upload that missed the deadline still counts as a
  participation on the client; it checks that the layer a client reports lies between the layers of
  the most and the fewest participations the client can have had (its downlinks, and its uplinks
  taken plus one), which is the one layer Z^n gives when no upload was late, and that the arrays
  have that layer's shapes (``FedD2SServer.check_uplink``,
  docs/methods/fedd2s.md#participation-count-on-the-server).

Privacy (docs/methods/fedd2s.md#privacy): H_1 plus labels is close to the data itself (one conv
layer is nearly invertible); "data-free" means "no public data set", nothing more.

Wire (docs/methods/fedd2s.md#messages; bytes = the formulas plus the codec's header and table
entries):

- uplink ``fedd2s.features``: ``h1`` [K, d_1] and ``hl`` [K, d_l] (omitted when l = 1) as float32,
  ``labels`` [K] uint8 (int32 when C > 256), scalars ``layer`` = l^n and ``samples`` = K_n (round
  and client id are in the codec header). The feature maps travel flattened per sample (the same
  elements as [K, c, h, w]; flat rows give int8 one scale per sample, as FedICT's features).
  ``--precision fp16|int8`` applies to ``h1``, ``hl`` (and ``t``, ``v``), never to weights or
  labels; it is a lossy deviation, off by default.
- downlink ``fedd2s.knowledge``: ``t`` [K, C] float32, ``v`` [K, C] with ``send_v``, and one float32
  array ``head/<state name>`` per parameter tensor of global layers l+1..L (P_head(l) values);
  scalar ``layer`` = the l those weights sit above.
- the uplink is large: K_n (4 (d_1 + d_l) + 1) bytes, more than the raw uint8 images
  (docs/methods/fedd2s.md#communication-cost).

Not implemented: the FedD2S-MSE ablation (Table 3) and the FedPer+ / FedRep+ baselines.

One module over 500 lines, a sixth of them this map from the code to the paper: the method reads top
to bottom as Alg. 1 does (params, the distillation layer and losses, client, server), and its classes
are named by module in a server's checkpoint (`edgefd.runtime.checkpoint`), so a split would also
move what a checkpoint names.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
from torch import nn

from edgefd import kernels
from edgefd.algorithms import schema
from edgefd.algorithms.base import ClientContext, ClientRole, ServerContext, ServerRole, register_method
from edgefd.algorithms.params import check_choices
from edgefd.algorithms.toolkit import (
    aggregator_setting,
    average_states,
    check_trim,
    robust_states,
    too_few_to_combine,
    trim_setting,
)
from edgefd.models.fedd2s import LayeredCNN
from edgefd.protocol import Payload
from edgefd.settings import setting
from edgefd.training import (
    LocalTraining,
    TrainConfig,
    batches,
    forward,
    load_state_arrays,
    local_epochs,
    make_optimizer,
    state_arrays,
    to_model,
)

__all__ = [
    "FedD2SParams",
    "FedD2SClient",
    "FedD2SServer",
    "distillation_layer",
    "kd_loss",
    "distil_global_copy",
    "INIT_KIND",
    "UP_KIND",
    "DOWN_KIND",
    "HEAD_PREFIX",
]

INIT_KIND = "fedd2s.init"
UP_KIND = "fedd2s.features"
DOWN_KIND = "fedd2s.knowledge"
HEAD_PREFIX = "head/"

SCHEDULES = ("deep_to_shallow", "floor", "none")
OPTIMIZERS = ("adam", "run")
KD_MODES = ("alternating", "sum")
C2S_TEACHERS = ("round_start", "current")


@dataclass
class FedD2SParams:
    """FedD2S's hyperparameters; defaults from the paper, or edgefd's choice where the paper is silent
    (docs/methods/fedd2s.md#switchable-choices)."""

    z0: int = setting(
        3,
        "dropping rate Z0: participations per distillation layer (Eq. 6; 3, 5, 7 for "
        "Dirichlet 0.1, 0.5, 1 in Sec. IV-A; docs/methods/fedd2s.md#dropping-rate)",
    )
    dropping_set: int = setting(
        4,
        "|S|, layers that are eventually withdrawn, deepest first; the floor is "
        "l = L - |S| (4: S = [C3, F1, F2, F3], l_min = 2, Sec. IV-A; docs/methods/fedd2s.md#dropping-set)",
    )
    schedule: str = setting(
        "deep_to_shallow",
        "'deep_to_shallow' (Eq. 6), 'floor' (FedD2S*: l = L - |S| from "
        "round 1, docs/methods/fedd2s.md#fedd2s-star) or 'none' (no dropping: l = L)",
        choices=SCHEDULES,
    )
    temperature: float = setting(
        1.0,
        "softmax temperature tau of both KL terms (not in the paper: 1, docs/methods/fedd2s.md#temperature); "
        "CE is always at tau = 1",
    )
    kd_tau_sq_scale: bool = setting(
        False, "multiply the KL terms by tau^2 (not in Eqs. 9/12, docs/methods/fedd2s.md#temperature)"
    )
    phase_epochs: int | None = setting(
        4,
        "passes per phase (C2S per client copy, S2C per client), each a "
        "J-step and a Q-step per batch (E = 4, docs/methods/fedd2s.md#epochs-per-phase); None = the run's --epochs "
        "(FedD2S's default: 4)",
    )
    optimizer: str = setting(
        "adam",
        "'adam' (PyTorch defaults, no weight decay, the run's --lr, docs/methods/fedd2s.md#optimiser) or "
        "'run' (the run's --optimizer, --momentum, --weight-decay)",
        choices=OPTIMIZERS,
    )
    kd_mode: str = setting(
        "alternating",
        "'alternating' (one J step then one Q step per batch, Alg. 1, docs/methods/fedd2s.md#sequential-j-and-q-steps) "
        "or 'sum' (one step on J + Q; not the paper)",
        choices=KD_MODES,
    )
    c2s_teacher: str = setting(
        "round_start",
        "C2S teacher p from the 'round_start' global head or the 'current' copy being trained (detached) "
        "(docs/methods/fedd2s.md#c2s-teacher)",
        choices=C2S_TEACHERS,
    )
    send_v: bool = setting(
        False,
        "also send v = global head logits on H_l (Alg. 1; no equation uses it, docs/methods/fedd2s.md#the-v-logits)",
    )
    aggregator: str = aggregator_setting("the clients' distilled copies of the global model", "Eq. 11's")
    trim: float = trim_setting()

    def __post_init__(self) -> None:
        check_choices(self)
        check_trim(self.trim)
        if isinstance(self.z0, bool) or not isinstance(self.z0, int) or self.z0 < 1:
            raise ValueError(f"param z0: must be an integer >= 1, got {self.z0!r}")
        if isinstance(self.dropping_set, bool) or not isinstance(self.dropping_set, int) or self.dropping_set < 0:
            raise ValueError(f"param dropping_set: must be an integer >= 0, got {self.dropping_set!r}")
        if not (self.temperature > 0 and np.isfinite(self.temperature)):
            raise ValueError(f"param temperature: must be a finite number > 0, got {self.temperature}")
        if self.phase_epochs is not None and (isinstance(self.phase_epochs, bool) or self.phase_epochs < 1):
            raise ValueError(f"param phase_epochs: must be an integer >= 1 or None, got {self.phase_epochs!r}")


# ----------------------------------------------------------------------------------------------
# The pieces of maths (pure functions, tested directly)


def distillation_layer(
    participations: int, num_layers: int, z0: int, dropping_set: int, schedule: str = "deep_to_shallow"
) -> int:
    """l^n for a client at its ``participations``-th participation (1-based, Eq. 6,
    docs/methods/fedd2s.md#dropping-set):
    ``max(L - floor((Z - 1) / Z0), L - |S|)``; 'floor' gives ``L - |S|`` always, 'none' gives L."""
    if participations < 1:
        raise ValueError(f"participations: the schedule is evaluated for selected clients (>= 1), got {participations}")
    if not 0 <= dropping_set < num_layers:
        raise ValueError(
            f"dropping_set: must be in [0, L - 1] = [0, {num_layers - 1}] (the floor is a layer "
            f">= 1), got {dropping_set}"
        )
    floor = num_layers - dropping_set
    if schedule == "none":
        return num_layers
    if schedule == "floor":
        return floor
    if schedule != "deep_to_shallow":
        raise ValueError(f"schedule: expected one of {', '.join(SCHEDULES)}, got {schedule!r}")
    return max(num_layers - (participations - 1) // z0, floor)


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, params: FedD2SParams) -> torch.Tensor:
    """``(1/b) sum_i KL(softmax(teacher_i / tau) || softmax(student_i / tau))`` (Eqs. 9, 12), times
    tau^2 only with ``kd_tau_sq_scale`` (the kernel's own factor is divided out otherwise)."""
    loss = kernels.weighted_kl(student_logits, teacher_logits, temperature=params.temperature)
    return loss if params.kd_tau_sq_scale else loss / params.temperature**2


def _optimizer(parameters, train: TrainConfig, params: FedD2SParams) -> torch.optim.Optimizer:
    if params.optimizer == "adam":
        return torch.optim.Adam(parameters, lr=train.lr)
    return make_optimizer(parameters, train)


def _step(optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> float:
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return float(loss.item())


def _distil(
    forward_kd,
    forward_ce,
    n: int,
    optimizer: torch.optim.Optimizer,
    params: FedD2SParams,
    epochs: int,
    batch_size: int,
    generator: torch.Generator,
    fixed_order: torch.Tensor | None = None,
) -> tuple[float, float]:
    """The shared two-step loop of both phases: per batch a J step then a fresh forward and a Q step
    (or one step on J + Q). Returns the mean J and Q of the last pass."""
    last = (0.0, 0.0)
    for _ in range(epochs):
        sums, count = np.zeros(2), 0
        for idx in batches(n, batch_size, generator, fixed_order):
            if params.kd_mode == "sum":
                j, q = forward_kd(idx), forward_ce(idx)
                _step(optimizer, j + q)
                j, q = j.item(), q.item()
            else:
                j = _step(optimizer, forward_kd(idx))
                q = _step(optimizer, forward_ce(idx))
            sums += (j * len(idx), q * len(idx))
            count += len(idx)
        last = tuple(sums / max(count, 1))
    return last


def distil_global_copy(
    model: LayeredCNN,
    global_model: LayeredCNN,
    h1: torch.Tensor,
    hl: torch.Tensor,
    layer: int,
    labels: torch.Tensor,
    params: FedD2SParams,
    train: TrainConfig,
    generator: torch.Generator,
) -> tuple[float, float]:
    """C2S for one client (Eqs. 8-10): trains ``model`` (a copy of ``global_model``) on its layers
    2..L from ``H_1``, towards the global head's reading of ``H_l`` and the labels.

    ``global_model`` is the round-start global model (it is not changed). Returns the mean KL and
    CE of the last pass."""
    epochs = params.phase_epochs or local_epochs(train)
    with torch.no_grad():
        # p as logits; the kernel applies softmax_tau
        teacher = forward(lambda h: global_model.head(h, layer), hl, on=global_model) if len(hl) else hl
    model.train()
    optimizer = _optimizer(list(model.parts_parameters(1, model.num_layers)), train, params)

    def forward_kd(idx: torch.Tensor) -> torch.Tensor:
        if params.c2s_teacher == "current":
            with torch.no_grad():
                target = forward(lambda h: model.head(h, layer), hl[idx], on=model)
        else:
            target = teacher[idx]
        return kd_loss(forward(lambda h: model.head(h, 1), h1[idx], on=model), target, params)

    def forward_ce(idx: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(forward(lambda h: model.head(h, 1), h1[idx], on=model), labels[idx])

    return _distil(forward_kd, forward_ce, len(h1), optimizer, params, epochs, train.batch_size, generator)


def _check_layered(model: nn.Module, who: str, name: str) -> LayeredCNN:
    if not isinstance(model, LayeredCNN):
        raise ValueError(
            f"fedd2s: {who} has model {name!r}, which cannot be split by layer; use "
            "--models fedd2s_m1 or --models fedd2s_m2 (docs/methods/fedd2s.md#model-architecture)"
        )
    return model


def _head_arrays(model: LayeredCNN, layer: int) -> dict[str, np.ndarray]:
    return {HEAD_PREFIX + k: v.detach().cpu().numpy().copy() for k, v in model.head_state_dict(layer).items()}


def _label_dtype(num_classes: int) -> type:
    return np.uint8 if num_classes <= 256 else np.int32


# ----------------------------------------------------------------------------------------------
# Client


class FedD2SClient(ClientRole):
    # one Adam per phase per round (docs/methods/fedd2s.md#optimiser); E = 4 passes per phase (Sec. IV-A,
    # docs/methods/fedd2s.md#epochs-per-phase), which phase_epochs sets unless it is None
    local_training = LocalTraining(optimizer_lifecycle="fresh", epochs=4)
    knowledge = ("h1", "hl")

    def __init__(self, context: ClientContext, params: FedD2SParams) -> None:
        super().__init__(context, params)
        self.model: LayeredCNN = _check_layered(context.model, f"client {context.client_id}", context.model_name)
        self.optimizer = self.round_optimizer(build=partial(_optimizer, params=params))  # a partial pickles
        distillation_layer(1, self.model.num_layers, params.z0, params.dropping_set, params.schedule)  # checks |S|
        self.participations = 0
        """Z^n: how many times this client has been selected (phase A ran)."""
        self.layer: int | None = None
        """l^n of the last upload."""
        self._global_head: LayeredCNN | None = None
        self.last_losses: tuple[float, float] | None = None

    def train_round(self, round: int, downlink: Payload | None) -> Payload:
        if downlink is not None:
            if downlink.kind != INIT_KIND:
                raise ValueError(f"fedd2s client {self.client_id}: unexpected downlink kind {downlink.kind!r}")
            # theta^n := theta^0 (docs/methods/fedd2s.md#common-initialisation)
            load_state_arrays(self.model, downlink.arrays)
        self.participations += 1
        self.layer = distillation_layer(
            self.participations, self.model.num_layers, self.params.z0, self.params.dropping_set, self.params.schedule
        )
        return self.extract(round, self.layer)

    def receive_reply(self, round: int, reply: Payload) -> None:
        """Phase B of this round, on the server's reply to the round's upload."""
        if reply.kind != DOWN_KIND:
            raise ValueError(f"fedd2s client {self.client_id}: unexpected reply kind {reply.kind!r}")
        self.distil_from_server(reply)

    @torch.no_grad()
    def extract(self, round: int, layer: int) -> Payload:
        """Phase A (Alg. 1, Sec. III-A1): H_1 and H_l of every training sample, eval mode, fixed order, flattened."""
        model = self.model
        model.eval()
        x, step = self.data.train_x, self.context.train.eval_batch_size
        dims = model.layer_dims()
        # written batch by batch into arrays made once (the features are the upload's bulk: a list of
        # batches and its concatenation would hold them twice)
        h1s = np.empty((len(x), dims[0]), np.float32)
        hls = np.empty((len(x), dims[layer - 1]), np.float32) if layer > 1 else None
        for start in range(0, len(x), step):
            h1 = model.trunk(to_model(model, x[start : start + step]), 1)
            h1s[start : start + len(h1)] = h1.flatten(1).cpu().numpy()
            if hls is not None:
                hls[start : start + len(h1)] = model.run_layers(h1, 1, layer).flatten(1).cpu().numpy()
        arrays = {"h1": h1s}
        if hls is not None:
            arrays["hl"] = hls
        arrays["labels"] = self.data.train_y.numpy().astype(_label_dtype(self.data.num_classes))
        return Payload(UP_KIND, arrays, {"layer": layer, "samples": len(x)})

    def _frozen_head(self, downlink: Payload, layer: int) -> LayeredCNN:
        if self._global_head is None:
            self._global_head = copy.deepcopy(self.model)
            for p in self._global_head.parameters():
                p.requires_grad_(False)
        head = self._global_head
        expected = {HEAD_PREFIX + k for k in head.head_state_dict(layer)}
        received = {k for k in downlink.arrays if k.startswith(HEAD_PREFIX)}
        if received != expected:
            raise ValueError(
                f"fedd2s client {self.client_id}: head weights above layer {layer} should be "
                f"{sorted(expected)[:4]}..., got {sorted(received)[:4]}..."
            )
        head.load_state_dict(
            {k[len(HEAD_PREFIX) :]: torch.from_numpy(np.asarray(downlink.arrays[k], np.float32)) for k in received},
            strict=False,
        )
        return head

    def distil_from_server(self, downlink: Payload) -> tuple[float, float]:
        """Phase B (Eqs. 12-13, Sec. III-B2): KL towards t through the frozen global head (layers 1..l only), then CE on
        the whole local model, per batch. Returns the mean J and Q of the last pass."""
        layer = int(downlink.scalars.get("layer", -1))
        L, n, C = self.model.num_layers, self.data.num_train, self.data.num_classes
        if not 1 <= layer <= L:
            raise ValueError(f"fedd2s client {self.client_id}: downlink layer must be in [1, {L}], got {layer}")
        t = np.asarray(downlink.arrays.get("t", np.empty(0)), dtype=np.float32)
        if t.shape != (n, C):
            raise ValueError(
                f"fedd2s client {self.client_id}: t must have shape {(n, C)} (one row per local "
                f"training sample, in order), got {t.shape}"
            )
        teacher = torch.from_numpy(t.copy())
        head = self._frozen_head(downlink, layer)
        x, y, model = self.data.train_x, self.data.train_y, self.model
        model.train()
        optimizer = self.optimizer.for_round()

        def forward_kd(idx: torch.Tensor) -> torch.Tensor:
            through_head = forward(lambda b: head.head(model.trunk(b, layer), layer), x[idx], on=model)
            return kd_loss(through_head, teacher[idx], self.params)

        def forward_ce(idx: torch.Tensor) -> torch.Tensor:
            return nn.functional.cross_entropy(forward(model, x[idx]), y[idx])

        epochs = self.params.phase_epochs or local_epochs(self.context.train)
        self.last_losses = _distil(
            forward_kd,
            forward_ce,
            n,
            optimizer,
            self.params,
            epochs,
            self.context.train.batch_size,
            self.context.torch_generator,
            self.batch_order,
        )
        return self.last_losses


# ----------------------------------------------------------------------------------------------
# Server


@dataclass
class _Upload:
    h1: torch.Tensor
    hl: torch.Tensor
    layer: int
    labels: torch.Tensor


class FedD2SServer(ServerRole):
    knowledge = ("t", "v")

    def __init__(self, context: ServerContext, params: FedD2SParams) -> None:
        super().__init__(context, params)
        names = set(context.client_models.values())
        if len(names) != 1:
            raise ValueError(f"fedd2s distils one architecture; clients have {sorted(names)} (use --models fedd2s_m1)")
        name = names.pop()
        self.global_model: LayeredCNN = _check_layered(context.build_model(name), "the server", name)
        distillation_layer(1, self.global_model.num_layers, params.z0, params.dropping_set, params.schedule)
        self.initial_state = state_arrays(self.global_model)
        """theta^0, every client's starting point (docs/methods/fedd2s.md#common-initialisation)."""
        self.initialised: set[str] = set()
        self.replies: dict[str, tuple[dict[str, np.ndarray], int]] = {}
        """This round's reply to each aggregated client, from `aggregate` until `reply` sends it:
        arrays and its layer."""
        self.selected: dict[str, int] = {}
        """Downlinks made for each client: it has trained at most this many times (Z^n <= it)."""
        self.uploaded: dict[str, int] = {}
        """Uplinks aggregated from each client: each came from a participation of its own."""
        seed = np.random.SeedSequence([int(context.seed), 0xFEDD25])
        self.generator = torch.Generator().manual_seed(int(seed.generate_state(1, dtype=np.uint64)[0] % 2**63))

    def downlink(self, round: int, client_id: str) -> Payload | None:
        self.selected[client_id] = self.selected.get(client_id, 0) + 1
        if client_id not in self.initialised:
            self.initialised.add(client_id)
            return Payload(INIT_KIND, self.initial_state)
        return None

    def reply(self, round: int, client_id: str) -> Payload | None:
        """The S2C message of this round (Alg. 1, Sec. III-B1): t, the head weights above l^n (and v)."""
        kept = self.replies.pop(client_id, None)
        if kept is None:
            return None
        arrays, layer = kept
        return Payload(DOWN_KIND, arrays, {"layer": layer})

    def allowed_layers(self, client_id: str) -> tuple[int, int]:
        """The shallowest and the deepest l^n this client's uplink may report now. The server does not
        know Z^n (a client that missed a deadline still counted the participation), but it knows
        bounds: Z^n <= the downlinks made for the client, Z^n >= 1 + the uplinks taken from it, and
        l^n only gets shallower as Z^n grows (Eq. 6). Without stragglers both bounds are Z^n."""
        p, L = self.params, self.global_model.num_layers

        def layer(participations: int) -> int:
            return distillation_layer(max(participations, 1), L, p.z0, p.dropping_set, p.schedule)

        return layer(self.selected.get(client_id, 0)), layer(self.uploaded.get(client_id, 0) + 1)

    def uplink_schemas(self, client_id: str) -> Sequence[schema.MessageSchema]:
        """H_1, H_l (none at l = 1) and the labels of every local sample, one row each of the
        ``samples`` the uplink declares, at a layer `allowed_layers` allows; hl's width and presence
        follow the layer reported (`check_uplink`)."""
        dims, C = self.global_model.layer_dims(), self.num_classes
        shallowest, deepest = self.allowed_layers(client_id)
        # "samples" rows: the server has no hello, so K_n is the uplink's `samples` scalar; None width:
        # hl's is d_l of the layer reported, when more than one is allowed.
        hl_width = dims[deepest - 1] if shallowest == deepest else None
        arrays = {
            "h1": schema.knowledge(("samples", dims[0])),
            "hl": dataclasses.replace(schema.knowledge(("samples", hl_width)), optional=shallowest == 1),
            "labels": schema.labels(C, (np.dtype(_label_dtype(C)).name,), "samples"),
        }
        scalars = {"layer": schema.ScalarSpec(int, shallowest, deepest), "samples": schema.samples()}
        return (schema.MessageSchema(UP_KIND, arrays, scalars),)

    def check_uplink(self, round: int, client_id: str, payload: Payload) -> None:
        """The schema, then hl exactly when l > 1, of width d_l."""
        super().check_uplink(round, client_id, payload)
        layer = int(payload.scalars["layer"])
        if layer > 1 and "hl" not in payload.arrays:
            raise schema.UplinkRejected("missing-array", f"no array 'hl' at layer {layer}")
        if layer == 1 and "hl" in payload.arrays:
            raise schema.UplinkRejected("unexpected-array", "array 'hl' at layer 1 (H_1 is h1)")
        width = self.global_model.layer_dims()[layer - 1]
        if "hl" in payload.arrays and payload.arrays["hl"].shape[1] != width:
            raise schema.UplinkRejected("shape", f"hl has width {payload.arrays['hl'].shape[1]}, d_{layer} = {width}")

    def _unpack(self, payload: Payload) -> _Upload:
        """An uplink that passed `check_uplink`, as tensors in the layers' shapes."""
        model, arrays = self.global_model, payload.arrays
        layer = int(payload.scalars["layer"])

        def features(field: str, l: int) -> torch.Tensor:
            a = np.array(arrays[field], dtype=np.float32)  # a copy: the server trains on it
            return torch.from_numpy(a).reshape((len(a),) + model.layer_output_shapes[l - 1])

        h1 = features("h1", 1)
        hl = features("hl", layer) if layer > 1 else h1
        return _Upload(h1, hl, layer, torch.from_numpy(arrays["labels"].astype(np.int64)))

    def aggregate(self, round: int, uplinks: dict[str, Payload]) -> dict[str, float]:
        arrived = sorted(uplinks)
        if not arrived:
            return {}
        uploads = {cid: self._unpack(uplinks[cid]) for cid in arrived}
        for cid in arrived:
            self.uploaded[cid] = self.uploaded.get(cid, 0) + 1
        states, losses = [], []
        for cid in arrived:  # C2S, one copy of the round-start global model per client (Eqs. 8-10)
            up = uploads[cid]
            local = copy.deepcopy(self.global_model)
            losses.append(
                distil_global_copy(
                    local,
                    self.global_model,
                    up.h1,
                    up.hl,
                    up.layer,
                    up.labels,
                    self.params,
                    self.context.train,
                    self.generator,
                )
            )
            states.append(state_arrays(local))
        how = self.params.aggregator
        if how == "mean":
            load_state_arrays(self.global_model, average_states(states))  # Eq. 11 over the arrivals
        elif not (kept := too_few_to_combine(round, len(states), how)):
            load_state_arrays(self.global_model, robust_states(states, how, self.params.trim))
        self.global_model.eval()
        with torch.no_grad():
            for cid in arrived:  # Sec. III-B1: t (and v) with the aggregated model, plus the head weights
                up = uploads[cid]
                arrays = {"t": self._logits(up.h1, 1)}
                if self.params.send_v:
                    arrays["v"] = self._logits(up.hl, up.layer)
                arrays.update(_head_arrays(self.global_model, up.layer))
                self.replies[cid] = (arrays, up.layer)
        layers = [uploads[c].layer for c in arrived]
        robust = {} if how == "mean" else {"below_quorum": float(kept)}
        return {
            **robust,
            "server_kl": float(np.mean([j for j, _ in losses])),
            "server_ce": float(np.mean([q for _, q in losses])),
            "mean_layer": float(np.mean(layers)),
            "min_layer": float(min(layers)),
            "server_clients": float(len(arrived)),
        }

    def _logits(self, h: torch.Tensor, layer: int) -> np.ndarray:
        step = self.context.train.eval_batch_size
        if len(h) == 0:
            return np.zeros((0, self.num_classes), dtype=np.float32)
        model = self.global_model
        out = [forward(lambda b: model.head(b, layer), h[i : i + step], on=model) for i in range(0, len(h), step)]
        return torch.cat(out).numpy().astype(np.float32, copy=False)


def fedd2s_family(input_shape: tuple[int, ...]) -> str:
    """The paper's M1, the layer-splittable CNN the deep-to-shallow exchange needs, on images."""
    if len(input_shape) != 3:
        raise ValueError(f"fedd2s's models are image CNNs (C, H, W); these samples are {input_shape}")
    return "fedd2s_m1"


register_method(
    "fedd2s",
    "FedD2S: per-sample mutual KD with a global model through a deep-to-shallow distillation "
    "layer (Atapour et al.; large uplink: first-layer feature maps of every sample)",
    FedD2SClient,
    FedD2SServer,
    FedD2SParams,
    paper="K. Atapour et al., FedD2S: Personalized Data-Free Federated Knowledge Distillation, arXiv:2402.10846",
    models=fedd2s_family,
)
