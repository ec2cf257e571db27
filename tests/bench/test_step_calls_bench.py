"""benchmarks/step_calls.py runs and reports what it promises: calls per step exchange, the files
they visit (the message layer among them), and no per-character scan of text on the way."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "step_calls.py"


def test_step_calls_reports_the_exchange_of_one_step():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--samples", "24", "--top", "40"], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    per_step = float(out.split("Python calls per step exchange: ")[1].split()[0])
    assert 100 < per_step < 5000
    for path in ("edgefd/protocol/message.py", "edgefd/runtime/verbs.py", "edgefd/runtime/transport.py"):
        assert f"  {path}\n" in out
    assert "builtins.ord" not in out  # the text checks are one regex search, not a loop per character
