"""The round loop: sampling fraction, stragglers, evaluation schedule, determinism."""

from dataclasses import asdict
from types import SimpleNamespace

import numpy as np
import pytest

from edgefd.algorithms.base import ClientRole, ServerRole
from edgefd.algorithms.schema import ArraySpec, MessageSchema
from edgefd.protocol import Payload
from edgefd.runtime.channel import InProcessChannel
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.loop import Federation, LoopConfig
from edgefd.runtime.scores import SUSPECT_EVALUATIONS


class EchoClient(ClientRole):
    """Uploads the round number it was sent, plus one."""

    def __init__(self, client_id):
        self.client_id = client_id
        self.context = SimpleNamespace(precision="fp32")
        self.rounds_trained = []

    def train_round(self, round, downlink):
        self.rounds_trained.append(round)
        return Payload("echo", {"v": downlink.arrays["v"] + 1})

    def evaluate(self, state=None):
        return {"accuracy": len(self.rounds_trained) / 10}


class CollectServer(ServerRole):
    def __init__(self):
        self.context = SimpleNamespace(precision="fp32")
        self.received = {}

    def downlink(self, round, client_id):
        return Payload("echo", {"v": np.array([round], np.int64)})

    def uplink_schemas(self, client_id):
        return [MessageSchema("echo", {"v": ArraySpec(("int64",), (1,), 1, None)})]

    def aggregate(self, round, uplinks):
        self.received[round] = {cid: int(p.arrays["v"][0]) for cid, p in uplinks.items()}
        return {"arrived": float(len(uplinks))}


def loop_config(**settings) -> LoopConfig:
    """A run's round settings, made as a run makes them."""
    return SimulationConfig(**settings).loop_config()


def make(config, seed=0, clients=10):
    roles = {f"c{i}": EchoClient(f"c{i}") for i in range(clients)}
    server = CollectServer()
    return Federation(server, InProcessChannel(roles), config, np.random.default_rng(seed)), roles, server


def test_participation_selects_the_fraction_and_uplinks_reach_the_server():
    federation, roles, server = make(loop_config(rounds=4, participation=0.3))
    records = federation.run()[1:]  # after round 0, the hellos
    assert all(len(r.selected) == 3 for r in records)
    assert server.received[2] == {cid: 3 for cid in records[1].selected}
    assert sum(len(c.rounds_trained) for c in roles.values()) == 12
    assert records[0].bytes_up > 0 and records[0].bytes_down > 0


def test_stragglers_train_but_their_uplinks_are_discarded():
    federation, _, server = make(loop_config(rounds=20, straggler_rate=0.5))
    records = federation.run()[1:]  # after round 0, the hellos
    late = sum(len(r.late) for r in records)
    assert 60 < late < 140  # about half of 200
    for r in records:
        assert set(server.received[r.round]) == set(r.selected) - set(r.late)


def test_evaluation_schedule_and_same_seed_same_selection():
    first, _, _ = make(loop_config(rounds=5, participation=0.5, eval_every=2))
    second, _, _ = make(loop_config(rounds=5, participation=0.5, eval_every=2))
    a, b = first.run()[1:], second.run()[1:]
    assert [r.selected for r in a] == [r.selected for r in b]
    assert [r.accuracy is not None for r in a] == [False, True, False, True, True]
    other, _, _ = make(loop_config(rounds=5, participation=0.5), seed=1)
    assert [r.selected for r in other.run()[1:]] != [r.selected for r in a]


