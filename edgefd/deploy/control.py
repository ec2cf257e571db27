"""The deployment's own control messages, beside the loop's verbs: the run's config, a client's
status, and the server's "send your answer again" (the loop's messages themselves are
`edgefd.protocol.message`).

The loop's verbs (`edgefd.runtime.verbs`) go out on `down/<client>/<verb>` and come back on
`up/<client>/<verb>`, as :class:`~edgefd.protocol.Message` s whose metadata says who, which
round and which step. Around them a deployment needs three messages of its own:

- ``config`` (server -> client, retained on `down/<client>/config`): the resolved run config, as
  JSON, from which every client builds its role exactly as `simulate` builds it;
- ``status`` (client -> server, retained on `status/<client>`): online or offline, the latter
  also the connection's last will;
- ``again`` (server -> client, on the topic of the request that is missing its answer): a few
  bytes asking the client to send its stored answer again; nothing is recomputed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import Any

from edgefd.protocol import Payload
from edgefd.protocol.message import SERVER, Message

CONFIG = "config"
STATUS = "status"
ONLINE = "online"
OFFLINE = "offline"
AGAIN = "again"
"""The kind of the content that asks a client to send its stored answer again."""


def config_message(config: Any, client_id: str, run: str) -> Message:
    """The run's resolved config (a SimulationConfig), as JSON: every client builds from it. A
    setting at None whose default is None is left out (the client's default is the same), so that a
    device of the previous edgefd, which lacks a newer such setting (``max_message_bytes``), reads
    the config of a run that does not use it."""
    defaults = {f.name: f.default for f in fields(config)}
    values = {k: v for k, v in asdict(config).items() if v is not None or defaults[k] is not None}
    content = Payload(CONFIG, scalars={"json": json.dumps(values, sort_keys=True)})
    return Message(CONFIG, SERVER, client_id, -1, content, run=run)


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
