"""How one device takes part in a deployed run (`ClientSettings`): `edgefd client`'s flags and the
keys of its `--config` file are made from these settings and the broker's (`BrokerSettings`)."""

from __future__ import annotations

from dataclasses import dataclass

from edgefd.deploy.mqtt_transport import BrokerSettings, check_name
from edgefd.settings import setting


@dataclass
class ClientSettings:
    """How one device takes part in a run (its device is its own choice, whatever the server's)."""

    run: str = setting(help="run name, as given to `edgefd server --run`, e.g. demo")
    client_id: str = setting(
        help="this device's id in the run: client-0, client-1, ... (client-00, client-01, ... for 10 or more clients)"
    )
    broker: BrokerSettings = setting(help="how this device reaches the broker (the broker flags)")
    state_dir: str | None = setting(
        None,
        "folder for this client's checkpoint, so that a restart resumes the run, e.g. ~/.edgefd (default: none, "
        "a restart starts the client afresh)",
    )
    data_dir: str | None = setting(
        None,
        "folder with this device's own data.npz (train_x, train_y, test_x, test_y, num_classes; see "
        "device/README.md) (default: the run's dataset share of this client id)",
    )
    max_message_bytes: int | None = setting(
        None,
        "the largest message this device takes from the server, whatever the run allows (default: what the "
        "run's server may send it: 64 MiB plus twice its model's weights, or the run's --max-message-bytes)",
    )
    device: str = setting(
        "auto",
        "where this device trains: auto (its CUDA GPU when torch sees one, e.g. a Jetson with NVIDIA's torch; else "
        "the CPU), cpu, cuda or cuda:N",
    )
    recompute_activations: bool = setting(
        False,
        "recompute the models' residual blocks' activations in training's backward pass instead of keeping them: "
        'less memory for more compute, the same results (docs/DEPLOYMENT.md, "Device memory": what it saves '
        "for each method)",
    )
    models_dir: str | None = setting(
        None,
        "folder where the client writes its final model (CLIENT_ID.pt) when the server ends the run, for "
        "`edgefd export` (default: STATE_DIR/models with --state-dir, else none)",
    )

    def __post_init__(self) -> None:
        from edgefd.training import resolve_device  # torch: not for `edgefd client --help`

        check_name("client id", self.client_id)
        resolve_device(self.device)
