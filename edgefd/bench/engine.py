"""`edgefd bench engine`: what the simulation engine costs on top of the training itself.

It runs FedAvg rounds through `edgefd simulate`'s engine (roles, codec, byte ledger, per-client
RNGs, evaluation) and the same work as a plain PyTorch loop over the same models and data (copy
the global weights in, one local epoch of SGD per client, average the state dicts, evaluate the
global model on every client's test split). The plain loop is the compute floor; the overhead is
the engine's seconds per round over the floor's, minus one. Rounds alternate between the two so
that machine noise hits both alike.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

# torch (and the engine, which imports it) is imported where a benchmark runs: `--help` needs neither.
if TYPE_CHECKING:
    import torch
    from torch import nn

    from edgefd.runtime.config import SimulationConfig


@dataclass
class EngineBenchResult:
    dataset: str
    clients: int
    rounds: int
    engine_seconds_per_round: float
    plain_seconds_per_round: float
    overhead: float
    """engine / plain - 1 (0.05 = 5% slower than the floor)."""


def _plain_round(
    models: list[nn.Module],
    data: list[tuple],
    global_model: nn.Module,
    config: SimulationConfig,
    generators: list[torch.Generator],
) -> None:
    import torch
    from torch import nn

    states, sizes = [], []
    for model, (x, y, _, _), gen in zip(models, data, generators):
        model.load_state_dict(global_model.state_dict())
        model.train()
        opt = torch.optim.SGD(
            model.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay
        )
        order = torch.randperm(len(x), generator=gen)
        for start in range(0, len(x), config.batch_size):
            idx = order[start : start + config.batch_size]
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
        states.append(model.state_dict())
        sizes.append(len(x))
    total = float(sum(sizes))
    averaged = {}
    for name, value in states[0].items():
        stacked = sum(s[name].double() * (n / total) for s, n in zip(states, sizes))
        averaged[name] = stacked.round().to(value.dtype) if not value.is_floating_point() else stacked.to(value.dtype)
    global_model.load_state_dict(averaged)
    global_model.eval()
    with torch.no_grad():
        for _, _, tx, ty in data:
            for start in range(0, len(tx), 1024):
                global_model(tx[start : start + 1024]).argmax(1).eq(ty[start : start + 1024]).sum()


def measure(
    dataset: str = "fmnist", clients: int = 10, rounds: int = 3, threads: int = 2, progress=print
) -> EngineBenchResult:
    import torch

    from edgefd.runtime.build import build
    from edgefd.runtime.config import SimulationConfig

    config = SimulationConfig(
        algo="fedavg",
        dataset=dataset,
        clients=clients,
        rounds=rounds,
        partition="iid",
        threads=threads,
        out=None,
        device="cpu",  # the plain loop it is compared with runs on the CPU
    )
    sim = build(config)
    federation = sim.federation
    roles = [sim.clients[cid] for cid in sorted(sim.clients)]
    models = [copy.deepcopy(role.model) for role in roles]
    data = [(r.data.train_x, r.data.train_y, r.data.test_x, r.data.test_y) for r in roles]
    global_model = copy.deepcopy(models[0])
    generators = [torch.Generator().manual_seed(i) for i in range(clients)]
    federation.hello()

    engine_times, plain_times = [], []
    for r in range(1, rounds + 1):
        start = time.perf_counter()
        federation.run_round(r)
        engine_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        _plain_round(models, data, global_model, config, generators)
        plain_times.append(time.perf_counter() - start)
        progress(f"round {r}: engine {engine_times[-1]:.2f} s, plain loop {plain_times[-1]:.2f} s")
    engine, plain = statistics.median(engine_times), statistics.median(plain_times)
    return EngineBenchResult(dataset, clients, rounds, round(engine, 6), round(plain, 6), round(engine / plain - 1, 6))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dataset",
        metavar="NAME",
        default="fmnist",
        help="dataset the FedAvg clients train on, by registry name, e.g. digits for a quick run "
        "(`edgefd partition --list` shows them) (default: %(default)s)",
    )
    parser.add_argument(
        "--clients",
        type=int,
        metavar="N",
        default=10,
        help="FedAvg clients (IID split, all of them every round) (default: %(default)s)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        metavar="N",
        default=3,
        help="timed rounds of each, the engine and the plain loop alternating; medians are reported "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--threads", type=int, metavar="N", default=2, help="torch and kernel threads (default: %(default)s)"
    )
    parser.add_argument(
        "--json",
        metavar="FILE",
        help="also write the result (seconds per round of each, overhead) to FILE, e.g. docs/bench-engine.json "
        "(default: print only)",
    )


def run(args: argparse.Namespace) -> int:
    result = measure(args.dataset, args.clients, args.rounds, args.threads)
    print(
        f"FedAvg, {result.clients} clients, 1 local epoch on {result.dataset}: "
        f"engine {result.engine_seconds_per_round:.2f} s/round, plain PyTorch loop "
        f"{result.plain_seconds_per_round:.2f} s/round, overhead {100 * result.overhead:+.1f}%"
    )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(asdict(result), handle, indent=2)
    return 0
