"""edgefd.settings: one declaration for every setting, its help always with it."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgefd.algorithms.base import list_methods
from edgefd.runtime.config import SimulationConfig
from edgefd.settings import setting


def test_a_setting_without_help_is_refused():
    with pytest.raises(ValueError, match="needs its help"):
        setting(1)


def test_choices_and_a_computed_default_are_kept():
    @dataclasses.dataclass
    class Example:
        mode: str = setting("fast", "fast | slow", choices=("fast", "slow"), aliases={"quick": "fast"})
        items: list = setting(help="a fresh list each time", default_factory=list)

    mode, items = dataclasses.fields(Example)
    assert mode.metadata == {"help": "fast | slow", "choices": ("fast", "slow"), "aliases": {"quick": "fast"}}
    assert Example().items == [] and Example().items is not Example().items


def test_the_run_and_every_methods_params_declare_each_setting_with_its_help():
    from edgefd.deploy.client_settings import ClientSettings
    from edgefd.deploy.flags import BROKER_OWNERS

    owners = [SimulationConfig, ClientSettings, *BROKER_OWNERS] + [method.params for method in list_methods()]
    missing = [
        f"{owner.__name__}.{f.name}"
        for owner in owners
        for f in dataclasses.fields(owner)
        if f.name != "params" and not f.metadata.get("help")
    ]
    assert not missing, f"declare these with edgefd.settings.setting(default, help): {missing}"


def test_the_deployment_flags_are_made_from_their_settings():
    import argparse

    from edgefd.deploy.mqtt_channel import DeploymentSettings
    from edgefd.deploy.server import DEPLOYMENT_FLAGS, add_deployment_arguments, deployment_flags
    from edgefd.settings import settings_from_args

    parser = argparse.ArgumentParser()
    add_deployment_arguments(parser)
    fields = {f.name: f for f in dataclasses.fields(DeploymentSettings)}
    actions = {action.dest: action for action in parser._actions if action.dest in DEPLOYMENT_FLAGS}
    assert set(actions) == set(DEPLOYMENT_FLAGS)
    for name, action in actions.items():
        assert action.help.startswith(fields[name].metadata["help"])
        assert action.default == fields[name].default
    args = parser.parse_args(["--round-timeout", "7.5", "--min-clients", "3", "--ask-again", "2.5"])
    values = settings_from_args(DeploymentSettings, args, DEPLOYMENT_FLAGS)
    assert values["round_timeout"] == 7.5 and values["min_clients"] == 3 and values["eval_timeout"] == 30.0
    with pytest.raises(ValueError, match="no setting"):
        settings_from_args(DeploymentSettings, args, ("round_timeout", "nonsense"))
    # `edgefd deploy-local` passes them all on to its server
    child = parser.parse_args(deployment_flags(args))
    assert settings_from_args(DeploymentSettings, child, DEPLOYMENT_FLAGS) == values


def test_the_broker_flags_are_made_from_their_settings_and_pass_on_to_a_child_process():
    import argparse

    from edgefd.deploy.flags import BROKER_OWNERS, add_broker_arguments, broker_flags, broker_settings
    from edgefd.deploy.mqtt_transport import BrokerSettings

    parser = argparse.ArgumentParser()
    add_broker_arguments(parser)
    fields = {f.name: f for owner in BROKER_OWNERS for f in dataclasses.fields(owner) if f.name != "password"}
    actions = {action.dest: action for action in parser._actions if action.dest in fields}
    assert set(actions) == set(fields)  # every setting has its flag, but the password: never a flag
    for name, action in actions.items():
        assert action.option_strings == ["--" + name.replace("_", "-")]
        assert action.help.startswith(fields[name].metadata["help"])
        no_default = fields[name].default is dataclasses.MISSING
        assert action.default == (None if no_default else fields[name].default)
    assert actions["broker"].required and actions["log_level"].choices == ("DEBUG", "INFO", "WARNING", "ERROR")

    # the settings the flags give, each at its dataclass's default where it is not given
    args = parser.parse_args(["--broker", "mqtt://here:1883", "--keepalive", "7"])
    assert broker_settings(vars(args)) == BrokerSettings("mqtt://here:1883", keepalive=7)

    # a value other than the default for every setting: the child process parses what this one had
    others = {"tls_insecure": True, "log_level": "DEBUG", "keepalive": 7, "chunk_size": 1000}
    args = parser.parse_args(["--broker", "mqtt://here:1883"])
    for name in fields:
        setattr(args, name, others.get(name, f"{name}.value"))
    child = parser.parse_args(broker_flags(args, "mqtt://there:1883"))
    assert vars(child) == {**vars(args), "broker": "mqtt://there:1883"}

    # and at the defaults, a child process gets them all back
    args = parser.parse_args(["--broker", "mqtt://here:1883"])
    assert vars(parser.parse_args(broker_flags(args, "mqtt://here:1883"))) == vars(args)


def test_the_client_flags_are_made_from_its_settings_and_the_brokers():
    import argparse

    from edgefd.deploy import client
    from edgefd.deploy.client_settings import ClientSettings
    from edgefd.deploy.flags import BROKER_FLAGS, BROKER_OWNERS

    parser = argparse.ArgumentParser()
    client.add_arguments(parser)
    fields = {f.name: f for owner in (ClientSettings, *BROKER_OWNERS) for f in dataclasses.fields(owner)}
    flags = {action.dest: action for action in parser._actions if action.dest in fields}
    assert set(flags) == {*client.CLIENT_FLAGS, *BROKER_FLAGS, "log_level"}
    assert set(fields) - set(flags) == {"password"}  # never a flag (ClientSettings.broker: these flags)
    for name, action in flags.items():
        assert action.help.startswith(fields[name].metadata["help"])
    # the flags hold only what the command line gives: `--config` fills the rest, then the defaults
    assert vars(parser.parse_args(["--keepalive", "10"])) == {"config": None, "keepalive": 10}


def test_the_loop_and_the_local_training_take_the_runs_settings_declared_once():
    from edgefd.runtime.loop import LoopConfig
    from edgefd.training import TrainConfig

    run = {f.name for f in dataclasses.fields(SimulationConfig)}
    for owner in (LoopConfig, TrainConfig):
        shared = [f for f in dataclasses.fields(owner) if f.name in run]
        assert shared, owner
        assert all(f.default is dataclasses.MISSING for f in shared), f"{owner.__name__} declares a run setting again"
    config = SimulationConfig(rounds=3, straggler_rate=0.25, lr=0.5, channels_last=False, device="cpu")
    assert (config.loop_config().rounds, config.loop_config().straggler_rate) == (3, 0.25)
    assert (config.train_config().lr, config.train_config().channels_last) == (0.5, False)


@pytest.mark.parametrize(
    ("write", "said"),
    [
        (None, "no such file"),
        ("directory", "a directory, not a file"),
        (b"rounds = 3\n# caf\xe9\n", "not UTF-8 text (byte 0xe9 at offset 16); save it as UTF-8"),
        (b"rounds = = 3\n", "not valid TOML"),
        ("unreadable", "cannot be read ("),
    ],
)
def test_every_problem_with_a_config_file_is_one_line_naming_the_file(tmp_path, write, said):
    """`edgefd simulate --config FILE` exits 2 with one line that names the file and the problem,
    never a traceback (an unreadable file gave 23 lines of PermissionError). Unreadable: a file of
    mode 000, or, for root (who reads it anyway), /proc/self/mem, whose reading fails too."""
    path = tmp_path / "run.toml"
    if write == "directory":
        path.mkdir()
    elif write == "unreadable":
        path.write_text("rounds = 3\n")
        path.chmod(0)
        if os.access(path, os.R_OK):
            path = Path("/proc/self/mem")
    elif write is not None:
        path.write_bytes(write)
    done = subprocess.run(
        [sys.executable, "-m", "edgefd.cli", "simulate", "--config", str(path), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert f"--config {path}: {said}" in lines[0]
