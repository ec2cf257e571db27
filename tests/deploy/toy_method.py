"""A toy method with a verb of its own, for the test that a new server-to-client message needs
nothing but the method and one line in the verb table (test_a_new_verb.py).

Each client uploads its sample count; after aggregating, the server "nudges" every aggregated
client with the round's total on a verb no built-in method uses, and the client keeps what it
was told. Its accuracy is the number of nudges it took in, so a round's record shows whether the
nudge reached it before the evaluation. Run as a process (``toy_method.py <edgefd arguments>``),
this is the `edgefd` command with the toy installed, as a device or a server would run it."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edgefd.algorithms.base import ClientRole, MethodSpec, ServerRole
from edgefd.algorithms.schema import ArraySpec, MessageSchema
from edgefd.protocol import Payload
from edgefd.runtime.verbs import Verb


@dataclass
class ToyParams:
    """The toy has no settings."""


class ToyClient(ClientRole):
    def __init__(self, context, params) -> None:
        super().__init__(context, params)
        self.nudges: list[tuple[int, int]] = []

    def train_round(self, round: int, downlink: Payload | None) -> Payload:
        return Payload("count", self.client_id, round, {"n": np.array([self.data.num_train], np.int64)})

    def receive_nudge(self, round: int, nudge: Payload) -> None:
        self.nudges.append((round, int(nudge.arrays["total"][0])))

    def evaluate(self, state=None, test=None) -> dict[str, float]:
        return {"accuracy": len(self.nudges) / 10}


class ToyServer(ServerRole):
    total = 0

    def uplink_schemas(self, client_id: str) -> Sequence[MessageSchema]:
        return (MessageSchema("count", {"n": ArraySpec(("int64",), (1,), 0, 10**9)}),)

    def downlink(self, round: int, client_id: str) -> Payload | None:
        return None

    def aggregate(self, round: int, uplinks: dict[str, Payload]) -> dict[str, float]:
        self.total = sum(int(p.arrays["n"][0]) for p in uplinks.values())
        return {"total": float(self.total)}

    def nudge(self, round: int, client_id: str) -> Payload:
        return Payload("total", "server", round, {"total": np.array([self.total], np.int64)})


METHOD = MethodSpec("toy", "a toy whose server nudges its clients after aggregating", ToyClient, ToyServer, ToyParams)

# its line in the verb table: what the server sends after aggregating, and what the client does with it
NUDGE = Verb(
    "nudge",
    lambda app, message, ask: app.role.receive_nudge(message.round, message.content),
    after_aggregation=lambda server, round, client_id: server.nudge(round, client_id),
    small_answer=True,
)


def install() -> None:
    """Register the toy and its verb in this process."""
    from edgefd.algorithms.base import _REGISTRY, get_method
    from edgefd.runtime.verbs import register_verb

    get_method("local")  # the built-in methods first
    _REGISTRY[METHOD.name] = METHOD
    register_verb(NUDGE)


if __name__ == "__main__":
    from edgefd.cli import main

    install()
    sys.exit(main(sys.argv[1:]))
