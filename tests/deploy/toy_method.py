"""A toy method with a verb of its own, for the test that a new server-to-client message needs
nothing but the method's file (test_a_new_verb.py).

Before each round's training the server "briefs" every selected client with the total it
aggregated in the round before, on a verb no built-in method uses; the client keeps what it was
told and reports it in its uplink. So a round's server metrics show whether the brief reached each
client before it trained (``heard``), and its accuracy, the number of briefs the client took in,
that each client took exactly one a round. Run as a process (``toy_method.py <edgefd arguments>``),
this is the `edgefd` command with the toy installed, as a device or a server would run it."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edgefd.algorithms import register_method, unregister_method
from edgefd.algorithms.base import ClientRole, ServerRole
from edgefd.algorithms.schema import ArraySpec, MessageSchema
from edgefd.protocol import Payload
from edgefd.runtime.verbs import Phase, Verb, register_verb, unregister_verb


@dataclass
class ToyParams:
    """The toy has no settings."""


class ToyClient(ClientRole):
    def __init__(self, context, params) -> None:
        super().__init__(context, params)
        self.briefs: list[tuple[int, int]] = []

    def train_round(self, round: int, downlink: Payload | None) -> Payload:
        heard = self.briefs[-1][1] if self.briefs and self.briefs[-1][0] == round else -1
        return Payload("count", {"n": np.array([self.data.num_train], np.int64), "heard": np.array([heard], np.int64)})

    def receive_brief(self, round: int, brief: Payload) -> None:
        self.briefs.append((round, int(brief.arrays["total"][0])))

    def evaluate(self, state=None, test=None) -> dict[str, float]:
        return {"accuracy": len(self.briefs) / 10}


class ToyServer(ServerRole):
    total = 0

    def uplink_schemas(self, client_id: str) -> Sequence[MessageSchema]:
        counts = ArraySpec(("int64",), (1,), -1, 10**9)
        return (MessageSchema("count", {"n": counts, "heard": counts}),)

    def downlink(self, round: int, client_id: str) -> Payload | None:
        return None

    def aggregate(self, round: int, uplinks: dict[str, Payload]) -> dict[str, float]:
        heard = sum(int(p.arrays["heard"][0]) for p in uplinks.values())
        self.total = sum(int(p.arrays["n"][0]) for p in uplinks.values())
        return {"total": float(self.total), "heard": float(heard)}

    def brief(self, round: int, client_id: str) -> Payload:
        return Payload("total", {"total": np.array([self.total], np.int64)})


# its line in the verb table: what the server sends before each round's training, and what the client does with it
BRIEF = Verb(
    "brief",
    lambda app, message, ask: app.role.receive_brief(message.round, message.content),
    phase=Phase.BEFORE_TRAINING,
    server_content=lambda server, round, client_id: server.brief(round, client_id),
    small_answer=True,
)


def install() -> None:
    """Register the toy and its verb in this process."""
    register_method("toy", "a toy whose server briefs its clients before they train", ToyClient, ToyServer, ToyParams)
    register_verb(BRIEF)


def uninstall() -> None:
    unregister_method("toy")
    unregister_verb(BRIEF.name)


if __name__ == "__main__":
    from edgefd.cli import main

    install()
    sys.exit(main(sys.argv[1:]))
