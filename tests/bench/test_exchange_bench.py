"""`edgefd bench exchange` runs FedCache in-process and over a real broker, and counts the step round trips."""

import json
import shutil

import pytest

from edgefd import cli


@pytest.mark.skipif(shutil.which("mosquitto") is None, reason="needs Mosquitto (scripts/install.sh installs it)")
def test_exchange_benchmark_reports_all_three_arms(tmp_path, capsys):
    out = tmp_path / "exchange.json"
    argv = ["bench", "exchange", "--clients", "2", "--rounds", "2", "--samples-per-client", "40", "--json", str(out)]
    assert cli.main(argv) == 0
    simulate, batch, per_round = json.loads(out.read_text())
    assert (simulate["arm"], batch["arm"], per_round["arm"]) == (
        "simulate",
        "mqtt, exchange=batch",
        "mqtt, exchange=round",
    )
    assert simulate["step_round_trips_per_round"] == per_round["step_round_trips_per_round"] == 0
    assert batch["step_round_trips_per_round"] >= 2 * 3  # 2 clients, at least 3 mini-batches of 8 each
    assert batch["accuracy"] == pytest.approx(simulate["accuracy"])  # the same run, over the broker
    assert all(arm["seconds_per_round"] > 0 for arm in (simulate, batch, per_round))
    assert "ms per trip" in capsys.readouterr().out


def test_exchange_benchmark_needs_two_rounds():
    with pytest.raises(SystemExit, match="--rounds must be >= 2"):
        cli.main(["bench", "exchange", "--rounds", "1"])
