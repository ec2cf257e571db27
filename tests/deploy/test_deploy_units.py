"""Pieces of the deployment that need no broker: selection, client settings, device data, configs."""

import argparse
import time
from dataclasses import asdict, replace
from types import SimpleNamespace

import numpy as np
import pytest

from edgefd.deploy import client as deploy_client
from edgefd.deploy import control as deploy_messages
from edgefd.deploy.client_runtime import ClientRuntime, ClientSettings
from edgefd.deploy.device_data import load_device_data
from edgefd.deploy.mqtt_transport import BrokerSettings, Incoming
from edgefd.deploy.server_runtime import DeploymentSettings, same_run_config
from edgefd.protocol import Message, Payload
from edgefd.runtime.config import SimulationConfig, config_to_toml
from edgefd.runtime.flags import config_from_args
from edgefd.runtime.verbs import VERBS, ClientApp

LOCAL_BROKER = BrokerSettings("mqtt://127.0.0.1:1883")
"""A broker URL for the channels and endpoints these tests make and never connect."""


def test_broker_urls_and_settings_are_checked():
    settings = BrokerSettings("mqtts://example.org")
    assert (settings.host, settings.port, settings.tls) == ("example.org", 8883, True)
    assert BrokerSettings("mqtt://127.0.0.1:1999").port == 1999
    for bad in ("tcp://x:1", "mqtt://", "mqtt://host:port"):
        with pytest.raises(ValueError, match="broker"):
            BrokerSettings(bad)
    with pytest.raises(ValueError, match="round_timeout"):
        DeploymentSettings(run="x", broker=LOCAL_BROKER, round_timeout=0).validate()


def test_a_checkpoint_from_when_epochs_defaulted_to_one_resumes_where_the_method_trains_one():
    old_default = {**asdict(SimulationConfig(algo="fd")), "epochs": 1}  # written before epochs were the method's
    assert same_run_config(old_default, SimulationConfig(algo="fd"))  # FD's paper: one epoch a round
    assert not same_run_config({**old_default, "algo": "dfl"}, SimulationConfig(algo="dfl"))  # DFL now trains 5
    assert same_run_config(asdict(SimulationConfig(algo="dfl")), SimulationConfig(algo="dfl"))
    assert not same_run_config(asdict(SimulationConfig(algo="fd", rounds=3)), SimulationConfig(algo="fd"))
    before_caps = {k: v for k, v in asdict(SimulationConfig(algo="fd")).items() if k != "max_message_bytes"}
    assert same_run_config(before_caps, SimulationConfig(algo="fd"))  # written before the setting existed
    assert not same_run_config(before_caps, SimulationConfig(algo="fd", max_message_bytes=10**6))


def down(verb: str, round: int, content: Payload | None = None, client: str = "client-1", run: str = "u") -> Message:
    """The server's message to ``client``."""
    return Message(verb, "server", client, round, content, run=run)


def test_config_travels_whole():
    config = SimulationConfig(algo="fedavg", clients=4, precision="int8", params={"beta": 2.0})
    sent = deploy_messages.config_from(deploy_messages.config_message(config, "client-0", "u"))
    assert SimulationConfig(**sent) == config
    assert "max_message_bytes" not in sent  # at its default, None: a device of the previous edgefd reads it
    capped = replace(config, max_message_bytes=10**6)
    sent = deploy_messages.config_from(deploy_messages.config_message(capped, "client-0", "u"))
    assert SimulationConfig(**sent) == capped
    with pytest.raises(ValueError, match="expected a config"):
        deploy_messages.config_from(down("config", 1))


def test_deploy_local_writes_a_config_that_simulate_reads(tmp_path):
    config = SimulationConfig(
        algo="fd",
        clients=3,
        rounds=2,
        partition="dirichlet:0.3",
        seed=9,
        params={"temperature": 3.0, "exclude_self": True},
    )
    path = tmp_path / "run.toml"
    path.write_text(config_to_toml(config))
    back = config_from_args(argparse.Namespace(config=str(path), param=[]))
    assert back == config


