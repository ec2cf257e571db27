"""`edgefd report RUN --html FILE`: the run's page in one file, from the run's own files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from edgefd import cli


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "fd-run"
    flags = ["--rounds", "3", "--clients", "3", "--threads", "1", "--quiet", "--out", str(out)]
    assert cli.main(["simulate", *flags]) == 0
    return out


def test_the_page_of_a_finished_run_holds_its_rounds_and_clients(finished_run: Path, tmp_path: Path):
    page = tmp_path / "page.html"
    assert cli.main(["report", str(finished_run), "--plot", str(tmp_path / "p.png"), "--html", str(page)]) == 0
    html = page.read_text()
    state = json.loads(re.search(r'id="edgefd-state">(.*?)</script>', html, re.S).group(1))
    lines = [json.loads(line) for line in (finished_run / "metrics.jsonl").read_text().splitlines()]
    assert [p["round"] for p in state["curve"]] == [line["round"] for line in lines if line["accuracy"] is not None]
    assert [d["id"] for d in state["devices"]] == ["client-0", "client-1", "client-2"]
    assert state["run"]["name"] == "fd-run" and state["run"]["finished"]
    assert html.count("<svg") == 2
    assert not re.search(r'(src|href)="', html)  # one file: it loads nothing, from anywhere


def test_a_page_is_of_one_run(finished_run: Path, tmp_path: Path, capsys):
    code = cli.main(["report", str(finished_run), str(finished_run), "--html", str(tmp_path / "page.html")])
    assert code == 2
    assert "--html writes the page of one run; 2 were given" in capsys.readouterr().err
