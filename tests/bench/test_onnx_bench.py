"""`edgefd bench onnx` measures each runtime at batch 1 and 32 and the two file sizes."""

from edgefd.bench.onnx import format_table, measure


def test_onnx_bench_rows():
    rows = measure(["cnn2"], "digits", repeats=2, warmup=0, threads=1)
    assert [(r.model, r.batch) for r in rows] == [("cnn2", 1), ("cnn2", 32)]
    for r in rows:
        assert min(r.torch_ms, r.onnx_fp32_ms, r.onnx_int8_ms) > 0
        assert 0 < r.int8_bytes < r.fp32_bytes
        assert r.exporter == "torchscript"
    assert "| cnn2 | 32 |" in format_table(rows)
