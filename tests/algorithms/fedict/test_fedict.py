"""FedICT / FedGKT (docs/methods/fedict.md): weights and losses against the paper's equations by hand,
both profiles; knowledge keyed by sample id whatever the order; bytes on the wire; short runs on digits
and watch."""

import as_sent
import numpy as np
import pytest
import torch

from edgefd import kernels
from edgefd.algorithms.base import ClientContext, ClientData, ServerContext, get_method
from edgefd.algorithms.fedict import (
    FedGKTParams,
    FedICTClient,
    FedICTParams,
    FedICTServer,
    SampleIndex,
    class_distribution,
    client_loss,
    cosine_similarity,
    fpkd_weights,
    global_distribution,
    lka_balance_weights,
    server_loss,
)
from edgefd.algorithms.params import make_params
from edgefd.algorithms.schema import UplinkRejected
from edgefd.metrics.results import load_run
from edgefd.models import build_model
from edgefd.protocol import HEADER_SIZE, Payload, encode
from edgefd.runtime.build import build
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.transport import DOWN, UP
from edgefd.simulate import run

# ------------------------------------------------------------------------------------------------
# The O(C) quantities (Eq. 7, 11, 12, 14; Alg. 2 l.8)


def test_distribution_vectors():
    a, b = np.array([0, 0, 1, 2]), np.array([1, 1, 1, 0, 0, 2])
    d_a, d_b = class_distribution(a, 3), class_distribution(b, 3)
    np.testing.assert_allclose(d_a, [0.5, 0.25, 0.25])
    d_S = global_distribution([d_a, d_b], [4, 6])
    np.testing.assert_allclose(d_S, class_distribution(np.concatenate([a, b]), 3))  # union frequency
    assert d_S.sum() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="labels must lie"):
        class_distribution(np.array([0, 3]), 3)
    with pytest.raises(ValueError, match="N = 0"):
        class_distribution(np.array([], np.int64), 3)


def test_weights_match_the_spec_values():
    one_hot, uniform = np.eye(10)[0], np.full(10, 0.1)
    w = fpkd_weights(one_hot, 3.0)  # Eq. 11, C = 10, T = 3, one-hot d^k: 0.134250 / 0.096194
    np.testing.assert_allclose([w[0], w[1]], [0.134250, 0.096194], atol=1e-6)
    np.testing.assert_allclose(fpkd_weights(uniform, 3.0), 0.1)
    np.testing.assert_allclose(fpkd_weights(one_hot, 3.0, "linear"), one_hot / 3)  # the demo's d/T
    v = lka_balance_weights(uniform, one_hot, 7.0)  # Eq. 14, U = 7: 0.087857 / 0.101349
    np.testing.assert_allclose([v[0], v[1]], [0.087857, 0.101349], atol=1e-6)
    np.testing.assert_allclose(lka_balance_weights(uniform, uniform, 7.0), 0.1)
    signed = lka_balance_weights(uniform, one_hot, 7.0, "linear")  # (dS - dk) / U: signed, sums to 0
    np.testing.assert_allclose(signed[:2], [-0.9 / 7, 0.1 / 7])
    assert signed.sum() == pytest.approx(0.0, abs=1e-12)
    assert cosine_similarity(uniform, one_hot) == pytest.approx(np.sqrt(0.1))  # Eq. 12: uniform vs one-hot
    assert cosine_similarity([0.2, 0.8], [0.1, 0.4]) == pytest.approx(1.0)
    assert cosine_similarity([0.0, 0.0], [0.5, 0.5]) == 0.0


# ------------------------------------------------------------------------------------------------
# Losses, by hand from the equations (Eq. 2, 4, 8-14; docs/methods/fedict.md#reference-profile), float64 numpy

S = np.array([[1.0, -0.5, 0.3], [0.2, 0.4, -1.0]])  # student logits
TEACH = np.array([[0.5, 1.5, -0.2], [2.0, -1.0, 0.0]])  # teacher logits
Y = np.array([0, 2])
D_K = np.array([0.6, 0.3, 0.1])
D_S = np.array([0.4, 0.35, 0.25])
BETA, LAM, MU, T_FPKD, U_LKA = 1.5, 1.5, 1.5, 3.0, 7.0


