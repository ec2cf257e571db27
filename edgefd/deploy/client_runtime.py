"""The device side of a deployed run: one client role, its data, and the broker.

The client learns the run's config from the server (the retained `down/<id>/config` message), builds
its own role exactly as `simulate` builds it (same seed streams, same data share; or the device's
own data folder), and then answers the server's messages with
:class:`edgefd.runtime.verbs.ClientApp`, the dispatcher a simulated client uses: each verb of the
table (hello, train, steps, reply, evaluate, ...) goes to its handler, and the answer goes back on
`up/<id>/<verb>`. What is a device's own:

- during ``steps`` each step request goes up on `up/<id>/step` and the training waits for the
  server's answer to that step (sent again now and then; a stop, or the server moving on,
  abandons the round);
- answers are stored: a request that comes twice (a reconnection, a restarted server) or an
  "again" from the server is answered with the stored answer, never recomputed, so a round is never
  trained twice; a training request, or a verb of the phase before training, for a round already
  past is ignored, and a verb sent after aggregation (``reply``) is taken only for the round this
  client trained last;
- after every answer but an evaluation the role, its RNGs and its stored answers are checkpointed
  atomically in `state_dir`: a client killed at any point restarts where it was;
- ``stop``: announce "offline" and exit 0.

paho reconnects by itself; every connection announces "online" (retained) once the role is built,
and the broker announces "offline" (the last will) when the client dies.
"""

from __future__ import annotations

import logging
import math
import queue
import signal
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path

from edgefd.algorithms.base import ClientRole
from edgefd.data import clear_cache as clear_dataset_cache
from edgefd.deploy import control
from edgefd.deploy.client_settings import ClientSettings
from edgefd.deploy.device_data import load_device_data
from edgefd.deploy.mqtt_transport import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEVICE_SEND_WINDOW,
    Incoming,
    MqttEndpoint,
    Topics,
    encode_frames,
    newest_common,
)
from edgefd.export.checkpoint import (
    MODELS_DIR,
    ClientCheckpoint,
    client_checkpoint,
    deliverable_model,
    save_checkpoint,
)
from edgefd.protocol import MESSAGE_VERSIONS
from edgefd.protocol.errors import versions_text
from edgefd.protocol.message import SERVER, Message
from edgefd.runtime import checkpoint
from edgefd.runtime.build import build_client, prepare
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.limits import client_limit
from edgefd.runtime.process import peak_rss_mb, seconds_since_start
from edgefd.runtime.verbs import STEP, VERBS, ClientApp, Phase, StepRefused, exchange_done, scores_of
from edgefd.training import device_choice

log = logging.getLogger(__name__)

STEP_RESEND_SECONDS = 10.0
"""A step request without an answer after this long is sent again (the answer may have been lost)."""


