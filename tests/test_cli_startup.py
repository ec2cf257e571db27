"""`edgefd --help` and every `edgefd COMMAND --help` start without importing torch: torch takes
seconds and hundreds of MB to import, and a newcomer's first commands only ask what exists."""

import json
import subprocess
import sys

import pytest

from edgefd import cli

HEAVY = ("torch", "torchvision", "matplotlib", "onnxruntime")
"""Packages a command imports when it runs, never for its help."""

# Runs in a fresh interpreter: the help as the console script prints it, then which of HEAVY came in.
PROBE = """
import json, runpy, sys
heavy = json.loads(sys.argv[2])
sys.argv = ["edgefd", *json.loads(sys.argv[1])]
try:
    runpy.run_module("edgefd.cli", run_name="__main__")
except SystemExit as exit:
    code = exit.code
else:
    code = None
print(json.dumps({"code": code, "heavy": [name for name in heavy if name in sys.modules]}))
"""


def _command_paths() -> list[list[str]]:
    return [[], ["bench"]] + [[item.name] for item in cli.SUBCOMMANDS] + [["bench", name] for name in cli.BENCHMARKS]


@pytest.mark.parametrize("path", _command_paths(), ids=lambda p: " ".join(p) or "edgefd")
def test_help_imports_no_torch(path):
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps([*path, "--help"]), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    *help_lines, last = result.stdout.strip().splitlines()
    assert "usage: edgefd" in "\n".join(help_lines)
    probe = json.loads(last)
    assert probe["code"] == 0
    assert probe["heavy"] == [], f"`edgefd {' '.join(path)} --help` imported {probe['heavy']}"
