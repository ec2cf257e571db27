"""FedICT (Wu et al., "Federated Multi-task Distillation for Multi-access Edge Computing", TPDS 2024)
and FedGKT (He et al. 2020) as FedICT with lam = mu = 0.

Method pages: ``docs/methods/fedict.md`` and ``docs/methods/fedgkt.md``; equation, algorithm and
table numbers are the FedICT paper's.

Each client model is a feature extractor + predictor (``extract(x)``, ``predict(h)``). Once, the
client uploads its class-distribution vector d^k (Eq. 7), its labels and their stable sample ids.
Every round it trains one epoch with CE + the FPKD-weighted KL towards the server's per-sample
logits, then uploads per-sample features H^k, logits Z^k and sample ids. The server trains one
shared predictor-only model on every client's features, client by client, with CE + the LKA-weighted
KL towards Z^k, and sends back its per-sample logits Z^S and their ids (the next downlink). Knowledge is keyed by
stable sample id on both sides (:class:`SampleIndex`, built once): a client gathers ``Z^S[id]`` for
each shuffled minibatch, the server scatters its logits into the canonical order of the client's
hello. Nothing is keyed by batch position (the official demo's bug,
docs/methods/fedict.md#sample-identity).

Losses: every objective is CE + one class-weighted KL computed by the ``weighted_kl`` kernel
(per-class weights in ``class_weight``, rows without a teacher masked by ``sample_weight``); no
per-sample-per-class weight matrix is needed by either profile.

``profile=paper`` (default, the equations as printed):
  client  CE + WKL(s, z^S; omega = beta + lam * softmax(d^k / fpkd_T))            Eq. 2, 8, 10, 11
  server  sim:      CE + (beta + mu * cos(d^S, d^k)) * KL(s, z^k)                 Eq. 4, 9, 12
                    (``sim_weighting=scaled``: CE + beta * cos(d^S, d^k) * KL, the authors' code's
                    reading: the similarity scales the base KL term, mu only switches it on)
          balanced: CE + WKL(s, z^k; omega = beta + mu * softmax((d^S - d^k) / lka_U))  Eq. 13, 14
  KD temperature 1 (docs/methods/fedict.md#kd-temperature); round 1 distils towards the server's
  initial zeros, i.e. the uniform distribution (Alg. 2 l.10-11, docs/methods/fedict.md#first-round);
  Z^S is generated in eval mode right after each client's server pass (Alg. 2 l.17,
  docs/methods/fedict.md#server-logit-generation).
``profile=reference`` (the authors' demo arithmetic, docs/methods/fedict.md#reference-profile): KD
  temperature 3 with T^2 scaling; teacher probabilities ``softmax(t / T) + 1e-7`` (not
  renormalised); linear weights d^k / fpkd_T and signed (d^S - d^k) / lka_U (the kernel takes
  non-negative weights, so a signed weight vector is applied exactly as WKL(omega+) - WKL(omega-); a
  warning is logged, docs/methods/fedict.md#signed-balance-weights); the demo's accidental
  double-softmax term EXTRA; loss weights client CE + beta * [KL + EXTRA], server [KL + EXTRA] +
  beta * CE (docs/methods/fedict.md#server-loss-weighting); no KD in round 1
  (docs/methods/fedict.md#first-round); Z^S = the train-mode logits of the server's training forward
  pass (docs/methods/fedict.md#server-logit-generation). The demo has a single KD weight ``alpha``,
  which is ``beta`` here; ``lam`` and ``mu`` only switch its FPKD / LKA losses on (non-zero) or back
  to FedGKT's plain ``KL_Loss`` (zero), so ``fedgkt --param profile=reference`` is FedML's FedGKT.
  The demo's bugs are not reproduced in either profile: no batch-position keys, no drop_last, full
  test-set accuracy, no server ReduceLROnPlateau (docs/methods/fedict.md#reference-profile).

Choices where the paper is silent:
- d^k from all training labels (docs/methods/fedict.md#class-distribution-vectors, not the demo's
  drop_last loader); d^S = sum_k N^k d^k / N (Alg. 2 l.8) over the clients that said hello.
- "global"/"local" in Eq. 10 and 12-13 are softmax probabilities
  (docs/methods/fedict.md#knowledge-as-probabilities); the student is the current model output, the
  teacher the received logits (docs/methods/fedict.md#student-and-teacher); KL(teacher || student)
  on both sides (docs/methods/fedict.md#kl-direction).
- FedICT (sim) and FedICT (balanced) share the same FPKD client (Sec. 5.2.1 of the paper).
- One shared server model for all clients (Sec. 3.2, Alg. 2), trained client by client in ascending
  id order (docs/methods/fedict.md#server-client-order), ``server_epochs`` = 1 epoch per client per
  round, SGD with the run's lr / momentum / weight decay and Nesterov momentum (the authors' code);
  constant LR (docs/methods/fedict.md#server-epochs-and-optimiser).
- Features are extracted after local training from the non-augmented inputs with eval-mode BN
  (docs/methods/fedict.md#feature-extraction; edgefd does not augment).
- LKA is sample-weighted (the server's minibatch mean over each client's samples,
  docs/methods/fedict.md#lka-averaging).
- The Z^S of the last round is not sent (docs/methods/fedict.md#last-round-server-logits): the
  runtime sends downlinks at the start of a round, so round R's server logits stay on the server (they are
  still computed: an eval pass).
- UA is each client's own model on its whole local test split
  (docs/methods/fedict.md#user-model-accuracy): the default ``ClientRole.evaluate``.
- Bytes (docs/methods/fedict.md#messages): per round, up ``features [N, D_H] + logits [N,C] + ids
  [N] int64`` (features flattened on the wire, so int8 has one scale per sample), down ``logits
  [N,C] + ids [N] int64``; once, up ``distribution [C] float32 + labels [N] int64 + ids [N] int64 +
  samples + feature shape``. Round 1's downlink is the full zero tensor of the paper (only when
  round-1 KD is on). The ids are edgefd's addition to the paper's formula (N * 8 bytes each way per
  round): they make the downlinks order-independent. Labels go up once (Alg. 1 l.8,
  docs/methods/fedict.md#labels-sent-once), not every round as in the demo (``resend_labels=true``
  restores that).
- Model choice (Table III, docs/methods/fedict.md#client-and-server-models): clients use whatever
  ``--models`` assigns and must be split models (``fedict_c1..c5``, ``fedict_fc6..8``, FedCache's
  ``resnet8/16/20``); the zoo's homogeneous default ``cnn2`` / ``cnn1d`` is not, and is refused with
  a ValueError naming the models to pass (there is no silent substitution: an explicit ``--models
  cnn2`` and ``homo`` look the same to a method). ``server_model=auto`` picks ``fedict_server``
  (A^S_1) for images of 16x16 and larger, the small recipe's ``fedict_server_small``
  (docs/methods/fedict.md#small-recipe) below that (digits), and ``fedict_fc_server`` (the A^S_2
  substitute) for sensor windows / vectors.

Switchable deviations (``--param NAME=VALUE``; ``None`` = the profile's value;
docs/methods/fedict.md#switchable-choices): kd_temperature, weight_form softmax|linear
(docs/methods/fedict.md#softmax-or-linear-weights), first_round_kd uniform|skip, zs_generation
after_client_pass|two_phase|train_forward, lka_client_weighting sample|client_uniform, server_order
ascending|shuffled, server_epochs and server_batch_size, nesterov, resend_labels, feature_precision
(fp16/int8 features, opt-in, docs/methods/fedict.md#feature-compression), dist_meta
none|uniform|normal|exponential (the random distribution-vector ablation of Sec. 6.1 and Table VIII,
scale 3, docs/methods/fedict.md#random-distribution-ablation).
"""

