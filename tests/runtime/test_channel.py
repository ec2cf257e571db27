"""The in-process channel refuses what a deployment of the same run refuses: an answer larger than
the run takes from its client misses the round, the round's record says so under ``rejected`` (and
``late``), a warning names the client, and `edgefd simulate` ends with exit status 4 when every round
refused someone (tests/deploy/test_message_bound.py runs the same over MQTT)."""

import json

from run_settings import CAP, SKEWED_FEDICT, flags

from edgefd import cli
from edgefd.metrics.results import REFUSED_EXIT


def test_an_answer_larger_than_the_run_takes_misses_the_round_and_the_run_says_so(tmp_path, capsys, caplog):
    argv = ["simulate", *flags(SKEWED_FEDICT), "--max-message-bytes", str(CAP), "--quiet"]
    assert cli.main([*argv, "--out", str(tmp_path)]) == REFUSED_EXIT
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    for line in lines[1:]:
        assert line["late"] == ["client-0"] and list(line["rejected"]) == ["client-0"]
        assert line["rejected"]["client-0"].startswith("OversizedError (a train message of 5486825 bytes; at most ")
        assert 0 < line["bytes_up"] < CAP  # client-1's uplink only: what was refused never arrived
    assert "round 1: refused from client-0: OversizedError" in caplog.text
    assert "round 2: refused from client-0: OversizedError" in caplog.text
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["refused_clients"] == {"client-0": 2} and summary["refused_every_round"]
    assert summary["config"]["max_message_bytes"] == CAP
    out, err = capsys.readouterr()
    assert "refused: client-0 in 2/2 rounds" in out.splitlines()[-1]
    assert "every round refused something a selected client sent" in err and "exit status 4" in err
