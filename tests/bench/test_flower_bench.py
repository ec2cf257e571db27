"""benchmarks/ray_vs_flower.py: its copy of edgefd's cnn2 (for Flower's interpreter, which has no
edgefd) is edgefd's, its table puts Flower's row beside edgefd's Ray row, and an interpreter that
cannot run Flower is refused before anything runs."""

from __future__ import annotations

import flower_fd
import ray_vs_flower
import torch

from edgefd.bench.ray_backend import ArmResult
from edgefd.models import build_model


def test_flowers_model_is_edgefds_cnn2():
    ours = build_model("cnn2", in_channels=1, num_classes=10, input_shape=(1, 8, 8))
    theirs = flower_fd.small_cnn((1, 8, 8), 10)
    assert [p.shape for p in ours.parameters()] == [p.shape for p in theirs.parameters()]
    assert theirs(torch.zeros(2, 1, 8, 8)).shape == (2, 10)


def test_the_table_puts_flowers_overhead_beside_edgefds():
    results = [
        ArmResult("overhead", "in-process", 2, 1.0, 2.0, 500.0),
        ArmResult("overhead", "ray, 1 worker", 2, 5.0, 2.2, 500.0),
    ]
    flower = ray_vs_flower.FlowerResult("1.42.0", plain_seconds_per_round=1.0, flower_seconds_per_round=1.3, start_up=9)
    lines = "\n".join(ray_vs_flower.flower_lines(flower, results))
    assert "| edgefd, Ray vs in-process | 2.000 | 2.200 | 1.10x | 5.0 |" in lines
    assert "| Flower 1.42.0 simulation vs its plain loop | 1.000 | 1.300 | 1.30x | 9.0 |" in lines


def test_an_interpreter_without_flower_is_refused_before_anything_runs(tmp_path, capsys):
    assert ray_vs_flower.main(["--flower-python", str(tmp_path / "no-python")]) == 2
    err = capsys.readouterr().err
    assert "does not run" in err and "overhead" not in err