class ClientRuntime:
    """One device's client process."""

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self.cid = settings.client_id
        self.topics = Topics(settings.run)
        will = encode_frames(  # in the oldest version this device speaks: any server it may meet reads it
            control.status_message(self.cid, control.OFFLINE, settings.run),
            settings.broker.chunk_size,
            min(MESSAGE_VERSIONS),
        )[0]
        self.endpoint = MqttEndpoint(
            settings.broker,
            self.topics,
            f"edgefd-{settings.run}-{self.cid}",
            chunk_size=settings.broker.chunk_size,
            max_message_bytes=settings.max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES,  # until the config comes
            will=(self.topics.status(self.cid), will),
            send_window=DEVICE_SEND_WINDOW,
        )
        self.endpoint.subscribe(f"{self.topics.root}/down/{self.cid}/+")
        self.endpoint.on_connect_hooks.append(self._announce)
        self.config: SimulationConfig | None = None
        self.role: ClientRole | None = None
        self.app: ClientApp | None = None
        self.last_round = 0
        self.stored_answers: dict[tuple[str, int], Message] = {}
        """This client's answers, by (verb, round): a repeated request is answered from here."""
        self.answered_at: dict[tuple[str, int], float] = {}
        """When each stored answer last went out (monotonic): see `_send_again`."""
        self.stopping = threading.Event()
        self._backlog: list[Incoming] = []
        self.model_card: ClientCheckpoint | None = None
        """This client's model file without weights and accuracy, made when the config arrives."""
        self.last_evaluation: Message | None = None
        """The last evaluate request answered: what the server had this client evaluate."""

    @property
    def models_dir(self) -> Path | None:
        if self.settings.models_dir is not None:
            return Path(self.settings.models_dir)
        return None if self.settings.state_dir is None else Path(self.settings.state_dir) / MODELS_DIR

    @property
    def checkpoint_path(self) -> Path | None:
        folder = self.settings.state_dir
        return None if folder is None else Path(folder) / f"{self.settings.run}-{self.cid}.ckpt"

    def run(self) -> int:
        """Serve until the server says stop (0) or SIGTERM/SIGINT (0)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                signal.signal(sig, lambda *_: self.stopping.set())
            except ValueError:  # not the main thread (tests)
                pass
        self.endpoint.start()
        try:
            while not self.stopping.is_set():
                try:
                    msg = self.endpoint.inbox.get(timeout=0.5)
                except queue.Empty:
                    continue
                self._handle(msg)
        finally:
            self._say(control.OFFLINE)
            self.endpoint.stop()
        # the device's own figure, for sizing a device (2 GB on a Raspberry Pi 4): its whole life's peak
        log.info("%s: stopped; peak_rss_mb=%.1f", self.cid, peak_rss_mb())
        return 0

    # ------------------------------------------------------------------ messages
    def _handle(self, msg: Incoming) -> None:
        message = msg.message
        topic = self.topics.down(self.cid, msg.verb) if msg.direction == "down" else f"{msg.direction}/{msg.client_id}"
        if msg.direction != "down" or msg.client_id != self.cid or message.receiver != self.cid:
            self.endpoint.reject("not-mine", topic, "a message on another client's topic")
            return
        if message.sender != SERVER or message.verb != msg.verb or message.run != self.settings.run:
            self.endpoint.reject(
                "sender-mismatch",
                topic,
                f"a {message.verb!r} message from {message.sender!r} of run {message.run!r} on the server's topic",
            )
            return
        if msg.verb == control.CONFIG:
            self._agree_on_protocol(control.protocols_of(message, msg.version))
            self._configure(message)
            for pending in self._backlog:
                self._handle(pending)
            self._backlog.clear()
            return
        spec = VERBS[msg.verb]  # a topic's verb is one of the table's (mqtt_transport.Topics.parse)
        if spec.ends_run:
            if self.config is None:  # retained by an earlier run of this name; this run has not begun
                log.info("%s: a stop left by an earlier run; waiting for this run's config", self.cid)
                return
            log.info("%s: the server ended the run", self.cid)
            self._save_model()
            self.stopping.set()
            return
        if self.app is None:
            self._backlog.append(msg)
            return
        if control.is_again(message):
            self._send_again(msg.verb, message.round, msg.received_at)
            return
        if spec.handle is None:
            log.debug(
                "%s: an answer to step %d of round %d that nobody waits for", self.cid, message.step, message.round
            )
            return
        stored = (msg.verb, message.round) in self.stored_answers
        before_training = spec.trains or spec.phase is Phase.BEFORE_TRAINING
        if not stored and before_training and message.round <= self.last_round:
            log.warning(
                "%s: %s request for round %d, already past round %d; ignored",
                self.cid,
                msg.verb,
                message.round,
                self.last_round,
            )
            return
        if not stored and spec.phase is Phase.AFTER_AGGREGATION and message.round != self.last_round:
            log.warning(
                "%s: the server's %s of round %d, but this client last trained round %d; ignored",
                self.cid,
                msg.verb,
                message.round,
                self.last_round,
            )
            return
        try:
            self._answer(message)
            if spec.evaluates:
                self.last_evaluation = message
        except _Interrupted:
            log.info("%s: round %d's %s abandoned unanswered", self.cid, message.round, msg.verb)
        except StepRefused as refused:
            log.warning("%s: %s; round %d's %s ends unanswered", self.cid, refused, message.round, msg.verb)
        except ValueError as error:  # a request the client cannot take (a reply without content, ...)
            self.endpoint.reject(f"bad-{msg.verb}", topic, str(error))

    def _agree_on_protocol(self, servers: tuple[int, ...]) -> None:
        """Write to the server in the newest protocol version both speak (a config of a version this
        device does not read never gets here: the endpoint refused it, saying which side to upgrade)."""
        agreed = newest_common(self.endpoint.versions, servers)
        assert agreed is not None  # `servers` holds the version the config came in, which this device read
        if agreed != self.endpoint.version_for(SERVER):
            said = versions_text(servers)
            log.info("%s: the server speaks protocol %s: this device writes version %d", self.cid, said, agreed)
            self.endpoint.write_to(SERVER, agreed)

    def _answer(self, request: Message) -> None:
        """Send the stored answer to a repeated request, or compute, checkpoint and send a new one."""
        assert self.app is not None  # built before any request is handled
        key = (request.verb, request.round)
        answer = self.stored_answers.get(key)
        if answer is None:
            log.info("%s: %s %d requested", self.cid, request.verb, request.round)
            if VERBS[request.verb].trains:
                # a new round: the server asks for none of the last one's answers again. Let go of
                # them before training, not after (FedICT's uplink held 328 MB through it)
                self.stored_answers = {k: v for k, v in self.stored_answers.items() if VERBS[k[0]].once}
            answer = self.app.handle(request, self._ask)
            if VERBS[request.verb].trains:
                self.last_round = request.round
            self.stored_answers[key] = answer
            if VERBS[request.verb].counted:
                self._save()
            log.info("%s: %s %d answered (%d bytes)", self.cid, request.verb, request.round, answer.content_bytes)
            if VERBS[request.verb].once and (age := seconds_since_start()) is not None:
                # its start-up: from the process's start (imports, the broker, its data and model) to its hello
                log.info("%s: %s sent %.1f s after its start; started_s=%.2f", self.cid, request.verb, age, age)
        else:
            log.info("%s: %s %d answered again with its stored answer", self.cid, request.verb, request.round)
        self.endpoint.publish(self.topics.up(self.cid, request.verb), answer)
        exchange_done([self.app])  # what simulated clients share (FedCache's hash encoder): this device is done with it
        self.answered_at = {k: v for k, v in self.answered_at.items() if k in self.stored_answers}
        self.answered_at[key] = time.monotonic()

    def _send_again(self, verb: str, round: int, asked_at: float) -> None:
        """The server has not received this answer: send the stored answer again. Nothing is
        computed here: a request still being worked on when it was asked is answered once done, and
        an answer sent after it was asked is on its way already."""
        key = (verb, round)
        answer = self.stored_answers.get(key)
        if answer is None or self.answered_at.get(key, -math.inf) >= asked_at:
            log.debug("%s: asked again for %s %d, which was answered since or is not answered yet", self.cid, *key)
            return
        log.info("%s: %s %d: its stored answer sent again (the server has not received it)", self.cid, *key)
        self.endpoint.publish(self.topics.up(self.cid, verb), answer)
        self.answered_at[key] = time.monotonic()

    def _ask(self, request: Message) -> Message:
        """Send a step request and wait for its answer, sending it again now and then (the server
        sends a repeat the same answer again). Other messages wait: the server asks nothing else of
        this client until its steps are done; a stop interrupts."""
        round, step = request.round, request.step
        topic = self.topics.up(self.cid, STEP)
        self.endpoint.publish(topic, request)
        sent = time.monotonic()
        while not self.stopping.is_set():
            try:
                msg = self.endpoint.inbox.get(timeout=0.5)
            except queue.Empty:
                if time.monotonic() - sent > STEP_RESEND_SECONDS:
                    log.info("%s: no answer to step %d of round %d yet; asking again", self.cid, step, round)
                    self.endpoint.publish(topic, request)
                    sent = time.monotonic()
                continue
            answer, spec = msg.message, VERBS.get(msg.verb)  # None: the deployment's own (a config)
            if (
                msg.direction != "down"
                or msg.client_id != self.cid
                or answer.sender != SERVER
                or answer.run != self.settings.run
            ):
                self._handle(msg)  # rejected there, with its reason
            elif spec is not None and spec.ends_run:
                self._handle(msg)
            elif msg.verb == STEP:
                if answer.round == round and answer.step == step and answer.is_answer:
                    return answer
                log.debug(
                    "%s: an answer to step %d of round %d while waiting for step %d",
                    self.cid,
                    answer.step,
                    answer.round,
                    step,
                )
            elif (spec is not None and spec.evaluates) or answer.round > round:
                # the server closed this client's steps (it went silent too long) and went on
                log.warning(
                    "%s: the server moved on (%s %d) during round %d's steps", self.cid, msg.verb, answer.round, round
                )
                self.endpoint.inbox.put(msg)  # handled once this round's training is abandoned
                break
            else:
                log.debug("%s: %s %d while waiting for step %d; ignored", self.cid, msg.verb, answer.round, step)
        raise _Interrupted

    def _configure(self, message: Message) -> None:
        values = control.config_from(message)
        config = replace(SimulationConfig(**values), device=self.settings.device)  # the device's own choice
        if self.config is not None:
            if asdict(config) != asdict(self.config):
                log.warning("%s: the server sent another config; keeping the one this run started with", self.cid)
            # The server sends a config again only to clients it does not see online: its broker did
            # not hand it this client's retained status (RabbitMQ's MQTT plugin hands retained
            # messages to exact-topic subscriptions only, and the server's is status/+). Say it again.
            self._say(control.ONLINE)
            return
        if self.cid not in _client_ids(config):
            raise ValueError(
                f"client id {self.cid!r} is not in run {self.settings.run!r} "
                f"({', '.join(_client_ids(config)[:3])}, ...)"
            )
        dataset = data = None
        if self.settings.data_dir is not None:
            data, dataset = load_device_data(self.settings.data_dir)
        pieces = prepare(config, dataset, on_demand=True)  # 8-bit images stay bytes; this client keeps its share so
        index = pieces.client_ids.index(self.cid)
        self.config = config
        recompute = self.settings.recompute_activations  # the device's own choice, as its device is
        self.role = build_client(config, pieces, index, data, recompute_activations=recompute)
        try:
            self._restore()
        except checkpoint.CheckpointError as error:  # unreadable, or not this run's: never half-restored
            log.warning("%s: %s; starting afresh", self.cid, error)
            self.role = build_client(config, pieces, index, data, recompute_activations=recompute)
            self.last_round, self.stored_answers = 0, {}
        poisoning = config.poisoning(self.cid, list(pieces.client_ids), self.role.model.state_dict())
        if poisoning is not None:
            log.warning("%s: this device attacks (--attack %s): its uplinks are poisoned", self.cid, config.attack)
        self.app = ClientApp(self.role, poisoning=poisoning)
        self.endpoint.resize(self.receive_limit())
        if data is None:  # a device's own data says nothing of its normalisation: no model file for it
            card = client_checkpoint(config, pieces.dataset, self.cid, pieces.model_names[index], pieces.splits[index])
            self.model_card = card
        if note := device_choice(config.device):
            log.info("%s: %s", self.cid, note)
        clear_dataset_cache()  # the role holds its share; the rest of the dataset is not needed again
        self._say(control.ONLINE)
        source = f"data from {self.settings.data_dir}" if self.settings.data_dir else f"its share of {config.dataset}"
        log.info(
            "%s: %s, model %s, %d training samples (%s), from round %d; peak_rss_mb=%.1f so far",
            self.cid,
            config.algo,
            pieces.model_names[index],
            len(self.role.data.train_y),
            source,
            self.last_round + 1,
            peak_rss_mb(),
        )

    def _save_model(self) -> None:
        """The model the run measured for this client (its own, or the state the server last had it
        evaluate), with its last accuracy, into the models folder: what `edgefd export` reads."""
        folder = self.models_dir
        if folder is None or self.role is None:
            return
        if self.model_card is None:
            log.info("%s: trained on its own data (--data-dir): no model file for edgefd export", self.cid)
            return
        evaluation = self.last_evaluation
        answer = self.stored_answers.get((evaluation.verb, evaluation.round)) if evaluation is not None else None
        accuracy = scores_of(answer.content)["accuracy"] if answer is not None else None
        model = deliverable_model(self.role, evaluation.content if evaluation is not None else None)
        card = replace(self.model_card, accuracy=accuracy, state=model.state_dict())
        try:
            path = save_checkpoint(card, folder / f"{self.cid}.pt")
        except OSError as error:  # a full or read-only disk: the run is over either way
            log.error("%s: could not save its model in %s: %s", self.cid, folder, error)
            return
        log.info("%s: its model is in %s (edgefd export reads it)", self.cid, path)

    # ------------------------------------------------------------------ status and checkpoints
    def _announce(self) -> None:
        """On every connection: "online" once the role is built (a client still loading its data
        and torch is not yet available; the server does not count it)."""
        if self.role is not None:
            self._say(control.ONLINE)

    def _say(self, state: str) -> None:
        self.endpoint.publish(
            self.topics.status(self.cid),
            control.status_message(self.cid, state, self.settings.run, self.last_round),
            retain=True,
        )

    def _save(self) -> None:
        if self.checkpoint_path is None:
            return
        assert self.config is not None and self.role is not None  # built before the first round
        state = {
            "config": asdict(self.config),
            "role": self.role,
            "last_round": self.last_round,
            "stored_answers": self.stored_answers,
        }
        checkpoint.save(self.checkpoint_path, state, {"data": self.role.context.data})

    def receive_limit(self) -> int:
        """The largest message this client takes from the server of its run: what that server may
        send it (`edgefd.runtime.limits.client_limit`, what a simulation's client takes too), under
        the run's --max-message-bytes and this device's own."""
        assert self.config is not None and self.role is not None  # the config has come
        caps = [cap for cap in (self.config.max_message_bytes, self.settings.max_message_bytes) if cap is not None]
        return client_limit(self.role.model, min(caps) if caps else None)

    def _restore(self) -> None:
        path = self.checkpoint_path
        if path is None or not path.exists():
            return
        assert self.config is not None and self.role is not None  # built just before
        saved = checkpoint.load(path, {"data": self.role.context.data})
        if saved.value("config") != asdict(self.config):
            log.warning("%s: checkpoint %s is from another config; starting afresh", self.cid, path)
            return
        saved.restore("role", self.role)  # into the role this process built from the config
        self.last_round = saved.value("last_round")
        self.stored_answers = saved.value("stored_answers")
        log.info("%s: resumed from its checkpoint after round %d", self.cid, self.last_round)


class _Interrupted(Exception):
    """A stop came, or the server went on to another request, while the client waited for a step's answer."""


def _client_ids(config: SimulationConfig) -> list[str]:
    from edgefd.runtime.build import client_ids_of

    return client_ids_of(config.clients)
