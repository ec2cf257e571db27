"""FD rounds through Flower's simulation engine and as a plain loop: the Flower row of
benchmarks/ray_vs_flower.py.

This file runs under another interpreter, one that has Flower (``pip install 'flwr[simulation]'``)
and torch but not edgefd: ``python3 benchmarks/ray_vs_flower.py --flower-python PYTHON`` starts it as
``PYTHON -I flower_fd.py --data FOLDER ...`` (``-I``: this folder, whose modules are named like
top-level packages, is not put on ``sys.path``). It imports numpy and torch, and Flower only to run
Flower's arm, so edgefd's tests can check its model against edgefd's ``cnn2``.

The workload is one FD round of edgefd (Jeong et al. 2018; docs/methods/fd.md) on the clients' data
that the benchmark wrote to FOLDER (``client-<i>.npz``: the same split as edgefd's run): each client
trains one local epoch of SGD with cross-entropy plus ``beta`` times the KL to the global mean logit
of the sample's label, then uploads its per-label mean logits and counts; the server averages them;
then every client scores its model on its local test split (edgefd's evaluation of each round).
It runs twice, and prints one JSON line with the seconds of each round of each:

- ``plain``: the clients' models and data held in this process, called one after another;
- ``flower``: a Flower `ServerApp` that sends "train" and "evaluate" messages to 100 `ClientApp`
  SuperNodes through ``flwr.simulation.run_simulation`` (Ray, ``--workers`` CPUs, one per client
  actor). A Flower `ClientApp` is built anew for each message, so each keeps its model in its
  ``Context.state`` between rounds and loads its data file when called, as Flower's examples do.

Both train with a fresh SGD optimiser each round and a batch order drawn from (round, client), so the
two do the same arithmetic; the overhead is Flower's seconds per round over the plain loop's.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class Workload:
    """The FD round's settings (edgefd's `SimulationConfig` and `FDParams` names)."""

    batch_size: int
    lr: float
    momentum: float
    weight_decay: float
    beta: float
    temperature: float
    threads: int


def small_cnn(shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """edgefd's ``cnn2`` (edgefd/models/generic.py, `SmallCNN` with channels 16, 32), written again:
    this interpreter has no edgefd. tests/bench/test_ray_bench.py checks the two have the same shapes."""
    features = nn.Sequential(
        nn.Conv2d(shape[0], 16, 3, padding=1),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Flatten(),
    )
    return nn.Sequential(features, nn.Linear(32 * (shape[1] // 4) * (shape[2] // 4), num_classes))


def load_client(folder: Path, index: int) -> dict[str, torch.Tensor]:
    """Client ``index``'s training and test samples, as the benchmark wrote them."""
    with np.load(folder / f"client-{index}.npz") as arrays:
        return {name: torch.from_numpy(arrays[name]) for name in ("x", "y", "test_x", "test_y")}


def train_round(
    model: nn.Module,
    data: dict[str, torch.Tensor],
    teacher: torch.Tensor | None,
    work: Workload,
    seed: tuple[int, int],
    num_classes: int,
) -> tuple[np.ndarray, np.ndarray]:
    """One local epoch against the global per-label logits ``teacher`` (None: cross-entropy alone);
    returns the per-label mean logits over the training data and their sample counts."""
    x, y = data["x"], data["y"]
    optimizer = torch.optim.SGD(model.parameters(), lr=work.lr, momentum=work.momentum, weight_decay=work.weight_decay)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed[0] * 100_003 + seed[1]))
    t = work.temperature
    model.train()
    for start in range(0, len(x), work.batch_size):
        rows = order[start : start + work.batch_size]
        optimizer.zero_grad(set_to_none=True)
        logits = model(x[rows])
        loss = nn.functional.cross_entropy(logits, y[rows])
        if teacher is not None:
            log_p = torch.log_softmax(teacher[y[rows]] / t, dim=1)
            log_q = torch.log_softmax(logits / t, dim=1)
            loss = loss + work.beta * (log_p.exp() * (log_p - log_q)).sum(1).mean() * t * t
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        logits = model(x)
    counts = torch.bincount(y, minlength=num_classes)
    sums = torch.zeros(num_classes, logits.shape[1]).index_add_(0, y, logits)
    means = sums / counts.clamp(min=1).unsqueeze(1)
    return means.numpy(), counts.numpy()


def accuracy(model: nn.Module, data: dict[str, torch.Tensor]) -> float:
    model.eval()
    with torch.no_grad():
        return float(model(data["test_x"]).argmax(1).eq(data["test_y"]).float().mean())


def aggregate(uplinks: list[tuple[np.ndarray, np.ndarray]]) -> torch.Tensor:
    """The global per-label mean logits, each client's weighted by its counts (edgefd's FD server)."""
    sums = sum(means.astype(np.float64) * counts[:, None] for means, counts in uplinks)
    counts = sum(counts for _, counts in uplinks)
    return torch.from_numpy((sums / np.maximum(counts, 1)[:, None]).astype(np.float32))


