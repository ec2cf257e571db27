"""`edgefd bench cache` end to end on a small cache (a smoke test; figures come from the real run)."""

import json

from edgefd import cli


def test_cache_benchmark_reports_time_memory_and_recall(tmp_path, capsys):
    out = tmp_path / "cache.json"
    assert cli.main(["bench", "cache", "--samples", "3000", "--m", "8", "--json", str(out)]) == 0
    (result,) = json.loads(out.read_text())
    assert result["config"]["m"] == 8 and result["config"]["samples"] == 3000
    assert result["build_seconds"] > 0 and result["lookup_seconds"] > 0 and result["peak_rss_mb"] > 0
    assert 0.9 <= result["recall"] <= 1.0
    assert "recall@16" in capsys.readouterr().out
