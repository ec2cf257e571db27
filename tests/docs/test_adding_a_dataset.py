"""docs/ADDING_A_DATASET.md works as written: its code and commands, run in a fresh folder."""

from __future__ import annotations

from pathlib import Path

from doc_pages import REPO, PageRunner, blocks, check_run_folder, commands, out_folder

from edgefd.data import load_dataset
from edgefd.data.registry import REGISTRY

PAGE = REPO / "docs" / "ADDING_A_DATASET.md"


def test_the_page_has_what_the_test_runs():
    python = [b for b in blocks(PAGE) if b.lang == "python"]
    assert len(python) >= 4
    assert {b.path for b in python} >= {"my_datasets.py", "my_edgefd.py"}
    lines = [" ".join(argv) for argv in commands(PAGE)]
    assert any(line.startswith("edgefd simulate --dataset npz:") for line in lines)
    assert any(line.startswith("python3 my_edgefd.py simulate") for line in lines)


def test_npz_and_register_dataset_routes_run_as_written(tmp_path: Path, monkeypatch, capsys):
    with PageRunner(PAGE, tmp_path, monkeypatch, capsys) as runner:
        result = runner.run()

        # the npz route: the file the snippet wrote loads as the page says, and the commands ran on it
        ds = load_dataset("npz:mydata.npz")
        assert ds.input_shape == (1, 8, 8) and ds.num_classes == 10 and ds.class_names == tuple("0123456789")
        assert abs(float(ds.train_x.mean())) < 1e-4  # standardised with training statistics

        # the register_dataset route: registered for as long as the page's process lives
        assert "wine-csv" in REGISTRY
        wine = load_dataset("wine-csv", root="data")
        assert wine.input_shape == (13,) and wine.num_classes == 3
        printed = "".join(out for name, out in result.output.items() if name.startswith("python block"))
        assert f'print(load_dataset("wine-csv", root="data"))  # {wine!r}' in PAGE.read_text()
        assert repr(wine) in printed  # ... and that is what it printed
        assert result.namespace["summary"]["rounds"] == 10
        check_run_folder(tmp_path / "runs" / "wine-fd", rounds=10)

    simulated = [argv for argv in result.ran if "simulate" in argv]
    assert len(simulated) == 3  # two npz runs and the wrapper script's run
    for argv in simulated:
        check_run_folder(tmp_path / out_folder(argv))
    partition = next(out for line, out in result.output.items() if line.startswith("edgefd partition"))
    assert "10 classes" in partition
    assert (tmp_path / "mydata.png").is_file()  # edgefd report --plot
    assert "wine-csv" not in REGISTRY  # the runner undid the page's registration
