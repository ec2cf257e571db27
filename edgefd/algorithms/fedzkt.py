"""FedZKT (Zhang, Wu, Yuan, ICDCS 2022, arXiv:2109.03775): zero-shot knowledge transfer between
devices that each choose their own architecture.

Per round (Alg. 1-3 of the paper; ``docs/methods/fedzkt.md``):

- **Device** (``FedZKTClient``): loads the weights the server last sent it, trains ``T_l`` epochs of
  minibatch SGD on ``CE + lambda * ||w - w_ref||^2`` (Eq. 9; ``w_ref`` = those received
  weights, ``lambda = 0`` until the device has received any), and uploads its full model state
  (trainable tensors and BatchNorm buffers).
- **Server** (``FedZKTServer``): loads each received state into its own copy of that device's
  architecture. Phase 1, adversarial zero-shot distillation (Alg. 3 l.1-13): a generator ``G`` is
  trained to *maximise* the disagreement between the global model ``F`` and the ensemble of the
  received device models, while ``F`` minimises it; the disagreement is the SL loss
  (``kernels.sl_loss``: l1 distance between ``softmax(F)`` and the teachers' mean softmax), or the
  paper's ablations KL (Eq. 3) and l1 on logits (Eq. 4). Phase 2, transfer back (l.14-22): each
  received device model is distilled from ``F`` on generated data with teacher-first KL
  (``kernels.weighted_kl``). Each device is then sent its own updated weights, nothing else.

Memory stays bounded with many teachers: teachers run in eval mode with ``requires_grad=False``
parameters, so the generator step keeps only the graph that carries gradients into the generated
images; the global step computes teacher outputs under ``no_grad``. ``aggregate`` reports the
server step's seconds and the share spent in the disagreement-loss kernel (``server_seconds``,
``loss_kernel_seconds``, ``loss_kernel_share``; ``server_cpu_seconds`` is the process's CPU time over
the step, which on a shared machine is the steadier figure), the mean per-sample input-gradient norm of the
generator step (Fig. 2's diagnostic), and first/last losses of each phase.

Where the paper is silent, edgefd chooses; each choice is explained in docs/methods/fedzkt.md:

- ensemble and transfer-back over the devices whose upload arrived this round only
  (docs/methods/fedzkt.md#ensemble-under-stragglers);
- server optimisers and the x0.3 schedule at n_D/2 and 3n_D/4 recreated every round
  (docs/methods/fedzkt.md#learning-rate-schedule);
- per-minibatch ``lambda ||dw||^2`` with lambda = 1 (``prox_scale="minibatch"``; ``"literal"`` weighs it
  against Eq. 9's summed loss, lambda / |D_k| per mean: docs/methods/fedzkt.md#proximal-term-scale);
- KL student-first for the adversarial ablation (``kl_direction="reverse"``, Eq. 3 literally;
  ``"forward"`` = KL(T||U)) and teacher-first, tau = 1, for transfer back
  (docs/methods/fedzkt.md#kl-direction);
- batch-mean reductions (docs/methods/fedzkt.md#loss-reductions);
- device copies in train mode during transfer back (``server_bn_mode="train"``, option
  ``"freeze_stats"``, docs/methods/fedzkt.md#batchnorm-buffers).

The server's scale comes from a preset unless given param by param
(docs/methods/fedzkt.md#preset-scale). ``preset=paper`` is the paper's (n_D = 200, batch 256, SGD 0.01
for F, a ResNet-18 global model, DFAD's GeneratorA with ngf 64): about 2.4 CPU-hours a round on a
2-core machine, a GPU's job. ``preset=cpu``, the default, keeps the algorithm and shrinks the scale so
that a default run ends in minutes (``preset_scale``): the small CPU models on images under 28x28
(docs/methods/fedzkt.md#small-cpu-models), the ``fedzkt`` reproduce recipe's scale otherwise, both
with the scaled recipes' server lr 0.05. Adam 1e-3 for G in both. The device optimiser is the run's,
fresh each round, for the paper's ``T_l = 5`` local epochs a round (Sec. IV-A3, on the MNIST family;
10 on CIFAR-10: ``--epochs 10``) unless the run sets ``--epochs``. At one epoch a round the devices
train too little for the transfer back to carry anything they lack: the global model trails the
device ensemble, every device is replaced by its copy of it, and FedZKT ended 19-23 points below Local
after three rounds on the bundled digits (5 epochs: 5-9 points, docs/methods/fedzkt.md#local-epochs).
``--lr 0.01 --momentum 0 --weight-decay 0 --batch-size 256`` is the paper's optimiser; the runtime's
defaults are not.

What the runtime adds to the paper's protocol, and why (docs/methods/fedzkt.md#accuracy-that-is-reported):

- The runtime sends downlinks at the *start* of a round, so the weights distilled in round t
  travel in the downlink of the device's next round (the same bytes, one round later). Accuracy is
  measured on the distilled weights at the end of round t all the same: ``evaluation_state`` hands
  the client the weights it would hold (a measurement, not a message). The last round's distilled
  weights are measured but never sent.
- A device whose upload missed the deadline is treated as inactive (keeps its own weights and is
  sent nothing new), as Sec. IV-C3 of the paper treats inactive devices.
- The whole ``state_dict`` travels, including BatchNorm's integer ``num_batches_tracked`` (8 bytes
  per BN layer). Weights always travel losslessly (fp32).
- The test accuracy of the global model and of the teacher ensemble is scored by the server
  (``server_model_accuracy`` in metrics.jsonl): a simulation's on the whole test set, a deployment's
  only on a held-out set it is given (`edgefd server --holdout-dir`).
- Not implemented: adding stale cached models of inactive devices to the ensemble
  (docs/methods/fedzkt.md#ensemble-under-stragglers) and a schedule over all rounds with persistent
  optimiser state (docs/methods/fedzkt.md#learning-rate-schedule).

One module over 500 lines, a seventh of them this map from the code to the paper: the method reads top
to bottom as Alg. 1-3 do (params, losses, device, server), and its classes are named by module in a
server's checkpoint (`edgefd.runtime.checkpoint`), so a split would also move what a checkpoint names.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from edgefd import kernels, progress
from edgefd.algorithms.base import ClientContext, ClientRole, ServerContext, ServerRole, register_method
from edgefd.algorithms.params import check_choices
from edgefd.algorithms.schema import MessageSchema, model_state
from edgefd.algorithms.toolkit import median_of_others
from edgefd.models import build_model
from edgefd.protocol import Payload
from edgefd.settings import setting
from edgefd.training import LocalTraining, load_state_arrays, state_arrays

KIND = "fedzkt"
PRESETS = ("cpu", "paper")
LOSSES = ("sl", "kl", "l1")
KL_DIRECTIONS = ("reverse", "forward")
PROX_SCALES = ("minibatch", "literal")
"""Where Eq. 9's lambda applies: to each minibatch's mean cross-entropy (edgefd's default), or to
Eq. 9's loss summed over the device's data, which is lambda / |D_k| against a mean."""
SERVER_BN_MODES = ("train", "freeze_stats")
log = logging.getLogger(__name__)


@dataclass
class FedZKTParams:
    """FedZKT's hyperparameters: the paper's where it gives them, edgefd's choices elsewhere
    (docs/methods/fedzkt.md)."""

    loss: str = setting(
        "sl",
        "adversarial disagreement loss: 'sl' (paper Eq. 5), 'kl' (Eq. 3) or 'l1' (logits, "
        "Eq. 4), the Table II ablation",
        choices=LOSSES,
    )
    kl_direction: str = setting(
        "reverse",
        "KL ablation only: 'reverse' = KL(student || ensemble) as Eq. 3 "
        "writes it, 'forward' = KL(ensemble || student) (docs/methods/fedzkt.md#kl-direction)",
        choices=KL_DIRECTIONS,
    )
    clip: float = setting(
        3.0,
        "scale each device model's logits on a generated batch down to at most this many times the median "
        "over the other devices of their typical logit norm, so that a device cannot vote with outputs scaled "
        "up (0: off, Eq. 1's outputs as they are; docs/methods/fedzkt.md#bounded-outputs)",
    )
    prox: float = setting(
        1.0,
        "lambda of the device's lambda*||w - w_received||^2, per minibatch (Eq. 9; "
        "docs/methods/fedzkt.md#proximal-term-scale); 0 = the Table IV 'no regularization' ablation",
    )
    prox_scale: str = setting(
        "minibatch",
        "what lambda weighs the proximal term against: 'minibatch' = each minibatch's mean cross-entropy; "
        "'literal' = Eq. 9's cross-entropy summed over the device's data, i.e. lambda / |D_k| against the mean "
        "(docs/methods/fedzkt.md#proximal-term-scale)",
        choices=PROX_SCALES,
    )
    preset: str = setting(
        "cpu",
        "server scale for the fields left unset (iterations, server_batch_size, server_lr, global_model, generator, "
        "generator_ngf): 'cpu' (default: sized to finish in minutes on "
        "a laptop CPU; the small CPU models on images under 28x28, the fmnist recipe's LeNet-wide global, "
        "GeneratorA ngf 16, n_D 20 x 32 otherwise) or 'paper' (ResNet-18 global, GeneratorA ngf 64, n_D 200 x "
        "256: hours per round on a CPU, for a GPU; docs/methods/fedzkt.md#preset-scale)",
        choices=PRESETS,
    )
    iterations: int | None = setting(
        None,
        "server iterations n_D per round (generator+global steps, then transfer-back steps per device; paper "
        "Sec. IV-A3: 200); default: the preset's",
    )
    server_batch_size: int | None = setting(
        None, "generated samples per server step (paper: 256); default: the preset's"
    )
    generator_lr: float = setting(1e-3, "Adam lr of the generator (paper Sec. IV-A3)")
    server_lr: float | None = setting(
        None,
        "SGD lr of the global model and of the transfer-back steps (paper Sec. IV-A3: 0.01; the scaled "
        "recipes: 0.05); default: the preset's",
    )
    server_momentum: float = setting(0.0, "SGD momentum on the server (0: the paper's plain SGD; DFAD uses 0.9)")
    lr_decay: float = setting(
        0.3, "server lrs are multiplied by this at n_D/2 and 3n_D/4 each round (paper Sec. IV-A3)"
    )
    student_steps_per_iter: int = setting(
        1, "global-model steps per generator step (paper 1; DFAD 5; docs/methods/fedzkt.md#adversarial-schedule)"
    )
    global_model: str | None = setting(
        None,
        "zoo name of the server's global model F (unstated in the paper; resnet18 at its scale, 'zkt_s1_cnn' "
        "lighter; docs/methods/fedzkt.md#generator-and-global-model); default: the preset's",
    )
    generator: str | None = setting(
        None,
        "zoo name of the generator G (DFAD GeneratorA 'zkt_generator'; 'zkt_generator_mlp' for the 8x8 recipe); "
        "default: the preset's",
    )
    generator_nz: int = setting(0, "noise dimension d_z; 0 = the generator's default (100 for 28x28, 256 for 32x32)")
    generator_ngf: int | None = setting(
        None, "GeneratorA width ngf (64 at the paper's scale); ignored by the MLP generator; default: the preset's"
    )
    server_bn_mode: str = setting(
        "train",
        "BatchNorm of device copies during transfer back: 'train' (stats adapt) or 'freeze_stats' "
        "(docs/methods/fedzkt.md#batchnorm-buffers)",
        choices=SERVER_BN_MODES,
    )

    def __post_init__(self) -> None:
        check_choices(self)
        for name in ("iterations", "server_batch_size", "student_steps_per_iter", "generator_ngf"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"param {name}: must be >= 1, got {value}")
        if self.generator_nz < 0:
            raise ValueError(f"param generator_nz: must be >= 0 (0 = default), got {self.generator_nz}")
        for name in ("prox", "server_momentum", "clip"):
            if not (getattr(self, name) >= 0 and np.isfinite(getattr(self, name))):
                raise ValueError(f"param {name}: must be a finite number >= 0, got {getattr(self, name)}")
        for name in ("generator_lr", "server_lr", "lr_decay"):
            if getattr(self, name) is None:
                continue
            if not (getattr(self, name) > 0 and np.isfinite(getattr(self, name))):
                raise ValueError(f"param {name}: must be a finite number > 0, got {getattr(self, name)}")

    def resolved(self, input_shape: tuple[int, ...]) -> FedZKTParams:
        """These params with every server-scale field the user left unset taken from the preset, for
        images of ``input_shape`` (C, H, W)."""
        scale = preset_scale(self.preset, input_shape)
        chosen = {name: value for name, value in scale.items() if getattr(self, name) is None}
        return dataclasses.replace(self, **chosen)


def preset_scale(preset: str, input_shape: tuple[int, ...]) -> dict[str, Any]:
    """The server's scale under a preset (docs/methods/fedzkt.md#preset-scale). ``paper``: Sec. IV-A3 of
    the paper. ``cpu``: on images smaller than 28x28 (the bundled digits), the small CPU models
    (docs/methods/fedzkt.md#small-cpu-models); otherwise the ``fedzkt`` reproduce recipe's scale
    (LeNet-wide global model, GeneratorA ngf 16, n_D 20 x 32), about 10 s of server time a round on two
    cores with ten LeNet-size devices."""
    if preset == "paper":
        return dict(
            global_model="resnet18", generator="zkt_generator", generator_ngf=64, iterations=200,
            server_batch_size=256, server_lr=0.01,
        )  # fmt: skip
    if min(input_shape[1:]) < 28:
        return dict(
            global_model="zkt_tiny_global", generator="zkt_generator_mlp", generator_ngf=64, iterations=100,
            server_batch_size=128, server_lr=0.05,
        )  # fmt: skip
    return dict(
        global_model="zkt_s5_lenet_wide", generator="zkt_generator", generator_ngf=16, iterations=20,
        server_batch_size=32, server_lr=0.05,
    )  # fmt: skip


def fedzkt_family(input_shape: tuple[int, ...]) -> str:
    """Heterogeneous devices as the paper's Table III pattern: five small models (A..E) on
    images under 28x28, the MNIST family S2-S5 on 28x28 grey images (S1, 1.7 M params, left out for
    CPU time), the CIFAR family (ShuffleNetV2, MobileNetV2, LeNet) on 32x32 colour images."""
    if len(input_shape) != 3:
        raise ValueError(f"fedzkt's generator makes images (C, H, W); these samples are {input_shape}")
    if min(input_shape[1:]) < 28:
        return "zkt_tiny_a,zkt_tiny_b,zkt_tiny_c,zkt_tiny_d,zkt_tiny_e"
    if input_shape[0] == 1:
        return "zkt_s2_fc,zkt_s3_lenet5,zkt_s4_lenet3,zkt_s5_lenet_wide"
    return "shufflenetv2_x0_5,shufflenetv2_x1_0,mobilenetv2_x0_8,mobilenetv2_x0_6,lenet"


# ----------------------------------------------------------------------------------------------
# The losses (Eq. 3-5 of the paper)


def teacher_log_probabilities(teacher_logits: torch.Tensor) -> torch.Tensor:
    """``[B, C]`` log-probabilities of the teachers' ensemble: their mean probabilities (Eq. 1),
    with no log(0) where a softmax underflows."""
    return torch.logsumexp(torch.log_softmax(teacher_logits, dim=2), dim=0) - float(np.log(teacher_logits.shape[0]))


def bounded_outputs(teacher_logits: torch.Tensor, clip: float) -> torch.Tensor:
    """``[K, B, C]`` teachers' logits, each row scaled down to at most ``clip`` times the median
    over the *other* teachers of their typical row norm (the median norm of their rows on this
    batch): a bound no teacher can raise itself. Rows keep their direction, so a teacher's vote
    keeps its ranking of the classes and loses only the confidence past the others'. The bounds
    are constants of the step; the rows' own norms stay in the graph. ``clip <= 0``: no bound."""
    if clip <= 0:
        return teacher_logits
    norms = teacher_logits.norm(dim=2)
    typical = norms.detach().median(dim=1).values.cpu().numpy()
    others = median_of_others(typical, np.ones(len(typical), dtype=bool))
    if np.isnan(others).any():  # one teacher: nobody to bound it by
        return teacher_logits
    bound = torch.as_tensor(clip * others, dtype=norms.dtype, device=norms.device)[:, None]
    scale = (bound / norms.clamp_min(torch.finfo(norms.dtype).tiny)).clamp(max=1.0)
    return teacher_logits * scale[..., None]


def disagreement(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, loss: str = "sl", kl_direction: str = "reverse"
) -> torch.Tensor:
    """Mean over the batch of the per-sample disagreement between the student's logits ``[B, C]``
    and the ensemble of ``K`` teachers' logits ``[K, B, C]`` (uniform weights).

    ``sl``: ``sum_c |softmax(u) - mean_k softmax(v_k)|`` (the C++ kernel); ``kl``: ``KL(U || T)``
    (``reverse``, Eq. 3) or ``KL(T || U)`` (``forward``) with ``T`` the mean teacher probabilities;
    ``l1``: ``sum_c |u - mean_k v_k|`` on logits. Differentiable w.r.t. both arguments."""
    if loss == "sl":
        return kernels.sl_loss(student_logits, teacher_logits)
    if loss == "l1":
        return (student_logits - teacher_logits.mean(0)).abs().sum(1).mean()
    if loss == "kl":
        log_u = torch.log_softmax(student_logits, dim=1)
        log_t = teacher_log_probabilities(teacher_logits)
        if kl_direction == "reverse":
            return (log_u.exp() * (log_u - log_t)).sum(1).mean()
        if kl_direction == "forward":
            return (log_t.exp() * (log_t - log_u)).sum(1).mean()
        raise ValueError(f"kl_direction: expected one of {', '.join(KL_DIRECTIONS)}, got {kl_direction!r}")
    raise ValueError(f"loss: expected one of {', '.join(LOSSES)}, got {loss!r}")


def prox_term(model: nn.Module, reference: list[torch.Tensor]) -> torch.Tensor:
    """``||w - w_ref||^2`` over the trainable parameters (BN buffers excluded,
    docs/methods/fedzkt.md#proximal-term-scale)."""
    # cast: sum's start value, the int 0, comes back only for a model without parameters
    return cast(torch.Tensor, sum(((p - r) ** 2).sum() for p, r in zip(model.parameters(), reference)))


def _set_trainable(model: nn.Module, flag: bool) -> None:
    for p in model.parameters():
        p.requires_grad_(flag)


def _schedule(optimizer: torch.optim.Optimizer, iterations: int, decay: float):
    """x decay at floor(n/2) and floor(3n/4) (paper Sec. IV-A3), stepped once per iteration."""
    return torch.optim.lr_scheduler.MultiStepLR(optimizer, [iterations // 2, (3 * iterations) // 4], gamma=decay)


# ----------------------------------------------------------------------------------------------
# Device


class FedZKTClient(ClientRole):
    """DeviceUpdate (Alg. 2 + Eq. 9): CE plus the proximal term towards the last received weights."""

    # the weights are replaced every round; T_l = 5 local epochs (paper Sec. IV-A3)
    local_training = LocalTraining(optimizer_lifecycle="fresh", epochs=5)

    def __init__(self, context: ClientContext, params: FedZKTParams) -> None:
        super().__init__(context, params)
        self.optimizer = self.round_optimizer()
        self.reference: list[torch.Tensor] | None = None
        """The trainable parameters last received from the server (None: never received)."""
        self.last_prox: float = 0.0

    def train_round(self, round: int, downlink: Payload | None) -> Payload:
        if downlink is not None:
            load_state_arrays(self.model, downlink.arrays)
            self.reference = [p.detach().clone() for p in self.model.parameters()]
        lam = self.params.prox if self.reference is not None else 0.0
        y = self.data.train_y
        if self.params.prox_scale == "literal":  # Eq. 9 sums the loss over D_k: against a mean, lambda / |D_k|
            lam /= len(y)
        reference = self.reference

        def loss_fn(logits: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            loss = nn.functional.cross_entropy(logits, y[idx])
            if lam > 0 and reference is not None:  # lam > 0 only with a reference
                loss = loss + lam * prox_term(self.model, reference).to(loss.device)
            return loss

        self.train_local(loss_fn)
        if reference is not None:
            with torch.no_grad():
                self.last_prox = float(prox_term(self.model, reference))
        return Payload(KIND, state_arrays(self.model))


# ----------------------------------------------------------------------------------------------
# Server


class TeacherEnsemble(nn.Module):
    """Device models voting by their mean softmax (uniform weights, Eq. 1), each one's outputs
    bounded as the server bounds them (``clip``): the teacher F distils. Returns the log of that
    mean, so that its argmax and cross-entropy are the ensemble's."""

    def __init__(self, members: list[nn.Module], clip: float = 0.0) -> None:
        super().__init__()
        self.members = nn.ModuleList(members)
        self.clip = clip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = torch.stack([member(x) for member in self.members])
        return teacher_log_probabilities(bounded_outputs(logits, self.clip))


class FedZKTServer(ServerRole):
    """ServerUpdate (Alg. 3): ensemble -> global model by adversarial zero-shot distillation, then
    global model -> each received device model."""

    def __init__(self, context: ServerContext, params: FedZKTParams) -> None:
        super().__init__(context, params)
        shape = tuple(context.input_shape)
        if len(shape) != 3:
            raise ValueError(f"fedzkt: the generator makes images (C, H, W); this dataset's samples are {shape}")
        self.params = params = params.resolved(shape)
        # resolved: the preset filled in every server-scale field left None
        assert params.global_model is not None and params.generator is not None and params.generator_ngf is not None
        log.info(
            "fedzkt server (preset %s): global model %s, generator %s, n_D %d x %d generated samples, lr %g",
            params.preset, params.global_model, params.generator, params.iterations, params.server_batch_size,
            params.server_lr,
        )  # fmt: skip
        self.global_model = context.build_model(params.global_model)
        options = {"nz": params.generator_nz} if params.generator_nz else {}
        if params.generator == "zkt_generator":
            options["ngf"] = params.generator_ngf
        self.device = context.train.device
        self.generator = build_model(
            params.generator, in_channels=shape[0], num_classes=context.num_classes, input_shape=shape, **options
        ).to(self.device)
        self.nz = int(cast(Any, self.generator).nz)  # torch types Module attributes as Tensor | Module
        self.noise = torch.Generator().manual_seed(int(np.random.SeedSequence([context.seed, 7]).generate_state(1)[0]))
        self.device_models: dict[str, nn.Module] = {}
        """Each device's model as last uploaded, built at its first upload."""
        """The server's trainable copy of each device's architecture (built on first upload)."""
        self.pending: dict[str, dict[str, np.ndarray]] = {}
        """Distilled weights not yet sent to their device."""
        self.state_schemas: dict[str, MessageSchema] = {}
        """The uplink schema of each device architecture (by zoo name), built on first use."""
        self.last_uploads: dict[str, dict[str, np.ndarray]] = {}
        """The last round's uploads as received (the teachers before the transfer back), for
        `server_models`' ensemble."""

    # -- messages ------------------------------------------------------------------------------

    def uplink_schemas(self, client_id: str) -> Sequence[MessageSchema]:
        """The full state of this client's own architecture."""
        name = self.context.client_models.get(client_id)
        if name is None:  # not a client of this run: it may send nothing
            return ()
        if name not in self.state_schemas:
            with torch.random.fork_rng(devices=[]):  # a throwaway model: leave the run's random draws as they were
                state = state_arrays(self.context.build_model(name))
            self.state_schemas[name] = MessageSchema(KIND, model_state(state))
        return (self.state_schemas[name],)

    def downlink(self, round: int, client_id: str) -> Payload | None:
        arrays = self.pending.pop(client_id, None)
        return None if arrays is None else Payload(KIND, arrays)

    def evaluation_state(self, client_id: str) -> Payload | None:
        """The distilled weights the device holds after this round's transfer back (None: the
        device's own model, e.g. before its first upload)."""
        arrays = self.pending.get(client_id)
        return None if arrays is None else Payload(KIND, arrays)

    def server_models(self) -> dict[str, nn.Module]:
        """What a simulation scores on the whole test set: the global model F and,
        once devices have uploaded, the ensemble F learnt from. Their gap is how much of the
        ensemble F caught, before the transfer back passes it on."""
        models: dict[str, nn.Module] = {"global_model": self.global_model}
        if self.last_uploads:
            with torch.random.fork_rng(devices=[]):  # built aside: the run's random draws stay as they were
                members = [self.context.build_model(self.context.client_models[cid]) for cid in self.last_uploads]
            for member, arrays in zip(members, self.last_uploads.values()):
                load_state_arrays(member, arrays)
            models["teacher_ensemble"] = TeacherEnsemble(members, self.params.clip).to(self.device)
        return models

    def rebuild_for_checkpoint(self, attribute: str, key: str) -> nn.Module:
        """A device model to restore a checkpoint into (its weights come from the checkpoint; built
        aside from torch's global random stream, which the run's draws do not use)."""
        if attribute != "device_models" or key not in self.context.client_models:
            raise ValueError(f"fedzkt: no model {attribute}[{key!r}] to rebuild")
        with torch.random.fork_rng(devices=[]):
            return self.context.build_model(self.context.client_models[key])

    def aggregate(self, round: int, uplinks: dict[str, Payload]) -> dict[str, float]:
        if not uplinks:
            return {"active_devices": 0.0}
        started, started_cpu = time.perf_counter(), time.process_time()
        active = sorted(uplinks)
        for cid in active:
            if cid not in self.context.client_models:
                raise ValueError(f"fedzkt: upload from unknown client {cid!r}")
            model = self.device_models.get(cid)
            if model is None:
                model = self.device_models[cid] = self.context.build_model(self.context.client_models[cid])
            load_state_arrays(model, uplinks[cid].arrays)
        self.last_uploads = {cid: uplinks[cid].arrays for cid in active}
        teachers = [self.device_models[cid] for cid in active]
        metrics = self.distill_global(teachers)
        metrics.update(self.transfer_back(teachers))
        for cid in active:
            self.pending[cid] = state_arrays(self.device_models[cid])
        metrics["active_devices"] = float(len(active))
        metrics["server_seconds"] = time.perf_counter() - started
        metrics["server_cpu_seconds"] = time.process_time() - started_cpu  # all threads of the process
        metrics["loss_kernel_share"] = metrics["loss_kernel_seconds"] / max(metrics["server_seconds"], 1e-12)
        return metrics

    # -- the two phases ------------------------------------------------------------------------

    def _noise(self) -> torch.Tensor:
        # drawn on the CPU (the same numbers on any device), then moved to where the server's models are
        return torch.randn(self.params.server_batch_size, self.nz, generator=self.noise).to(self.device)

    def _teacher_logits(self, teachers: list[nn.Module], x: torch.Tensor) -> torch.Tensor:
        logits = torch.stack([teacher(x) for teacher in teachers])
        return bounded_outputs(logits, self.params.clip)

    def _loss(self, u: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, float]:
        start = time.perf_counter()
        loss = disagreement(u, v, self.params.loss, self.params.kl_direction)
        return loss, time.perf_counter() - start

    def generator_step(self, teachers: list[nn.Module], optimizer: torch.optim.Optimizer) -> tuple[float, float, float]:
        """One step of G maximising the disagreement; gradients flow through F and the teachers
        into the images only. Returns (loss, mean per-sample ||dL/dx||, kernel seconds)."""
        _set_trainable(self.global_model, False)
        optimizer.zero_grad(set_to_none=True)
        x = self.generator(self._noise())
        x.retain_grad()
        loss, seconds = self._loss(self.global_model(x), self._teacher_logits(teachers, x))
        (-loss).backward()
        optimizer.step()
        _set_trainable(self.global_model, True)
        # x.grad = -(1/B) dL_b/dx_b, so the per-sample gradient norm is B * ||x.grad_b||
        norm = float(x.grad.flatten(1).norm(dim=1).mean()) * x.shape[0]
        return float(loss.detach()), norm, seconds

    def student_step(self, teachers: list[nn.Module], optimizer: torch.optim.Optimizer) -> tuple[float, float]:
        """One step of F minimising the disagreement on detached images and constant teachers."""
        with torch.no_grad():
            x = self.generator(self._noise())
            v = self._teacher_logits(teachers, x)
        optimizer.zero_grad(set_to_none=True)
        loss, seconds = self._loss(self.global_model(x), v)
        loss.backward()
        optimizer.step()
        return float(loss.detach()), seconds

    def distill_global(self, teachers: list[nn.Module]) -> dict[str, float]:
        """Phase 1 (Alg. 3 l.1-13): n_D alternating generator / global-model steps."""
        p = self.params
        for teacher in teachers:
            teacher.eval()
            _set_trainable(teacher, False)
        self.generator.train()
        self.global_model.train()
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=p.generator_lr, betas=(0.9, 0.999))
        opt_s = torch.optim.SGD(self.global_model.parameters(), lr=p.server_lr, momentum=p.server_momentum)
        schedules = [_schedule(opt_g, p.iterations, p.lr_decay), _schedule(opt_s, p.iterations, p.lr_decay)]
        kernel_seconds, gen_losses, norms, student_losses = 0.0, [], [], []
        for _ in progress.track(range(p.iterations), "fedzkt server: distilling the global model"):
            loss, norm, seconds = self.generator_step(teachers, opt_g)
            gen_losses.append(loss)
            norms.append(norm)
            kernel_seconds += seconds
            for _ in range(p.student_steps_per_iter):
                loss, seconds = self.student_step(teachers, opt_s)
                student_losses.append(loss)
                kernel_seconds += seconds
            for schedule in schedules:
                schedule.step()
        return {
            "generator_loss_mean": float(np.mean(gen_losses)),
            "input_grad_norm": float(np.mean(norms)),
            "global_loss_first": student_losses[0],
            "global_loss_last": student_losses[-1],
            "loss_kernel_seconds": kernel_seconds,
        }

    def transfer_back(self, students: list[nn.Module]) -> dict[str, float]:
        """Phase 2 (Alg. 3 l.14-22): each device model takes n_D SGD steps on KL(F || f_k), one
        shared generated batch per iteration (F and G frozen, images detached)."""
        p = self.params
        self.global_model.eval()
        self.generator.train()
        optimizers = []
        for student in students:
            _set_trainable(student, True)
            student.train(p.server_bn_mode == "train")
            optimizers.append(torch.optim.SGD(student.parameters(), lr=p.server_lr, momentum=0.0))
        schedules = [_schedule(opt, p.iterations, p.lr_decay) for opt in optimizers]
        first = last = 0.0
        for n in progress.track(range(p.iterations), "fedzkt server: transfer back to the devices"):
            with torch.no_grad():
                x = self.generator(self._noise())
                teacher = self.global_model(x)
            losses = []
            for student, optimizer in zip(students, optimizers):
                optimizer.zero_grad(set_to_none=True)
                loss = kernels.weighted_kl(student(x), teacher)
                loss.backward()
                optimizer.step()
                losses.append(float(loss.detach()))
            for schedule in schedules:
                schedule.step()
            if n == 0:
                first = float(np.mean(losses))
            last = float(np.mean(losses))
        for student in students:
            student.eval()
        return {"transfer_kl_first": first, "transfer_kl_last": last}


register_method(
    "fedzkt",
    "zero-shot server distillation between heterogeneous device models (Zhang et al., FedZKT)",
    FedZKTClient,
    FedZKTServer,
    FedZKTParams,
    paper="L. Zhang, D. Wu, X. Yuan, FedZKT: Zero-Shot Knowledge Transfer towards Resource-Constrained Federated "
    "Learning with Heterogeneous On-Device Models, ICDCS 2022, arXiv:2109.03775",
    models=fedzkt_family,
)