def test_client_settings_from_a_toml_file(tmp_path):
    path = tmp_path / "client.toml"
    path.write_text(
        'broker = "mqtt://10.0.0.2:1883"\nrun = "demo"\nclient_id = "client-1"\nkeepalive = 30\nlog_level = "DEBUG"\n'
    )
    parser = argparse.ArgumentParser()
    deploy_client.add_arguments(parser)
    settings, flags = deploy_client.resolve(parser.parse_args(["--config", str(path), "--client-id", "client-2"]))
    assert (settings.broker.broker, settings.run, settings.client_id) == ("mqtt://10.0.0.2:1883", "demo", "client-2")
    assert (settings.broker.keepalive, flags.log_level, settings.device) == (30, "DEBUG", "auto")
    assert settings.recompute_activations is False  # the device keeps its activations unless it says
    settings, _ = deploy_client.resolve(parser.parse_args(["--config", str(path), "--recompute-activations"]))
    assert settings.recompute_activations is True
    # the rule of every --config: a flag given wins over the file, even at its default
    settings, flags = deploy_client.resolve(
        parser.parse_args(["--config", str(path), "--keepalive", "10", "--log-level", "INFO"])
    )
    assert (settings.broker.keepalive, flags.log_level) == (10, "INFO")
    path.write_text('broker = "mqtt://x:1"\nrun = "demo"\nclient_id = "c"\nbrokr = 1\n')
    with pytest.raises(ValueError, match="unknown key"):
        deploy_client.resolve(parser.parse_args(["--config", str(path)]))
    with pytest.raises(ValueError, match="--run"):
        deploy_client.resolve(parser.parse_args(["--broker", "mqtt://x:1", "--client-id", "c"]))


def test_client_cli_reports_bad_settings(tmp_path, capsys):
    from edgefd import cli

    assert cli.main(["client", "--broker", "mqtt://x:1", "--run", "a/b", "--client-id", "c"]) == 2
    assert "run name" in capsys.readouterr().err


def test_device_data_folder(tmp_path):
    rng = np.random.default_rng(0)
    arrays = dict(
        train_x=rng.random((20, 1, 8, 8), np.float32),
        train_y=rng.integers(0, 10, 20),
        test_x=rng.random((5, 1, 8, 8), np.float32),
        test_y=rng.integers(0, 10, 5),
        num_classes=np.array(10),
    )
    np.savez(tmp_path / "data.npz", **arrays)
    data, shape = load_device_data(tmp_path)
    assert shape.input_shape == (1, 8, 8) and shape.num_classes == 10
    assert data.train_x.shape == (20, 1, 8, 8) and data.train_ids.tolist() == list(range(20))
    np.savez(tmp_path / "data.npz", **{**arrays, "test_y": np.full(5, 12)})
    with pytest.raises(ValueError, match="labels outside"):
        load_device_data(tmp_path)
    np.savez(tmp_path / "data.npz", **{k: v for k, v in arrays.items() if k != "num_classes"})
    with pytest.raises(ValueError, match="num_classes"):
        load_device_data(tmp_path)
    with pytest.raises(ValueError, match="no data.npz"):
        load_device_data(tmp_path / "nowhere")


def test_a_stop_left_retained_by_an_earlier_run_does_not_stop_a_new_client():
    """The server leaves its stops retained (a client reconnecting at the end still gets one); a
    client of the next run with the same name meets it before its config, and must not exit."""
    device = ClientRuntime(ClientSettings("u", "client-0", BrokerSettings("mqtt://127.0.0.1:1")))
    device._handle(Incoming("down", "client-0", "stop", down("stop", 3, client="client-0"), nbytes=0))
    assert not device.stopping.is_set()


