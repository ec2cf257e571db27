"""runtime.config: a run's config written as TOML reads back as the same run; its defaults."""

import argparse

import pytest

from edgefd.algorithms.dfl import DFLParams
from edgefd.algorithms.params import make_params
from edgefd.runtime.config import DEFAULT_THREADS, SimulationConfig, config_to_toml
from edgefd.runtime.flags import add_config_arguments, config_from_args


def test_a_none_param_survives_the_toml_round_trip_instead_of_reading_back_as_its_default(tmp_path):
    literal = SimulationConfig(algo="dfl", rounds=3, params={"threshold": 0.6, "horizon": None})
    path = tmp_path / "run.toml"
    path.write_text(config_to_toml(literal))
    back = config_from_args(argparse.Namespace(config=str(path), param=[]))
    assert make_params(DFLParams, back.params).horizon is None  # not DFL's default of 200
    assert make_params(DFLParams, back.params).threshold == 0.6
    default = SimulationConfig(algo="dfl", rounds=3, params={"threshold": 0.6})
    assert config_to_toml(default) != config_to_toml(literal)  # a recipe that moves to none runs again
    assert "samples_per_client" not in config_to_toml(default)  # None settings are their defaults


def test_a_flag_whose_default_is_none_takes_none_over_the_config_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(config_to_toml(SimulationConfig(algo="dfl", epochs=1, samples_per_client=40)))
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    back = config_from_args(parser.parse_args(["--config", str(path), "--epochs", "none"]))
    assert back.epochs is None and back.samples_per_client == 40  # DFL's paper's epochs again
    assert config_from_args(parser.parse_args(["--config", str(path), "--epochs", "3"])).epochs == 3
    with pytest.raises(SystemExit):
        parser.parse_args(["--epochs", "many"])


@pytest.mark.parametrize(
    ("variable", "threads"),
    [(None, DEFAULT_THREADS), ("1", 1), ("3", 3), ("4,2", 4), ("0", DEFAULT_THREADS), ("x", DEFAULT_THREADS)],
)
def test_threads_default_to_omp_num_threads_where_it_is_a_count(monkeypatch, variable, threads):
    if variable is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", variable)
    assert SimulationConfig().threads == threads
    assert SimulationConfig(threads=2).threads == 2  # a chosen count wins


def test_where_a_run_executes_is_left_out_of_its_toml_at_the_defaults_and_round_trips_otherwise(tmp_path):
    text = config_to_toml(SimulationConfig())
    assert "backend" not in text and "workers" not in text and "ray_address" not in text
    ray = SimulationConfig(backend="ray", workers=3, ray_address="auto")
    path = tmp_path / "run.toml"
    path.write_text(config_to_toml(ray))
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    back = config_from_args(parser.parse_args(["--config", str(path)]))
    assert (back.backend, back.workers, back.ray_address) == ("ray", 3, "auto")


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="backend"):
        SimulationConfig(backend="dask").validate()


@pytest.mark.parametrize(
    "gpus, refusal",
    [
        (-0.5, "must be >= 0, got -0.5"),
        (1.5, "a fraction of one GPU or a whole number of GPUs, got 1.5"),
        (float("nan"), "must be >= 0"),
    ],
)
def test_a_gpu_share_ray_cannot_give_is_refused(gpus, refusal):
    SimulationConfig(backend="ray", gpus_per_worker=0.25).validate()
    SimulationConfig(backend="ray", gpus_per_worker=2).validate()
    with pytest.raises(ValueError, match=refusal):
        SimulationConfig(backend="ray", gpus_per_worker=gpus).validate()