def plain_rounds(folder: Path, meta: dict[str, Any], work: Workload, rounds: int) -> list[float]:
    """Every client's model and data in this process, called one after another: the floor."""
    torch.set_num_threads(work.threads)
    shape, classes = tuple(meta["shape"]), meta["classes"]
    clients = [load_client(folder, i) for i in range(meta["clients"])]
    models = []
    for i in range(meta["clients"]):
        torch.manual_seed(i)
        models.append(small_cnn(shape, classes))
    teacher, seconds = None, []
    for r in range(1, rounds + 1):
        start = time.perf_counter()
        uplinks = [train_round(m, d, teacher, work, (r, i), classes) for i, (m, d) in enumerate(zip(models, clients))]
        teacher = aggregate(uplinks)
        [accuracy(m, d) for m, d in zip(models, clients)]
        seconds.append(time.perf_counter() - start)
    return seconds


def flower_rounds(folder: Path, meta: dict[str, Any], work: Workload, rounds: int, workers: int) -> dict[str, Any]:
    """The same rounds through Flower's simulation engine; the seconds of each round, and the
    start-up (from the call until the `ServerApp` sees every SuperNode)."""
    import flwr
    from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.simulation import run_simulation

    shape, classes = tuple(meta["shape"]), meta["classes"]
    client_app = ClientApp()

    def client_model(index: int, context: Context) -> nn.Module:
        torch.set_num_threads(work.threads)
        torch.manual_seed(index)
        model = small_cnn(shape, classes)
        if "model" in context.state.array_records:
            model.load_state_dict(context.state.array_records["model"].to_torch_state_dict())
        return model

    @client_app.train()
    def train(message: Message, context: Context) -> Message:
        index = int(context.node_config["partition-id"])
        model = client_model(index, context)
        knowledge = message.content.array_records.get("teacher")
        teacher = None if knowledge is None else torch.from_numpy(knowledge["logits"].numpy())
        means, counts = train_round(
            model, load_client(folder, index), teacher, work, (int(message.metadata.group_id), index), classes
        )
        context.state.array_records["model"] = ArrayRecord(model.state_dict())
        return Message(
            RecordDict({"knowledge": ArrayRecord({"means": Array(means), "counts": Array(counts)})}), reply_to=message
        )

    @client_app.evaluate()
    def evaluate(message: Message, context: Context) -> Message:
        index = int(context.node_config["partition-id"])
        model = client_model(index, context)
        score = accuracy(model, load_client(folder, index))
        return Message(RecordDict({"scores": MetricRecord({"accuracy": score})}), reply_to=message)

    server_app = ServerApp()
    times: dict[str, Any] = {"rounds": []}

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        nodes = sorted(grid.get_node_ids())
        while len(nodes) < meta["clients"]:  # the SuperNodes register after the ServerApp starts
            time.sleep(0.05)
            nodes = sorted(grid.get_node_ids())
        times["main"] = time.perf_counter()
        teacher = None
        for r in range(1, rounds + 1):
            start = time.perf_counter()
            content = (
                RecordDict() if teacher is None else RecordDict({"teacher": ArrayRecord({"logits": Array(teacher)})})
            )
            messages = [Message(content, dst_node_id=node, message_type="train", group_id=str(r)) for node in nodes]
            replies = list(grid.send_and_receive(messages))
            failed = [reply.error for reply in replies if reply.has_error()]
            if failed or len(replies) != len(nodes):
                raise RuntimeError(
                    f"round {r}: {len(replies)} of {len(nodes)} answers, {len(failed)} errors: {failed[:1]}"
                )
            uplinks = [
                (reply.content["knowledge"]["means"].numpy(), reply.content["knowledge"]["counts"].numpy())
                for reply in replies
            ]
            teacher = aggregate(uplinks).numpy()
            evaluations = [
                Message(RecordDict(), dst_node_id=node, message_type="evaluate", group_id=str(r)) for node in nodes
            ]
            list(grid.send_and_receive(evaluations))
            times["rounds"].append(time.perf_counter() - start)

    called = time.perf_counter()
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=meta["clients"],
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {
                "address": "local",
                "num_cpus": workers,
                "num_gpus": 0,
                "include_dashboard": False,
                "log_to_driver": False,
            },
        },
    )
    if len(times["rounds"]) != rounds:
        raise RuntimeError(f"Flower's simulation ran {len(times['rounds'])} of {rounds} rounds (its log says why)")
    return {"seconds": times["rounds"], "start_up": times["main"] - called, "flwr": flwr.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="folder of client-<i>.npz and meta.json")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of each loop")
    parser.add_argument("--workers", type=int, default=1, help="CPUs of Flower's Ray, one per client actor")
    arguments = parser.parse_args()
    meta = json.loads((arguments.data / "meta.json").read_text())
    work = Workload(**meta["workload"])
    plain = plain_rounds(arguments.data, meta, work, arguments.rounds)
    flower = flower_rounds(arguments.data, meta, work, arguments.rounds, arguments.workers)
    print(
        json.dumps(
            {"plain": plain, "flower": flower["seconds"], "start_up": flower["start_up"], "flwr": flower["flwr"]}
        )
    )


if __name__ == "__main__":
    main()
