"""Bring-your-own-data: `npz:PATH` files and `register_dataset`, checked and normalised like the built-ins."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from edgefd import cli
from edgefd.data import (
    Dataset,
    DatasetNotFoundError,
    DatasetSpec,
    clear_cache,
    dataset_from_arrays,
    dataset_label,
    list_datasets,
    load_dataset,
    partition,
    register_dataset,
    unregister_dataset,
)
from edgefd.data.registry import REGISTRY


def image_arrays(seed: int = 0, classes: int = 3, train: int = 90, test: int = 30) -> dict[str, np.ndarray]:
    """Class-dependent 2-channel 8x8 images: the label shifts the mean, so a model can learn it."""
    rng = np.random.default_rng(seed)
    out = {}
    for split, n in (("train", train), ("test", test)):
        y = np.arange(n) % classes
        x = rng.normal(size=(n, 2, 8, 8)) + y[:, None, None, None]
        x[:, 1] = 5.0 + 3.0 * x[:, 1]  # a second channel with its own scale
        out[f"{split}_x"], out[f"{split}_y"] = x.astype(np.float32), y.astype(np.int64)
    return out


def write(path: Path, **arrays: np.ndarray) -> str:
    np.savez(path, **arrays)
    return f"npz:{path}"


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


def test_images_load_standardised_with_train_statistics(tmp_path: Path):
    arrays = image_arrays()
    ds = load_dataset(write(tmp_path / "mine.npz", **arrays, class_names=np.array(["a", "b", "c"])))
    assert isinstance(ds, Dataset)
    assert ds.name == f"npz:{(tmp_path / 'mine.npz').resolve()}"
    assert ds.input_shape == (2, 8, 8) and ds.num_classes == 3 and ds.class_names == ("a", "b", "c")
    assert ds.train_x.dtype == ds.test_x.dtype == torch.float32
    assert ds.train_y.dtype == ds.test_y.dtype == torch.int64
    assert (len(ds.train_x), len(ds.test_x)) == (90, 30)
    assert len(ds.mean) == len(ds.std) == 2 and ds.input_scale == 1.0
    per_channel = ds.train_x.transpose(0, 1).reshape(2, -1)
    torch.testing.assert_close(per_channel.mean(1), torch.zeros(2), atol=1e-5, rtol=0)
    torch.testing.assert_close(per_channel.std(1, unbiased=False), torch.ones(2), atol=1e-4, rtol=0)
    # mean / std undo the normalisation, for the test split too (the export's sidecar relies on it)
    mean, std = torch.tensor(ds.mean).view(1, 2, 1, 1), torch.tensor(ds.std).view(1, 2, 1, 1)
    torch.testing.assert_close(ds.test_x * std + mean, torch.from_numpy(arrays["test_x"]), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("shape", [(20, 3), (7,)], ids=["sensor-windows", "vectors"])
def test_sensor_windows_and_vectors_are_standardised_per_feature(tmp_path: Path, shape):
    rng = np.random.default_rng(1)
    x = (rng.normal(size=(40, *shape)) * 4 + 2).astype(np.float64)  # float64 is converted
    x[..., 0] = 3.0  # a constant feature keeps std 1: shifted, never divided by ~0
    y = np.arange(40) % 2
    ds = load_dataset(write(tmp_path / "d.npz", train_x=x, train_y=y, test_x=x[:10] + 1, test_y=y[:10]))
    assert ds.input_shape == shape and ds.num_classes == 2
    assert len(ds.mean) == len(ds.std) == shape[-1]
    assert ds.std[0] == 1.0 and ds.mean[0] == pytest.approx(3.0)
    assert torch.isfinite(ds.test_x).all()
    assert float(ds.test_x[..., 0].abs().max()) == pytest.approx(1.0)  # the constant 3 became 0; test's 4 -> 1


def test_tilde_expands_and_a_rewritten_file_is_read_again(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    write(tmp_path / "d.npz", **image_arrays(classes=3))
    assert load_dataset("npz:~/d.npz").num_classes == 3
    assert load_dataset("NPZ:~/d.npz") is load_dataset("npz:~/d.npz")  # cached
    write(tmp_path / "d.npz", **image_arrays(classes=4, train=80))
    assert load_dataset("npz:~/d.npz").num_classes == 4


def test_groups_give_a_natural_partition(tmp_path: Path):
    arrays = image_arrays(train=60, test=30)
    name = write(tmp_path / "g.npz", **arrays, train_groups=np.arange(60) % 4, test_groups=np.arange(30) % 4)
    ds = load_dataset(name)
    assert ds.num_groups == 4
    splits = partition(ds, 4, "natural", 0)
    assert sorted(len(s.train_indices) for s in splits) == [15, 15, 15, 15]


BAD_INPUTS = {
    "missing key": (lambda a: {k: v for k, v in a.items() if k != "test_y"}, "missing test_y"),
    "misspelt key": (lambda a: {**a, "Train_X": a["train_x"]}, "unexpected Train_X"),
    "fewer labels than samples": (lambda a: {**a, "train_y": a["train_y"][:-1]}, "train_x has 90 samples but train_y"),
    "negative label": (lambda a: {**a, "test_y": a["test_y"] - 1}, "test_y holds label -1"),
    "label beyond class_names": (
        lambda a: {**a, "class_names": np.array(["a", "b"])},
        "holds label 2 but class_names has 2 names",
    ),
    "1-based labels": (lambda a: {**a, "train_y": a["train_y"] + 1, "test_y": a["test_y"] + 1}, "class(es) 0 never"),
    "NaN": (lambda a: {**a, "train_x": np.where(np.arange(90)[:, None, None, None] == 7, np.nan, a["train_x"])}, "NaN"),
    "Inf": (lambda a: {**a, "test_x": np.where(np.arange(30)[:, None, None, None] == 3, np.inf, a["test_x"])}, "Inf"),
    "integer inputs": (lambda a: {**a, "train_x": (a["train_x"] * 10).astype(np.uint8)}, "dtype uint8"),
    "float labels": (lambda a: {**a, "train_y": a["train_y"].astype(np.float32)}, "labels must be integers"),
    "rank 5": (lambda a: {**a, "train_x": a["train_x"][..., None]}, "rank 5"),
    "rank 1": (lambda a: {**a, "test_x": a["test_x"][:, 0, 0, 0]}, "rank 1"),
    "labels of rank 2": (lambda a: {**a, "train_y": a["train_y"][:, None]}, "one integer per sample"),
    "train and test shapes differ": (lambda a: {**a, "test_x": a["test_x"][:, :, :4]}, "same per-sample shape"),
    "no samples": (lambda a: {**a, "test_x": a["test_x"][:0], "test_y": a["test_y"][:0]}, "at least one sample"),
    "one group array": (lambda a: {**a, "train_groups": np.zeros(90, np.int64)}, "both train_groups and test_groups"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS), ids=list(BAD_INPUTS))
def test_bad_files_are_refused_naming_the_problem(tmp_path: Path, case: str):
    change, message = BAD_INPUTS[case]
    path = tmp_path / "bad.npz"
    name = write(path, **change(image_arrays()))
    with pytest.raises(ValueError, match="npz dataset") as error:
        load_dataset(name)
    assert message in str(error.value)
    assert str(path.resolve()) in str(error.value)


def test_files_that_are_not_npz_archives(tmp_path: Path):
    with pytest.raises(DatasetNotFoundError, match="no such file"):
        load_dataset(f"npz:{tmp_path / 'absent.npz'}")
    (tmp_path / "text.npz").write_text("not an archive")
    with pytest.raises(ValueError, match="not an .npz archive"):
        load_dataset(f"npz:{tmp_path / 'text.npz'}")
    np.save(tmp_path / "one.npy", np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match="single .npy array"):
        load_dataset(f"npz:{tmp_path / 'one.npy'}")
    np.savez(tmp_path / "objects.npz", **image_arrays(), class_names=np.array(["a", 1, None], dtype=object))
    with pytest.raises(ValueError, match="class_names holds Python objects"):
        load_dataset(f"npz:{tmp_path / 'objects.npz'}")
    with pytest.raises(ValueError, match="needs a file"):
        load_dataset("npz:")


def test_unknown_names_point_at_npz(tmp_path: Path):
    with pytest.raises(ValueError, match="npz:PATH"):
        load_dataset("my-data")


def _toy_spec(name: str) -> DatasetSpec:
    def load(root: Path) -> Dataset:
        a = image_arrays(seed=3)
        return dataset_from_arrays(name, a["train_x"], a["train_y"], a["test_x"], a["test_y"])

    return DatasetSpec(name, "a toy set built in a test", load, lambda root: True)


def test_register_dataset_adds_a_name_until_unregistered():
    spec = _toy_spec("toy-images")
    register_dataset(spec)
    try:
        ds = load_dataset("toy-images")
        assert ds.name == "toy-images" and ds.input_shape == (2, 8, 8) and ds.num_classes == 3
        assert load_dataset("TOY-IMAGES") is ds
        assert "toy-images" in {info.name for info in list_datasets()}
        with pytest.raises(ValueError, match="already registered"):
            register_dataset(_toy_spec("toy-images"))
    finally:
        unregister_dataset("toy-images")
    assert "toy-images" not in REGISTRY
    with pytest.raises(ValueError, match="unknown dataset"):
        load_dataset("toy-images")


@pytest.mark.parametrize(
    "name, message",
    [
        ("digits", "built-in"),
        ("fashion-mnist", "built-in"),
        ("Mine", "lower-case"),
        ("npz:x", "':'"),
        ("", "non-empty"),
    ],
)
def test_register_dataset_refuses_taken_or_bad_names(name: str, message: str):
    with pytest.raises(ValueError, match=message):
        register_dataset(_toy_spec(name))
    with pytest.raises(ValueError, match="built in"):
        unregister_dataset("digits")
    assert set(REGISTRY) >= {"digits", "fmnist"}


def test_dataset_from_arrays_checks_like_a_file():
    a = image_arrays()
    with pytest.raises(ValueError, match="dataset 'mine': train_y has dtype float64"):
        dataset_from_arrays("mine", a["train_x"], a["train_y"].astype(np.float64), a["test_x"], a["test_y"])


def test_run_folder_name_is_safe():
    assert dataset_label("digits") == "digits"
    assert dataset_label("npz:~/data/my data.npz") == "npz-my-data"
    from edgefd.runtime.config import SimulationConfig

    assert SimulationConfig(dataset="npz:/x/y/mine.npz").out_dir() == Path("runs/fd-npz-mine-s0")


def test_simulate_partition_and_the_deployment_pieces_accept_an_npz_dataset(tmp_path: Path, capsys):
    from edgefd.runtime.build import prepare
    from edgefd.runtime.config import SimulationConfig
    from edgefd.simulate import run

    name = write(tmp_path / "mine.npz", **image_arrays(train=120, test=60))
    out = tmp_path / "run"
    config = SimulationConfig(dataset=name, clients=3, rounds=2, threads=1, models="auto", out=str(out))
    summary = run(config, progress=False)
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["round"] for line in lines] == [0, 1, 2]
    assert 0.0 <= summary["final_accuracy"] <= 1.0 and summary["bytes_up_total"] > 0
    assert set(summary["models"].values()) == {"cnn2"}  # --models auto: FD's homogeneous default for images

    # `edgefd server` and `edgefd client` build their pieces with prepare(), from the same config
    pieces = prepare(config)
    assert tuple(pieces.dataset.input_shape) == (2, 8, 8) and len(pieces.splits) == 3

    assert cli.main(["partition", "--dataset", name, "--clients", "3", "--partition", "iid"]) == 0
    assert "120 train / 60 test samples, 3 classes" in capsys.readouterr().out
    bad = write(tmp_path / "bad.npz", **{**image_arrays(), "train_y": image_arrays()["train_y"][:5]})
    assert cli.main(["simulate", "--dataset", bad, "--rounds", "1", "--quiet", "--out", str(tmp_path / "x")]) == 2
    assert "train_x has 90 samples but train_y has 5 labels" in capsys.readouterr().err
