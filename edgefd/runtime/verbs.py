"""The verbs of a run, and the one client-side dispatcher that answers them.

The server drives a run by sending each client a :class:`~edgefd.protocol.message.Message` whose
verb says what to do; the client answers with a message of the same verb, round and step. The
table :data:`VERBS` holds, for every verb, the client's handler and what the channels need to
know to carry it (how long to wait, whether its bytes are the method's communication, whether the
client sends on it). Every channel hands a client's messages to :class:`ClientApp`, so a
simulated client, a device over MQTT and a later channel route each verb the same way; the broker
ACL (``edgefd.deploy.acl``) is generated from the same table.

    verb      sent by the loop                  the client's handler
    hello     at the start                      role.hello()                  -> its one-time upload
    train     each round (most methods)         role.train_round(r, content)  -> its uplink
    steps     each round (step exchange)        role.train_steps(r): each request goes up as a
                                                ``step`` message, and the loop's answer comes back
                                                as one (an answer without content: refused)
    reply     after aggregation                 role.receive_reply(r, content) -> nothing
    evaluate  every eval round                  role.evaluate(content)        -> its scores
    stop      at the end                        nothing (a device process exits)

A method that needs another server-to-client message adds one :class:`Verb` (``register_verb``)
with the :class:`Phase` of the round it is sent in, a ``server_content`` that builds its content
from the server role, and a handler for the client role; the loop sends every such verb in its
phase, the channels carry it, the device runtime takes it, and the ACL lets clients answer it,
without another change.

Precision is applied here and in the loop, never by a method: every content a role produces is
put at the run's wire precision (``--precision``) on the arrays the role names as knowledge.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgefd.protocol import Payload, at_precision
from edgefd.protocol.message import SERVER, Message
from edgefd.protocol.payload import Scalar

# Types only: the MQTT flags that `edgefd server --help` lists reach this table, and torch is slow to import.
if TYPE_CHECKING:
    import torch

    from edgefd.algorithms.base import ClientRole, ServerRole
    from edgefd.runtime.attack import Poisoning

__all__ = [
    "SERVER",
    "STEP",
    "VERBS",
    "Ask",
    "ClientApp",
    "Deadline",
    "Phase",
    "StepRefused",
    "UnknownVerb",
    "Verb",
    "Wait",
    "exchange_done",
    "register_verb",
    "scores_of",
    "unregister_verb",
    "verb",
    "verbs_in",
]

Ask = Callable[[Message], Message]
"""How a client asks the server during its work and waits for the answer (a ``step``)."""
Handler = Callable[["ClientApp", Message, "Ask | None"], "Payload | None"]
ServerContent = Callable[["ServerRole", int, str], "Payload | None"]

STEP = "step"
"""The verb of a client's request during its work (``steps``), and of the server's answer to it."""

SCORES_KIND = "metrics"
"""The kind of an evaluate answer's content: the client's scores as float scalars."""


class Wait(enum.Enum):
    """Which of a deployment's timeouts a verb's answers are waited for."""

    HELLO = "hello"
    ROUND = "round"
    EVAL = "eval"


class Phase(enum.Enum):
    """Where in a round the loop sends a method's own server-to-client verb."""

    BEFORE_TRAINING = "before-training"
    """To each selected client before the round's training (what the client needs to train that
    is not the downlink); a device takes it only for a round it has not trained yet."""
    AFTER_AGGREGATION = "after-aggregation"
    """To each client whose uplink the server aggregated, learnt from before the round is evaluated
    (FedD2S's S2C knowledge); a device takes it only for the round it trained last."""


@dataclass(frozen=True)
class Deadline:
    """How long a channel waits for the answers of one send (the seconds are the channel's own:
    a deployment's settings; a simulation does not wait)."""

    wait: Wait
    skip_offline: bool = False
    """Stop waiting once every client still missing is offline."""
    steps: int | None = None
    """The most requests a client makes during its work (``ServerRole.max_steps``, set by the loop
    for each client of a verb that ``asks``): a deployment's hard deadline for its work grows with
    it, up to a grace of the deployment's own that no count buys past (None: the requests get no
    time of their own)."""