@pytest.mark.parametrize(
    "bad",
    [dict(rounds=0), dict(participation=0), dict(participation=1.5), dict(straggler_rate=1.0), dict(eval_every=0)],
)
def test_bad_loop_settings_are_rejected(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        loop_config(**bad)
    with pytest.raises(ValueError, match=next(iter(bad))):  # a LoopConfig made otherwise is checked too
        LoopConfig(**{**asdict(loop_config()), **bad})


class AskingClient(ClientRole):
    """Asks the server three times per round, then uploads nothing; records the answers."""

    def __init__(self, client_id):
        self.client_id = client_id
        self.context = SimpleNamespace(precision="fp32")
        self.answers = []

    def train_round(self, round, downlink):
        raise AssertionError("a step-exchange method is never asked for a round uplink")

    def train_steps(self, round):
        for step in range(3):
            answer = yield Payload("ask", {"v": np.array([step], np.int64)})
            self.answers.append(int(answer.arrays["log"][-1]))
        return None

    def evaluate(self, state=None):
        return {"accuracy": 0.5}


class LoggingServer(ServerRole):
    """Answers with everything it has been asked so far, in arrival order."""

    step_exchange = True

    def __init__(self):
        self.context = SimpleNamespace(precision="fp32")
        self.log = []

    def downlink(self, round, client_id):
        raise AssertionError("a step-exchange server prepares no round downlink")

    def request_schemas(self, client_id):
        return [MessageSchema("ask", {"v": ArraySpec(("int64",), (1,), 0, 2)})]

    def answer(self, round, client_id, request):
        self.log.append(int(client_id[1:]) * 10 + int(request.arrays["v"][0]))
        return Payload("log", {"log": np.array(self.log, np.int64)})

    def aggregate(self, round, uplinks):
        assert uplinks == {}
        return {}


def test_step_exchange_runs_clients_one_after_another_and_counts_every_message():
    roles = {f"c{i}": AskingClient(f"c{i}") for i in range(3)}
    server = LoggingServer()
    federation = Federation(server, InProcessChannel(roles), loop_config(rounds=2), np.random.default_rng(0))
    records = federation.run()[1:]  # after round 0, the hellos
    # client c0's three requests are answered before c1 asks, and so on, every round
    assert server.log == [0, 1, 2, 10, 11, 12, 20, 21, 22] * 2
    assert roles["c1"].answers == [10, 11, 12] * 2
    messages = federation.ledger.messages
    assert all(messages[(1, d, cid, "step")] == 3 for d in ("up", "down") for cid in roles)
    assert all(messages[(1, d, cid, "steps")] == 1 for d in ("up", "down") for cid in roles)
    assert records[0].bytes_up > 0 and records[0].bytes_down > records[0].bytes_up


def test_step_exchange_refuses_stragglers():
    with pytest.raises(ValueError, match="straggler_rate"):
        Federation(
            LoggingServer(),
            InProcessChannel({"c0": AskingClient("c0")}),
            loop_config(straggler_rate=0.2),
            np.random.default_rng(0),
        )


class LiarClient(EchoClient):
    """Sends -1 instead of the round number plus one: a payload that decodes, but is not an echo."""

    def train_round(self, round, downlink):
        self.rounds_trained.append(round)
        return Payload("echo", {"v": np.array([-1], np.int64)})


def test_an_uplink_that_does_not_fit_is_dropped_and_the_round_goes_on(caplog):
    roles = {"c0": EchoClient("c0"), "c1": LiarClient("c1"), "c2": EchoClient("c2")}
    server = CollectServer()
    federation = Federation(server, InProcessChannel(roles), loop_config(rounds=2), np.random.default_rng(0))
    records = federation.run()[1:]
    assert [r.rejected for r in records] == [{"c1": "out-of-range"}] * 2
    assert server.received[2] == {"c0": 3, "c2": 3}  # the others were aggregated
    assert all(r.late == [] for r in records)  # it answered in time; it was refused, not late
    assert "c1's uplink rejected: out-of-range" in caplog.text


class BlindLiar(LiarClient):
    """Every uplink refused from round 2 on, and no accuracy from round 2's evaluation on."""

    def train_round(self, round, downlink):
        return (LiarClient if round >= 2 else EchoClient).train_round(self, round, downlink)

    def evaluate(self, state=None):
        return {"accuracy": float("nan") if len(self.rounds_trained) >= 2 else 0.5}


def test_a_round_that_takes_no_uplink_or_gets_no_accuracy_is_recorded_as_lost(caplog):
    from edgefd.metrics.results import record_line, summarise

    roles = {"c0": BlindLiar("c0"), "c1": BlindLiar("c1")}
    federation = Federation(CollectServer(), InProcessChannel(roles), loop_config(rounds=2), np.random.default_rng(0))
    records = federation.run()
    assert [r.lost for r in records] == [[], [], ["uplinks", "evaluation"]]
    assert "round 2: no uplink taken from the 2 selected client(s)" in caplog.text
    assert "round 2: no client's accuracy came back" in caplog.text
    summary = summarise([record_line(record, 0, 0) for record in records])
    assert summary["lost_rounds"] == {"2": ["uplinks", "evaluation"]}
    assert summary["final_accuracy"] is None and summary["best_accuracy"] == 0.5  # not round 1's 0.5 as final


def test_a_step_request_that_does_not_fit_stops_at_the_check_before_the_server_sees_it(caplog):
    """The client gets an answer without content (refused), ends its round unanswered, as a device
    does, and the round's record says why; the run goes on."""

    class Overasking(AskingClient):
        def train_steps(self, round):
            yield Payload("ask", {"v": np.array([7], np.int64)})

    server = LoggingServer()
    federation = Federation(
        server, InProcessChannel({"c0": Overasking("c0")}), loop_config(rounds=1), np.random.default_rng(0)
    )
    federation.start()
    record = federation.run_round(1)
    assert server.log == []
    assert record.rejected == {"c0": "step 1: out-of-range"}
    assert record.late == ["c0"] and record.lost == ["uplinks"]
    assert "the server refused the request" in caplog.text


class ReplyingClient(EchoClient):
    """Takes the server's post-aggregation reply in; its accuracy says how many it has taken."""

    def __init__(self, client_id):
        super().__init__(client_id)
        self.replies = []

    def receive_reply(self, round, reply):
        self.replies.append((round, int(reply.arrays["sum"][0])))

    def evaluate(self, state=None):
        return {"accuracy": len(self.replies) / 10}


class ReplyingServer(CollectServer):
    """Answers each aggregated client with the sum of the round's uplinks."""

    def aggregate(self, round, uplinks):
        self.total = sum(int(p.arrays["v"][0]) for p in uplinks.values())
        return super().aggregate(round, uplinks)

    def reply(self, round, client_id):
        return Payload("sum", {"sum": np.array([self.total], np.int64)})


def test_a_reply_reaches_the_aggregated_clients_in_the_round_before_its_evaluation():
    roles = {f"c{i}": ReplyingClient(f"c{i}") for i in range(6)}
    server = ReplyingServer()
    config = loop_config(rounds=6, participation=0.5, straggler_rate=0.3)
    federation = Federation(server, InProcessChannel(roles), config, np.random.default_rng(0))
    records = federation.run()[1:]
    ledger = federation.ledger
    for record in records:
        aggregated = set(record.selected) - set(record.late)
        expected = (record.round, (record.round + 1) * len(aggregated))  # the sum of the round's uplinks
        replied = {cid for cid, role in roles.items() if expected in role.replies}
        assert replied == aggregated  # every aggregated client, and only they
        for cid in aggregated:  # the round's downlink and its reply, both counted in the round
            assert ledger.messages[(record.round, "down", cid, "train")] == 1
            assert ledger.messages[(record.round, "down", cid, "reply")] == 1
    assert any(r.late for r in records) and sum(len(r.replies) for r in roles.values()) > 0
    # the evaluation of a round sees that round's reply
    last = records[-1]
    assert last.client_accuracy == {cid: len(role.replies) / 10 for cid, role in roles.items()}


def test_a_method_without_replies_sends_nothing_after_aggregating():
    federation, _, _ = make(loop_config(rounds=2))
    federation.run()
    sent = {verb for (r, d, _, verb) in federation.ledger.messages if d == "down" and r}
    assert sent == {"train", "evaluate", "stop"}  # no reply


def test_a_simulated_client_whose_uplink_does_not_encode_misses_the_round(tmp_path, caplog):
    """A diverged model's NaN weights cannot be encoded: a device would send nothing (its error is
    logged) and miss the round; a simulated client does the same instead of ending the run."""
    from edgefd.runtime.build import build

    sim = build(SimulationConfig(algo="fd", clients=3, rounds=1, samples_per_client=40, threads=1, out=str(tmp_path)))
    role = sim.clients["client-1"]
    honest = role.train_round

    def diverged(round, downlink):
        payload = honest(round, downlink)
        return Payload(payload.kind, {**payload.arrays, "logits": payload.arrays["logits"] * np.nan})

    role.train_round = diverged
    sim.federation.start()
    record = sim.federation.run_round(1)
    assert record.late == ["client-1"] and record.rejected == {}
    assert "client-1's train cannot be sent" in caplog.text and "it misses the round" in caplog.text


class ScoringClient(EchoClient):
    """Reports the accuracies it is given, one per evaluation (round 0 first)."""

    def __init__(self, client_id, accuracies):
        super().__init__(client_id)
        self.accuracies = list(accuracies)

    def evaluate(self, state=None):
        return {"accuracy": self.accuracies.pop(0)}


def test_a_client_that_reports_a_perfect_score_every_round_moves_the_mean_not_the_median_and_is_flagged(caplog):
    """The spoofed score of issue 48: of three clients, one says 1.0 every round. The mean moves
    (0.375 -> 0.583 at the end), the median stays with the honest clients, and once the liar has
    stayed that far above them for SUSPECT_EVALUATIONS evaluations, every round's record names it,
    and only it."""
    honest = {"c0": [0.10, 0.25, 0.33, 0.35, 0.35], "c1": [0.126, 0.28, 0.36, 0.40, 0.40]}
    roles = {cid: ScoringClient(cid, values) for cid, values in honest.items()}
    roles["c2"] = ScoringClient("c2", [1.0] * 5)
    federation = Federation(CollectServer(), InProcessChannel(roles), loop_config(rounds=4), np.random.default_rng(0))
    records = federation.run()
    for record in records:
        scores = [values[record.round] for values in honest.values()]
        assert record.accuracy == pytest.approx((sum(scores) + 1.0) / 3)
        assert min(scores) <= record.accuracy_median <= max(scores)
    assert [list(record.suspect_scores) for record in records] == [[]] * (SUSPECT_EVALUATIONS - 1) + [["c2"]] * (
        len(records) - SUSPECT_EVALUATIONS + 1
    )
    assert records[-1].accuracy == pytest.approx(0.583, abs=1e-3)
    assert records[-1].accuracy_median == pytest.approx(0.40)
    assert "c2's score 1.000 looks wrong" in caplog.text


def test_an_honest_client_far_from_the_others_now_and_then_is_not_flagged():
    """Personalised scores on label-skewed splits swing (FedAvg's global model on two-class
    splits): a client far above the others in one round and below them in the next is honest."""
    roles = {
        "c0": ScoringClient("c0", [0.9, 0.1, 0.95, 0.2, 1.0]),
        "c1": ScoringClient("c1", [0.3, 0.5, 0.35, 0.5, 0.4]),
        "c2": ScoringClient("c2", [0.31, 0.52, 0.36, 0.55, 0.42]),
    }
    federation = Federation(CollectServer(), InProcessChannel(roles), loop_config(rounds=4), np.random.default_rng(0))
    assert all(record.suspect_scores == {} for record in federation.run())
