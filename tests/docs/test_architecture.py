"""docs/ARCHITECTURE.md's round diagram is the round loop's: the verbs it names are the ones the loop
sends, the server hooks it names are the ones the loop calls, and its notes open the loop's phases,
all in the loop's order.

The code side is taken from the code, not typed here: a one-client run of the loop on a toy method,
once with a round uplink and once with an exchange during training, records every message the
channel carries (its direction and verb), every call the loop makes on the server role and each
phase it enters."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pytest
from doc_pages import REPO, blocks

from edgefd.algorithms.base import ClientRole, ServerRole
from edgefd.algorithms.schema import ArraySpec, MessageSchema
from edgefd.protocol import Payload
from edgefd.protocol.message import SERVER, Message
from edgefd.runtime import verbs
from edgefd.runtime.channel import InProcessChannel
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.loop import Federation
from edgefd.runtime.transport import InProcessTransport

PAGE = REPO / "docs" / "ARCHITECTURE.md"
LOOP, SERVER_ROLE, CLIENT = "F", "S", "C"
"""The diagram's participants: the round loop, the method's server role, a client."""

PHASES = ("start", "run_round", "stop")
"""The loop's phases (`Federation`'s methods), which the diagram's notes open in this order: round 0,
a round, the end."""
Event = tuple[str, str]
"""("down" | "up", verb): a message the channel carries; ("call", hook): the loop calls the server
role; ("phase", name): the loop enters one of its `PHASES`."""

_ARROW = re.compile(r"(?P<src>\w+)\s*(?P<arrow>--?(?:>>|>|x|\)))\s*(?P<dst>\w+)\s*:\s*(?P<label>.*)")
_OTHER = re.compile(r"sequenceDiagram|autonumber|participant \w+ as .+|Note (?:over|left of|right of) [\w,]+: .+")


@dataclass
class Step:
    event: Event
    branches: dict[int, int] = field(default_factory=dict)
    """The alt blocks it sits in: alt number -> branch number (0 before the first ``else``)."""


@dataclass
class Diagram:
    participants: list[str]
    steps: list[Step]
    alts: list[int]
    """Each alt block's number of branches."""

    def path(self, branches: dict[int, int]) -> list[Event]:
        """The events of one way through the diagram (``branches``: alt number -> branch taken)."""
        return [s.event for s in self.steps if all(branches[alt] == b for alt, b in s.branches.items())]


def round_diagram(text: str) -> Diagram:
    """Every line of the sequence diagram read; a line that is none of the forms below fails the test,
    so that nothing in the diagram goes unchecked."""
    participants, steps, alts = [], [], []
    open_blocks: list[int | None] = []  # per open block: its alt number, or None (opt, loop)
    for raw in text.strip().splitlines():
        line = raw.strip()
        if not line or line.startswith("%%"):  # a blank line, a comment
            continue
        keyword = line.split(" ", 1)[0]
        if keyword in ("alt", "opt", "loop", "else", "end") and (keyword == "end" or " " in line):
            if keyword == "alt":
                alts.append(1)
                open_blocks.append(len(alts) - 1)
            elif keyword in ("opt", "loop"):
                open_blocks.append(None)
            elif keyword == "else":
                alt = open_blocks[-1]
                assert alt is not None, f"`{line}` outside an alt block"
                alts[alt] += 1
            else:
                open_blocks.pop()
            continue
        arrow = _ARROW.fullmatch(line)
        if arrow is None:
            assert _OTHER.fullmatch(line), f"a line of the diagram this test does not read: {line!r}"
            if keyword == "participant":
                participants.append(line.split()[1])
            elif keyword == "Note":
                notes = sum(s.event[0] == "phase" for s in steps)
                assert not open_blocks and notes < len(PHASES), f"a note that opens no phase of the loop: {line!r}"
                steps.append(Step(("phase", PHASES[notes])))
            continue
        src, dst, label = arrow["src"], arrow["dst"], arrow["label"]
        if {src, dst} == {LOOP, CLIENT}:
            verb = label.split(":", 1)[0].strip()
            assert re.fullmatch(r"\w+", verb), f"a message's label starts with its verb: {line!r}"
            event = ("down" if src == LOOP else "up", verb)
        elif (src, dst) == (LOOP, SERVER_ROLE):
            hook = re.match(r"(\w+)\(", label)
            assert hook, f"a call of the server role names its hook: {line!r}"
            event = ("call", hook[1])
        else:
            raise AssertionError(f"an arrow other than loop <-> client or loop -> server role: {line!r}")
        branches = {alt: alts[alt] - 1 for alt in open_blocks if alt is not None}
        steps.append(Step(event, branches))
    assert not open_blocks, "a block of the diagram is not closed"
    return Diagram(participants, steps, alts)


def page_diagram() -> Diagram:
    diagrams = [b.text for b in blocks(PAGE) if b.lang == "mermaid"]
    assert len(diagrams) == 1, "ARCHITECTURE.md has one Mermaid diagram: the round's messages"
    return round_diagram(diagrams[0])


# ---------------------------------------------------------------------- the loop, recorded
def _one() -> dict[str, np.ndarray]:
    return {"n": np.array([1], np.int64)}


def _schema(kind: str) -> tuple[MessageSchema, ...]:
    return (MessageSchema(kind, {"n": ArraySpec(("int64",), (1,))}),)


