"""The `edgefd` command: every subcommand answers --help, and running nothing shows the help."""

import subprocess
import sys

import pytest

from edgefd import cli


def _subcommand_paths():
    paths = [[item.name] for item in cli.SUBCOMMANDS]
    paths += [["bench", name] for name in cli.BENCHMARKS]
    return [[]] + [["bench"]] + paths


@pytest.mark.parametrize("path", _subcommand_paths(), ids=lambda p: " ".join(p) or "edgefd")
def test_every_subcommand_has_help(path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(path + ["--help"])
    assert exit_info.value.code == 0
    assert "usage: edgefd" in capsys.readouterr().out


def test_no_subcommand_prints_help_and_fails(capsys):
    assert cli.main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_console_script_is_installed():
    result = subprocess.run([sys.executable, "-m", "edgefd.cli", "--version"], capture_output=True, text=True)
    assert result.returncode == 0
    assert result.stdout.startswith("edgefd ")


def test_output_piped_into_head_ends_without_a_traceback():
    """A reader that stops reading (`| head`) ended a long listing with a BrokenPipeError traceback.
    1,400 clients' rows (about 85 kB) overflow the pipe's buffer, so the writer meets the closed pipe."""
    import subprocess
    import sys

    command = f"{sys.executable} -m edgefd.cli partition --clients 1400 --partition iid | head -2"
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
    assert len(done.stdout.splitlines()) == 2
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
