"""The chores methods share: the robust aggregators and the bounds on declared weights and on
updates (the others are tested with their methods)."""

import numpy as np
import pytest
import torch

from edgefd.algorithms.fd import FDParams, FDServer
from edgefd.algorithms.fedavg import FedAvgParams
from edgefd.algorithms.toolkit import (
    UPDATE_CAP,
    WEIGHT_CAP,
    bounded_updates,
    capped_label_counts,
    capped_weights,
    gather_robust,
    median_of_others,
    robust_mean,
    robust_states,
)
from edgefd.protocol import Payload


def test_median_and_trimmed_mean_ignore_one_extreme_client():
    honest = np.array([[1.0, 2.0], [1.2, 2.2], [0.8, 1.8], [1.1, 2.1]])
    values = np.vstack([honest, [[1e3, -1e3]]])
    assert np.allclose(robust_mean(values, "median"), [1.1, 2.0])
    # 5 clients, trim 0.2: one dropped at each end of every coordinate
    assert np.allclose(robust_mean(values, "trimmed"), [(1.0 + 1.1 + 1.2) / 3, (1.8 + 2.0 + 2.1) / 3])
    with pytest.raises(ValueError, match="needs at least 3"):  # of two, neither can outvote the other
        robust_mean(values[:2], "median")
    with pytest.raises(ValueError, match="how must be"):
        robust_mean(values, "mode")


def test_robust_states_keep_each_entrys_dtype():
    states = [{"w": np.full(3, v, np.float32), "n": np.array(k, np.int64)} for v, k in [(1, 4), (2, 5), (90, 6)]]
    combined = robust_states(states, "median")
    assert combined["w"].dtype == np.float32 and np.allclose(combined["w"], 2.0)
    assert combined["n"].dtype == np.int64 and int(combined["n"]) == 5


@pytest.mark.parametrize("aggregator", ["median", "trimmed"])
def test_fd_robust_rows_use_only_the_clients_that_hold_each_label(aggregator):
    server = FDServer.__new__(FDServer)  # the arithmetic needs no context beyond the class count
    server.num_classes, server.params = 2, FDParams(aggregator=aggregator)
    server.global_logits = server.global_counts = None

    def uplink(name, logits, counts):
        return Payload("knowledge", {"logits": np.array(logits, np.float32), "counts": np.array(counts)})

    uplinks = {
        "a": uplink("a", [[1, 0], [0, 0]], [3, 0]),  # holds no sample of label 1: left out of its row
        "b": uplink("b", [[2, 0], [0, 5]], [1, 2]),
        "c": uplink("c", [[3, 0], [0, 6]], [1, 2]),
        "d": uplink("d", [[900, 0], [0, 7]], [9, 2]),  # the poisoner: its 9 samples buy nothing
    }
    server.aggregate(1, uplinks)
    # label 0 from 1, 2, 3, 900: the median is 2.5, and the trimmed mean drops 1 and 900
    assert server.global_logits[0, 0] == pytest.approx(2.5)
    assert server.global_logits[1, 1] == pytest.approx(6.0)
    assert server.global_counts.tolist() == [14, 6]
    with pytest.raises(ValueError, match="trim"):
        FDParams(trim=0.5)


def test_fd_gives_no_teacher_for_a_label_fewer_than_three_clients_hold():
    """Of one honest row and one poisoned, no statistic can tell which is which: such a label goes
    down with count 0 (no teacher), and the round's metrics count it."""
    server = FDServer.__new__(FDServer)
    server.num_classes, server.params = 2, FDParams(aggregator="median")
    rows = {"a": ([[1, 0], [0, 4]], [2, 3]), "b": ([[2, 0], [0, 0]], [2, 0]), "c": ([[3, 0], [0, 0]], [2, 0])}
    rows["d"] = ([[9e3, 0], [0, -9e3]], [1, 1])  # label 1: only a and the poisoner
    uplinks = {
        cid: Payload("knowledge", {"logits": np.array(l, np.float32), "counts": np.array(c)})
        for cid, (l, c) in rows.items()
    }
    metrics = server.aggregate(1, uplinks)
    assert server.global_logits[0, 0] == pytest.approx(2.5)
    assert server.global_counts.tolist() == [7, 0] and not server.global_logits[1].any()
    assert metrics["below_quorum"] == 1.0 and metrics["labels_covered"] == 1.0


def test_gather_robust_is_the_robust_mean_of_the_named_rows():
    generator = torch.Generator().manual_seed(0)
    values = torch.randn(40, 5, generator=generator)
    neighbours = torch.randint(-1, 40, (30, 7), generator=generator)
    neighbours[0] = -1  # names none
    neighbours[1, 2:] = -1  # names two: too few
    for how in ("median", "trimmed"):
        got = gather_robust(values, neighbours, how)
        for row, named in enumerate(neighbours.tolist()):
            rows = [i for i in named if i >= 0]
            expected = robust_mean(values[rows].numpy(), how) if len(rows) >= 3 else np.zeros(5)
            assert np.allclose(got[row].numpy(), expected, atol=1e-6), (how, row)
    with pytest.raises(ValueError, match="how must be"):
        gather_robust(values, neighbours, "mode")