from edgefd.algorithms.base import register_method
from edgefd.algorithms.fedict.client import FedICTClient
from edgefd.algorithms.fedict.losses import (
    KDLoss,
    class_distribution,
    client_loss,
    cosine_similarity,
    fpkd_weights,
    global_distribution,
    lka_balance_weights,
    server_loss,
)
from edgefd.algorithms.fedict.params import FedGKTParams, FedICTParams
from edgefd.algorithms.fedict.server import FedICTServer
from edgefd.algorithms.toolkit import SampleIndex

__all__ = [
    "FedICTParams",
    "FedGKTParams",
    "FedICTClient",
    "FedICTServer",
    "KDLoss",
    "SampleIndex",
    "class_distribution",
    "global_distribution",
    "fpkd_weights",
    "lka_balance_weights",
    "cosine_similarity",
    "client_loss",
    "server_loss",
]

FEDICT_PAPER = (
    "Z. Wu et al., FedICT: Federated Multi-task Distillation for Multi-access Edge Computing, IEEE TPDS 35(6) "
    "2024, DOI 10.1109/TPDS.2023.3289444"
)


def fedict_family(input_shape: tuple[int, ...]) -> str:
    """The paper's heterogeneous clients: A^C_1..A^C_5 on images, the fully-connected A^C_6..A^C_8 on
    sensor data (each split into extractor and predictor, as FedICT needs)."""
    if len(input_shape) == 3:
        return "fedict_c1,fedict_c2,fedict_c3,fedict_c4,fedict_c5"
    return "fedict_fc6,fedict_fc7,fedict_fc8"


register_method(
    "fedict",
    "FedICT: per-sample feature/logit co-distillation with FPKD (client) and LKA (server)",
    FedICTClient,
    FedICTServer,
    FedICTParams,
    paper=FEDICT_PAPER,
    models=fedict_family,
)
register_method(
    "fedgkt",
    "FedGKT: FedICT's protocol and losses with lam = mu = 0 (plain CE + beta KL both sides)",
    FedICTClient,
    FedICTServer,
    FedGKTParams,
    paper="C. He et al., Group Knowledge Transfer: Federated Learning of Large CNNs at the Edge, NeurIPS 2020 "
    "(here: " + FEDICT_PAPER + ", with lam = mu = 0)",
    models=fedict_family,
)
