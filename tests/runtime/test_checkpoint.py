"""Role checkpoints: a role saved after training and loaded in a fresh build goes on exactly as
the original would (same uplink next round), without writing its data."""

import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from light_settings import LIGHT_SETTINGS

from edgefd.algorithms.base import list_methods
from edgefd.protocol.message import SERVER, Message
from edgefd.runtime import checkpoint
from edgefd.runtime.build import build_client, build_server, prepare
from edgefd.runtime.channel import InProcessChannel
from edgefd.runtime.config import SimulationConfig
from edgefd.runtime.verbs import VERBS

CONFIG = dict(dataset="digits", clients=2, rounds=3, seed=1, threads=1, samples_per_client=60)
SETTINGS = {
    **LIGHT_SETTINGS,
    "fedcache": dict(params={"exchange": "round"}),  # checkpoints serve the MQTT runtime, which runs rounds
}


def exchange(clients, verb, r, contents):
    """Send each client ``verb`` with its content in-process; {client: the content of its answer}."""
    messages = [Message(verb, SERVER, cid, r, contents.get(cid)) for cid in sorted(clients)]
    answers = InProcessChannel(clients).send_and_receive(messages, VERBS[verb].deadline).answers
    return {cid: answer.content for cid, answer in answers.items()}


def run_round(server, clients, r):
    """Round r with every client, without the loop (the roles are checkpointed in between)."""
    uplinks = exchange(clients, "train", r, {cid: server.downlink(r, cid) for cid in clients})
    server.aggregate(r, {c: p for c, p in uplinks.items() if p is not None})
    return uplinks


@pytest.mark.parametrize("algo", [m.name for m in list_methods()])
def test_every_method_resumes_from_a_checkpoint(tmp_path, algo):
    config = SimulationConfig(algo=algo, **{**CONFIG, **SETTINGS.get(algo, {})})
    pieces = prepare(config)
    clients = {pieces.client_ids[i]: build_client(config, pieces, i) for i in range(config.clients)}
    server = build_server(config, pieces)
    server.start({cid: p for cid, p in exchange(clients, "hello", 0, {}).items() if p is not None})
    run_round(server, clients, 1)

    for cid, role in clients.items():
        checkpoint.save(tmp_path / f"{cid}.ckpt", {"role": role}, {"data": role.context.data})
    checkpoint.save(
        tmp_path / "server.ckpt",
        {"role": server},
        {"build_model": server.context.build_model, "dataset": pieces.dataset},
    )
    fresh_pieces = prepare(config)
    restored = {}
    for i, cid in enumerate(fresh_pieces.client_ids):
        role = build_client(config, fresh_pieces, i)
        restored[cid] = checkpoint.load(tmp_path / f"{cid}.ckpt", {"data": role.context.data}).restore("role", role)
        assert restored[cid] is role  # restored into the role this process built
    restored_server = build_server(config, fresh_pieces)
    references = {"build_model": restored_server.context.build_model, "dataset": fresh_pieces.dataset}
    checkpoint.load(tmp_path / "server.ckpt", references).restore("role", restored_server)
    assert restored["client-0"].data is restored["client-0"].context.data  # the data was not written

    expected = run_round(server, clients, 2)
    got = run_round(restored_server, restored, 2)
    for cid in expected:
        if expected[cid] is None:
            assert got[cid] is None
        else:
            assert got[cid].same_as(expected[cid]), f"{algo}: {cid}'s round-2 uplink differs after a checkpoint"


def test_generators_travel_as_their_state(tmp_path):
    generator = torch.Generator().manual_seed(7)
    torch.rand(3, generator=generator)
    state = {"g": generator, "rng": np.random.default_rng(3)}
    checkpoint.save(tmp_path / "x.ckpt", state, {})
    back = checkpoint.load(tmp_path / "x.ckpt", {})
    assert torch.equal(torch.rand(4, generator=back.value("g")), torch.rand(4, generator=generator))
    assert back.value("rng").random() == state["rng"].random()


def test_a_missing_reference_is_a_clear_error(tmp_path):
    marker = object()
    checkpoint.save(tmp_path / "x.ckpt", {"m": marker}, {"marker": marker})
    with pytest.raises(checkpoint.CheckpointError, match="marker"):
        checkpoint.load(tmp_path / "x.ckpt", {}).value("m")


def test_an_old_or_foreign_file_is_a_clear_error(tmp_path):
    (tmp_path / "old.ckpt").write_bytes(b"\x80\x04not a checkpoint")
    with pytest.raises(checkpoint.CheckpointError, match="not an edgefd checkpoint"):
        checkpoint.load(tmp_path / "old.ckpt", {})


