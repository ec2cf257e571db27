"""Run settings that tests in several folders share, and how a run's settings become flags."""

SKEWED_FEDICT = dict(
    algo="fedict",
    dataset="digits",
    clients=2,
    rounds=2,
    seed=3,
    threads=1,
    partition="quantity:0.5",
    models="fedict_c1",
)
"""FedICT on digits with a size skew: client-0 holds 1,324 samples (a 5.5 MB uplink of features),
client-1 113 (0.5 MB)."""
CAP = 1_000_000
"""A --max-message-bytes between the two uplinks of `SKEWED_FEDICT`: client-0's is refused, client-1's taken."""


def flags(config: dict) -> list[str]:
    """A run's settings as command-line flags (``samples_per_client=60`` -> ``--samples-per-client 60``)."""
    return [item for key, value in config.items() for item in ("--" + key.replace("_", "-"), str(value))]
