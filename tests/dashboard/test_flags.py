"""`--dashboard` and `--dashboard-token-file` on the commands: a bad setting is refused, with a
line naming it, before a run starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgefd import cli


@pytest.mark.parametrize(
    "flags,said",
    [
        (["--dashboard", "0.0.0.0:0"], "an address beyond this machine needs --dashboard-token-file"),
        (["--dashboard", "host:http"], "expected HOST:PORT"),
        (["--dashboard-token-file", "token"], "--dashboard-token-file without --dashboard"),
    ],
)
def test_deploy_local_refuses_a_bad_page_before_it_starts(flags, said, tmp_path: Path, capsys):
    code = cli.main(["deploy-local", "--rounds", "1", "--clients", "2", "--out", str(tmp_path / "run"), *flags])
    assert code == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # nothing was started


def test_simulate_refuses_a_token_without_a_page(tmp_path: Path, capsys):
    code = cli.main(["simulate", "--rounds", "1", "--out", str(tmp_path / "run"), "--dashboard-token-file", "t"])
    assert code == 2
    assert "--dashboard-token-file without --dashboard" in capsys.readouterr().err


def test_simulate_refuses_a_short_token(tmp_path: Path, capsys):
    (tmp_path / "token").write_text("short")
    flags = ["--dashboard", "0.0.0.0:0", "--dashboard-token-file", str(tmp_path / "token")]
    code = cli.main(["simulate", "--rounds", "1", "--out", str(tmp_path / "run"), *flags])
    assert code == 2
    assert "a token of 16 characters or more is needed" in capsys.readouterr().err
