"""A recording of one protocol version's messages: what a device or server of that release sends.

`messages()` builds one message of each shape a run sends (every verb and control message, with
and without content, every wire precision, a non-ASCII client id), always the same. Running this
file writes the bytes that the checked-out edgefd encodes them to:

    python tests/protocol/wire_fixture.py tests/protocol/fixtures/messages-v3.json

Before a change of the message format, record the outgoing version with the release that speaks
it; the tests then hold every later release to reading those bytes and writing them again
byte for byte (`tests/protocol/test_protocol_versions.py`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from edgefd.protocol import Message, Payload, encode_message
from edgefd.protocol.message import MESSAGE_VERSION, SERVER

FIXTURES = Path(__file__).parent / "fixtures"
RUN = "fleet-7"
CLIENT = "pi-kitchen-03"


def _logits() -> np.ndarray:
    return (np.arange(40, dtype=np.float32).reshape(4, 10) - 20.0) / 7.0


def messages() -> dict[str, Message]:
    """One message of each shape, by name: the same on every release."""
    weights = Payload("weights", {"conv.w": np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 3, 4)}, {"n": 479})
    knowledge = Payload(
        "knowledge",
        {"logits": _logits(), "labels": np.arange(4, dtype=np.int64)},
        {"samples": 4},
        {"logits": "fp16"},
    )
    int8 = Payload("logits", {"z": _logits()}, precision={"z": "int8"})
    hello = Payload("hello", {"counts": np.array([48, 50, 51, 0, 49, 47, 52, 50, 49, 50], dtype=np.int64)})
    return {
        "config": Message(
            "config", SERVER, CLIENT, -1, Payload("config", scalars={"json": '{"algo": "fd", "seed": 0}'}), run=RUN
        ),
        "status-online": Message(
            "status", CLIENT, SERVER, -1, Payload("status", scalars={"state": "online", "last_round": 3}), run=RUN
        ),
        "hello-request": Message("hello", SERVER, CLIENT, 0, run=RUN),
        "hello-answer": Message("hello", CLIENT, SERVER, 0, hello, run=RUN, is_answer=True),
        "train-request": Message("train", SERVER, CLIENT, 2, weights, run=RUN),
        "train-answer": Message("train", CLIENT, SERVER, 2, knowledge, run=RUN, is_answer=True),
        "step-request": Message("step", CLIENT, SERVER, 2, int8, step=5, run=RUN),
        "step-refused": Message("step", SERVER, CLIENT, 2, None, step=5, run=RUN, is_answer=True),
        "again": Message("train", SERVER, CLIENT, 2, Payload("again"), run=RUN),
        "evaluate-answer": Message(
            "evaluate",
            CLIENT,
            SERVER,
            2,
            Payload("metrics", scalars={"accuracy": 0.8125, "loss": 0.5}),
            run=RUN,
            is_answer=True,
        ),
        "stop": Message("stop", SERVER, "café-ü", -1, run=RUN),
    }


def record(path: Path) -> None:
    revision = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    recorded = {name: encode_message(message).hex() for name, message in messages().items()}
    document = {"version": MESSAGE_VERSION, "recorded_at": revision, "messages": recorded}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    record(Path(sys.argv[1]))