def test_a_client_sent_its_config_again_says_again_that_it_is_online(monkeypatch):
    """The server sends a config again only to clients it does not see online (RabbitMQ hands the
    retained statuses to no wildcard subscription): the client must answer with its status."""
    device = ClientRuntime(ClientSettings("u", "client-1", BrokerSettings("mqtt://127.0.0.1:1"), device="cpu"))
    sent = []
    monkeypatch.setattr(device.endpoint, "publish", lambda topic, message, retain=False: sent.append(message))
    config = deploy_messages.config_message(
        SimulationConfig(dataset="digits", clients=2, rounds=1, threads=1), "client-1", "u"
    )
    device._handle(Incoming("down", "client-1", "config", config, nbytes=0))
    assert [deploy_messages.state_of(m) for m in sent] == [deploy_messages.ONLINE]  # built, and said so
    device._handle(Incoming("down", "client-1", "config", config, nbytes=0))
    assert [deploy_messages.state_of(m) for m in sent] == [
        deploy_messages.ONLINE,
        deploy_messages.ONLINE,
    ]  # not rebuilt; said so again


def test_a_device_takes_what_its_server_may_send_it_under_the_runs_cap_and_its_own(monkeypatch):
    """Until the config comes a device takes 64 MiB (a config is a few KB); then what the run's server
    may send it (`client_limit`: its model's weights and knowledge), under the run's cap and its own."""
    from edgefd.runtime.limits import OPEN_MESSAGE_BYTES, client_limit

    def device_for(run_cap, own_cap):
        device = ClientRuntime(
            ClientSettings("u", "client-1", BrokerSettings("mqtt://127.0.0.1:1"), max_message_bytes=own_cap)
        )
        monkeypatch.setattr(device.endpoint, "publish", lambda *a, **k: None)
        assert device.endpoint.max_message_bytes == (own_cap or OPEN_MESSAGE_BYTES)
        config = SimulationConfig(dataset="digits", clients=2, rounds=1, threads=1, max_message_bytes=run_cap)
        message = deploy_messages.config_message(config, "client-1", "u")
        device._handle(Incoming("down", "client-1", "config", message, nbytes=0))
        return device

    device = device_for(None, None)
    largest = client_limit(device.role.model, None)
    assert largest > OPEN_MESSAGE_BYTES and device.endpoint.max_message_bytes == largest
    assert device.endpoint.inbox.max_bytes == 4 * largest and device.endpoint.budget.max_bytes == 2 * largest
    assert device_for(500_000, None).endpoint.max_message_bytes == 500_000
    assert device_for(500_000, 300_000).endpoint.max_message_bytes == 300_000


def test_a_password_file_others_can_read_is_refused(tmp_path):
    from edgefd.deploy.flags import read_password

    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    secret.chmod(0o644)
    with pytest.raises(ValueError, match=r"readable or writable by others \(mode 644\); run `chmod 600"):
        read_password(str(secret))
    secret.chmod(0o600)
    assert read_password(str(secret)) == "s3cret"


def test_credentials_in_a_broker_url_are_used_and_never_shown():
    from edgefd.deploy.mqtt_transport import BrokerSettings

    settings = BrokerSettings("mqtts://client-3:p%40ss@broker.example:8883")
    assert (settings.username, settings.password) == ("client-3", "p@ss")
    assert settings.shown_url == "mqtts://broker.example:8883"
    assert "p@ss" not in settings.shown_url and "p%40ss" not in settings.shown_url
    explicit = BrokerSettings("mqtt://u:x@h:1883", username="other", password="y")
    assert (explicit.username, explicit.password, explicit.shown_url) == ("other", "y", "mqtt://h:1883")


