"""How large a message a run takes: one rule for every channel, so that a simulation refuses
exactly what a deployment of the same run refuses.

A deployed server decides what it takes on a topic before it buffers a byte of the message (a
device could otherwise fill its memory), so it needs, per client and verb, the largest message it
accepts. That follows from the run: the method's schemas for this client (its hello, its uplink,
its step requests: `edgefd.algorithms.schema.message_bound`) bound the content, for this run's data
and models, and a message adds `WRAPPING_BYTES` of metadata around it. FedICT's uplink for 1,381
MNIST samples is ~69 MB and for 5,000 CIFAR-10 samples ~312 MB: a fixed limit would refuse the one
or the other, where the schema's bound takes both and refuses one byte more. Where a schema leaves
a size open (an axis of any length), a message may be up to `OPEN_MESSAGE_BYTES`. An operator may
cap every message of the run (`SimulationConfig.max_message_bytes`, ``--max-message-bytes``); the
bound still applies under a larger cap.

A client takes from the server a model of its own architecture with the knowledge that rides with
it (FedAvg, DFL, FedZKT, FedD2S send weights back) or knowledge about its own samples and classes
(logits, soft targets: FedICT's are 48 bytes a sample at 10 classes): `client_limit`.

The in-process channel applies the same limits to the bytes it carries (a client whose answer is
larger misses the round, and the round's record says so under ``rejected``), so that a simulation
stays the twin of its deployment.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from edgefd.runtime.records import RoundRecord
from edgefd.runtime.verbs import VERBS

# Types only: `edgefd server --help` reaches this module through the MQTT channel, and torch is slow to import.
if TYPE_CHECKING:
    from torch import nn

    from edgefd.algorithms.base import ServerRole

log = logging.getLogger(__name__)

OPEN_MESSAGE_BYTES = 64 * 1024 * 1024
"""The largest message taken where the method's schema leaves its size open (and, with no cap,
the least room the receiver keeps for messages waiting to be handled)."""
WRAPPING_BYTES = 1024
"""What a message adds to a method's content (its metadata): also the largest message taken on a
verb whose content the method bounds at 0 (it has no schema for it: FD's and FedAvg's hello and
step), an answer without content."""
SMALL_ANSWER_MAX_BYTES = 64 * 1024
"""The largest answer taken on a verb whose answer is small (scores; an acknowledgement)."""
OVERSIZED = "OversizedError"
"""The reason a message larger than its limit is recorded under in a round's ``rejected`` (the
name of the codec's error, as a deployment's transport counts it)."""

Bounds = Callable[[str], Mapping[str, "int | None"]]
"""For a client, the largest content the method accepts from it now on each verb (None: open)."""


def method_bounds(server: ServerRole, client_id: str) -> dict[str, int | None]:
    """The largest content the method accepts from ``client_id`` now, per verb a client sends on
    (None: open). A verb the method declares no schema for takes no content (0: FD's and FedAvg's
    hello, every method's step but FedCache's per-batch exchange), and a method's round uplink comes
    on ``steps`` or on ``train``, never both: left open, such a verb would take messages of
    `OPEN_MESSAGE_BYTES` the method would only refuse once whole."""
    from edgefd.algorithms.schema import message_bound  # numpy: not for `edgefd server --help`

    def bound(schemas) -> int | None:
        return message_bound(schemas) if schemas else 0

    uplink = bound(server.uplink_schemas(client_id))
    return {
        "hello": bound(server.hello_schemas(client_id)),
        "train": 0 if server.step_exchange else uplink,
        "steps": uplink if server.step_exchange else 0,
        "step": bound(server.request_schemas(client_id)),
    }


def largest_message(bound: int | None, cap: int | None) -> int:
    """The largest message taken where the method's content is at most ``bound`` bytes (None:
    open), under the run's ``cap`` (None: none)."""
    largest = OPEN_MESSAGE_BYTES if bound is None else bound + WRAPPING_BYTES
    if cap is None:
        return largest
    return cap if bound is None else min(largest, cap)


