"""The deployment's own control messages, beside the loop's verbs: the run's config, a client's
status, and the server's "send your answer again" (the loop's messages themselves are
`edgefd.protocol.message`).

The loop's verbs (`edgefd.runtime.verbs`) go out on `down/<client>/<verb>` and come back on
`up/<client>/<verb>`, as :class:`~edgefd.protocol.Message` s whose metadata says who, which
round and which step. Around them a deployment needs three messages of its own:

- ``config`` (server -> client, retained on `down/<client>/config`): the resolved run config, as
  JSON, from which every client builds its role exactly as `simulate` builds it, and the protocol
  versions the server speaks (a device writes the newest both speak; `protocols_of`);
- ``status`` (client -> server, retained on `status/<client>`): online or offline, the latter
  also the connection's last will;
- ``again`` (server -> client, on the topic of the request that is missing its answer): a few
  bytes asking the client to send its stored answer again; nothing is recomputed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import Any

from edgefd.protocol import MESSAGE_VERSIONS, Payload
from edgefd.protocol.message import SERVER, Message
from edgefd.protocol.payload import Scalar

CONFIG = "config"
STATUS = "status"
ONLINE = "online"
OFFLINE = "offline"
OLDEST, NEWEST = "oldest_protocol", "newest_protocol"
"""A config's scalars naming the protocol versions its server speaks."""
AGAIN = "again"
"""The kind of the content that asks a client to send its stored answer again."""


def config_message(config: Any, client_id: str, run: str, versions: tuple[int, ...] = MESSAGE_VERSIONS) -> Message:
    """The run's resolved config (a SimulationConfig), as JSON: every client builds from it, and the
    protocol ``versions`` the server speaks, beside the JSON (a device of protocol version 2 reads
    the JSON alone). A setting at None whose default is None is left out (the client's default is
    the same), so that a device of the previous edgefd, which lacks a newer such setting
    (``max_message_bytes``), reads the config of a run that does not use it."""
    defaults = {f.name: f.default for f in fields(config)}
    values = {k: v for k, v in asdict(config).items() if v is not None or defaults[k] is not None}
    scalars: dict[str, Scalar] = {"json": json.dumps(values, sort_keys=True)}
    scalars |= {OLDEST: min(versions), NEWEST: max(versions)}
    return Message(CONFIG, SERVER, client_id, -1, Payload(CONFIG, scalars=scalars), run=run)


def protocols_of(message: Message, heard: int) -> tuple[int, ...]:
    """The protocol versions the server of a config speaks: those it names, or (a server of
    protocol version 2, which names none) only the version the config came in, ``heard``."""
    scalars = message.content.scalars if message.content is not None else {}
    oldest, newest = scalars.get(OLDEST), scalars.get(NEWEST)
    if isinstance(oldest, int) and isinstance(newest, int) and 0 <= oldest <= heard <= newest <= 255:
        return tuple(range(oldest, newest + 1))
    return (heard,)


def config_from(message: Message) -> dict[str, Any]:
    content = message.content
    text = None if content is None else content.scalars.get("json")
    if content is None or content.kind != CONFIG or not isinstance(text, str):
        raise ValueError(f"expected a config, got {content and content.kind!r}")
    values = json.loads(text)
    if not isinstance(values, dict):
        raise ValueError("config: the JSON is not an object")
    return values


def status_message(client_id: str, state: str, run: str, last_round: int = -1) -> Message:
    content = Payload(STATUS, scalars={"state": state, "last_round": last_round})
    return Message(STATUS, client_id, SERVER, -1, content, run=run)


def state_of(message: Message) -> str | None:
    """ONLINE or OFFLINE for a status message; None for anything else."""
    content = message.content
    state = content.scalars.get("state") if content is not None and content.kind == STATUS else None
    return state if state in (ONLINE, OFFLINE) else None


def again(request: Message) -> Message:
    """The server's "send your answer to this request again": a few bytes where the request itself
    may carry a whole model. A client answers it only with its stored answer."""
    return Message(request.verb, SERVER, request.receiver, request.round, Payload(AGAIN), run=request.run)


def is_again(message: Message) -> bool:
    return message.content is not None and message.content.kind == AGAIN