def test_the_deployed_server_refuses_what_exceeds_the_bound_before_buffering_it():
    """Each round begins by asking the method's bounds; a topic's limit is then the bound plus the
    deployment's wrapping (the method's message is never larger), whatever its size (FedICT's
    uplink of 1,381 MNIST samples: ~69 MB), and under --max-message-bytes where one is set."""
    from edgefd.deploy.mqtt_channel import DeploymentSettings, MqttChannel
    from edgefd.deploy.mqtt_transport import Topics
    from edgefd.runtime.config import SimulationConfig
    from edgefd.runtime.limits import OPEN_MESSAGE_BYTES, WRAPPING_BYTES

    bounds = {"train": 700, "step": None, "hello": 69_000_000}
    clients = ["client-0", "client-1"]
    settings = DeploymentSettings(run="b", broker=LOCAL_BROKER)
    channel = MqttChannel(SimulationConfig(clients=2), settings, clients, Topics("b"), lambda cid: bounds)
    largest = channel._largest_message
    assert largest("up", "client-0", "train") == OPEN_MESSAGE_BYTES  # no round begun yet
    channel._follow_the_limits(0)  # a round's first message
    assert largest("up", "client-0", "train") == 700 + WRAPPING_BYTES
    assert largest("up", "client-0", "hello") == 69_000_000 + WRAPPING_BYTES  # above 64 MiB: the bound's
    assert largest("up", "client-0", "step") == OPEN_MESSAGE_BYTES  # open
    assert largest("up", "client-7", "train") is None  # not in the run
    assert channel.endpoint.inbox.max_bytes == 4 * (69_000_000 + WRAPPING_BYTES)  # four of the largest wait

    capped = MqttChannel(
        SimulationConfig(clients=2, max_message_bytes=1_000_000), settings, clients, Topics("b"), lambda cid: bounds
    )
    capped._follow_the_limits(0)
    largest = capped._largest_message
    assert largest("up", "client-0", "train") == 700 + WRAPPING_BYTES
    assert largest("up", "client-0", "hello") == largest("up", "client-0", "step") == 1_000_000
    assert capped.endpoint.inbox.max_bytes == 4 * 1_000_000


def test_each_client_has_a_share_of_the_reassembly_budget_and_the_budget_holds_every_share():
    """A client's share is twice its largest message on any of its topics (a verb left open: up to
    --max-message-bytes), and the whole budget their sum: one device cannot take the others' room."""
    from edgefd.deploy.mqtt_channel import DeploymentSettings, MqttChannel
    from edgefd.deploy.mqtt_transport import Topics
    from edgefd.runtime.config import SimulationConfig
    from edgefd.runtime.limits import SMALL_ANSWER_MAX_BYTES, WRAPPING_BYTES

    clients = [f"client-{i}" for i in range(50)]
    settings = DeploymentSettings(run="r", broker=LOCAL_BROKER)
    config = SimulationConfig(clients=50, max_message_bytes=1_000_000)
    bounded = {"hello": 0, "train": 300_000, "steps": 0, "step": 0}

    def bounds(cid):
        return bounded if cid != "client-7" else {**bounded, "hello": None}  # client-7's hello is open

    channel = MqttChannel(config, settings, clients, Topics("r"), bounds)
    channel._follow_the_limits(0)  # a round's first message
    share = 2 * (300_000 + WRAPPING_BYTES)
    assert channel.endpoint._share_bytes == {cid: 2 * 1_000_000 if cid == "client-7" else share for cid in clients}
    assert channel.endpoint.budget.max_bytes == 49 * share + 2 * 1_000_000
    small = {"hello": 0, "train": 500, "steps": 0, "step": 0}  # FD: the eval answers' cap is the largest
    channel = MqttChannel(config, settings, clients, Topics("r"), lambda cid: small)
    channel._follow_the_limits(0)  # a round's first message
    assert channel.endpoint.budget.max_bytes == 50 * 2 * SMALL_ANSWER_MAX_BYTES