class _RunsCode:
    """What a hostile pickle would hold: unpickling it calls os.system."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def crafted(tmp_path, tree: dict, arrays: list | None = None, body: bytes = b"") -> Path:
    """A file laid out as a checkpoint, with whatever header entries and bytes a test chooses."""
    header = json.dumps({"format": checkpoint.FORMAT, "arrays": arrays or [], "state": tree}).encode()
    head = checkpoint.MAGIC + len(header).to_bytes(8, "little") + header
    path = tmp_path / "crafted.ckpt"
    path.write_bytes(head + bytes(-len(head) % checkpoint.ALIGN) + body)
    return path


def test_a_crafted_checkpoint_cannot_run_code(tmp_path):
    marker = tmp_path / "ran"
    # 1. a pickle that runs a shell command when unpickled (what the old format would have executed)
    (tmp_path / "evil.ckpt").write_bytes(pickle.dumps({"role": _RunsCode(marker)}))
    with pytest.raises(checkpoint.CheckpointError):
        checkpoint.load(tmp_path / "evil.ckpt", {})
    # 2. the same pickle's bytes declared as an array of Python objects: such a dtype is never read
    evil = pickle.dumps(_RunsCode(marker))
    path = crafted(tmp_path, {"x": {"$": "array", "n": 0, "i": 0}}, [["|O", [1], 0, 8]], evil)
    with pytest.raises(checkpoint.CheckpointError, match="holds Python objects"):
        checkpoint.load(path, {})
    # 3. a tree naming callables: only edgefd classes are made, with __new__ and nothing else
    names = ("os:system", "builtins:eval", "edgefd.deploy.broker:start_broker", "subprocess:Popen", "edgefd.cli:main")
    names += ("edgefd.never_imported_module:Thing",)  # importing a module runs it: never done
    for name in names:
        path = crafted(tmp_path, {"role": {"$": "object", "n": 0, "class": name, "attrs": {}}})
        with pytest.raises(checkpoint.CheckpointError, match="neither edgefd's nor a registered method's"):
            checkpoint.load(path, {}).value("role")
    import edgefd.deploy.broker  # noqa: F401  (only classes of modules already imported are made)

    made = checkpoint.load(
        crafted(tmp_path, {"x": {"$": "object", "n": 0, "class": "edgefd.deploy.broker:RunningBroker", "attrs": {}}}),
        {},
    ).value("x")
    assert type(made).__name__ == "RunningBroker" and vars(made) == {}  # no __init__: nothing started
    assert not marker.exists()


def test_an_npz_checkpoint_of_an_older_edgefd_is_refused_by_name(tmp_path):
    with open(tmp_path / "old.ckpt", "wb") as handle:
        np.savez(handle, __json__=np.array(json.dumps({"format": "edgefd-checkpoint/3", "state": {}})))
    with pytest.raises(checkpoint.CheckpointError, match="older edgefd .an .npz archive.*without --resume"):
        checkpoint.load(tmp_path / "old.ckpt", {})


@pytest.mark.parametrize(
    "place, why",
    [
        (["<f4", [4], 0, 16], "past the file's end"),  # the body holds 8 bytes
        (["<f4", [-1], 0, 0], "malformed"),
        (["<f4", [True], 0, 4], "malformed"),
        (["<f4", [2], 0, 12], "malformed"),  # a size that is not the shape's
        (["<f4", [2], -8, 8], "malformed"),
        (["not a dtype", [2], 0, 8], "malformed"),
        (["<f4", 2, 0, 8], "malformed"),
        (["V0", [2], 0, 0], "malformed"),  # a dtype of no size: numpy cannot lay it out
    ],
)
def test_a_malformed_array_entry_is_a_clear_error(tmp_path, place, why):
    path = crafted(tmp_path, {"x": {"$": "array", "n": 0, "i": 0}}, [place], bytes(8))
    with pytest.raises(checkpoint.CheckpointError, match=why):
        checkpoint.load(path, {}).value("x")


def test_a_file_cut_short_is_a_clear_error(tmp_path):
    checkpoint.save(tmp_path / "c.ckpt", {"x": np.arange(100, dtype=np.float64)}, {})
    whole = (tmp_path / "c.ckpt").read_bytes()
    for cut in (10, 30, len(whole) - 8):
        (tmp_path / "cut.ckpt").write_bytes(whole[:cut])
        with pytest.raises(checkpoint.CheckpointError, match="not an edgefd checkpoint|cut short"):
            checkpoint.load(tmp_path / "cut.ckpt", {}).value("x")


def test_arrays_keep_their_shape_dtype_and_values(tmp_path):
    parts = {
        "scalar": np.float32(2.5),
        "empty": np.zeros((0, 3), np.int64),
        "bools": np.array([[True, False]]),
        "strided": np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2],
        "half": np.linspace(0, 1, 5, dtype=np.float16),
    }
    checkpoint.save(tmp_path / "c.ckpt", parts, {})
    back = checkpoint.load(tmp_path / "c.ckpt", {})
    for key, value in parts.items():
        got = back.value(key)
        assert np.asarray(got).shape == np.asarray(value).shape and np.asarray(got).dtype == np.asarray(value).dtype
        assert np.array_equal(got, value), key
    assert np.isscalar(back.value("scalar"))


def test_saving_writes_the_arrays_in_pieces_never_a_whole_copy(tmp_path):
    """A client's checkpoint holds its last answer (FedICT: 312 MB of features): building the file
    in memory first held the checkpoint twice, at the client's peak."""
    probe = f"""
import resource
import numpy as np
from edgefd.runtime import checkpoint
answer = np.ones((2048, 16384), np.float32)  # 128 MiB
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
checkpoint.save({str(tmp_path / "c.ckpt")!r}, {{"stored_answers": {{"train": answer}}}}, {{}})
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
back = checkpoint.load({str(tmp_path / "c.ckpt")!r}, {{}}).value("stored_answers")["train"]
assert np.array_equal(back, answer)
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout) < 48  # MB above the array while saving it (a whole copy: 128)
