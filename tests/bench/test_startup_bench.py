"""benchmarks/startup.py measures what it promises: every `--help` the `edgefd` command has, each
with a wall time and a peak RSS, in its table and in its JSON."""

import json
import subprocess
import sys
from pathlib import Path

from edgefd import cli

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "startup.py"


def test_startup_measures_every_help(tmp_path):
    out = tmp_path / "startup.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--repeats", "1", "--json", str(out)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())
    expected = {"edgefd --help", "edgefd bench --help"}
    expected |= {f"edgefd {item.name} --help" for item in cli.SUBCOMMANDS}
    expected |= {f"edgefd bench {name} --help" for name in cli.BENCHMARKS}
    assert {row["command"] for row in rows} == expected
    for row in rows:
        assert row["median_seconds"] > 0
        assert row["peak_rss_mb"] > 1  # a Python interpreter alone holds several MB
        assert f"{row['command']:<36} {row['median_seconds']:>9.3f}" in done.stdout