def test_the_server_publishes_again_the_configs_of_clients_it_does_not_see_online(monkeypatch):
    """RabbitMQ's MQTT plugin keeps a retained config on the server's node, for subscriptions of its
    exact topic only (a client subscribing later never gets it from the store): while the server
    waits, the configs of the clients not online go out again, retained, every CONFIG_RESEND_SECONDS
    (less often for many clients), and only theirs."""
    from edgefd.deploy.mqtt_channel import CONFIG_RESEND_RATE, DeploymentSettings, MqttChannel
    from edgefd.deploy.mqtt_transport import Topics
    from edgefd.runtime.config import SimulationConfig

    clients = ["client-0", "client-1", "client-2"]
    config = SimulationConfig(clients=3)
    channel = MqttChannel(config, DeploymentSettings(run="r", broker=LOCAL_BROKER), clients, Topics("r"))
    sent = []
    monkeypatch.setattr(channel.endpoint, "publish", lambda topic, message, retain=False: sent.append((topic, retain)))

    def waited_long_enough():
        channel._configs_due = time.monotonic() - 0.1

    channel.publish_configs()
    assert sent == [(f"edgefd/r/down/{cid}/config", True) for cid in clients]
    sent.clear()
    channel._pump(0.01)
    assert sent == []  # not yet: the interval has not passed
    status = deploy_messages.status_message("client-1", deploy_messages.ONLINE, "r")
    channel._handle(Incoming("status", "client-1", "", status, nbytes=100))
    assert channel.stats["client-1"].online
    waited_long_enough()
    channel._pump(0.01)
    assert sent == [("edgefd/r/down/client-0/config", True), ("edgefd/r/down/client-2/config", True)]
    sent.clear()
    channel._pump(0.01)
    assert sent == []  # once per interval
    for cid in ("client-0", "client-2"):
        channel._handle(
            Incoming("status", cid, "", deploy_messages.status_message(cid, deploy_messages.ONLINE, "r"), nbytes=100)
        )
    waited_long_enough()
    channel._pump(0.01)
    assert sent == []  # everyone online: nothing more

    many = [f"client-{i:04d}" for i in range(1000)]
    fleet = MqttChannel(
        SimulationConfig(clients=1000), DeploymentSettings(run="r", broker=LOCAL_BROKER), many, Topics("r")
    )
    monkeypatch.setattr(fleet.endpoint, "publish", lambda topic, message, retain=False: None)
    fleet.publish_configs()
    assert fleet._configs_due - time.monotonic() > 1000 / CONFIG_RESEND_RATE - 1  # a large fleet: less often


def test_the_server_asks_a_silent_online_client_to_answer_again_and_takes_the_answer_once(monkeypatch):
    """A broker under load drops messages for a session whose queue is full, honest uplinks too:
    after `ask_again` seconds the server asks an online client without an answer, a few bytes, to
    send it again, once nothing has arrived for a second (an answer may be queued behind others).
    Clients that answered or are offline are not asked; a repeat is taken once."""
    from edgefd.deploy.mqtt_channel import DeploymentSettings, MqttChannel, _Phase
    from edgefd.deploy.mqtt_transport import Topics
    from edgefd.protocol import encode_message
    from edgefd.runtime.config import SimulationConfig

    clients = ["client-0", "client-1", "client-2"]
    channel = MqttChannel(
        SimulationConfig(clients=3),
        DeploymentSettings(run="r", broker=LOCAL_BROKER, ask_again=0.6),
        clients,
        Topics("r"),
    )
    for cid in clients[:2]:
        channel._handle(
            Incoming("status", cid, "", deploy_messages.status_message(cid, deploy_messages.ONLINE, "r"), nbytes=10)
        )
    asked_again = []
    requests = {cid: down("train", 4, client=cid, run="r") for cid in clients}

    def answer(cid):
        channel.endpoint.inbox.offer(Incoming("up", cid, "train", requests[cid].answer(None), nbytes=10))

    def publish(topic, message, retain=False):
        cid = Topics("r").parse(topic)[1]
        if deploy_messages.is_again(message):
            assert message.round == 4 and len(encode_message(message)) < 100  # not the request again
            asked_again.append(cid)
            answer(cid)  # client-1's first answer was lost; this one arrives
            answer(cid)  # and a duplicate, as when the first was only late
        elif cid == "client-0":
            answer(cid)

    monkeypatch.setattr(channel.endpoint, "publish", publish)
    started = time.monotonic()
    now = time.monotonic()
    phase = _Phase("train", 4, clients, requests, now, timeout=3.0, min_needed=1, active_at=now, ends_at=now + 60)
    channel._open(phase)
    channel._wait(phase)
    assert sorted(phase.got) == ["client-0", "client-1"]
    assert asked_again == ["client-1"]  # once: it answered; client-2 is offline, client-0 had answered
    assert time.monotonic() - started >= 3.0  # client-2 was waited for until the deadline
    assert channel.stats["client-1"].on_time == 1


