"""The one interface every federated method implements, and the registry of methods.

One module of a little over 500 lines: the registry checks each method against the interface (the
hooks its client implements, the schemas its server declares), and `edgefd.algorithms.base` is the
documented import path of both.

A method is two roles that exchange :class:`~edgefd.protocol.Payload` s in rounds:

    client role:  hello() -> Payload | None                  one-time upload (histogram, hashes, ...)
                  train_round(round, downlink) -> Payload | None
                  receive_reply(round, reply) -> None        (optional) learn from the server's reply
                  evaluate(state) -> dict                    accuracy on its local test split
    server role:  start(hellos) -> None
                  downlink(round, client_id) -> Payload | None
                  aggregate(round, uplinks) -> dict          update server state from what arrived
                  reply(round, client_id) -> Payload | None  (optional) the answer to an aggregated
                                                             uplink, delivered in the same round
                  evaluation_state(client_id) -> Payload | None
                  server_models() -> dict                    (diagnostic) models a simulation scores

A method whose client asks the server during local training (FedCache's faithful per-batch
exchange) sets ``ServerRole.step_exchange``; the loop then runs the selected clients one after
another, drives ``ClientRole.train_steps(round)`` (a generator that yields each request and
receives the reply) and answers each request with ``ServerRole.answer``.

A server role declares what its clients may send (``hello_schemas``, ``uplink_schemas``,
``request_schemas``); :func:`register_method` refuses a method whose client sends on a verb that its
server declares nothing for (:func:`check_schemas`), since every such message would be refused.

The runtime owns rounds, sampling, deadlines, seeds and transports; a method owns only its
maths and never sees the network. Every payload a role returns is encoded, counted and decoded
by the transport before the other side sees it, so roles must not share Python objects.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from edgefd.algorithms.schema import MessageSchema, UplinkRejected, check_payload
from edgefd.models import RESIDUAL_BLOCKS
from edgefd.protocol import Payload
from edgefd.training import (
    LocalTraining,
    LossFn,
    RoundOptimizer,
    TrainConfig,
    draw_batch_order,
    evaluate_model,
    for_method,
    load_state_arrays,
    make_optimizer,
    recomputing,
    train_epochs,
)


class ClientData:
    """What one client holds locally. Sample ids are stable: knowledge is keyed by them, never by
    batch position.

    The inputs may be kept as 8-bit images with the function that normalises them
    (``normalise``): ``train_x`` and ``test_x`` then give float32 tensors made on each access, the
    same numbers a float copy would hold. Fashion-MNIST's 60,000 training images take 47 MB as
    bytes against 188 MB as float32: what 20 simulated clients holding the whole set save."""

    def __init__(
        self,
        train_x: torch.Tensor,
        train_y: torch.Tensor,
        test_x: torch.Tensor,
        test_y: torch.Tensor,
        train_ids: torch.Tensor,
        num_classes: int,
        normalise: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        self._train_x = train_x
        self.train_y = train_y
        self._test_x = test_x
        self.test_y = test_y
        self.train_ids = train_ids
        """Global index of each training sample in the dataset's train split (int64)."""
        self.num_classes = num_classes
        self.normalise = normalise

    @property
    def train_x(self) -> torch.Tensor:
        """float32 training inputs (a new tensor per access when they are kept as 8-bit images:
        take it once per pass, not once per batch)."""
        return self._train_x if self.normalise is None else self.normalise(self._train_x)

    @property
    def test_x(self) -> torch.Tensor:
        """float32 test inputs, as ``train_x``."""
        return self._test_x if self.normalise is None else self.normalise(self._test_x)

    @property
    def num_train(self) -> int:
        """Training samples (without normalising them)."""
        return len(self.train_y)

    @property
    def input_bytes(self) -> int:
        """Bytes the inputs take in memory as they are kept (1 per pixel for 8-bit images)."""
        return self._train_x.nbytes + self._test_x.nbytes


@dataclass
class ClientContext:
    """Everything a client role is built from."""

    client_id: str
    model: nn.Module
    model_name: str
    data: ClientData
    train: TrainConfig
    rng: np.random.Generator
    """This client's own random stream (one per client: results do not depend on the order in
    which clients run)."""
    torch_generator: torch.Generator
    """The same stream for torch (batch order, dropout-free sampling)."""
    precision: str = "fp32"
    """Wire precision for knowledge arrays: "fp32", "fp16" or "int8"."""
    total_rounds: int = 1
    """Rounds in the run (schedules such as DFL's loss weight depend on it)."""


