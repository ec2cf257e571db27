"""`edgefd bench engine` runs both loops and reports the overhead (on digits, as a smoke test)."""

import json

from edgefd import cli


def test_engine_benchmark_reports_both_loops(tmp_path, capsys):
    out = tmp_path / "engine.json"
    assert (
        cli.main(["bench", "engine", "--dataset", "digits", "--clients", "4", "--rounds", "2", "--json", str(out)]) == 0
    )
    result = json.loads(out.read_text())
    assert result["engine_seconds_per_round"] > 0 and result["plain_seconds_per_round"] > 0
    ratio = result["engine_seconds_per_round"] / result["plain_seconds_per_round"] - 1
    assert abs(result["overhead"] - ratio) < 1e-3
    assert "overhead" in capsys.readouterr().out