def test_a_client_asked_again_sends_its_stored_answer_only_if_it_went_out_before_the_asking(monkeypatch):
    device = ClientRuntime(ClientSettings("u", "client-1", BrokerSettings("mqtt://127.0.0.1:1"), device="cpu"))
    sent = []
    monkeypatch.setattr(device.endpoint, "publish", lambda topic, message, retain=False: sent.append((topic, message)))
    device.app = ClientApp(object())  # built (nothing of it is used to send a stored answer)
    uplink = down("train", 3).answer(None)

    def asked_again(at: float) -> None:
        message = Incoming(
            "down", "client-1", "train", deploy_messages.again(down("train", 3)), nbytes=0, received_at=at
        )
        device._handle(message)

    asked_again(10.0)
    assert sent == []  # nothing answered yet: still working, or the request never came
    device.stored_answers[("train", 3)], device.answered_at[("train", 3)] = uplink, 20.0
    asked_again(15.0)
    assert sent == []  # asked while it was working: the answer went out after the asking
    asked_again(25.0)
    assert sent == [("edgefd/u/up/client-1/train", uplink)]
    assert device.answered_at[("train", 3)] > 25.0


def test_a_client_lets_go_of_its_last_uplink_before_it_trains_the_next_round(monkeypatch):
    """The server has gone on: the last round's uplink (FedICT's: 328 MB of features) is not kept
    through the next round's training; the hello is kept for the run."""
    device = ClientRuntime(ClientSettings("u", "client-1", BrokerSettings("mqtt://127.0.0.1:1"), device="cpu"))
    monkeypatch.setattr(device.endpoint, "publish", lambda topic, message, retain=False: None)
    held_while_training = []

    def train_round(round, content):
        held_while_training.append(sorted(device.stored_answers))

    device.app = ClientApp(SimpleNamespace(train_round=train_round, done_sharing=lambda: None))
    device.stored_answers = {("hello", 0): down("hello", 0).answer(None), ("train", 3): down("train", 3).answer(None)}
    device.last_round = 3
    device._handle(Incoming("down", "client-1", "train", down("train", 4), nbytes=0))
    assert held_while_training == [[("hello", 0)]]
    assert sorted(device.stored_answers) == [("hello", 0), ("train", 4)] and device.last_round == 4


def test_a_client_takes_in_the_reply_to_its_last_round_once_and_no_other(monkeypatch):
    """The server's post-aggregation reply (FedD2S's phase B) is learnt from once: a repeat is
    acknowledged with the stored answer, and a reply to a round this client did not train last is ignored."""
    device = ClientRuntime(ClientSettings("u", "client-1", BrokerSettings("mqtt://127.0.0.1:1"), device="cpu"))
    sent = []
    monkeypatch.setattr(device.endpoint, "publish", lambda topic, message, retain=False: sent.append((topic, message)))
    taken = []
    role = SimpleNamespace(receive_reply=lambda r, reply: taken.append((r, reply.kind)), done_sharing=lambda: None)
    device.app = ClientApp(role)
    device.last_round = 3

    def reply(round: int) -> None:
        message = down("reply", round, Payload("knowledge"))
        device._handle(Incoming("down", "client-1", "reply", message, nbytes=0))

    reply(3)
    reply(3)  # repeated (a reconnection): acknowledged again, not learnt from again
    reply(2)  # a stale round
    assert taken == [(3, "knowledge")]
    assert [(topic, m.content, m.round, m.is_answer) for topic, m in sent] == [
        ("edgefd/u/up/client-1/reply", None, 3, True)
    ] * 2