class ClientRole(ABC):
    """The part of a method that runs on a device.

    ``local_training`` says what the method's paper code does with the local optimiser (a new one
    every round, or one kept for the run) and the batch order (reshuffled every epoch, or one fixed
    permutation). The run may override both for every method alike (``--optimizer-lifecycle``,
    ``--batch-order``); ``context.train`` holds the resolved choice, ``batch_order`` the fixed
    permutation (None when reshuffling) and `round_optimizer` applies the lifecycle."""

    local_training: ClassVar[LocalTraining] = LocalTraining()
    knowledge: ClassVar[tuple[str, ...]] = ()
    """The float arrays of this role's payloads that are knowledge: the runtime sends them at the
    run's ``--precision`` (``edgefd.runtime.verbs``); every other array travels losslessly."""
    optimizer: RoundOptimizer
    """The local optimiser: each method builds it with :meth:`round_optimizer` in ``__init__``."""

    def __init__(self, context: ClientContext, params: Any) -> None:
        context = dataclasses.replace(context, train=for_method(context.train, self.local_training))
        self.context = context
        self.params = params
        self.client_id = context.client_id
        self.model = context.model
        self.data = context.data
        self.batch_order = draw_batch_order(context.data.num_train, context.train, context.torch_generator)

    def round_optimizer(
        self,
        parameters: Callable[[], Iterable[nn.Parameter]] | None = None,
        build: Callable[[Iterable[nn.Parameter], TrainConfig], torch.optim.Optimizer] = make_optimizer,
    ) -> RoundOptimizer:
        """The local optimiser under the run's lifecycle (of all the model's parameters by default)."""
        return RoundOptimizer(parameters or self.model.parameters, self.context.train, build)

    def train_local(self, loss_fn: LossFn) -> float:
        """The round's local epochs on this client's training data: ``loss_fn(logits, rows)`` of
        each mini-batch, stepped by ``self.optimizer`` (a :meth:`round_optimizer` the method
        built) in the run's batch order, the residual blocks' activations recomputed where the
        device asks (`TrainConfig.recompute_activations`). Returns the last epoch's mean loss."""
        train = self.context.train
        with recomputing(self.model, RESIDUAL_BLOCKS) if train.recompute_activations else nullcontext():
            return train_epochs(
                self.model,
                self.data.train_x,
                loss_fn,
                self.optimizer.for_round(),
                train,
                self.context.torch_generator,
                fixed_order=self.batch_order,
            )

    def hello(self) -> Payload | None:
        """One-time upload before round 1 (None: nothing to say)."""
        return None

    @classmethod
    def done_sharing(cls) -> None:
        """The clients of this method in this process have each answered one request: let go of
        what they share to answer it (FedCache's hash encoder, built once for every simulated
        client's hello). Whatever runs clients calls it after each exchange; most methods share
        nothing."""
        return None

    @abstractmethod
    def train_round(self, round: int, downlink: Payload | None) -> Payload | None:
        """Train locally with what the server sent, and return the uplink."""

    def receive_reply(self, round: int, reply: Payload) -> None:
        """Learn from the server's reply to this round's uplink, sent after aggregation in the same
        round (FedD2S's phase B); only for methods whose server returns one from
        :meth:`ServerRole.reply`. The round's evaluation sees what it changed."""
        raise NotImplementedError(f"{type(self).__name__} takes no reply after aggregation")

    def train_steps(self, round: int) -> Generator[Payload, Payload, Payload | None]:
        """Train locally while talking to the server: yield each request, receive the server's
        answer, and return the round's uplink (None: nothing more to say). Only for methods whose
        server sets ``step_exchange``."""
        raise NotImplementedError(f"{type(self).__name__} does not exchange during training")

    def evaluate(
        self, state: Payload | None = None, test: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> dict[str, float]:
        """Accuracy of this client's deliverable model on its local test split, or on ``test``
        (x, y) when given (the whole test set: FedZKT's paper metric).

        ``state`` is what :meth:`ServerRole.evaluation_state` returned for this client: a full
        model state for methods whose deliverable lives on the server (FedAvg's and DFL's global
        model). It is evaluated on a private copy of this client's model, which stays as it is."""
        model = self.model
        if state is not None:
            if getattr(self, "_evaluation_copy", None) is None:
                self._evaluation_copy = copy.deepcopy(self.model)
            load_state_arrays(self._evaluation_copy, state.arrays)
            model = self._evaluation_copy
        x, y = test if test is not None else (self.data.test_x, self.data.test_y)
        return evaluate_model(model, x, y, self.context.train.eval_batch_size)


@dataclass
class ServerContext:
    """Everything a server role is built from."""

    client_ids: list[str]
    num_classes: int
    input_shape: tuple[int, ...]
    client_models: dict[str, str]
    """Architecture name of each client's model."""
    build_model: Callable[[str], nn.Module]
    """Builds a fresh model by zoo name for this dataset (server-side models, global models)."""
    train: TrainConfig
    """Optimisation settings for server-side training, where a method has any (resolved with the
    method's `LocalTraining`, as the clients' are)."""
    seed: int
    precision: str = "fp32"
    """Wire precision for knowledge arrays."""
    total_rounds: int = 1
    """Rounds in the run."""
    samples_per_client: int | None = None
    """The run's --samples-per-client: no client holds more training samples (None: not set)."""
    class_samples: tuple[int, ...] = ()
    """Training samples of each class in the run's data (empty: not known): no client holds more of a
    class, nor more in all than their sum."""

    def max_client_samples(self) -> int | None:
        """The most training samples the run's settings let one client hold: --samples-per-client
        when set, else the run's training set (None: not known)."""
        if self.samples_per_client is not None:
            return self.samples_per_client
        return sum(self.class_samples) if self.class_samples else None

    def check_declared(self, samples: int | None = None, counts: np.ndarray | None = None) -> None:
        """``UplinkRejected("too-many-samples")`` for a declared sample number, or per-label counts
        (in all, or of a class), that no client of this run can hold (see `max_client_samples`,
        `class_samples`): what a client declares weights its contribution, so a declaration is
        capped by the run."""
        most = self.max_client_samples()
        where = "--samples-per-client" if self.samples_per_client is not None else "the run's training set"
        totals = [samples, None if counts is None else int(np.asarray(counts, dtype=np.int64).sum())]
        for total in totals:
            if most is not None and total is not None and total > most:
                raise UplinkRejected(
                    "too-many-samples", f"{total} samples declared; one client holds at most {most} ({where})"
                )
        if counts is not None and self.class_samples:
            over = np.flatnonzero(np.asarray(counts, dtype=np.int64) > np.asarray(self.class_samples))
            if len(over):
                c = int(over[0])
                raise UplinkRejected(
                    "too-many-samples",
                    f"{int(counts[c])} samples of class {c}; the run's training set holds {self.class_samples[c]}",
                )


class ServerRole(ABC):
    """The part of a method that runs on the workstation."""

    knowledge: ClassVar[tuple[str, ...]] = ()
    """As :attr:`ClientRole.knowledge`, for the server's payloads."""

    def __init__(self, context: ServerContext, params: Any) -> None:
        self.context = context
        self.params = params
        self.client_ids = context.client_ids
        self.num_classes = context.num_classes

    step_exchange: bool = False
    """True when this server answers requests during the clients' training (``answer``) instead
    of preparing one downlink per client per round. Clients then train one after another, each
    seeing what the previous ones wrote (the order of the FedCache authors' simulation)."""

    def start(self, hellos: dict[str, Payload]) -> None:  # noqa: B027 (an optional hook)
        """Receive the clients' one-time uploads (those that fit :meth:`hello_schemas`)."""

    # What the clients may send. The runtime checks every hello, uplink and step request against
    # these before the server sees it, and drops what does not fit (edgefd.algorithms.schema).
    # The defaults accept nothing: a method declares each message its clients send.

    def hello_schemas(self, client_id: str) -> Sequence[MessageSchema]:
        """What this client's hello may be."""
        return ()

    def uplink_schemas(self, client_id: str) -> Sequence[MessageSchema]:
        """What this client's round uplink may be, given what the server knows of it (its hello,
        its model, the number of classes)."""
        return ()

    def request_schemas(self, client_id: str) -> Sequence[MessageSchema]:
        """What this client's step requests may be (``step_exchange`` only)."""
        return ()

    def check_hello(self, client_id: str, payload: Payload) -> None:
        """Raise :class:`UplinkRejected` unless ``payload`` is a hello this client may send."""
        check_payload(payload, self.hello_schemas(client_id))

    def check_uplink(self, round: int, client_id: str, payload: Payload) -> None:
        """Raise :class:`UplinkRejected` unless ``payload`` is an uplink this client may send in
        ``round`` (a method with checks beyond the schema extends this)."""
        check_payload(payload, self.uplink_schemas(client_id))

    def check_request(self, round: int, client_id: str, payload: Payload) -> None:
        """Raise :class:`UplinkRejected` unless ``payload`` is a step request this client may send."""
        check_payload(payload, self.request_schemas(client_id))

    def max_steps(self, client_id: str) -> int | None:
        """The most step requests this client's training makes in one round, from what it declared
        (``step_exchange`` only; FedCache: its samples' mini-batches times the local epochs). The
        loop refuses a request past it, and a deployment's hard deadline for the client's steps
        grows with it. None: no cap (a deployment then gives the steps no time of their own)."""
        return None

    def answer(self, round: int, client_id: str, request: Payload) -> Payload:
        """The answer to one request a client made during training (``step_exchange`` only)."""
        raise NotImplementedError(f"{type(self).__name__} does not exchange during training")

    @abstractmethod
    def downlink(self, round: int, client_id: str) -> Payload | None:
        """What this client gets at the start of the round (None: nothing)."""

    @abstractmethod
    def aggregate(self, round: int, uplinks: dict[str, Payload]) -> dict[str, float]:
        """Update the server state from the uplinks that arrived before the deadline."""

    def reply(self, round: int, client_id: str) -> Payload | None:
        """The answer to ``client_id``'s uplink of ``round``, computed in :meth:`aggregate` and sent
        before the round's evaluation (Alg. 1 of FedD2S: C2S, then S2C in the same round); the client
        learns from it in :meth:`ClientRole.receive_reply`. Asked only of the clients whose uplinks
        were aggregated. None (the default): nothing to send, and the round has no second exchange."""
        return None

    def evaluation_state(self, client_id: str) -> Payload | None:
        """The server-side model a client's accuracy is measured with (None: the client's own).

        A measurement hook, not a message: it is handed over in-process and not counted as sent."""
        return None

    def server_models(self) -> dict[str, nn.Module]:
        """Models the server holds for itself (FedAvg's and DFL's global model, FedZKT's and the
        ensemble it learns from), by name, the global one as ``"global_model"``: a simulation scores
        them on the whole test set every evaluated round (metrics.jsonl's ``server_model_accuracy``),
        a deployment on the server's held-out set where it has one (`edgefd server --holdout-dir`;
        the global model's score is then the run's first figure). Never sent. Default: none."""
        return {}


ModelFamily = Callable[[tuple[int, ...]], str]
"""Maps a dataset's per-sample shape to a `--models` value (``"homo"``, ``"hetero"`` or a comma list of
zoo names): what ``--models auto`` picks for a method."""


def same_model_everywhere(input_shape: tuple[int, ...]) -> str:
    """The family of methods that run on any model: one default architecture for every client."""
    return "homo"


@dataclass
class MethodSpec:
    name: str
    summary: str
    client: type[ClientRole]
    server: type[ServerRole]
    params: type
    """A dataclass of the method's hyperparameters, defaults from its paper."""
    paper: str = ""
    """Where the method comes from (authors, venue, arXiv id), shown by `edgefd methods NAME`."""
    models: ModelFamily = same_model_everywhere
    """The client models the method needs (or its paper uses), by data shape: ``--models auto``."""
    global_model: bool = False
    """True when the method's deliverable is one global model (FedAvg, DFL), False when it is each
    client's own model; the contract test compares the first with FedAvg, the second with Local."""


_REGISTRY: dict[str, MethodSpec] = {}


@dataclass(frozen=True)
class ClientContent:
    """A verb on which a client role sends content that the server checks before it sees it: the
    client hook that makes the content, and the server hook that declares what it may be."""

    verb: str
    client_hook: str
    """The :class:`ClientRole` method whose result travels on ``verb``."""
    schemas: str
    """The :class:`ServerRole` method that returns the content's :class:`MessageSchema` s."""
    what: str


CLIENT_CONTENT: tuple[ClientContent, ...] = (
    ClientContent("hello", "hello", "hello_schemas", "a hello"),
    ClientContent("train", "train_round", "uplink_schemas", "a round uplink"),
    ClientContent("steps", "train_steps", "uplink_schemas", "a round uplink"),
    ClientContent("step", "train_steps", "request_schemas", "a step request"),
)
"""Every verb whose client content reaches a server role (``edgefd.runtime.verbs`` holds the verbs;
its tests check that this table names each verb whose answer the server takes in)."""


class MissingSchema(ValueError):
    """A method whose client sends on a verb for which its server declares no schema: the runtime
    would refuse every such message, so the method is refused at registration instead."""


def sends(client: type[ClientRole], hook: str) -> bool:
    """Whether ``client`` sends what ``hook`` returns: it implements the hook (``ClientRole``'s own
    sends nothing) and does not declare it ``-> None`` (Local's ``train_round``: mypy holds a
    method to that annotation)."""
    implemented = getattr(client, hook)
    if implemented is getattr(ClientRole, hook):
        return False
    return inspect.signature(implemented).return_annotation not in (None, "None")


def sent_verbs(client: type[ClientRole]) -> list[str]:
    """The verbs on which ``client`` sends content that its server must declare."""
    return [content.verb for content in CLIENT_CONTENT if sends(client, content.client_hook)]


def check_schemas(name: str, client: type[ClientRole], server: type[ServerRole]) -> None:
    """:class:`MissingSchema` unless ``server`` declares a schema for every verb ``client`` sends on,
    saying what to add."""
    missing: dict[str, list[ClientContent]] = {}
    for content in CLIENT_CONTENT:
        declared = getattr(server, content.schemas) is not getattr(ServerRole, content.schemas)
        if sends(client, content.client_hook) and not declared:
            missing.setdefault(content.schemas, []).append(content)
    if not missing:
        return
    lines = []
    for schemas, contents in missing.items():
        verbs = " and ".join(repr(c.verb) for c in contents)
        hooks = " and ".join(sorted({f"{client.__name__}.{c.client_hook}" for c in contents}))
        what = contents[0].what
        line = (
            f"{hooks} sends {what} on {verbs}, but {server.__name__} declares no schema for it, so its server "
            f"would refuse every one. Add to {server.__name__}:\n"
            f"    def {schemas}(self, client_id: str) -> Sequence[MessageSchema]:\n"
            f"        return (MessageSchema(KIND, arrays={{...}}, scalars={{...}}),)"
            f"  # what {what} of this client may be"
        )
        if any(c.client_hook == "train_round" for c in contents):
            line += f"\n  or, if {client.__name__}.train_round never sends anything, annotate it `-> None`."
        lines.append(line)
    raise MissingSchema(
        f"method {name!r}: " + "\n".join(lines) + "\n(edgefd.algorithms.schema has MessageSchema, ArraySpec and "
        "helpers for knowledge, counts, sample ids, labels and model states; docs/ADDING_A_METHOD.md, "
        '"Say what your clients may send")'
    )


def register_method(
    name: str,
    summary: str,
    client: type[ClientRole],
    server: type[ServerRole],
    params: type,
    *,
    paper: str = "",
    models: ModelFamily | None = None,
    global_model: bool = False,
) -> None:
    """Adds a method under ``name`` (its ``--algo``). ``models`` says which client models
    ``--models auto`` gives it; without it every client gets the dataset's default model.
    :class:`MissingSchema` where the client sends on a verb that the server declares no schema for."""
    if name in _REGISTRY:
        raise ValueError(f"method {name!r} is registered twice")
    check_schemas(name, client, server)
    _REGISTRY[name] = MethodSpec(
        name, summary, client, server, params, paper, models or same_model_everywhere, global_model
    )


def unregister_method(name: str) -> None:
    """Remove a method that `register_method` added (a test's, or a plugin's that is unloaded)."""
    if _REGISTRY.pop(name, None) is None:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(sorted(_REGISTRY))}")


def get_method(name: str) -> MethodSpec:
    _load_builtin_methods()
    if name not in _REGISTRY:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def list_methods() -> list[MethodSpec]:
    _load_builtin_methods()
    return [_REGISTRY[name] for name in sorted(_REGISTRY)]


def _load_builtin_methods() -> None:
    from edgefd.algorithms import import_methods

    import_methods()
