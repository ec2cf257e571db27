"""Device memory: the peak RSS of `edgefd client` during a round with each paper's largest client
model, and of `edgefd predict` with that model's exported ONNX file.

    python3 benchmarks/device_memory.py                           # every case (about 15 min)
    python3 benchmarks/device_memory.py --cases fedcache,dfl       # some of them
    python3 benchmarks/device_memory.py --python /tmp/cpu/bin/python   # clients and predict on another torch
    python3 benchmarks/device_memory.py --quick                    # digits, one tiny client: checks it runs

Each case is a real deployment: a Mosquitto broker (edgefd.deploy.broker.start_broker), one
`edgefd server` and `--clients` `edgefd client` processes, one round (training and evaluation; `--rounds`),
every client with the case's model. A client logs its own peak (`peak_rss_mb`, Linux's VmHWM:
the peak of its own memory, whatever launched it) once its role is built and again when it
stops; the benchmark also polls each client's /proc/PID/status while it runs, and reports the
larger figure. Then the model, freshly initialised (memory does not depend on the weights), is
exported with `edgefd export`'s code (fp32 and static int8, with sidecars) and `edgefd predict`
runs it on one sample in a process of its own, which reports its VmHWM and whether torch was
imported.

The cases are each method's largest client model of its zoo, on its paper's dataset shape, with
the paper's per-client data size and batch size: Fashion-MNIST is real (Debian's
dataset-fashion-mnist); CIFAR-10 / CIFAR-100 are read from --data-root when there, else written
as synthetic files of the official format and size (random pixels: the same arrays, the same
loader, the same memory). Variants beside the papers' settings show what fits a device: `--cases
fedcache-onnx,fedict-recompute,fedict-int8,fedict-b64-int8,fedict-2500-int8,fedzkt-cifar-b32,fedzkt-cifar-b64`
(the hash encoder exported beforehand; FedICT on a device that recomputes activations; FedICT's
features as int8, at its paper's setting, in batches of 64, and with half its data; FedZKT's
MobileNetV2 in batches of 32 and 64). Prints a table; --json FILE writes the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

SYNTHETIC_MARK = "SYNTHETIC"
PEAK_LINE = re.compile(r"peak_rss_mb=([0-9.]+)")
STARTED_LINE = re.compile(r"started_s=([0-9.]+)")


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    model: str
    dataset: str
    samples: int
    """Training samples per client (the paper's per-client share where it gives one)."""
    batch_size: int
    why: str
    params: tuple[str, ...] = ()
    device_flags: tuple[str, ...] = ()
    """The device's own `edgefd client` flags (not the run's)."""


CASES = (
    Case(
        "fd", "fd", "cnn2", "fmnist", 600, 32, "FD/FedAvg baselines: edgefd's cnn2 (--models auto); MNIST-size shares"
    ),
    Case("fedavg", "fedavg", "cnn2", "fmnist", 600, 32, "as FD"),
    Case(
        "fedcache",
        "fedcache",
        "resnet20",
        "fmnist",
        3000,
        8,
        "A^C_3 ResNet-20, the largest; FMNIST over 20 clients; batch 8; MobileNetV3 hash encoder (random weights); "
        "exchange=round (batch sends a small request per mini-batch: the same model and data, a much longer run)",
        ("encoder=mobilenet", "hash_cache=off", "knn=exact", "exchange=round"),
    ),
    Case(
        "fedcache-onnx",
        "fedcache",
        "resnet20",
        "fmnist",
        3000,
        8,
        "as above, with the hash encoder exported beforehand (edgefd export-encoder) and run by onnxruntime: "
        "encoder=onnx:FILE, the device's way (no torch.onnx export and no torchvision on the device)",
        ("encoder=onnx:@ENCODER@", "hash_cache=off", "knn=exact", "exchange=round"),
    ),
    Case(
        "fedict",
        "fedict",
        "fedict_c3",
        "cifar10",
        5000,
        256,
        "A^C_3, the largest client; CIFAR-10 over 10 clients (uploads 16x32x32 fp32 features of every sample); "
        "batch 256",
    ),
    Case(
        "fedict-recompute",
        "fedict",
        "fedict_c3",
        "cifar10",
        5000,
        256,
        "the paper's setting on a device that recomputes activations (edgefd client --recompute-activations)",
        device_flags=("--recompute-activations",),
    ),
    Case(
        "fedict-int8",
        "fedict",
        "fedict_c3",
        "cifar10",
        5000,
        256,
        "as above, the features sent as int8 (feature_precision=int8: a quarter of the bytes)",
        ("feature_precision=int8",),
    ),
    Case(
        "fedict-b64-int8",
        "fedict",
        "fedict_c3",
        "cifar10",
        5000,
        64,
        "the paper's data with mini-batches of 64 and int8 features: a setting beside the paper's, for a 1 GB device",
        ("feature_precision=int8",),
    ),
    Case(
        "fedict-2500-int8",
        "fedict",
        "fedict_c3",
        "cifar10",
        2500,
        256,
        "half the paper's data per client, the paper's batch and int8 features: a setting beside the paper's",
        ("feature_precision=int8",),
    ),
    Case(
        "fedd2s",
        "fedd2s",
        "fedd2s_m2",
        "cifar100",
        1000,
        128,
        "M2, the larger model (FEMNIST / CIFAR-100); CIFAR-100 over 50 clients; batch 128",
    ),
    Case(
        "dfl",
        "dfl",
        "mobilenet_v2",
        "cifar10",
        500,
        50,
        "torchvision MobileNetV2 (DFL Table IV); CIFAR-10, 500 per device; batch 50",
    ),
    Case(
        "dfl-vgg16",
        "dfl",
        "vgg16",
        "cifar10",
        500,
        50,
        "torchvision VGG-16 (134 M parameters), the largest of DFL's zoo; CIFAR-10, 500 per device; batch 50",
    ),
    Case(
        "fedzkt",
        "fedzkt",
        "zkt_s1_cnn",
        "fmnist",
        6000,
        256,
        "S1 CNN, the largest MNIST-family device; FASHION over 10 devices; batch 256",
    ),
    Case(
        "fedzkt-cifar",
        "fedzkt",
        "mobilenetv2_x0_8",
        "cifar10",
        5000,
        256,
        "device C MobileNetV2 x0.8, the largest CIFAR device; CIFAR-10 over 10 devices; batch 256",
    ),
    Case(
        "fedzkt-cifar-b32",
        "fedzkt",
        "mobilenetv2_x0_8",
        "cifar10",
        5000,
        32,
        "as above, with mini-batches of 32 instead of the paper's 256",
    ),
    Case(
        "fedzkt-cifar-b64",
        "fedzkt",
        "mobilenetv2_x0_8",
        "cifar10",
        5000,
        64,
        "as above, with mini-batches of 64: where a 1 GB device's limit lies between 32 and 256",
    ),
)
VARIANTS = (
    "fedcache-onnx",
    "fedict-recompute",
    "fedict-int8",
    "fedict-b64-int8",
    "fedict-2500-int8",
    "fedzkt-cifar-b32",
    "fedzkt-cifar-b64",
)
"""Cases that are a setting beside a paper's, not the paper's own: run only when named in --cases."""
QUICK = (Case("quick", "fd", "cnn2", "digits", 40, 16, "smoke test"),)


@dataclass
class Row:
    case: str
    method: str
    model: str
    parameters: int
    dataset: str
    data: str
    """real | synthetic"""
    samples_per_client: int
    batch_size: int
    client_after_build_mb: float | None = None
    """The largest client's peak once its data and role were built (before the round)."""
    client_peak_mb: float | None = None
    """The largest client's peak over its whole life (the round included)."""
    clients_mb: list[float] = field(default_factory=list)
    run_seconds: float | None = None
    hello_after_s: float | None = None
    """The slowest client's start-up: from its process's start to its hello sent (the clients start
    together, the server already waiting)."""
    onnx_mb: float | None = None
    predict_fp32_mb: float | None = None
    predict_int8_mb: float | None = None
    predict_imports_torch: bool | None = None
    error: str | None = None


# ------------------------------------------------------------------------------------------- data
def synthetic_cifar(root: Path, name: str) -> None:
    """Official-format CIFAR files of the official size, with random pixels and labels."""
    from edgefd.data.cifar import CIFAR10_FOLDER, CIFAR10_TEST, CIFAR10_TRAIN, CIFAR100_FOLDER, write_cifar_batch

    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    (root / SYNTHETIC_MARK).write_text("random pixels and labels written by benchmarks/device_memory.py\n")
    if name == "cifar10":
        folder = root / CIFAR10_FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        for file in (*CIFAR10_TRAIN, *CIFAR10_TEST):
            write_cifar_batch(folder / file, rng.integers(0, 256, (10000, 3072), np.uint8), rng.integers(0, 10, 10000))
    else:
        folder = root / CIFAR100_FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        for file, n in (("train", 50000), ("test", 10000)):
            fine = rng.integers(0, 100, n)
            write_cifar_batch(
                folder / file,
                rng.integers(0, 256, (n, 3072), np.uint8),
                fine,
                "fine_labels",
                coarse_labels=list(fine // 5),
            )


def data_root_for(dataset: str, given: str | None, scratch: Path) -> tuple[str | None, str]:
    """(the --data-root to pass, "real" or "synthetic")."""
    from edgefd.data import list_datasets

    if dataset not in ("cifar10", "cifar100"):
        return given, "real"
    if given and any(i.name == dataset and i.available for i in list_datasets(given)):
        return given, "synthetic" if (Path(given) / SYNTHETIC_MARK).exists() else "real"
    root = scratch / "synthetic-data"
    if not any(i.name == dataset and i.available for i in list_datasets(root)):
        print(f"  writing a synthetic {dataset} (official format and size, random pixels) to {root}", flush=True)
        synthetic_cifar(root, dataset)
    return str(root), "synthetic"


# ------------------------------------------------------------------------------------ processes
def vm_hwm_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def logged_peaks(path: Path) -> list[float]:
    return [float(m.group(1)) for m in PEAK_LINE.finditer(path.read_text(errors="replace"))] if path.exists() else []


def logged_start_up(path: Path) -> float | None:
    """The seconds from a client's start to its hello, as it logged them (`started_s=`)."""
    found = STARTED_LINE.search(path.read_text(errors="replace")) if path.exists() else None
    return float(found.group(1)) if found else None


def edgefd(python: str, *args: str) -> list[str]:
    return [python, "-m", "edgefd.cli", *args]


def deploy(case: Case, args: argparse.Namespace, data_root: str | None, folder: Path, row: Row) -> None:
    """One round of the case as a real deployment; fills the client figures of ``row``."""
    from edgefd.deploy.broker import start_broker
    from edgefd.runtime.config import SimulationConfig, config_to_toml

    params = [p.replace("@ENCODER@", encoder_file(folder.parent)) if "@ENCODER@" in p else p for p in case.params]
    config = SimulationConfig(
        algo=case.method,
        dataset=case.dataset,
        data_root=data_root,
        clients=args.clients,
        rounds=args.rounds,
        epochs=1,  # one local epoch for every method: a client's peak does not grow with more
        partition="iid",
        samples_per_client=case.samples,
        test_fraction=0.2,
        models=case.model,
        batch_size=case.batch_size,
        threads=args.threads,
        seed=0,
        device="cpu",
        out=str(folder / "server"),
        params=dict(p.split("=", 1) for p in params),
    )
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    (folder / "run.toml").write_text(config_to_toml(config))
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    # Mosquitto queues at most 1,000 QoS 1 messages per session by default and drops the rest with
    # a warning in its log: two FedICT uploads of 5,000 CIFAR-10 samples are 2,504 frames of 256 KiB
    # on their way to the server. Unbounded here (loopback, one round); see docs/DEPLOYMENT.md.
    broker = start_broker(kind="mosquitto", workdir=folder / "broker", extra_config="max_queued_messages 0")
    shared = ["--broker", broker.url, "--run", f"memory-{case.name}"]
    processes: dict[str, subprocess.Popen] = {}
    polled: dict[str, float] = {}
    started = time.perf_counter()
    try:
        with open(folder / "logs" / "server.log", "wb") as log:
            processes["server"] = subprocess.Popen(
                edgefd(args.server_python or args.python, "server", "--config", str(folder / "run.toml"), "--quiet",
                       *shared,
                       "--round-timeout", str(args.timeout), "--hello-timeout", str(args.timeout),
                       "--eval-timeout", str(args.timeout), "--min-clients", str(args.clients)),
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        clients = [f"client-{i}" for i in range(args.clients)]
        for cid in clients:
            with open(folder / "logs" / f"{cid}.log", "wb") as log:
                processes[cid] = subprocess.Popen(
                    edgefd(args.python, "client", "--client-id", cid, "--device", "cpu",
                           "--state-dir", str(folder / "state"), *case.device_flags, *shared),
                    stdout=log, stderr=subprocess.STDOUT, env=env,
                )  # fmt: skip
        deadline = started + args.timeout
        while processes["server"].poll() is None and time.perf_counter() < deadline:
            for cid in clients:
                value = vm_hwm_mb(processes[cid].pid)
                if value is not None:
                    polled[cid] = max(polled.get(cid, 0.0), value)
            time.sleep(0.1)
        for process in processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
        broker.stop()
    row.run_seconds = round(time.perf_counter() - started, 1)
    if processes["server"].returncode != 0:
        tail = (folder / "logs" / "server.log").read_text(errors="replace").strip().splitlines()[-3:]
        row.error = f"server exited {processes['server'].returncode}: {' | '.join(tail)}"
    after_build, peaks = [], []
    for cid in clients:
        logged = logged_peaks(folder / "logs" / f"{cid}.log")
        if logged:
            after_build.append(logged[0])
        if len(logged) < 2 and row.error is None:
            row.error = f"{cid} did not log its peak at stop (see {folder / 'logs' / f'{cid}.log'})"
        peaks.append(max([*logged, polled.get(cid, 0.0)]))
    start_ups = [logged_start_up(folder / "logs" / f"{cid}.log") for cid in clients]
    row.hello_after_s = max((s for s in start_ups if s is not None), default=None)
    row.clients_mb = peaks
    row.client_after_build_mb = max(after_build) if after_build else None
    row.client_peak_mb = max(peaks) if peaks else None


def encoder_file(scratch: Path) -> str:
    """FedCache's MobileNetV3 hash encoder for 1x28x28 inputs as an ONNX file (random trunk: the
    memory is the same with ImageNet weights), written once with `edgefd export-encoder`."""
    path = scratch / "encoder.onnx"
    if not path.exists():
        command = edgefd(sys.executable, "export-encoder", "--input-shape", "1,28,28", "--out", str(path))
        subprocess.run(command, check=True, capture_output=True)
    return str(path)


PREDICT_PROBE = """
import sys
from edgefd.cli import main
code = main(sys.argv[1:])
status = {l.split(':')[0]: l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')}
print('PROBE', round(int(status['VmHWM']) / 1024, 1), 'torch' in sys.modules, file=sys.stderr)
sys.exit(code)
"""


def predict_memory(case: Case, args: argparse.Namespace, data_root: str | None, folder: Path, row: Row) -> None:
    """Exports the case's model (fp32 and int8, sidecars) and measures `edgefd predict` on one sample."""
    import torch

    from edgefd.data import load_dataset
    from edgefd.export.checkpoint import ClientCheckpoint
    from edgefd.export.onnx_export import ExportConfig, export_client
    from edgefd.models import build_model, count_parameters, in_channels_of

    torch.manual_seed(0)
    dataset = load_dataset(case.dataset, root=data_root)
    shape = tuple(dataset.input_shape)
    model = build_model(
        case.model, in_channels=in_channels_of(shape), num_classes=dataset.num_classes, input_shape=shape
    )
    row.parameters = count_parameters(model)
    checkpoint = ClientCheckpoint(
        "client-0", case.model, in_channels_of(shape), dataset.num_classes, list(shape), case.dataset, data_root,
        list(dataset.mean), list(dataset.std), dataset.input_scale, None, None, case.method,
        train_indices=list(range(256)), test_indices=list(range(256)), state=model.state_dict(),
    )  # fmt: skip
    out = folder / "exported"
    written = export_client(checkpoint, out, ExportConfig(int8=True))
    row.onnx_mb = round(written["onnx"].stat().st_size / 2**20, 2)
    sample = folder / "sample.npy"
    np.save(sample, dataset.test_x[:1].numpy())
    del dataset, model, checkpoint
    for key, path in (("fp32", written["onnx"]), ("int8", written["int8"])):
        done = subprocess.run(
            [args.python, "-c", PREDICT_PROBE, "predict", str(path), str(sample)], capture_output=True, text=True
        )
        probe = [line.split() for line in done.stderr.splitlines() if line.startswith("PROBE")]
        if done.returncode != 0 or not probe:
            row.error = (row.error or "") + f" predict {key} failed: {done.stderr.strip()[-300:]}"
            continue
        setattr(row, f"predict_{key}_mb", float(probe[0][1]))
        row.predict_imports_torch = bool(row.predict_imports_torch) or probe[0][2] == "True"


def floor_mb(python: str) -> float:
    """An interpreter with the client runtime imported (torch and all), before any data or model."""
    probe = "import edgefd.deploy.client, sys; from edgefd.runtime.process import peak_rss_mb; print(peak_rss_mb())"
    return float(subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True).stdout.split()[-1])


DYNAMO_PROBE = """
import sys, time
import edgefd.deploy.client, torch
from edgefd.runtime.process import peak_rss_mb
before, started = peak_rss_mb(), time.perf_counter()
assert "torch._dynamo" not in sys.modules
torch.optim.SGD(torch.nn.Linear(4, 2).parameters(), lr=0.1)
print(round(peak_rss_mb() - before, 1), round(time.perf_counter() - started, 2), "torch._dynamo" in sys.modules)
"""


def dynamo_cost(python: str) -> tuple[float, float, bool]:
    """What a process's first optimiser costs beyond the client runtime: torch.optim imports
    torch._dynamo there (Optimizer.__init__ and step are wrapped by torch._disable_dynamo), which
    nothing in a client needs. MB, seconds, and whether it was imported."""
    out = subprocess.run([python, "-c", DYNAMO_PROBE], capture_output=True, text=True, check=True).stdout.split()
    return float(out[-3]), float(out[-2]), out[-1] == "True"


# ------------------------------------------------------------------------------------------ table
def table(rows: list[Row], floor: float, python: str, dynamo: tuple[float, float, bool]) -> str:
    def mb(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f}"

    lines = [
        f"Interpreter of the server, clients and predict: {python}; "
        f"client runtime imported, nothing built: {floor:,.0f} MB; its first optimiser "
        + (f"imports torch._dynamo: +{dynamo[0]:,.0f} MB, {dynamo[1]:.2f} s" if dynamo[2] else "imports no dynamo"),
        "",
        "| case | method | client model | parameters | dataset | samples / client | batch | start-up to hello, s | "
        "client after build, MB | client peak in a round, MB | ONNX fp32, MB | predict fp32, MB | predict int8, MB |",
        "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        data = r.dataset if r.data == "real" else f"{r.dataset} (synthetic)"
        peak = mb(r.client_peak_mb) if not r.error else f"{mb(r.client_peak_mb)} ({r.error[:60]})"
        lines.append(
            f"| {r.case} | {r.method} | {r.model} | {r.parameters:,} | {data} | {r.samples_per_client:,} | "
            f"{r.batch_size} | {'-' if r.hello_after_s is None else f'{r.hello_after_s:.1f}'} | "
            f"{mb(r.client_after_build_mb)} | {peak} | {r.onnx_mb if r.onnx_mb is not None else '-'} | "
            f"{mb(r.predict_fp32_mb)} | {mb(r.predict_int8_mb)} |"
        )
    torch_seen = [r.case for r in rows if r.predict_imports_torch]
    lines += ["", f"`edgefd predict` imported torch in: {', '.join(torch_seen) or 'no case'}"]
    return "\n".join(lines)


def _interrupted(*_) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    names = [c.name for c in CASES]
    parser.add_argument(
        "--cases",
        default=",".join(n for n in names if n not in VARIANTS),
        help=f"comma-separated, of {', '.join(names)} (default: all but {', '.join(VARIANTS)})",
    )
    parser.add_argument("--clients", type=int, default=2, help="client processes per deployment (default: 2)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per process (default: 2)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="rounds per deployment (default: 1); 2 also measures a round that begins with the last one's answers "
        "held and the server's knowledge to learn from",
    )
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter that runs the server, the clients and predict, e.g. a venv with the CPU-only torch "
        "a device gets (default: this one)",
    )
    parser.add_argument(
        "--server-python",
        help="the interpreter of the server (default: --python's), e.g. the workstation's where --python is a "
        "device's without plotting",
    )
    parser.add_argument("--data-root", help="where real CIFAR-10 / CIFAR-100 files are (default: synthetic ones)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds before a deployment is abandoned")
    parser.add_argument("--quick", action="store_true", help="digits, one tiny client: checks that it runs")
    parser.add_argument("--keep", metavar="DIR", help="keep the run folders and logs here")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupted)  # stop the broker and the processes on the way out
    if args.quick:
        cases = list(QUICK)
        args.clients = 1
    else:
        chosen = [n.strip() for n in args.cases.split(",") if n.strip()]
        unknown = sorted(set(chosen) - set(names))
        if unknown:
            parser.error(f"--cases: unknown {', '.join(unknown)} (known: {', '.join(names)})")
        cases = [c for c in CASES if c.name in chosen]
    scratch = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="edgefd-device-memory-"))
    floor = floor_mb(args.python)
    dynamo = dynamo_cost(args.python)
    rows = []
    for case in cases:
        print(f"{case.name}: {case.method} with {case.model} on {case.dataset} ({case.why})", flush=True)
        folder = scratch / case.name
        root, kind = data_root_for(case.dataset, args.data_root, scratch)
        row = Row(case.name, case.method, case.model, 0, case.dataset, kind, case.samples, case.batch_size)
        deploy(case, args, root, folder, row)
        predict_memory(case, args, root, folder, row)
        print(
            f"  client peak {row.client_peak_mb} MB (after build {row.client_after_build_mb}), predict fp32 "
            f"{row.predict_fp32_mb} MB, int8 {row.predict_int8_mb} MB, hello after {row.hello_after_s} s, "
            f"{row.run_seconds} s" + (f"; {row.error}" if row.error else ""),
            flush=True,
        )
        rows.append(row)
        if args.json:  # after every case: a long run that is stopped keeps what it measured
            document = {
                "python": args.python,
                "floor_mb": floor,
                "clients": args.clients,
                "threads": args.threads,
                "rounds": args.rounds,
            }
            document["dynamo_mb"], document["dynamo_s"], document["dynamo_imported"] = dynamo
            Path(args.json).write_text(json.dumps({**document, "rows": [asdict(r) for r in rows]}, indent=2) + "\n")
    print()
    print(table(rows, floor, args.python, dynamo))
    if not args.keep:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    return 1 if any(r.error for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