def test_deploy_local_reads_only_the_finished_lines_of_a_growing_metrics_file(tmp_path):
    from edgefd.deploy.local import finished_lines

    metrics = tmp_path / "metrics.jsonl"
    assert finished_lines(metrics) == []  # the server has not written it yet
    metrics.write_text('{"round": 0}\n{"round": 1}\n{"rou')  # the server is writing round 2
    assert finished_lines(metrics) == [{"round": 0}, {"round": 1}]


def open_phase(monkeypatch, verb: str = "train"):
    """A server channel of clients 0 and 1 with a phase of ``verb`` round 4 open (its requests out),
    and the list every publish but a config lands in: (client, "request" | "again" | "answer")."""
    from edgefd.deploy.mqtt_channel import DeploymentSettings, MqttChannel, _Phase
    from edgefd.deploy.mqtt_transport import Topics
    from edgefd.runtime.config import SimulationConfig

    clients = ["client-0", "client-1"]
    channel = MqttChannel(
        SimulationConfig(clients=2), DeploymentSettings(run="r", broker=LOCAL_BROKER), clients, Topics("r")
    )
    sent = []

    def publish(topic, message, retain=False):
        _, cid, verb = Topics("r").parse(topic)
        if verb != deploy_messages.CONFIG:
            sent.append(
                (cid, "again" if deploy_messages.is_again(message) else "answer" if message.is_answer else "request")
            )

    monkeypatch.setattr(channel.endpoint, "publish", publish)
    requests = {cid: down(verb, 4, Payload("weights"), client=cid, run="r") for cid in clients}
    now = time.monotonic()
    channel.phase = _Phase(verb, 4, clients, requests, now, timeout=60.0, asks=VERBS[verb].asks, active_at=now)
    for cid in clients:
        channel._send_request(cid)
    sent.clear()
    return channel, sent


def status(channel, cid: str, state: str) -> None:
    channel._handle(Incoming("status", cid, "", deploy_messages.status_message(cid, state, "r"), nbytes=10))


def test_a_request_goes_out_again_once_a_phase_when_its_client_comes_online(monkeypatch):
    """A client that comes online after its request went out may have missed it: it gets it once
    more. An "online" repeated while online, or a status toggled on and off, gets nothing more;
    after the server's own reconnection (a broker restart loses no will) each client may have its
    copy once more."""
    channel, sent = open_phase(monkeypatch)
    status(channel, "client-0", deploy_messages.ONLINE)  # came online after the request went out
    assert sent == [("client-0", "request")]
    for _ in range(50):
        status(channel, "client-0", deploy_messages.ONLINE)
        status(channel, "client-0", deploy_messages.OFFLINE)
        status(channel, "client-0", deploy_messages.ONLINE)
    assert sent == [("client-0", "request")] and channel.stats["client-0"].connects == 51
    channel._reconnected = True
    channel._pump(0.0)  # the server's reconnection: the outstanding requests go out again
    assert sent[1:] == [("client-0", "request"), ("client-1", "request")]
    status(channel, "client-0", deploy_messages.ONLINE)  # its session may be new: once more
    status(channel, "client-0", deploy_messages.ONLINE)
    assert sent[3:] == [("client-0", "request")]