def test_a_declared_count_weighs_at_most_the_cap_times_the_others_median():
    """The issue's free rider: 1,437 samples declared beside two honest 479s is held to 2 x 479, so it
    weighs no more than the two honest devices together; the honest counts stay as declared."""
    assert WEIGHT_CAP == 2.0
    np.testing.assert_array_equal(capped_weights([479, 479, 1437], WEIGHT_CAP), [479, 479, 958])
    np.testing.assert_array_equal(capped_weights([1437, 479, 479], WEIGHT_CAP), [958, 479, 479])  # any position
    np.testing.assert_array_equal(capped_weights([100, 1000], WEIGHT_CAP), [100, 200])  # the bound from the other
    honest = [412.0, 531.0, 480.0, 650.0]  # within 2x of each other's median: exactly as declared
    assert capped_weights(honest, WEIGHT_CAP).tolist() == honest
    np.testing.assert_array_equal(capped_weights([479, 479, 1437], 0), [479, 479, 1437])  # 0: the paper's weights
    np.testing.assert_array_equal(capped_weights([1437], WEIGHT_CAP), [1437])  # alone: no others to bound it
    np.testing.assert_array_equal(capped_weights([0, 0, 50], WEIGHT_CAP), [0, 0, 50])  # others without data
    with pytest.raises(ValueError, match="weight_cap"):
        FedAvgParams(weight_cap=0.5)


def test_label_counts_over_the_cap_are_scaled_down_keeping_their_proportions():
    honest = np.array([30, 10, 0, 8])  # 48 in all
    liar = np.array([90, 60, 0, 0])  # 150 in all: held to 96
    capped = capped_label_counts([honest, honest, liar], WEIGHT_CAP)
    assert capped[0] is honest and capped[1] is honest  # unchanged, not copied
    assert capped[2].dtype == np.int64 and capped[2].tolist() == [57, 38, 0, 0]  # floor(90 * 96/150), ...
    assert capped[2].sum() <= WEIGHT_CAP * 48


def _state(weight: float, bias: float, batches: int = 7) -> dict[str, np.ndarray]:
    return {
        "w": np.full((2, 2), weight, dtype=np.float32),
        "b": np.full(2, bias, dtype=np.float32),
        "num_batches_tracked": np.array(batches, dtype=np.int64),
    }


def test_an_update_is_held_to_the_cap_times_the_others_median_norm():
    """A max-in-bounds device's weights (every value at the schema's bound) move the global model by
    no more than twice an honest step; the honest updates are returned as they came."""
    global_state = _state(0.0, 0.0)
    honest = [_state(0.1, 0.0), _state(0.2, 0.0), _state(0.3, 0.0)]  # update norms 0.2, 0.4, 0.6
    attacker = _state(-0.999e6, 0.999e6, batches=10**6)
    out, clipped = bounded_updates([*honest, attacker], global_state, UPDATE_CAP)
    assert clipped == 1 and UPDATE_CAP == 2.0
    for sent, kept in zip(honest, out):
        assert kept is sent
    norm = np.sqrt(sum(float(np.square(out[3][name].astype(np.float64)).sum()) for name in ("w", "b")))
    assert norm == pytest.approx(2 * 0.4, rel=1e-6)  # twice the median of the other three
    assert out[3]["w"].dtype == np.float32 and out[3]["w"][0, 0] < 0 < out[3]["b"][0]  # its direction kept
    assert out[3]["num_batches_tracked"] == 10**6  # integer buffers are not updates
    # 0 is the paper's average: nothing bounded; a single client has no others to bound it
    assert bounded_updates([*honest, attacker], global_state, 0) == ([*honest, attacker], 0)
    assert bounded_updates([attacker], global_state, UPDATE_CAP)[1] == 0
    with pytest.raises(ValueError, match="update_cap"):
        FedAvgParams(update_cap=0.5)


def test_a_bounded_update_is_measured_from_the_global_model_not_from_zero():
    global_state = _state(5.0, 5.0)
    out, clipped = bounded_updates([_state(5.1, 5.0), _state(5.1, 5.0), _state(50.0, 5.0)], global_state, 2.0)
    assert clipped == 1
    np.testing.assert_allclose(out[2]["w"], 5.2, rtol=1e-6)  # its norm 0.4 = 2 x 0.2, spread over its 4 entries


def test_the_median_of_the_others_is_that_of_each_entry_left_out():
    """One sort instead of a median per entry: the same numbers as leaving each entry out and taking
    np.median of the counted rest (NaN where nothing is left), ties and uncounted entries included."""
    rng = np.random.default_rng(0)
    for _ in range(500):
        n = int(rng.integers(1, 9))
        values = rng.integers(0, 5, n) * rng.choice([1.0, 0.5])
        counted = rng.random(n) < 0.7
        expected = [np.median(rest) if len(rest := values[counted & (np.arange(n) != k)]) else np.nan for k in range(n)]
        np.testing.assert_array_equal(median_of_others(values, counted), expected)
