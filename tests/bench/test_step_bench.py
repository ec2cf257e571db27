"""`edgefd bench step` times both layouts of a model's training step and names bad input."""

import json

import pytest

from edgefd import cli


def test_step_benchmark_reports_both_layouts(tmp_path, capsys):
    out = tmp_path / "step.json"
    argv = ["bench", "step", "--models", "cnn2", "--steps", "5", "--threads", "1", "--json", str(out)]
    assert cli.main(argv) == 0
    (result,) = json.loads(out.read_text())
    assert result["model"] == "cnn2" and result["batch_size"] == 8
    assert set(result["milliseconds"]) == {"nchw", "channels_last"}
    assert all(ms > 0 for ms in result["milliseconds"].values())
    assert "channels-last" in capsys.readouterr().out


def test_step_benchmark_rejects_a_bad_shape():
    with pytest.raises(SystemExit, match="--input-shape must be C,H,W"):
        cli.main(["bench", "step", "--input-shape", "28,28"])


def test_the_recompute_arm_times_channels_last_with_recomputed_blocks(tmp_path, capsys):
    out = tmp_path / "step.json"
    argv = ["bench", "step", "--models", "resnet8", "--steps", "3", "--threads", "1", "--recompute", "--json", str(out)]
    assert cli.main(argv) == 0
    (result,) = json.loads(out.read_text())
    assert set(result["milliseconds"]) == {"nchw", "channels_last", "recomputed"}
    assert all(ms > 0 for ms in result["milliseconds"].values())
    assert "recomputed" in capsys.readouterr().out