@dataclass(frozen=True)
class Verb:
    """One verb: its client handler and how channels carry it."""

    name: str
    handle: Handler | None
    """The client's handler; None for a verb only clients send (``step``: a request to the server)."""
    deadline: Deadline = Deadline(Wait.ROUND)
    counted: bool = True
    """Its contents are the method's communication and count in the round's bytes (an evaluation
    is the run's measurement, and is not counted)."""
    trains: bool = False
    """A round's training: answered once per round, and the client's last trained round moves."""
    phase: Phase | None = None
    """The phase of a round in which the loop sends this verb (None: the loop's own verbs, which
    it sends itself)."""
    server_content: ServerContent | None = None
    """With a ``phase``: the content for one client (``server_content(server, round, client_id)``);
    the verb is sent to each client of its phase for which this is not None."""
    answers: bool = True
    """The client answers it (False: one way, the client only reads it)."""
    once: bool = False
    """Sent once a run (the hello): a device keeps its answer for the whole run."""
    evaluates: bool = False
    """Its answer is the client's scores: a device keeps the last beside its saved model, and
    takes one that comes during its steps as the server having gone on without them."""
    ends_run: bool = False
    """The run is over: a device saves its model and exits."""
    asks: bool = False
    """The client asks the server during its work (``step`` requests, each answered before it
    goes on): a channel brings each request back to the loop as a message, the loop's answer goes
    to the client as one, and the work's last message is its answer."""
    small_answer: bool = False
    """Its answer is a few scalars or nothing (a channel caps it small, whatever the method's size)."""
    check_answer: Callable[[Payload | None], None] | None = None
    """ValueError for an answer's content that the server must not take (it is rejected on arrival)."""
    refused_as: str = "bad-answer"
    """The reason an answer that ``check_answer`` refuses is counted under."""


class UnknownVerb(ValueError):
    """A message whose verb is not in the table."""


class StepRefused(ValueError):
    """The server answered a step request without content: it refused it (past the steps the
    client's declared data makes, or a request it does not take), and the client's work of the
    round ends unanswered, wherever the client runs."""


class ClientApp:
    """One client's side of a run: every verb a server sends, routed to its handler. Used by every
    channel, so a client answers the same wherever it runs."""

    def __init__(
        self,
        role: ClientRole,
        full_test: tuple[torch.Tensor, torch.Tensor] | None = None,
        poisoning: Poisoning | None = None,
    ) -> None:
        """``full_test`` (x, y): also score the client on it (the whole test set) when evaluated.
        ``poisoning``: an attacking client's (edgefd.runtime.attack), applied to its training
        messages (uplinks and step requests)."""
        self.role = role
        self.full_test = full_test
        self.poisoning = poisoning

    @property
    def client_id(self) -> str:
        return self.role.client_id

    def handle(self, message: Message, ask: Ask | None = None) -> Message:
        """The answer to ``message``; ``ask`` carries the client's own requests during its work
        (needed by ``steps``). UnknownVerb for a verb the table does not hold or a client is not sent."""
        spec = verb(message.verb)
        if spec.handle is None:
            raise UnknownVerb(f"{message.verb!r} is sent by clients, not to them")
        return message.answer(spec.handle(self, message, ask))

    def at_precision(self, content: Payload | None) -> Payload | None:
        """``content`` at the run's wire precision on the role's knowledge arrays."""
        return None if content is None else at_precision(content, self.role.context.precision, self.role.knowledge)

    def training_message(self, content: Payload | None) -> Payload | None:
        """An uplink or a step request, as the client sends it: poisoned if it attacks, then at the
        run's wire precision."""
        return self.at_precision(content if self.poisoning is None else self.poisoning.apply(content))


def exchange_done(apps: Iterable[ClientApp]) -> None:
    """Every client of ``apps`` (the clients of one process) has answered its message of one
    exchange: each method lets go of what its clients shared for it (``ClientRole.done_sharing``)."""
    done: set[type] = set()
    for app in apps:
        if type(app.role) not in done:  # once a method (a class's hook)
            done.add(type(app.role))
            app.role.done_sharing()


def server_at_precision(role: ServerRole, content: Payload | None) -> Payload | None:
    """The server's ``content`` at the run's wire precision on its knowledge arrays."""
    return None if content is None else at_precision(content, role.context.precision, role.knowledge)


# ---------------------------------------------------------------------- the handlers
def _hello(app: ClientApp, message: Message, ask: Ask | None) -> Payload | None:
    return app.at_precision(app.role.hello())


def _train(app: ClientApp, message: Message, ask: Ask | None) -> Payload | None:
    return app.training_message(app.role.train_round(message.round, message.content))


