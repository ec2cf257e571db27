"""`edgefd simulate` saves each client's final model: the weights the run measured, loadable safely."""

import pytest
import torch

from edgefd.data import load_dataset
from edgefd.export.checkpoint import list_checkpoints, load_checkpoint
from edgefd.runtime.config import SimulationConfig
from edgefd.simulate import run
from edgefd.training import evaluate_model

QUICK = dict(dataset="digits", clients=3, rounds=2, threads=1, samples_per_client=120)


@pytest.mark.parametrize("algo", ["fd", "fedavg"])  # own model / the server's global model
def test_saved_models_reproduce_the_reported_accuracy(tmp_path, algo):
    summary = run(SimulationConfig(algo=algo, out=str(tmp_path), **QUICK), progress=False)
    files = list_checkpoints(tmp_path)
    assert sorted(files) == sorted(summary["models"])
    dataset = load_dataset("digits")
    accuracies = []
    for cid, path in files.items():
        checkpoint = load_checkpoint(path)
        assert checkpoint.model_name == summary["models"][cid]
        assert checkpoint.dataset == "digits" and checkpoint.input_shape == list(dataset.input_shape)
        assert len(checkpoint.train_indices) == 120 and checkpoint.test_indices
        model = checkpoint.build_model()
        test = torch.tensor(checkpoint.test_indices)
        measured = evaluate_model(model, dataset.test_x[test], dataset.test_y[test])["accuracy"]
        assert measured == pytest.approx(checkpoint.accuracy, abs=1e-12)
        accuracies.append(measured)
    assert sum(accuracies) / len(accuracies) == pytest.approx(summary["final_accuracy"], abs=1e-9)


def test_foreign_file_is_rejected_clearly(tmp_path):
    path = tmp_path / "x.pt"
    torch.save({"weights": torch.zeros(2)}, path)
    with pytest.raises(ValueError, match="not an edgefd client model"):
        load_checkpoint(path)
    path.write_bytes(b"garbage")
    with pytest.raises(ValueError, match="not an edgefd client model"):
        load_checkpoint(path)
    with pytest.raises(ValueError, match="no client models"):
        list_checkpoints(tmp_path)
