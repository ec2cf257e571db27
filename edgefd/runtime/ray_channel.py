"""The clients of a simulation in Ray actors: `RayChannel`, a `Channel` for `--backend ray`.

Each actor (`ClientHost`) builds its own clients from the run's config, as a deployed device does
(`prepare` + `build_client`, seeded from (seed, 1, index) alone), and keeps them between rounds:
nothing but the config and the messages leaves the driver. Client i lives on actor i mod workers.

Messages travel encoded, as bytes: the driver encodes the server's, the actor the client's (the
loop counts them, as every run's). Answers come back in client-id order, never in order of arrival.

On most verbs every actor answers its selected clients at once (each actor its own clients one
after another). On a verb that ``asks`` (a method that exchanges with the server during training,
such as FedCache's per-batch exchange) the order of the clients' requests is the server's state, so
the clients are called one at a time in client-id order, as in process: the actor runs the client's
work as a `Conversation` that stops at each request, which comes back to the loop as a message, and
the loop's answer goes to the actor as one (`ClientHost.start`, `ClientHost.resume`). Either way the
results are those of `InProcessChannel`, bit for bit.

Faults: at the end of every round (`end_round`, which the run calls as it records the round) each
actor writes the state of the clients that worked in it
(the project's safe checkpoint format, `edgefd.runtime.checkpoint`) to a folder on its node, in
one file for all of them (`SavedStates`: a hundred small files a round cost more than the round). A
worker process that dies takes its clients' answers of the round with it: they miss the round, as
stragglers do; Ray restarts the actor (up to `RESTARTS` times, on the same node while it lives),
which restores its clients from those files, and the round's record says so (`RoundRecord.faults`).

Placement: the actors are spread over the cluster's nodes in turn, as many on a node as it has
CPUs (and GPUs, with ``gpus_per_worker``); a cluster too small for them is an error, not a wait.

Ray is imported only when a `RayChannel` is made: the rest of edgefd does not need it installed.
One module, though long: the driver's side (`RayChannel`) and the actor's (`ClientHost`) speak the
events above to each other, and read best together.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import tempfile
import time
import traceback
import uuid
import zipfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from edgefd.data import registry
from edgefd.data.dataset import DatasetNotFoundError
from edgefd.protocol import decode_message, encode_message
from edgefd.protocol.errors import ProtocolError
from edgefd.protocol.message import Message
from edgefd.runtime import checkpoint
from edgefd.runtime.channel import Delivery
from edgefd.runtime.conversation import Conversation
from edgefd.runtime.conversation import Event as ConversationEvent
from edgefd.runtime.limits import MessageLimits, client_limit
from edgefd.runtime.records import RoundRecord
from edgefd.runtime.verbs import Deadline, exchange_done, verb

if TYPE_CHECKING:
    from edgefd.runtime.config import SimulationConfig
    from edgefd.runtime.verbs import ClientApp

log = logging.getLogger(__name__)

Event = tuple[str, Any]
"""What an actor says about a client's work: ("ask", request bytes), ("done", answer bytes),
("missed", why: the client's message did not encode) or ("failed", traceback); the driver adds
("lost", why) for a client whose actor died meanwhile."""

RESTARTS = 5
"""How many times Ray restarts an actor whose worker process died; past that its clients miss
every round left (a process that dies again and again has a cause a restart does not cure)."""
RESTART_WAIT_S = 600.0
"""How long the driver waits for a dead actor to come back (a node may have to load the data)."""


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


class SavedStates:
    """The saved states of one actor's clients, on its node: a file a round, a zip archive of the
    checkpoints of the clients that worked in it (``NAME-round-R.zip``, one member a client,
    each member `checkpoint.write`'s format). A client's state is in the newest file that holds
    it; a file that holds no client's newest state is deleted. Files are written whole or not at
    all (`checkpoint.atomic_write`), and not synced to disk: they guard against a process that
    dies, not a machine that loses power."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self.name = name
        self.where: dict[str, Path] = {}
        """The file that holds each client's newest saved state."""
        for path in sorted(folder.glob(f"{name}-round-*.zip"), reverse=True):  # newest first
            try:
                with zipfile.ZipFile(path) as bundle:
                    members = bundle.namelist()
            except (zipfile.BadZipFile, OSError) as error:
                log.warning("%s: unreadable, its states are not used (%s)", path, error)
                continue
            for cid in members:
                self.where.setdefault(cid, path)
        for left in folder.glob(f".{name}-round-*.tmp"):  # a save the process died in
            left.unlink(missing_ok=True)
        self.forget_old()

    def save(self, round: int, roles: dict[str, Any]) -> None:
        """The states of ``roles`` (by client id) as they are at the end of ``round``."""
        if not roles:
            return
        path = self.folder / f"{self.name}-round-{round:06d}.zip"

        def write(handle: BinaryIO) -> None:
            with zipfile.ZipFile(handle, "w", zipfile.ZIP_STORED) as bundle:
                for cid, role in roles.items():
                    with bundle.open(cid, "w", force_zip64=True) as member:
                        checkpoint.write(member, {"round": round, "role": role}, {"data": role.context.data})

        checkpoint.atomic_write(path, write, durable=False)
        self.where.update(dict.fromkeys(roles, path))
        self.forget_old()

    def load(self, cid: str, references: dict[str, Any]) -> checkpoint.Checkpoint:
        """Client ``cid``'s newest saved state (a `checkpoint.CheckpointError` if it cannot be read)."""
        path = self.where[cid]
        try:
            with zipfile.ZipFile(path) as bundle:
                data = bundle.read(cid)
        except (zipfile.BadZipFile, KeyError, OSError) as error:
            raise checkpoint.CheckpointError(f"{path}: {cid}: {error}") from None
        return checkpoint.Checkpoint(data, references, f"{path.name}:{cid}")

    def forget_old(self) -> None:
        """Deletes this actor's files that hold no client's newest state."""
        newest = set(self.where.values())
        for path in self.folder.glob(f"{self.name}-round-*.zip"):
            if path not in newest:
                path.unlink(missing_ok=True)

    def clear(self) -> None:
        """Deletes all of this actor's files, and the folder once no actor has any there."""
        for path in self.folder.glob(f"{self.name}-round-*.zip"):
            path.unlink(missing_ok=True)
        self.where.clear()
        try:
            self.folder.rmdir()
        except OSError:  # another actor's files are still there (it deletes the folder), or it did already
            pass


class ClientHost:
    """One actor's clients: built here from the config, kept between rounds, answering encoded
    messages, and saved at each round's end into ``state_dir`` (on this actor's node), from where
    the actor restores them when Ray restarts it."""

    def __init__(
        self, config: SimulationConfig, indices: list[int], make_apps: MakeApps, state_dir: str, name: str = "actor"
    ) -> None:
        self.threads = config.threads
        self.cap = config.max_message_bytes
        self.saved = SavedStates(Path(state_dir), name)
        self.conversations: dict[str, Conversation] = {}
        """The clients whose work waits for the server's answer to a request."""
        self.dirty: set[str] = set()
        """Clients that worked since their state was last saved."""
        self.error: str | None = None
        self.restored: dict[str, str] = {}
        config = on_this_node(config)
        self.rebuild = lambda index: make_apps(config, [index])
        try:
            self.apps = make_apps(config, indices)  # also sets torch's and the kernels' threads to the run's
        except (DatasetNotFoundError, OSError) as error:  # `ready` says it: a dead actor would only be restarted
            self.apps = {}
            self.error = (
                f"{node_name()} cannot build its clients, it lacks their data ({one_line(error)}); "
                "every node needs the data (docs/RAY.md)"
            )
            return
        except Exception as error:  # noqa: BLE001  # the same for any other cause, named
            self.apps = {}
            self.error = f"{node_name()} cannot build its clients ({type(error).__name__}: {first_line(error)})"
            return
        for index, cid in zip(indices, list(self.apps)):
            self.restored[cid] = self.restore(cid, index)
        registry.clear_cache()  # the clients hold their shares: the whole dataset the cache keeps is not needed here

    def restore(self, cid: str, index: int) -> str:
        """Client ``cid`` (the run's client ``index``) as it was saved on this node, if it was;
        what became of it, in words."""
        if cid not in self.saved.where:
            return f"started afresh (no state of it saved on {node_name()})"
        role = self.apps[cid].role
        try:
            saved = self.saved.load(cid, {"data": role.context.data})
            saved.restore("role", role)
        except checkpoint.CheckpointError as error:  # never half-restored: rebuilt, as a device does
            self.apps[cid] = self.rebuild(index)[cid]
            return f"started afresh (its saved state is unreadable: {error})"
        return f"restored from its state after round {saved.value('round')}"

    def save(self, round: int) -> None:
        """The state of every client that worked since the last save, as it is at the end of ``round``."""
        self.saved.save(round, {cid: self.apps[cid].role for cid in sorted(self.dirty)})
        self.dirty.clear()

    def restarted(self) -> dict[str, str]:
        """What became of each of this actor's clients when it was built (after a restart: restored or not)."""
        return self.restored

    def placement(self) -> dict[str, Any]:
        """Where this actor runs: its node, its process, the GPUs Ray gave it."""
        import ray

        return {
            "node": node_name(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "gpus": [str(g) for g in ray.get_gpu_ids()],
        }

    def clear(self) -> None:
        """Deletes this actor's saved states (the run is over)."""
        self.saved.clear()

    def ready(self) -> list[str] | str:
        """This actor's client ids once they are built, or why they cannot be."""
        return self.error if self.error is not None else sorted(self.apps)

    def handle(self, messages: list[bytes]) -> list[Event]:
        """Each message's answer, one client after another (a verb whose client asks nothing)."""
        events: list[Event] = []
        for data in messages:
            message = decode_message(data, max_bytes=None)
            app = self.apps[message.receiver]
            largest = client_limit(app.role.model, self.cap)
            if len(data) > largest:  # the client refuses it, as a device does (InProcessChannel)
                events.append(("missed", f"a {message.verb} message of {len(data)} bytes; at most {largest} taken"))
                continue
            self.dirty.add(message.receiver)
            try:
                events.append(("done", encode_message(app.handle(message))))
            except ProtocolError as error:
                events.append(("missed", str(error)))
        exchange_done(self.apps.values())
        return events

    def start(self, data: bytes) -> Event:
        """Start a client's work that asks the server: its first request, or its answer."""
        from edgefd import kernels

        message = decode_message(data)
        self.dirty.add(message.receiver)
        # a thread's own OpenMP setting: the run's, as in the main thread
        prepare = partial(kernels.set_num_threads, self.threads)
        conversation = Conversation(self.apps[message.receiver], message, prepare)
        self.conversations[message.receiver] = conversation
        return self._said(message.receiver, conversation.start())

    def resume(self, reply: bytes) -> Event:
        """Give the client the server's answer to its request: its next request, or its answer."""
        message = decode_message(reply)
        return self._said(message.receiver, self.conversations[message.receiver].resume(message))

    def _said(self, cid: str, event: ConversationEvent) -> Event:
        """A conversation's event as the driver takes it (its message encoded)."""
        conversation = self.conversations[cid]
        if event.message is not None:
            try:
                data = encode_message(event.message)
            except ProtocolError as error:  # a diverged model's NaN: the client misses the round
                if conversation.open:
                    conversation.abandon()
                self.conversations.pop(cid)
                return ("missed", str(error))
            if not conversation.open:
                self.conversations.pop(cid)
            return (event.kind, data)
        self.conversations.pop(cid)
        assert event.error is not None
        if event.kind == "missed":
            return ("missed", str(event.error))
        return ("failed", "".join(traceback.format_exception(event.error)))

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

    def __init__(self, config: SimulationConfig, client_ids: list[str], make_apps: MakeApps, wait: bool = True) -> None:
        """Joins the cluster at ``config.ray_address``, or starts a local Ray of ``config.workers``
        CPUs (stopped by `close`), and starts the actors, which build their clients with
        ``make_apps`` (a module's function: Ray sends it by name). Without ``wait`` it returns
        while they build them (the caller does its own part meanwhile), and `wait_ready` waits."""
        ray = import_ray()
        self.ray = ray
        self.started_ray = False
        if not ray.is_initialized():
            connect(ray, config.ray_address, config.workers)
            self.started_ray = config.ray_address is None
        self.client_ids = sorted(client_ids)
        self.run = ""
        self.limits = MessageLimits(config.max_message_bytes)
        """The run's message limits: the method's bounds once `edgefd.runtime.build` gives them."""
        self._limits_round: int | None = None
        self._faults: dict[int, dict[str, str]] = {}
        """What befell clients in each round not yet ended (`RoundRecord.faults`)."""
        self._gone: set[int] = set()
        """The actors Ray will not restart again."""
        groups = host_indices(config.clients, config.workers)
        nodes = place(ray, len(groups), config.gpus_per_worker)
        state_dir = str(Path(tempfile.gettempdir()) / f"edgefd-ray-{uuid.uuid4().hex[:12]}")
        self.actors = [
            ray.remote(ClientHost)
            .options(
                num_cpus=1,
                num_gpus=config.gpus_per_worker,
                max_restarts=RESTARTS,
                max_task_retries=0,  # a call that dies with its actor is not run again: its clients miss the round
                scheduling_strategy=node_affinity(node),
            )
            .remote(config, indices, make_apps, state_dir, f"actor-{n}")
            for n, (node, indices) in enumerate(zip(nodes, groups))
        ]
        self._groups = {n: [client_ids[i] for i in indices] for n, indices in enumerate(groups)}
        self._host = {cid: n for n, cids in self._groups.items() for cid in cids}
        self._building = [actor.ready.remote() for actor in self.actors]
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Waits until every actor has built its clients; a ValueError (the actors ended) if one cannot."""
        for answer in self.ray.get(self._building):
            if isinstance(answer, str):
                self.close()
                raise ValueError(f"--backend ray: {answer}")
        for n, where in enumerate(self.ray.get([actor.placement.remote() for actor in self.actors])):
            gpus = f", GPU {','.join(where['gpus'])}" if where["gpus"] else ""
            clients = len(self._groups[n])
            log.info("actor %d (%d clients) on %s, pid %d%s", n, clients, where["node"], where["pid"], gpus)

    def end_round(self, record: RoundRecord) -> RoundRecord:
        """Has every actor save its clients as they are at the end of the round (the time it takes
        is the round's), and records what befell clients in it. Not part of the `Channel`: the
        run that chose Ray calls it as it records each round (`edgefd.runtime.build.Simulation`)."""
        started = time.perf_counter()
        saving = {n: self.actors[n].save.remote(record.round) for n in self._live()}
        for n, ref in saving.items():
            self._get(n, ref, record.round, "while saving its clients' state after the round", missed=[])
        record.seconds += time.perf_counter() - started
        record.faults = dict(sorted(self._faults.pop(record.round, {}).items()))
        return record

    def _live(self) -> list[int]:
        return [n for n in range(len(self.actors)) if n not in self._gone]

    def _get(self, n: int, ref: Any, round: int, when: str, missed: list[str]) -> Any:
        """The result of actor ``n``'s call ``ref``; None if the actor died meanwhile, which is
        noted against its clients (``missed``: those whose answers of the round died with it),
        and the actor's restart awaited."""
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayActorError as error:
            self._fault(n, round, f"its Ray worker died {when} ({first_line(error)})", missed)
            return None

    def _fault(self, n: int, round: int, what: str, missed: list[str]) -> None:
        """Notes ``what`` happened to actor ``n``'s clients in ``round`` (``missed``: those that
        miss the round for it), then waits for Ray to restart the actor and notes what became of
        each of its clients (or that it is gone for good)."""
        notes = self._faults.setdefault(round, {})
        if n in self._gone:
            for cid in missed:
                notes[cid] = "its Ray actor is gone: it misses every round left"
            return
        log.warning("round %d: actor %d: %s", round, n, what)
        try:
            outcome = self._restarted(n)
        except RuntimeError as error:
            self._gone.add(n)
            outcome = {cid: f"{error}: it misses every round left" for cid in self._groups[n]}
        for cid in self._groups[n]:
            missing = ": it missed the round" if cid in missed else ""
            notes[cid] = f"{what}{missing}; {outcome.get(cid, 'not restarted')}"
            log.warning("round %d: %s: %s", round, cid, notes[cid])

    def _restarted(self, n: int) -> dict[str, str]:
        """Waits for Ray to restart actor ``n``: what became of its clients; a RuntimeError when it
        will not come back (restarted `RESTARTS` times already, or not within `RESTART_WAIT_S`)."""
        exceptions = self.ray.exceptions
        deadline = time.monotonic() + RESTART_WAIT_S
        while True:
            try:
                return self.ray.get(self.actors[n].restarted.remote(), timeout=max(deadline - time.monotonic(), 0))
            except exceptions.ActorUnavailableError:  # restarting: its calls are refused until it is back
                if time.monotonic() > deadline:
                    raise RuntimeError(f"not back after {RESTART_WAIT_S:g} s") from None
                time.sleep(0.2)
            except exceptions.GetTimeoutError:
                raise RuntimeError(f"not back after {RESTART_WAIT_S:g} s") from None
            except exceptions.RayActorError as error:
                raise RuntimeError(f"not restarted ({first_line(error)})") from None

    def send_and_receive(self, messages: Sequence[Message], deadline: Deadline) -> Delivery:
        if messages and messages[0].round != self._limits_round:  # the method's bounds of the round
            self.limits.update(self.client_ids)
            self._limits_round = messages[0].round
        ordered = sorted(messages, key=lambda m: m.receiver)
        if ordered and (ordered[0].is_answer or verb(ordered[0].verb).asks):
            events = [self._one_at_a_time(message) for message in ordered]
        else:
            events = self._handle_at_once(ordered)
        delivery = Delivery({})
        for message, (kind, value) in zip(ordered, events):
            if kind in ("done", "ask"):
                came = decode_message(value, max_bytes=None)
                refusal = self.limits.refusal(message.receiver, came.verb, len(value))
                if refusal is None:
                    delivery.answers[message.receiver] = came
                    continue
                delivery.refused[message.receiver] = refusal  # it never reaches the server (InProcessChannel)
                if kind == "ask":  # the client waits for an answer: refused
                    self._abandon(came)
            elif kind == "missed":
                log.warning(
                    "round %d: %s's %s ends unanswered (%s): it misses the round, as a device's would",
                    message.round,
                    message.receiver,
                    message.verb,
                    value,
                )
            elif kind == "failed":
                raise RuntimeError(f"{message.receiver} failed on its actor:\n{value}")
        return delivery

    def _by_actor(self, messages: Sequence[Message]) -> dict[int, list[Message]]:
        grouped: dict[int, list[Message]] = {}
        for message in messages:
            grouped.setdefault(self._host[message.receiver], []).append(message)
        return grouped

    def _handle_at_once(self, ordered: list[Message]) -> list[Event]:
        """Every actor answers its clients' messages at the same time as the others."""
        if not ordered:
            return []
        round = ordered[0].round
        grouped = self._by_actor(ordered)
        pending = {n: self.actors[n].handle.remote([encode_message(m) for m in group]) for n, group in grouped.items()}
        by_client: dict[str, Event] = {}
        for n, group in grouped.items():
            events = self._get(n, pending[n], round, "during the round", [m.receiver for m in group])
            lost: list[Event] = [("lost", "its actor died")] * len(group)
            by_client.update({m.receiver: event for m, event in zip(group, events if events is not None else lost)})
        return [by_client[m.receiver] for m in ordered]

    def _one_at_a_time(self, message: Message) -> Event:
        """A message of a verb that asks, or the server's answer to a client's request: the
        client works until its next request, or its answer."""
        n = self._host[message.receiver]
        call = self.actors[n].resume if message.is_answer else self.actors[n].start
        event = self._get(
            n, call.remote(encode_message(message)), message.round, "during the round", [message.receiver]
        )
        return ("lost", "its actor died") if event is None else event

    def _abandon(self, request: Message) -> None:
        """Refuse a request its client waits on: its work of the round ends unanswered."""
        kind, value = self._one_at_a_time(request.answer(None))
        while kind == "ask":  # a client that asks on regardless
            kind, value = self._one_at_a_time(decode_message(value, max_bytes=None).answer(None))

    def send(self, messages: Sequence[Message]) -> None:
        grouped = self._by_actor(sorted(messages, key=lambda m: m.receiver))
        refs = {n: self.actors[n].send.remote([encode_message(m) for m in group]) for n, group in grouped.items()}
        for n, ref in refs.items():
            try:
                self.ray.get(ref)
            except self.ray.exceptions.RayActorError as error:  # the run is over: nothing is lost
                log.warning("actor %d died while its clients were told the run is over (%s)", n, first_line(error))

    def client_models(self) -> dict[str, Any]:
        """Every client's model as it is now, fetched from the actors (at the end: to save them);
        an actor that died since the last round gives them as it restored them."""
        models: dict[str, Any] = {}
        for n in self._live():
            try:
                models.update(self.ray.get(self.actors[n].models.remote()))
            except self.ray.exceptions.RayActorError:
                self._restarted(n)
                models.update(self.ray.get(self.actors[n].models.remote()))
        return dict(sorted(models.items()))

    def close(self) -> None:
        """Ends the actors (their saved states deleted), and the local Ray this channel started."""
        clearing = [self.actors[n].clear.remote() for n in self._live()]
        try:
            self.ray.get(clearing, timeout=60)
        except (self.ray.exceptions.RayError, self.ray.exceptions.GetTimeoutError) as error:
            log.warning("some actors' saved states could not be deleted (%s)", first_line(error))
        for actor in self.actors:
            self.ray.kill(actor, no_restart=True)
        self.actors = []
        if self.started_ray:
            self.ray.shutdown()
            self.started_ray = False


def place(ray: Any, actors: int, gpus_per_worker: float) -> list[str]:
    """The node of each actor: the nodes in turn, each taking as many actors as it has CPUs (and
    GPUs for them); a ValueError naming what is short when the cluster cannot hold them all."""
    slots: dict[str, int] = {}
    for node in sorted(ray.nodes(), key=lambda node: node["NodeID"]):
        if not node.get("Alive"):
            continue
        resources = node.get("Resources", {})
        room = int(resources.get("CPU", 0))
        if gpus_per_worker > 0:
            room = min(room, actors_per_gpus(resources.get("GPU", 0), gpus_per_worker))
        if room > 0:
            slots[node["NodeID"]] = room
    if sum(slots.values()) < actors:
        total = ray.cluster_resources()
        gpus = f" and {total.get('GPU', 0):g} GPU(s) for actors of {gpus_per_worker:g} GPU" if gpus_per_worker else ""
        raise ValueError(
            f"--workers {actors}: the Ray cluster has room for {sum(slots.values())} actor(s) "
            f"({total.get('CPU', 0):g} CPU(s), one an actor{gpus}); use fewer workers or add nodes"
        )
    order: list[str] = []
    while len(order) < actors:
        for node, room in slots.items():
            if room > 0 and len(order) < actors:
                order.append(node)
                slots[node] = room - 1
    return order


def actors_per_gpus(gpus: float, each: float) -> int:
    """How many actors of ``each`` GPU(s) fit on ``gpus`` GPUs (a fraction of one never spans two)."""
    if each <= 1:
        return int(gpus + 1e-9) * int(1 / each + 1e-9)
    return int(gpus // math.ceil(each))


def node_affinity(node: str) -> Any:
    """Run on ``node``, and restart there while it lives (where the actor's saved states are)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node, soft=True)


def on_this_node(config: SimulationConfig) -> SimulationConfig:
    """The run's config as an actor's clients use it: on the GPU Ray gave the actor, if it gave one
    and torch sees it (Ray shows the actor only its own: it is cuda:0)."""
    if config.gpus_per_worker <= 0:
        return config
    import dataclasses

    import torch

    if not torch.cuda.is_available():  # declared GPUs (a test's), or a driver-less node: --device decides
        log.warning("%s: Ray gave this actor a GPU, but torch sees no CUDA device", node_name())
        return config
    return dataclasses.replace(config, device="cuda:0")


def node_name() -> str:
    """This machine, as an error names it: host name and, inside Ray, the node's address."""
    try:
        import ray

        address = ray.util.get_node_ip_address() if ray.is_initialized() else ""
    except ImportError:
        address = ""
    host = socket.gethostname()
    return f"node {address} ({host})" if address else f"node {host}"


def one_line(error: BaseException, most: int = 600) -> str:
    """The whole of ``error``'s message on one line (a dataset's says where it looked), cut at ``most``."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= most else text[: most - 3] + "..."


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


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
