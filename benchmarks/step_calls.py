"""How many Python function calls one FedCache step exchange costs, and which edgefd files they visit.

FedCache's default exchange (``exchange=batch``) sends a request per mini-batch and waits for the
server's answer, so whatever the wire and the checks cost in Python is paid once per training step.
This counts it, through public entry points only: a simulation is built (`edgefd.runtime.build.build`:
FedCache on digits, 3 clients, exact relations), round 0 runs (`Federation.start`), then one client's
round 2 alone, as the loop sends it (`Federation.train_with_steps`, or `Federation.exchange` of its
``train`` verb), runs
twice: once under cProfile with the exchange (``exchange=batch``) and once, built alike, with
``exchange=round`` and the same batches (its one download and one upload a
round are the only exchange). Both train the same model on the same batches, so the difference,
divided by the number of steps, is what ONE step's exchange costs: the client's request sealed,
encoded, counted and decoded, checked and answered by the server, the answer sealed, encoded and
decoded, and taken in by the client. The client's side of the exchange runs in a thread of its own
(`edgefd.runtime.conversation`), profiled with the rest.

Printed: Python calls per step (every call cProfile sees: Python functions, generator resumptions
and C functions alike), the distinct edgefd source files the exchange's calls visit, and the functions
with the most calls per step. Counts are deterministic; nothing is timed.

    python benchmarks/step_calls.py [--clients 3] [--samples 64] [--batch-size 8] [--top 15]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
from collections import Counter
from pathlib import Path
from typing import Any

import edgefd
from edgefd.runtime.build import build
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.conversation import Conversation

PACKAGE = Path(edgefd.__file__).resolve().parent

Calls = Counter[tuple[str, int, str]]


def profile_round(exchange: str, clients: int, samples: int, batch_size: int) -> tuple[Calls, int]:
    """Calls made by client 0's round 1 under ``exchange``, by function, and its number of steps."""
    config = SimulationConfig(
        algo="fedcache",
        dataset="digits",
        clients=clients,
        rounds=2,
        seed=0,
        models="mlp",
        threads=1,
        samples_per_client=samples,
        batch_size=batch_size,
        params={"exchange": exchange, "knn": "exact"},
    )
    sim = build(config)
    federation = sim.federation
    federation.start()
    federation.run_round(1)  # warm: lazy imports and first-call set-up are not a step's cost
    client = federation.client_ids[0]
    profiler = cProfile.Profile()
    threads: list[cProfile.Profile] = []  # a client's work that asks runs in a thread of its own
    work = Conversation._work

    def profiled_work(self: Conversation, *args: Any) -> None:
        threads.append(cProfile.Profile())
        threads[-1].runcall(work, self, *args)

    Conversation._work = profiled_work  # type: ignore[method-assign]
    try:
        if exchange == "batch":
            profiler.runcall(federation.train_with_steps, 2, client)
        else:
            profiler.runcall(federation.exchange, "train", 2, {client: federation.downlink(2, client)})
    finally:
        Conversation._work = work  # type: ignore[method-assign]
    samples = len(sim.clients[client].data.train_y)
    steps = -(-samples // batch_size)  # the last batch of the epoch may be short
    stats = pstats.Stats(profiler)
    for thread in threads:
        stats.add(thread)
    calls: Calls = Counter({func: entry[1] for func, entry in stats.stats.items()})  # type: ignore[attr-defined]
    return calls, steps


def in_package(func: tuple[str, int, str]) -> str | None:
    """The edgefd source file (relative to the package) a profiled function is defined in, or None."""
    try:
        return str(Path(func[0]).resolve().relative_to(PACKAGE))
    except ValueError:  # another package's, a C function's ("~") or generated code's
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--samples", type=int, default=64, help="training samples per client")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--top", type=int, default=15, help="functions listed (default: %(default)s)")
    args = parser.parse_args()

    batch, steps = profile_round("batch", args.clients, args.samples, args.batch_size)
    rounded, steps_round = profile_round("round", args.clients, args.samples, args.batch_size)
    assert steps == steps_round
    exchange = Counter({func: n - rounded.get(func, 0) for func, n in batch.items() if n > rounded.get(func, 0)})
    per_step = sum(exchange.values()) / steps
    files = sorted({path for func in exchange if (path := in_package(func)) is not None})

    print(f"FedCache exchange=batch, digits, {args.clients} clients, batch {args.batch_size}, {steps} steps")
    print(
        f"Python calls per step exchange: {per_step:.0f}  (whole step with training: {sum(batch.values()) / steps:.0f})"
    )
    print(f"edgefd source files visited: {len(files)}")
    for path in files:
        print(f"  edgefd/{path}")
    print(f"top {args.top} functions by calls per step:")
    for func, n in exchange.most_common(args.top):
        path = in_package(func)
        where = f"edgefd/{path}" if path else Path(func[0]).name
        print(f"  {n / steps:7.1f}  {where}:{func[1]}({func[2]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