def test_a_silent_client_is_asked_again_a_bounded_number_of_times(monkeypatch):
    from edgefd.deploy.mqtt_channel import MAX_ASKS_AGAIN

    channel, sent = open_phase(monkeypatch)
    status(channel, "client-0", deploy_messages.ONLINE)
    sent.clear()
    now = time.monotonic()
    for i in range(1, 3 * MAX_ASKS_AGAIN):
        channel._ask_again(channel.phase, now + 10 * i, 5.0)
    assert sent == [("client-0", "again")] * MAX_ASKS_AGAIN  # client-1 is offline: never asked


def test_a_repeated_step_request_gets_its_answer_again_a_bounded_number_of_times(monkeypatch):
    from edgefd.deploy.mqtt_channel import MAX_STEP_RESENDS

    channel, sent = open_phase(monkeypatch, "steps")
    request = Message("step", "client-0", "server", 4, Payload("q"), 1, "r")
    channel._handle(Incoming("up", "client-0", "step", request, nbytes=10))
    repeats = [9]

    def pump(timeout):  # the client asks 9 times more, then its round's uplink comes
        repeats[0] -= 1
        if repeats[0] >= 0:
            channel._handle(Incoming("up", "client-0", "step", request, nbytes=10))
        else:
            done = channel.phase.requests["client-0"].answer(None)
            channel._handle(Incoming("up", "client-0", "steps", done, nbytes=10))

    channel._pump = pump
    delivery = channel.send_and_receive([request.answer(None)], VERBS["steps"].deadline)
    assert delivery.answers["client-0"].verb == "steps" and channel.phase is None
    assert sent == [("client-0", "answer")] * (1 + MAX_STEP_RESENDS)
    assert channel.endpoint.stats.rejected["step-repeated"] == 10 - 1 - MAX_STEP_RESENDS


def test_the_server_takes_live_uplinks_and_statuses_only(monkeypatch):
    """A frame the broker hands over with the retain flag on an uplink or status topic is one it
    stored before the server subscribed (a device that is gone, revoked even, may have left a
    hello and an "online"): ignored, counted and cleared (an empty retained payload). The same
    frames live are taken. A device still takes its retained config."""
    import paho.mqtt.client as mqtt

    from edgefd.deploy.mqtt_transport import MqttEndpoint, Topics, encode_frames

    topics = Topics("u")

    def frame(topic: str, message: Message, retain: bool):
        received = mqtt.MQTTMessage(topic=topic.encode())
        received.payload, received.retain = encode_frames(message, 4096)[0], retain
        return received

    server = MqttEndpoint(LOCAL_BROKER, topics, "edgefd-server-u", stale_retained=("up", "status"))
    published = []

    def publish(topic, payload, qos, retain):
        published.append((topic, payload, retain))
        return SimpleNamespace(mid=len(published))

    monkeypatch.setattr(server._client, "publish", publish)
    hello = down("hello", 0, client="client-2").answer(None)
    online = deploy_messages.status_message("client-2", deploy_messages.ONLINE, "u")
    for retain in (True, False):
        server._on_message(None, None, frame(topics.up("client-2", "hello"), hello, retain))
        server._on_message(None, None, frame(topics.status("client-2"), online, retain))
    taken = [server.inbox.get_nowait() for _ in range(server.inbox.qsize())]
    assert [(m.direction, m.verb, m.message.verb) for m in taken] == [
        ("up", "hello", "hello"),
        ("status", "", "status"),
    ]
    assert server.stats.stale_retained == {"up/hello": 1, "status": 1}
    assert server.stats.snapshot()["stale_retained"] == {"up/hello": 1, "status": 1}
    assert published == [(topics.up("client-2", "hello"), b"", True), (topics.status("client-2"), b"", True)]
    assert not server.stats.rejected

    device = MqttEndpoint(LOCAL_BROKER, topics, "edgefd-u-client-2")
    config = deploy_messages.config_message(SimulationConfig(algo="fd"), "client-2", "u")
    device._on_message(None, None, frame(topics.down("client-2", "config"), config, True))
    assert device.inbox.get_nowait().verb == "config" and not device.stats.stale_retained