def client_limit(model: nn.Module, cap: int | None) -> int:
    """The largest message a client takes from the server: `OPEN_MESSAGE_BYTES` of knowledge plus
    twice its model's weights (a model of its architecture, with whatever rides with it), under
    the run's ``cap``."""
    weights = sum(tensor.numel() * tensor.element_size() for tensor in model.state_dict().values())
    largest = OPEN_MESSAGE_BYTES + 2 * weights
    return largest if cap is None else min(largest, cap)


def check_cap(cap: int | None) -> None:
    """A ValueError for a cap no message fits under (the smallest answer is ~100 bytes)."""
    if cap is not None and cap < WRAPPING_BYTES:
        raise ValueError(f"max_message_bytes: must be at least {WRAPPING_BYTES} (a message's metadata), got {cap}")


class MessageLimits:
    """The largest message a run takes from each of its clients on each verb, as of the start of
    the current round (`update`): the one rule of the module doc, for the MQTT channel and the
    in-process channel alike."""

    def __init__(self, cap: int | None = None, bounds: Bounds | None = None) -> None:
        """``cap``: the run's --max-message-bytes (None: none); ``bounds``: the method's bounds per
        client (`method_bounds`; None: every size open)."""
        check_cap(cap)
        self.cap = cap
        self.bounds = bounds
        self._bounds: dict[str, dict[str, int | None]] = {}

    def update(self, client_ids: Iterable[str]) -> None:
        """Ask the method again: a round begins (its bounds follow what it learnt, e.g. a hello)."""
        if self.bounds is not None:  # replaced whole: a deployment's network thread reads it
            bounds = self.bounds
            self._bounds = {cid: dict(bounds(cid)) for cid in client_ids}

    def bound(self, client_id: str, verb: str) -> int | None:
        """The method's bound on the content of ``client_id``'s messages on ``verb`` (None: open)."""
        return self._bounds.get(client_id, {}).get(verb)

    def largest(self, client_id: str, verb: str) -> int:
        """The largest message taken from ``client_id`` on ``verb``: a small answer's cap on a verb
        whose answer is small (scores, acknowledgements), else `largest_message` of the method's
        bound under the run's cap."""
        spec = VERBS.get(verb)
        if spec is None or spec.small_answer:
            return SMALL_ANSWER_MAX_BYTES if self.cap is None else min(SMALL_ANSWER_MAX_BYTES, self.cap)
        return largest_message(self.bound(client_id, verb), self.cap)

    def refusal(self, client_id: str, verb: str, size: int) -> str | None:
        """Why a message of ``size`` bytes from ``client_id`` on ``verb`` is refused (None: it is
        taken), as a round's ``rejected`` says it."""
        largest = self.largest(client_id, verb)
        if size <= largest:
            return None
        return f"{OVERSIZED} (a {verb} message of {size} bytes; at most {largest} taken{self._why(client_id, verb)})"

    def _why(self, client_id: str, verb: str) -> str:
        spec = VERBS.get(verb)
        if spec is None or spec.small_answer:
            return ""
        bound = self.bound(client_id, verb)
        if self.cap is not None and (bound is None or bound + WRAPPING_BYTES > self.cap):
            return ": --max-message-bytes"
        return ": the method's bound" if bound is not None else ": a size the method leaves open"


def record_refusals(record: RoundRecord, refused: Mapping[str, str]) -> None:
    """Add to the round's ``rejected`` the clients whose messages a simulation's channel refused for
    their size, and why (``refused``), each named in a warning, as a deployment's server names what
    it refused on the wire."""
    if not refused:
        return
    rejected = dict(record.rejected)
    for cid, why in sorted(refused.items()):
        log.warning("round %d: refused from %s: %s", record.round, cid, why)
        rejected[cid] = f"{rejected[cid]}; {why}" if cid in rejected else why
    record.rejected = dict(sorted(rejected.items()))