def _steps(app: ClientApp, message: Message, ask: Ask | None) -> Payload | None:
    """Drive the role's step generator: each request goes to the server as step 1, 2, ... and the
    server's answer to it goes back in; the generator's return value is the round's uplink."""
    if ask is None:
        raise ValueError("steps: this channel gave the client no way to ask the server")
    steps = app.role.train_steps(message.round)
    answer: Payload | None = None
    step = 0
    while True:
        try:
            # next() is send(None), the only value a generator can be started with.
            request = next(steps) if answer is None else steps.send(answer)
        except StopIteration as finished:
            return app.training_message(finished.value)
        step += 1
        content = app.training_message(request)
        answered = ask(Message(STEP, app.client_id, SERVER, message.round, content, step, message.run))
        if answered.content is None:
            raise StepRefused(f"step {step} of round {message.round}: the server refused the request")
        answer = answered.content


def _reply(app: ClientApp, message: Message, ask: Ask | None) -> Payload | None:
    if message.content is None:
        raise ValueError(f"reply of round {message.round} without content")
    app.role.receive_reply(message.round, message.content)
    return None


def _evaluate(app: ClientApp, message: Message, ask: Ask | None) -> Payload | None:
    scores: dict[str, Scalar] = {"accuracy": float(app.role.evaluate(message.content)["accuracy"])}
    if app.full_test is not None:
        scores["accuracy_full"] = float(app.role.evaluate(message.content, app.full_test)["accuracy"])
    return Payload(SCORES_KIND, scalars=scores)


def _stop(app: ClientApp, message: Message, ask: Ask | None) -> Payload | None:
    return None


def scores_of(content: Payload | None) -> dict[str, float]:
    """The scores an evaluate answer carries: accuracies in [0, 1], or NaN (a client with no test
    data). ValueError for anything else (text, Inf, 1.7): it would crash or skew the round's mean."""
    if content is None or content.kind != SCORES_KIND:
        raise ValueError(f"an evaluate answer needs {SCORES_KIND!r} content, got {content and content.kind!r}")
    scores = {}
    for name in ("accuracy", "accuracy_full"):
        value = content.scalars.get(name)
        if value is None and name != "accuracy":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"an evaluate answer needs a numeric {name}, got {value!r}")
        if not (math.isnan(value) or 0.0 <= value <= 1.0):
            raise ValueError(f"{name} {value!r} is outside [0, 1]")
        scores[name] = float(value)
    return scores


def _check_scores(content: Payload | None) -> None:
    scores_of(content)


VERBS: dict[str, Verb] = {}


def register_verb(spec: Verb) -> Verb:
    """Add a verb to the table (a name already there is an error: verbs are the wire's words)."""
    if spec.name in VERBS:
        raise ValueError(f"verb {spec.name!r} is registered already")
    if (spec.phase is None) != (spec.server_content is None):
        raise ValueError(f"verb {spec.name!r}: a phase needs a server_content, and a server_content a phase")
    VERBS[spec.name] = spec
    return spec


def unregister_verb(name: str) -> None:
    """Remove a verb that `register_verb` added (a test's, or a plugin's that is unloaded); the
    loop's own verbs stay."""
    if name in _LOOP_VERBS:
        raise ValueError(f"verb {name!r} is one of the loop's own and cannot be removed")
    if VERBS.pop(name, None) is None:
        raise UnknownVerb(f"unknown verb {name!r} (known: {', '.join(VERBS)})")


def verb(name: str) -> Verb:
    try:
        return VERBS[name]
    except KeyError:
        raise UnknownVerb(f"unknown verb {name!r} (known: {', '.join(VERBS)})") from None


def verbs_in(phase: Phase) -> list[Verb]:
    """The verbs the loop sends in ``phase`` of a round, in the table's order."""
    return [spec for spec in VERBS.values() if spec.phase is phase]


register_verb(Verb("hello", _hello, Deadline(Wait.HELLO), once=True))
register_verb(Verb("train", _train, trains=True))
register_verb(Verb("steps", _steps, trains=True, asks=True))
register_verb(Verb(STEP, None))
register_verb(
    Verb(
        "reply",
        _reply,
        phase=Phase.AFTER_AGGREGATION,
        server_content=lambda server, round, cid: server.reply(round, cid),
        small_answer=True,
    )
)
register_verb(
    Verb(
        "evaluate",
        _evaluate,
        Deadline(Wait.EVAL, skip_offline=True),
        counted=False,
        small_answer=True,
        check_answer=_check_scores,
        refused_as="bad-accuracy",
        evaluates=True,
    )
)
register_verb(Verb("stop", _stop, counted=False, answers=False, ends_run=True))
_LOOP_VERBS = frozenset(VERBS)
