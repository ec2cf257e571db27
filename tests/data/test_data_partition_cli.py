"""``edgefd partition``: the table, the plot, and exit code 2 for a missing dataset."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from edgefd.data.partition_cli import add_arguments, run


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="edgefd partition")
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_defaults():
    args = parse()
    assert (args.dataset, args.clients, args.partition, args.seed) == ("digits", 10, "dirichlet:0.5", 0)
    assert args.data_root is None and args.plot is None and args.download is False and args.list is False


def test_prints_a_table_of_label_counts(capsys: pytest.CaptureFixture[str]):
    assert run(parse("--clients", "4", "--partition", "shards:2", "--seed", "1")) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "digits" in lines[0] and "'shards:2'" in lines[0] and "4 clients" in lines[0]
    header = lines[1].split()
    assert header[:4] == ["client", "train", "test", "|"] and header[4:] == [str(c) for c in range(10)]
    rows = [line.split() for line in lines[2:6]]
    assert [r[0] for r in rows] == ["0", "1", "2", "3"]
    for r in rows:
        counts = [int(v) for v in r[4:]]
        assert sum(counts) == int(r[1]) and sum(c > 0 for c in counts) == 2
    total = lines[6].split()
    assert total[0] == "total" and int(total[1]) == sum(int(r[1]) for r in rows)


def test_natural_partition_shows_groups_and_saves_a_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    plot = tmp_path / "watch.png"
    assert run(parse("--dataset", "watch", "--partition", "natural", "--plot", str(plot))) == 0
    out = capsys.readouterr().out
    assert "group" in out.splitlines()[1]
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_missing_dataset_prints_the_advice_and_returns_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert run(parse("--dataset", "cifar10", "--data-root", str(tmp_path))) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "cifar-10-batches-py" in captured.err and "--data-root" in captured.err
    assert "Traceback" not in captured.err


def test_list_shows_availability(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert run(parse("--list", "--data-root", str(tmp_path))) == 0
    rows = {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines()}
    assert rows["digits"] == "available" and rows["cifar10"] == "missing"


def test_bad_partition_returns_2(capsys: pytest.CaptureFixture[str]):
    assert run(parse("--partition", "dirichlet:-1")) == 2
    assert "alpha must be > 0" in capsys.readouterr().err


def test_a_test_set_not_shared_out_whole_says_how_much_is(capsys: pytest.CaptureFixture[str]):
    """digits at Dirichlet 0.5 over 10 clients: the header says 360 test samples, the total row 354.
    A note says why the two differ (before, nothing did)."""
    assert run(parse("--clients", "10", "--partition", "dirichlet:0.5", "--seed", "0")) == 0
    lines = capsys.readouterr().out.splitlines()
    tested = int(next(line for line in lines if line.split()[0] == "total").split()[2])
    assert "360 test samples" in lines[0] and tested < 360
    assert f"note: the clients' test splits hold {tested} of the 360 test samples" in lines[-1]
