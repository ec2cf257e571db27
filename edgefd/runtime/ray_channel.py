"""The clients of a simulation in Ray actors: `RayChannel`, a `Channel` for `--backend ray`.

Each actor (`ClientHost`) builds its own clients from the run's config, as a deployed device does
(`prepare` + `build_client`, seeded from (seed, 1, index) alone), and keeps them between rounds:
nothing but the config and the messages leaves the driver. Client i lives on actor i mod workers.

Messages travel encoded, as bytes: the driver encodes the server's, the actor the client's, and
the driver counts every message in its `ByteLedger` as `InProcessTransport` does, so the bytes a
round reports are the same. Answers come back in client-id order, never in order of arrival.

Without ``serve`` every actor answers its selected clients at once (each actor its own clients one
after another). With ``serve`` (a method that exchanges with the server during training, such as
FedCache's per-batch exchange) the order of the clients' requests is the server's state, so the
clients are called one at a time in client-id order, as in process: the actor runs the client's
work in a thread that stops at each request, and the driver answers it (`ClientHost.start`,
`ClientHost.resume`). Either way the results are those of `InProcessChannel`, bit for bit.

Ray is imported only when a `RayChannel` is made: the rest of edgefd does not need it installed.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from edgefd.protocol import decode_message, encode_message
from edgefd.protocol.errors import ProtocolError
from edgefd.protocol.message import Message
from edgefd.runtime.channel import Serve
from edgefd.runtime.records import RoundRecord
from edgefd.runtime.transport import DOWN, UP, ByteLedger
from edgefd.runtime.verbs import Deadline

if TYPE_CHECKING:
    from edgefd.runtime.config import SimulationConfig
    from edgefd.runtime.verbs import ClientApp

log = logging.getLogger(__name__)

Event = tuple[str, Any]
"""What an actor says about a client's work: ("ask", request bytes), ("done", answer bytes),
("missed", why: the client's message did not encode) or ("failed", traceback)."""


MakeApps = Callable[["SimulationConfig", list[int]], dict[str, "ClientApp"]]
"""Builds the clients of the given indices from the run's config, as `ClientApp`s by client id."""


def import_ray() -> Any:
    """Ray, or a ValueError that says how to install it (the CLI prints it as one line)."""
    try:
        import ray
    except ImportError as error:
        raise ValueError(
            f"--backend ray needs Ray, which is not installed ({error}): pip install 'edgefd[ray]'"
        ) from None
    return ray


def host_indices(clients: int, workers: int) -> list[list[int]]:
    """The client indices of each actor: client i on actor i mod workers (no actor without clients)."""
    return [list(range(actor, clients, workers)) for actor in range(min(workers, clients))]


class ClientHost:
    """One actor's clients: built here from the config, kept between rounds, answering encoded messages."""

    def __init__(self, config: SimulationConfig, indices: list[int], make_apps: MakeApps) -> None:
        self.threads = config.threads
        self.apps = make_apps(config, indices)  # also sets torch's and the kernels' threads to the run's
        self.session: tuple[queue.Queue[Event], queue.Queue[bytes]] | None = None

    def ready(self) -> list[str]:
        """This actor's client ids, once they are built."""
        return sorted(self.apps)

    def handle(self, messages: list[bytes]) -> list[Event]:
        """Each message's answer, one client after another (no ``serve``)."""
        events: list[Event] = []
        for data in messages:
            message = decode_message(data)
            try:
                events.append(("done", encode_message(self.apps[message.receiver].handle(message))))
            except ProtocolError as error:
                events.append(("missed", str(error)))
        return events

    def start(self, data: bytes) -> Event:
        """Start a client's work that makes requests of the server: its first request, or its answer."""
        from edgefd import kernels

        message = decode_message(data)
        app = self.apps[message.receiver]
        events: queue.Queue[Event] = queue.Queue()
        replies: queue.Queue[bytes] = queue.Queue()

        def ask(request: Message) -> Message:
            events.put(("ask", encode_message(request)))
            return decode_message(replies.get())

        def work() -> None:
            kernels.set_num_threads(self.threads)  # a thread's own OpenMP setting: the run's, as in the main thread
            try:
                events.put(("done", encode_message(app.handle(message, ask))))
            except ProtocolError as error:
                events.put(("missed", str(error)))
            except BaseException:
                events.put(("failed", traceback.format_exc()))

        self.session = (events, replies)
        threading.Thread(target=work, name=f"edgefd-{message.receiver}", daemon=True).start()
        return events.get()

    def resume(self, reply: bytes) -> Event:
        """Give the client the server's reply to its request: its next request, or its answer."""
        assert self.session is not None, "resume without start"
        events, replies = self.session
        replies.put(reply)
        return events.get()

    def send(self, messages: list[bytes]) -> None:
        """Messages that get no answer (the stop)."""
        for data in messages:
            message = decode_message(data)
            self.apps[message.receiver].handle(message)

    def models(self) -> dict[str, Any]:
        """Each client's model as it is now (at the end: to save it)."""
        return {cid: app.role.model for cid, app in self.apps.items()}


class RayChannel:
    """The clients of a simulation in Ray actors (see the module's docstring)."""

    def __init__(self, config: SimulationConfig, client_ids: list[str], make_apps: MakeApps) -> None:
        """Joins the cluster at ``config.ray_address``, or starts a local Ray of ``config.workers``
        CPUs (stopped by `close`), and starts the actors, which build their clients with
        ``make_apps`` (a module's function: Ray sends it by name)."""
        ray = import_ray()
        self.ray = ray
        self.started_ray = False
        if not ray.is_initialized():
            connect(ray, config.ray_address, config.workers)
            self.started_ray = config.ray_address is None
        self.client_ids = sorted(client_ids)
        self.run = ""
        self.ledger = ByteLedger()
        remote = ray.remote(num_cpus=1)(ClientHost)
        groups = host_indices(config.clients, config.workers)
        self.actors = [remote.remote(config, indices, make_apps) for indices in groups]
        self.host = {client_ids[i]: actor for actor, indices in zip(self.actors, groups) for i in indices}
        ray.get([actor.ready.remote() for actor in self.actors])

    def begin(self, round: int) -> None:
        """Every client is always there."""

    def finish(self, record: RoundRecord) -> RoundRecord:
        return record

    def down(self, message: Message) -> bytes:
        """The server's message, encoded and counted."""
        data = encode_message(message)
        self.ledger.add(message, len(data) - message.metadata_bytes, message.metadata_bytes)
        return data

    def up(self, data: bytes) -> Message:
        """A client's message, counted and decoded."""
        message = decode_message(data)
        self.ledger.add(message, len(data) - message.metadata_bytes, message.metadata_bytes)
        return message

    def send_and_receive(
        self, messages: Sequence[Message], deadline: Deadline, serve: Serve | None = None, steps: int | None = None
    ) -> dict[str, Message]:
        ordered = sorted(messages, key=lambda m: m.receiver)
        if serve is None:
            events = self.handle_at_once(ordered)
        else:
            events = [self.handle_alone(message, serve) for message in ordered]
        answers = {}
        for message, (kind, value) in zip(ordered, events):
            if kind == "done":
                answers[message.receiver] = self.up(value)
            elif kind == "missed":
                log.warning(
                    "round %d: %s's %s cannot be sent (%s): it misses the round, as a device's would",
                    message.round,
                    message.receiver,
                    message.verb,
                    value,
                )
            else:
                raise RuntimeError(f"{message.receiver} failed on its actor:\n{value}")
        return answers

    def by_actor(self, messages: Sequence[Message]) -> dict[Any, list[Message]]:
        grouped: dict[Any, list[Message]] = {}
        for message in messages:
            grouped.setdefault(self.host[message.receiver], []).append(message)
        return grouped

    def handle_at_once(self, ordered: list[Message]) -> list[Event]:
        """Every actor answers its clients' messages at the same time as the others."""
        grouped = self.by_actor(ordered)
        pending = {actor: actor.handle.remote([self.down(m) for m in group]) for actor, group in grouped.items()}
        results = dict(zip(pending, self.ray.get(list(pending.values()))))
        by_client = {m.receiver: event for actor, group in grouped.items() for m, event in zip(group, results[actor])}
        return [by_client[m.receiver] for m in ordered]

    def handle_alone(self, message: Message, serve: Serve) -> Event:
        """One client's work, each of its requests answered by ``serve`` as it comes."""
        actor = self.host[message.receiver]
        kind, value = self.ray.get(actor.start.remote(self.down(message)))
        while kind == "ask":
            reply = serve(self.up(value))
            kind, value = self.ray.get(actor.resume.remote(self.down(reply)))
        return kind, value

    def send(self, messages: Sequence[Message]) -> None:
        grouped = self.by_actor(sorted(messages, key=lambda m: m.receiver))
        self.ray.get([actor.send.remote([self.down(m) for m in group]) for actor, group in grouped.items()])

    def round_bytes(self, round: int) -> tuple[int, int]:
        return self.ledger.total(UP, round), self.ledger.total(DOWN, round)

    def client_models(self) -> dict[str, Any]:
        """Every client's model as it is now, fetched from the actors (at the end: to save them)."""
        models: dict[str, Any] = {}
        for part in self.ray.get([actor.models.remote() for actor in self.actors]):
            models.update(part)
        return dict(sorted(models.items()))

    def close(self) -> None:
        """Ends the actors, and the local Ray this channel started."""
        for actor in self.actors:
            self.ray.kill(actor)
        self.actors = []
        if self.started_ray:
            self.ray.shutdown()
            self.started_ray = False


def connect(ray: Any, address: str | None, cpus: int) -> None:
    """Starts a local Ray of ``cpus`` CPUs (``address`` None) or joins the cluster at ``address``
    (auto or HOST:PORT); a cluster that cannot be reached is a ValueError naming it (Ray itself
    would wait for ever on a HOST:PORT where none listens). A local Ray is always a new one: Ray's
    default would join the last cluster started on this machine, even another user's."""
    if address is None:
        ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False)
        return
    if address != "auto":
        reachable(address)
    try:
        ray.init(address=address, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"--ray-address {address}: cannot join a Ray cluster there ({first})") from None


def reachable(address: str, timeout: float = 5.0) -> None:
    """A ValueError unless something listens at ``address`` (HOST:PORT, a Ray head's GCS)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--ray-address {address}: expected auto or HOST:PORT (a Ray head, e.g. 10.0.0.5:6379)")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as error:
        raise ValueError(f"--ray-address {address}: no Ray cluster answers there ({error})") from None
