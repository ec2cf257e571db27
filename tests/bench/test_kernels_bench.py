"""`edgefd bench kernels --quick` runs end to end and writes the records the issue names."""

import json

from edgefd import cli
from edgefd.bench.kernels import FLOAT, INDEX, cases

FIELDS = {
    "kernel",
    "shape",
    "cpp_ms",
    "torch_ms",
    "speedup",
    "gbps",
    "bandwidth_fraction",
    "moved_gbps",
    "moved_fraction",
}


def test_quick_benchmark_writes_one_record_per_kernel(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert cli.main(["bench", "kernels", "--quick", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["copy_gbps"] > 0
    kernels_seen = {record["kernel"].split()[0] for record in report["records"]}
    assert kernels_seen == {"weighted_kl", "sl_loss", "labelwise_mean", "gather_mean"}
    for record in report["records"]:
        assert FIELDS <= record.keys()
        assert record["cpp_ms"] > 0 and record["torch_ms"] > 0
        ratio = record["torch_ms"] / record["cpp_ms"]
        assert abs(record["speedup"] - ratio) <= 0.05 * ratio
    table = capsys.readouterr().out
    assert "copy bandwidth" in table and "weighted_kl" in table
    assert "compiled" not in table.splitlines()[0]  # its columns come with --compiled only (they were empty)


def test_only_gather_mean_moves_more_than_it_touches():
    """gather_mean reads R cached rows per output row: its moved bytes are those rows, not the cache once."""
    for case in cases(quick=False):
        if case.kernel != "gather_mean":
            assert case.bytes_moved is None
            continue
        n, r, c = (int(part.split("=")[1]) for part in case.shape.split())
        assert case.bytes_touched == n * r * INDEX + 2 * n * c * FLOAT
        assert case.bytes_moved == n * r * INDEX + n * r * c * FLOAT + n * c * FLOAT


def test_a_gpu_run_adds_shapes_past_a_gpus_l2_cache():
    """An H100's L2 holds 50 MB: a kernel whose data fits in it would be timed against L2, not the
    memory that the copy bandwidth measures."""
    cpu = {(case.kernel, case.shape) for case in cases(quick=False)}
    gpu_only = [case for case in cases(quick=False, device="cuda") if (case.kernel, case.shape) not in cpu]
    assert {case.kernel for case in gpu_only} == {
        "weighted_kl fwd+bwd",
        "sl_loss fwd+bwd",
        "labelwise_mean",
        "gather_mean",
    }
    assert all(case.bytes_touched > 2 * 50e6 for case in gpu_only)
