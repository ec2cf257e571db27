"""docs/ADDING_A_METHOD.md works as written: the example method registers, shows up and runs."""

from __future__ import annotations

from pathlib import Path

from doc_pages import REPO, PageRunner, blocks, check_run_folder, out_folder

from edgefd.algorithms import base, get_method

PAGE = REPO / "docs" / "ADDING_A_METHOD.md"


def test_the_page_has_a_method_file_and_its_test():
    paths = [b.path for b in blocks(PAGE) if b.lang == "python"]
    assert "edgefd/algorithms/fedprox.py" in paths
    assert "tests/algorithms/test_fedprox.py" in paths
    shipped = {method.name for method in base.list_methods()}
    assert "fedprox" not in shipped, "a method named fedprox now ships: rename the page's example"


def test_the_example_method_registers_shows_up_and_runs(tmp_path: Path, monkeypatch, capsys):
    with PageRunner(PAGE, tmp_path, monkeypatch, capsys) as runner:
        result = runner.run()
        method = get_method("fedprox")
        assert method.params().mu == 0.01

    shown = next(out for line, out in result.output.items() if line == "edgefd methods fedprox")
    assert shown.startswith("fedprox: FedAvg plus a proximal term")
    assert "paper: T. Li et al." in shown
    assert "mu=0.01" in shown and "edgefd simulate --algo fedprox" in shown

    simulated = [argv for argv in result.ran if "simulate" in argv]
    assert len(simulated) == 2
    for argv in simulated:
        lines = check_run_folder(tmp_path / out_folder(argv))
        if "fedprox" in argv:
            assert lines[-1]["server"] == {"clients_averaged": 10.0}
            assert lines[-1]["bytes_up"] > 0
    assert (tmp_path / "fedprox-vs-fedavg.png").is_file()  # edgefd report --plot
    assert result.tests_called == ["test_fedprox_is_registered_with_its_params", "test_fedprox_with_mu_0_is_fedavg"]
    assert "fedprox" not in {m.name for m in base.list_methods()}  # the runner removed it again