class Client(ClientRole):
    """Sends on every verb a client can: a hello, an uplink (from either way of training), one
    request during training; takes a reply."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.context = SimpleNamespace(precision="fp32")

    def hello(self) -> Payload:
        return Payload("hi", _one())

    def train_round(self, round, downlink):
        return Payload("up", _one())

    def train_steps(self, round):
        yield Payload("ask", _one())
        return Payload("up", _one())

    def receive_reply(self, round, reply) -> None:
        pass

    def evaluate(self, state=None, test=None):
        return {"accuracy": 0.5}


class Server(ServerRole):
    """Takes what `Client` sends, and replies to every aggregated client."""

    def __init__(self, step_exchange: bool) -> None:
        self.context = SimpleNamespace(precision="fp32")
        self.step_exchange = step_exchange

    def hello_schemas(self, client_id):
        return _schema("hi")

    def uplink_schemas(self, client_id):
        return _schema("up")

    def request_schemas(self, client_id):
        return _schema("ask")

    def downlink(self, round, client_id):
        return Payload("down", _one())

    def answer(self, round, client_id, request):
        return Payload("told", _one())

    def aggregate(self, round, uplinks):
        return {}

    def reply(self, round, client_id):
        return Payload("re", _one())


class Calls:
    """The server role as the loop sees it: every hook the loop calls is recorded (not the ones a
    hook calls itself, such as ``check_uplink`` calling ``uplink_schemas``)."""

    def __init__(self, role: ServerRole, events: list[Event]) -> None:
        self._role, self._events = role, events

    def __getattr__(self, name: str):
        value = getattr(self._role, name)
        if not callable(value):
            return value

        def call(*args, **kwargs):
            self._events.append(("call", name))
            return value(*args, **kwargs)

        return call


class Carried(InProcessTransport):
    """The in-process transport, recording each message it carries."""

    def __init__(self, events: list[Event]) -> None:
        super().__init__()
        self.events = events

    def carry(self, message: Message) -> Message:
        self.events.append(("down" if message.sender == SERVER else "up", message.verb))
        return super().carry(message)


class Phased(Federation):
    """The loop, recording each of its phases as it enters it."""

    events: list[Event]

    def start(self):
        self.events.append(("phase", "start"))
        return super().start()

    def run_round(self, round):
        self.events.append(("phase", "run_round"))
        return super().run_round(round)

    def stop(self):
        self.events.append(("phase", "stop"))
        return super().stop()


def loop_events(step_exchange: bool) -> list[Event]:
    """What the loop sends and calls in a run of one round with one client (and a score of the
    server's own models, as a simulation's)."""
    events: list[Event] = []
    server = Calls(Server(step_exchange), events)
    channel = InProcessChannel({"c0": Client("c0")}, Carried(events))
    federation = Phased(
        server, channel, SimulationConfig(rounds=1).loop_config(), np.random.default_rng(0), lambda models: {}
    )
    federation.events = events
    federation.run()
    return events


# ---------------------------------------------------------------------- the checks
def test_the_diagram_has_the_loop_the_server_role_and_a_client_the_loops_phases_and_one_choice_of_training():
    diagram = page_diagram()
    assert diagram.participants == [SERVER_ROLE, LOOP, CLIENT]
    assert [s.event for s in diagram.steps if s.event[0] == "phase"] == [("phase", name) for name in PHASES]
    assert diagram.alts == [2]  # a round uplink, or an exchange during training


@pytest.mark.parametrize(("branch", "step_exchange"), [(0, False), (1, True)])
def test_the_diagram_sends_and_calls_what_the_loop_does_in_its_order(branch, step_exchange):
    assert page_diagram().path({0: branch}) == loop_events(step_exchange)


def test_the_diagram_names_every_verb_of_the_table_and_no_other():
    named = {verb for kind, verb in (s.event for s in page_diagram().steps) if kind in ("down", "up")}
    sent = {verb for kind, verb in loop_events(False) + loop_events(True) if kind in ("down", "up")}
    own = {
        name for name, spec in verbs.VERBS.items() if spec.handle is None or spec.handle.__module__ == verbs.__name__
    }
    assert named == sent == own  # the table's own verbs; a method's own (register_verb) are not the loop's


def test_each_step_of_the_diagram_has_its_sentence():
    text = PAGE.read_text()
    after = text[text.index("```mermaid") :].split("```", 2)[2]
    section = after.split("\n## ", 1)[0]
    numbers = [int(n) for n in re.findall(r"^(\d+)\. ", section, re.M)]
    arrows = [s for s in page_diagram().steps if s.event[0] != "phase"]  # what autonumber numbers
    assert numbers == list(range(1, len(arrows) + 1))


def test_the_layers_table_is_the_import_contracts():
    """The page's table of layers lists the parts of pyproject.toml's first contract, in its order."""
    import tomllib

    contract = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    expected = [sorted(part.strip() for part in layer.split("|")) for layer in contract["layers"]]
    rows = re.findall(r"^\| (\d) \| (.+?) \| .+ \|$", PAGE.read_text(), re.M)
    table = [sorted(re.findall(r"`(\w+)`", parts)) for _, parts in rows]
    assert table == expected, "docs/ARCHITECTURE.md's layers differ from pyproject.toml's first contract"
