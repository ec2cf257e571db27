"""An `edgefd client` whose messages are tampered with: each round's uplink carries one attack on
the method's knowledge (a payload that decodes, but is not what the method accepts), and with FD
some eval answers report an accuracy that is text, infinite or above 1. Run as a process by
test_hostile_devices.py: ``hostile_client.py fd|fedcache <edgefd client flags>``."""

import sys
from dataclasses import replace

import numpy as np

from edgefd.protocol import Payload
from edgefd.runtime.verbs import SCORES_KIND, VERBS

honest_train = VERBS["train"].handle
honest_evaluate = VERBS["evaluate"].handle


def replaced(payload: Payload, **arrays) -> Payload:
    """``payload`` with ``arrays`` replaced (None: removed); a replaced array travels losslessly, so
    that the server receives exactly the attack."""
    new = {name: array for name, array in {**payload.arrays, **arrays}.items() if array is not None}
    precision = {name: p for name, p in payload.precision.items() if name in new and name not in arrays}
    return Payload(payload.kind, new, payload.scalars, precision)


FD_ATTACKS = {
    1: lambda p: replaced(p, counts=None),  # an array missing
    2: lambda p: replaced(p, logits=np.zeros((1, 1), np.float32)),  # broadcasts silently
    3: lambda p: replaced(p, logits=np.full_like(p.arrays["logits"], 1e30)),  # finite, absurd
    4: lambda p: replaced(p, logits=np.full_like(p.arrays["logits"], 70000.0)),  # beyond fp16: unencodable later
    5: lambda p: replaced(p, counts=np.full_like(p.arrays["counts"], -3)),  # negative counts: Inf averages
    6: lambda p: replaced(p, logits=p.arrays["logits"].astype(np.float64)),
    7: lambda p: Payload("weights", {"w": np.zeros(3, np.float32)}),
}
FEDCACHE_ATTACKS = {
    1: lambda p: replaced(p, ids=p.arrays["ids"] + 1),  # the neighbouring samples: some are another client's
    2: lambda p: replaced(p, logits=p.arrays["logits"][:-1]),  # one row short of the ids
}
ATTACKS = {"fd": FD_ATTACKS, "fedcache": FEDCACHE_ATTACKS}[sys.argv[1]]
BAD_ACCURACY = {2: "text", 3: float("inf"), 4: 1.7} if sys.argv[1] == "fd" else {}


def hostile_train(app, message, ask):
    return ATTACKS[message.round](honest_train(app, message, ask))


def hostile_evaluate(app, message, ask):
    if message.round in BAD_ACCURACY:
        return Payload(SCORES_KIND, scalars={"accuracy": BAD_ACCURACY[message.round]})
    return honest_evaluate(app, message, ask)


# the device's handlers of the two verbs, replaced in the one table every channel dispatches by
VERBS["train"] = replace(VERBS["train"], handle=hostile_train)
VERBS["evaluate"] = replace(VERBS["evaluate"], handle=hostile_evaluate)

if __name__ == "__main__":
    from edgefd.cli import main

    sys.exit(main(["client", *sys.argv[2:]]))