def softmax(x, T=1.0):
    e = np.exp(x / T - (x / T).max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def log_softmax(x, T=1.0):
    return np.log(softmax(x, T))


def ce(s=S, y=Y):
    return -log_softmax(s)[np.arange(len(y)), y].mean()


def kl_rows(teacher_prob, s, T=1.0, weight=1.0):
    """sum_r weight_r t_r (log t_r - log p_r) per row: L_sim(p, t) of Eq. 2/4 (teacher first)."""
    return (weight * teacher_prob * (np.log(teacher_prob) - log_softmax(s, T))).sum(1)


def extra(s, q_eps, T):
    """The demo's double softmax (docs/methods/fedict.md#reference-profile): KL_Loss(T=3) applied to (log p, q~)."""
    q2 = softmax(q_eps, 3.0) + 1e-7
    return 9.0 * (q2 * (np.log(q2) - log_softmax(log_softmax(s, T), 3.0))).sum(1).mean()


def evaluate(loss):
    s, t, y = torch.tensor(S, dtype=torch.float32), torch.tensor(TEACH, dtype=torch.float32), torch.tensor(Y)
    return loss(s, t, y).item()


def paper(**kw):
    return FedICTParams(**kw)


def test_paper_client_loss_is_eq2_plus_fpkd():
    g = softmax(TEACH)  # global knowledge tau(z^S); local = current output
    w = fpkd_weights(D_K, T_FPKD)
    by_hand = ce() + BETA * kl_rows(g, S).mean() + LAM * kl_rows(g, S, weight=w).mean()  # Eq. 8, 10, 11
    assert by_hand == pytest.approx(2.587851, abs=1e-6)
    assert evaluate(client_loss(paper(), D_K, 3)) == pytest.approx(by_hand, rel=1e-5)


@pytest.mark.parametrize("lka, pinned", [("sim", 3.135465), ("balanced", 2.577247)])
def test_paper_server_loss_is_eq4_plus_lka(lka, pinned):
    local = softmax(TEACH)  # uploaded local knowledge tau(z^k); global = current server output
    if lka == "sim":  # Eq. 12
        lka_term = cosine_similarity(D_S, D_K) * kl_rows(local, S).mean()
    else:  # Eq. 13, 14
        lka_term = kl_rows(local, S, weight=lka_balance_weights(D_S, D_K, U_LKA)).mean()
    by_hand = ce() + BETA * kl_rows(local, S).mean() + MU * lka_term  # Eq. 9
    assert by_hand == pytest.approx(pinned, abs=1e-6)
    assert evaluate(server_loss(paper(lka=lka), D_S, D_K, 3)) == pytest.approx(by_hand, rel=1e-5)


def test_scaled_sim_weighting_multiplies_the_base_kl_by_the_similarity():
    """The authors' code's reading of Eq. 9 + 12: CE + beta * cos_k * KL (mu only switches it on)."""
    local = softmax(TEACH)
    by_hand = ce() + BETA * cosine_similarity(D_S, D_K) * kl_rows(local, S).mean()
    scaled = evaluate(server_loss(paper(sim_weighting="scaled"), D_S, D_K, 3))
    assert scaled == pytest.approx(by_hand, rel=1e-5)
    additive = evaluate(server_loss(paper(sim_weighting="additive"), D_S, D_K, 3))
    assert additive == pytest.approx(evaluate(server_loss(paper(), D_S, D_K, 3)), rel=1e-6)  # the default
    assert additive > scaled  # beta + mu cos > beta cos: the readings differ
    fedgkt = evaluate(server_loss(paper(sim_weighting="scaled", mu=0.0), D_S, D_K, 3))
    assert fedgkt == pytest.approx(ce() + BETA * kl_rows(local, S).mean(), rel=1e-5)


@pytest.mark.parametrize(
    "values, message",
    [
        ({"sim_weighting": "scaled", "lka": "balanced"}, "applies to lka=sim only"),
        ({"sim_weighting": "additive", "profile": "reference"}, "reference profile is the code's arithmetic"),
        ({"sim_weighting": "sometimes"}, "expected one of additive, scaled"),
    ],
)
def test_sim_weighting_is_refused_where_it_has_no_meaning(values, message):
    with pytest.raises(ValueError, match=message):
        paper(**values)


def test_reference_client_loss_is_the_demo_fpkd():
    T = 3.0
    q = softmax(TEACH, T) + 1e-7  # not renormalised
    klw = T * T * kl_rows(q, S, T, weight=D_K / T_FPKD).mean()  # linear weights d^k / T
    by_hand = ce() + BETA * (klw + extra(S, q, T))
    assert by_hand == pytest.approx(1.590390, abs=1e-6)
    assert evaluate(client_loss(paper(profile="reference"), D_K, 3)) == pytest.approx(by_hand, rel=1e-5)


@pytest.mark.parametrize("lka, pinned", [("sim", 2.761659), ("balanced", 2.016278)])
def test_reference_server_loss_is_the_demo_lka(lka, pinned):
    T = 3.0
    q = softmax(TEACH, T) + 1e-7
    if lka == "sim":
        klw = T * T * cosine_similarity(D_S, D_K) * kl_rows(q, S, T).mean()
    else:  # signed weights (d^S - d^k) / U
        klw = T * T * kl_rows(q, S, T, weight=(D_S - D_K) / U_LKA).mean()
    by_hand = klw + extra(S, q, T) + BETA * ce()  # KD weight 1, CE weight alpha = beta
    assert by_hand == pytest.approx(pinned, abs=1e-6)
    assert evaluate(server_loss(paper(lka=lka, profile="reference"), D_S, D_K, 3)) == pytest.approx(by_hand, rel=1e-5)


@pytest.mark.parametrize("profile", ["paper", "reference"])
def test_lam_mu_zero_is_fedgkt(profile):
    """With lam = mu = 0 both sides are CE + beta KL (FedGKT, Eq. 2 and 4), bit for bit."""
    T = 1.0 if profile == "paper" else 3.0
    q = softmax(TEACH, T) + (0.0 if profile == "paper" else 1e-7)
    kl = T * T * kl_rows(q, S, T).mean()
    gkt = FedGKTParams(profile=profile)
    assert evaluate(client_loss(gkt, D_K, 3)) == pytest.approx(ce() + BETA * kl, rel=1e-5)
    server_by_hand = ce() + BETA * kl if profile == "paper" else kl + BETA * ce()
    for lka in ("sim", "balanced"):
        ict = paper(profile=profile, lka=lka, lam=0.0, mu=0.0)
        assert evaluate(server_loss(ict, D_S, D_K, 3)) == evaluate(server_loss(gkt, D_S, D_K, 3))
        assert evaluate(server_loss(ict, D_S, D_K, 3)) == pytest.approx(server_by_hand, rel=1e-5)
        assert evaluate(client_loss(ict, D_K, 3)) == evaluate(client_loss(gkt, D_K, 3))
    with pytest.raises(ValueError, match="lam = mu = 0"):
        make_params(FedGKTParams, {"lam": "1.5"})


def test_round_one_zero_teacher_is_uniform_target():
    """Zero server logits give KL(uniform || p) plus the FPKD term towards uniform
    (docs/methods/fedict.md#first-round)."""
    p = softmax(S)
    w = fpkd_weights(D_K, T_FPKD)
    u = 1 / 3
    by_hand = ce() + BETA * (u * np.log(u / p)).sum(1).mean() + LAM * (w * u * np.log(u / p)).sum(1).mean()
    loss = client_loss(paper(), D_K, 3)
    got = loss(torch.tensor(S, dtype=torch.float32), torch.zeros(2, 3), torch.tensor(Y)).item()
    assert got == pytest.approx(by_hand, rel=1e-5)


@pytest.mark.parametrize("profile, lka", [("paper", "balanced"), ("reference", "balanced"), ("reference", "sim")])
def test_loss_gradients_agree_between_kernel_backends(profile, lka):
    """The C++ kernel path (signed weights split in two, EXTRA through log_softmax) against autograd."""
    params = paper(profile=profile, lka=lka)
    grads, values = [], []
    for backend in ("cpp", "torch"):
        with kernels.use_backend(backend):
            for loss in (client_loss(params, D_K, 3), server_loss(params, D_S, D_K, 3)):
                s = torch.tensor(S, dtype=torch.float32, requires_grad=True)
                value = loss(s, torch.tensor(TEACH, dtype=torch.float32), torch.tensor(Y))
                value.backward()
                grads.append(s.grad.clone())
                values.append(value.item())
    for a, b in zip(grads[:2], grads[2:]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(values[:2], values[2:], rtol=1e-5)


def test_params_defaults_and_choices():
    p = FedICTParams()
    assert (p.profile, p.lka, p.beta, p.lam, p.mu, p.fpkd_T, p.lka_U) == ("paper", "sim", 1.5, 1.5, 1.5, 3.0, 7.0)
    assert (p.kd_T, p.weights, p.first_round, p.generation) == (1.0, "softmax", "uniform", "after_client_pass")
    r = make_params(FedICTParams, {"profile": "reference", "lka": "balance"})
    assert (r.lka, r.kd_T, r.weights, r.first_round, r.generation) == (
        "balanced",
        3.0,
        "linear",
        "skip",
        "train_forward",
    )
    with pytest.raises(ValueError, match="param lka"):
        FedICTParams(lka="cosine")
    assert get_method("fedgkt").params is FedGKTParams and get_method("fedict").client is FedICTClient


# ------------------------------------------------------------------------------------------------
# Sample-id alignment (docs/methods/fedict.md#sample-identity), on a tiny fully connected setting

C, N, DIM = 4, 23, 6


def make_client(ids, params=None, seed=0, precision="fp32"):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(N, DIM, generator=g)
    y = torch.arange(N) % C
    torch.manual_seed(seed)
    model = build_model("fedict_fc7", in_channels=DIM, num_classes=C, input_shape=(DIM,))
    data = ClientData(x, y, x[:6], y[:6], torch.as_tensor(ids, dtype=torch.int64), C)
    context = ClientContext(
        "client-0",
        model,
        "fedict_fc7",
        data,
        SimulationConfig(batch_size=5, lr=0.1, device="cpu").train_config(),
        np.random.default_rng(seed),
        torch.Generator().manual_seed(seed),
        precision,
        3,
    )
    return FedICTClient(context, params or FedICTParams())


def make_server(params=None, lr=0.1, rounds=3):
    def model(name):
        return build_model(name, in_channels=DIM, num_classes=C, input_shape=(DIM,))

    torch.manual_seed(1)
    context = ServerContext(
        ["client-0"],
        C,
        (DIM,),
        {"client-0": "fedict_fc7"},
        model,
        SimulationConfig(batch_size=5, lr=lr, device="cpu").train_config(),
        0,
        "fp32",
        rounds,
    )
    return FedICTServer(context, params or FedICTParams())


IDS = np.random.default_rng(3).choice(10_000, size=N, replace=False)  # sparse, unsorted global ids


def shuffled(payload, perm):
    arrays = {k: (v[perm] if k in ("ids", "features", "logits", "labels") else v) for k, v in payload.arrays.items()}
    return Payload(payload.kind, arrays, payload.scalars)


def test_sample_index_maps_ids_to_rows():
    index = SampleIndex(IDS)
    perm = np.random.default_rng(0).permutation(N)
    np.testing.assert_array_equal(index.rows(IDS[perm]), perm)
    with pytest.raises(ValueError, match="unknown sample id"):
        index.rows([IDS.max() + 1])
    with pytest.raises(ValueError, match="unique"):
        SampleIndex([1, 2, 1])


def test_client_gathers_teacher_by_id_whatever_the_reply_order():
    server_logits = np.random.default_rng(1).normal(size=(N, C)).astype(np.float32)  # row i is for IDS[i]
    perm = np.random.default_rng(2).permutation(N)
    ordered = Payload("knowledge", {"ids": IDS, "logits": server_logits})
    reply = shuffled(ordered, perm)
    client = make_client(IDS)
    table, known = client.teacher(reply)
    assert bool(known.all())
    np.testing.assert_array_equal(table.numpy(), server_logits)  # local row i <-> id IDS[i]
    # the same shuffled-batch training gives the same model whatever order the reply came in
    a, b = make_client(IDS), make_client(IDS)
    up_a, up_b = a.train_round(2, ordered), b.train_round(2, reply)
    for pa, pb in zip(a.model.parameters(), b.model.parameters()):
        torch.testing.assert_close(pa, pb, rtol=0, atol=0)
    np.testing.assert_array_equal(up_a.arrays["logits"], up_b.arrays["logits"])
    np.testing.assert_array_equal(up_a.arrays["ids"], IDS)


@pytest.mark.parametrize("generation", ["after_client_pass", "train_forward"])
def test_server_reply_for_each_id_is_its_own_logit(generation):
    params = FedICTParams(zs_generation=generation, resend_labels=True)
    client = make_client(IDS, params)
    # train_forward with lr = 0 on an MLP without BatchNorm: the training forward pass equals f(H; W^S)
    server = make_server(params, lr=0.0 if generation == "train_forward" else 0.1)
    server.start({"client-0": client.hello()})
    first = server.downlink(1, "client-0")  # paper profile, round 1: zeros (Alg. 2 l.9-11)
    assert not first.arrays["logits"].any()
    upload = client.train_round(1, first)
    perm = np.random.default_rng(4).permutation(N)
    metrics = server.aggregate(1, {"client-0": shuffled(upload, perm)})
    assert np.isfinite(metrics["server_loss"])
    reply = server.downlink(2, "client-0")
    features = {int(i): f for i, f in zip(upload.arrays["ids"], upload.arrays["features"])}
    server.model.eval()
    with torch.no_grad():
        expected = server.model(torch.tensor(np.stack([features[int(i)] for i in reply.arrays["ids"]])))
    np.testing.assert_allclose(reply.arrays["logits"], expected.numpy(), rtol=1e-5, atol=1e-6)
    # labels travel by id too: positions shuffled without their labels are refused
    bad = shuffled(upload, perm)
    bad.arrays["labels"] = upload.arrays["labels"]
    with pytest.raises(ValueError, match="labels disagree"):
        server.aggregate(2, {"client-0": bad})


def test_non_split_models_are_refused_with_a_hint():
    with pytest.raises(ValueError, match="--models fedict_c1"):
        build(SimulationConfig(algo="fedict", dataset="digits", clients=2, rounds=1, models="homo"))


def test_models_auto_gives_the_papers_split_clients():
    images = build(SimulationConfig(algo="fedict", dataset="digits", clients=6, rounds=1))
    assert list(images.model_names.values()) == [f"fedict_c{k}" for k in (1, 2, 3, 4, 5, 1)]
    assert "fedict_c1" in images.model_note
    sensors = build(SimulationConfig(algo="fedgkt", dataset="watch", clients=3, rounds=1, partition="iid"))
    assert list(sensors.model_names.values()) == ["fedict_fc6", "fedict_fc7", "fedict_fc8"]


# ------------------------------------------------------------------------------------------------
# Bytes on the wire (docs/methods/fedict.md#messages)

DIGITS = dict(dataset="digits", clients=3, models="fedict_c1", batch_size=64, lr=0.05)


def array_header(name, ndim):
    return 20 + len(name) + 4 * ndim


def test_bytes_per_round_follow_the_formula_and_fp16_halves_features(tmp_path):
    sim = build(SimulationConfig(algo="fedict", rounds=1, out=str(tmp_path), **DIGITS))
    federation = sim.federation
    federation.hello()
    federation.run_round(1)
    ledger = federation.ledger
    C, D_H, F = 10, 16 * 8 * 8, (16, 8, 8)
    for cid, client in sim.clients.items():
        n = len(client.data.train_y)
        h_up = (
            HEADER_SIZE
            + len("features")
            + array_header("ids", 1)
            + array_header("features", 2)
            + array_header("logits", 2)
        )
        b_up = h_up + n * (D_H * 4 + C * 4) + n * 8  # features + logits up, plus the ids (int64)
        h_down = HEADER_SIZE + len("knowledge") + array_header("ids", 1) + array_header("logits", 2)
        b_down = h_down + n * C * 4 + n * 8  # logits down (round 1: the zeros), plus the ids
        h_hello = (
            HEADER_SIZE
            + len("hello")
            + (2 + len("samples") + 8)
            + array_header("distribution", 1)
            + array_header("labels", 1)
            + array_header("ids", 1)
            + array_header("feature_shape", 1)
        )
        b_hello = h_hello + C * 4 + n * 8 + n * 8 + 3 * 8  # d^k, Y^k, ids, feature shape
        assert ledger.total(UP, 1, cid) == b_up
        assert ledger.total(DOWN, 1, cid) == b_down
        assert ledger.total(UP, 0, cid) == b_hello
        upload = client.train_round(2, None)
        assert upload.arrays["features"].shape == (n, D_H)  # flattened H^k of shape F on the wire
        assert client.feature_shape() == F
        assert len(encode(upload)) == b_up
    fp32_sizes = {cid: len(encode(client.train_round(3, None))) for cid, client in sim.clients.items()}
    for precision in ("fp16", "int8"):
        other = build(
            SimulationConfig(
                algo="fedict", rounds=1, out=str(tmp_path), params={"feature_precision": precision}, **DIGITS
            )
        )
        for cid, client in other.clients.items():
            n = len(client.data.train_y)
            size = len(encode(client.train_round(1, None)))
            if precision == "fp16":
                assert size == fp32_sizes[cid] - n * D_H * 2  # feature bytes halved
            else:  # one byte per element plus one float32 scale per sample (row)
                assert size == fp32_sizes[cid] - n * D_H * 3 + n * 4


# ------------------------------------------------------------------------------------------------
# What the server accepts (edgefd.algorithms.schema): every honest message, and no tampered one


def altered(payload: Payload, **arrays) -> Payload:
    """``payload`` with these arrays replaced (None: removed)."""
    merged = {**payload.arrays, **arrays}
    kept = {name: array for name, array in merged.items() if array is not None}
    return Payload(payload.kind, kept, payload.scalars)


@pytest.fixture(scope="module")
def honest_fedict(tmp_path_factory):
    """The server, client-1's hello and round-1 uplink (labels resent), and an id client-1 does not own."""
    config = SimulationConfig(
        algo="fedict", rounds=1, out=str(tmp_path_factory.mktemp("fedict")), params={"resend_labels": True}, **DIGITS
    )
    sim = build(config)
    sim.federation.hello()
    client = sim.clients["client-1"]
    uplink = as_sent.train_round(client, 1, sim.federation.downlink(1, "client-1"))
    return sim.server, as_sent.hello(client), uplink, int(sim.server.clients["client-0"].index.ids[0])


def claiming(payload: Payload, n: int) -> Payload:
    """A hello of ``n`` samples, all of class 0, self-consistent (ids, labels and d^k agree)."""
    arrays = dict(ids=np.arange(n, dtype=np.int64), labels=np.zeros(n, np.int64))
    hello = altered(payload, distribution=np.eye(10, dtype=np.float32)[0], **arrays)
    return Payload(hello.kind, hello.arrays, {**hello.scalars, "samples": n})


def foreign(ids, other):
    ids = ids.copy()
    ids[-1] = other
    return ids


@pytest.mark.parametrize(
    "message, tamper, reason",
    [
        ("hello", lambda p, other: p, None),
        ("hello", lambda p, other: altered(p, ids=None), "missing-array"),
        ("hello", lambda p, other: altered(p, labels=p.arrays["labels"] * 0 + 10), "out-of-range"),
        ("hello", lambda p, other: altered(p, distribution=p.arrays["distribution"] / 2), "out-of-range"),
        ("hello", lambda p, other: altered(p, distribution=p.arrays["distribution"].astype(np.float64)), "dtype"),
        ("hello", lambda p, other: altered(p, feature_shape=np.array([16, 4, 4])), "shape"),  # not the server's
        ("hello", lambda p, other: altered(p, ids=p.arrays["ids"][1:]), "shape"),  # fewer ids than samples
        ("hello", lambda p, other: altered(p, ids=p.arrays["ids"] * 0), "repeated-ids"),
        # d^k weighs in d^S: it must be the histogram of the hello's own labels
        ("hello", lambda p, other: altered(p, distribution=np.eye(10, dtype=np.float32)[9]), "counts-disagree"),
        ("hello", lambda p, other: claiming(p, 5), None),
        ("hello", lambda p, other: claiming(p, 1000), "too-many-samples"),  # digits holds fewer 0s
        ("uplink", lambda p, other: p, None),
        ("uplink", lambda p, other: altered(p, ids=foreign(p.arrays["ids"], other)), "foreign-ids"),
        ("uplink", lambda p, other: altered(p, logits=p.arrays["logits"] * 0 + 1e30), "out-of-range"),
        ("uplink", lambda p, other: altered(p, features=p.arrays["features"] * 0 + 7e4), "out-of-range"),  # > fp16
        ("uplink", lambda p, other: altered(p, features=p.arrays["features"][:, :-1]), "shape"),
        ("uplink", lambda p, other: altered(p, **{k: a[1:] for k, a in p.arrays.items()}), "shape"),  # one short
        ("uplink", lambda p, other: altered(p, ids=p.arrays["ids"].astype(np.int32)), "dtype"),
        ("uplink", lambda p, other: altered(p, logits=None), "missing-array"),
        ("uplink", lambda p, other: altered(p, labels=p.arrays["labels"] * 0 - 1), "out-of-range"),
        ("uplink", lambda p, other: altered(p, labels=(p.arrays["labels"] + 1) % 10), "labels-disagree"),
    ],
)
def test_the_server_accepts_honest_messages_and_refuses_tampered_ones(honest_fedict, message, tamper, reason):
    server, hello, uplink, other = honest_fedict
    if message == "hello":
        check, payload = (lambda p: server.check_hello("client-1", p)), hello
    else:
        check, payload = (lambda p: server.check_uplink(1, "client-1", p)), uplink
    tampered = tamper(payload, other)
    if reason is None:
        check(tampered)
    else:
        with pytest.raises(UplinkRejected) as refused:
            check(tampered)
        assert refused.value.reason == reason
    assert server.uplink_schemas("client-9") == ()  # no hello, no uplink


# ------------------------------------------------------------------------------------------------
# End to end


def test_fedict_learns_on_digits(tmp_path):
    out = tmp_path / "fedict"
    settings = dict(DIGITS, models="fedict_c2", rounds=3)  # A^C_2: A^C_1 (GAP -> Linear) learns too slowly here
    summary = run(SimulationConfig(algo="fedict", out=str(out), **settings), progress=False)
    _, lines = load_run(out)
    assert summary["final_accuracy"] > lines[0]["accuracy"] + 0.15
    server_ce = [line["server"]["server_ce"] for line in lines[1:]]
    assert server_ce[-1] < server_ce[0]  # the server learns from the uploaded features


WATCH = dict(
    dataset="watch",
    clients=4,
    rounds=2,
    partition="natural",
    models="fedict_fc6,fedict_fc7,fedict_fc8",
    batch_size=32,
    lr=0.05,
)


def test_fedgkt_is_fedict_with_lam_mu_zero(tmp_path):
    a = run(SimulationConfig(algo="fedgkt", out=str(tmp_path / "gkt"), **WATCH), progress=False)
    b = run(
        SimulationConfig(algo="fedict", out=str(tmp_path / "ict"), params={"lam": 0, "mu": 0}, **WATCH), progress=False
    )
    lines_a, lines_b = load_run(tmp_path / "gkt")[1], load_run(tmp_path / "ict")[1]
    keys = ("accuracy", "client_accuracy", "bytes_up", "bytes_down", "server")
    assert [[line[k] for k in keys] for line in lines_a] == [[line[k] for k in keys] for line in lines_b]
    assert a["final_accuracy"] == b["final_accuracy"]


@pytest.mark.parametrize("params", [{}, {"profile": "reference", "lka": "balanced"}])
def test_fedict_learns_on_watch(params, tmp_path):
    summary = run(SimulationConfig(algo="fedict", out=str(tmp_path), params=params, **WATCH), progress=False)
    _, lines = load_run(tmp_path)
    assert summary["final_accuracy"] > lines[0]["accuracy"] + 0.1
    if params:  # reference: no KD in round 1, so no server logits go down before round 2
        assert lines[1]["bytes_down"] == 0 and lines[2]["bytes_down"] > 0


def test_clip_bounds_what_one_attacking_device_puts_into_the_servers_training(tmp_path):
    """client-0 sends every feature and logit at the schema's bound (9,990): with clip=3 the server
    scales each of its samples' vectors down to 3x the median norm of the round's uploads, and the
    honest devices' are left as they are (almost all: the metric is there only when any was)."""
    from edgefd.runtime.build import build
    from edgefd.runtime.config import SimulationConfig

    def first_round(**settings):
        config = SimulationConfig(
            algo="fedict",
            clients=4,
            rounds=1,
            samples_per_client=30,
            partition="iid",
            threads=1,
            out=str(tmp_path / str(len(settings))),
            **settings,
        )
        sim = build(config)
        sim.federation.start()
        return sim, sim.federation.run_round(1)

    sim, record = first_round(attack="max-in-bounds", params={"clip": 3.0})
    assert record.rejected == {}
    attacker_samples = len(sim.clients["client-0"].data.train_y)
    # the attacker's vectors, features and logits: all of them; an honest sample's rarely
    assert 2 * attacker_samples <= record.server["clipped"] <= 2 * attacker_samples + 6
    _, clean = first_round(params={"clip": 3.0})
    assert clean.server.get("clipped", 0) <= 6
    _, off = first_round(attack="max-in-bounds")  # the default: off, the paper's
    assert "clipped" not in off.server
    with pytest.raises(ValueError, match="param clip"):
        make_params(get_method("fedict").params, {"clip": -1})
