"""What a round did, as the loop records it and the results files write it."""

from __future__ import annotations

from dataclasses import dataclass, field

HELLO_ROUND = 0
"""The one-time uploads are round 0."""
LOST_UPLINKS = "uplinks"
LOST_EVALUATION = "evaluation"
"""What a round can lose entirely (``RoundRecord.lost``)."""
GLOBAL_MODEL = "global_model"
"""The name methods give their global model among ``ServerRole.server_models``: its score in
``server_model_accuracy`` is the run's ``final_server_accuracy``."""


@dataclass
class RoundRecord:
    """What one round did; `accuracy` is None on rounds without evaluation."""

    round: int
    accuracy: float | None
    accuracy_std: float | None
    bytes_up: int
    bytes_down: int
    seconds: float
    selected: list[str]
    late: list[str]
    client_accuracy: dict[str, float] = field(default_factory=dict)
    """Each client's accuracy as the client reported it (a deployed device's own claim)."""
    server: dict[str, float] = field(default_factory=dict)
    accuracy_full: float | None = None
    """The clients' mean accuracy on the whole test set (None unless the run asks for it)."""
    client_accuracy_full: dict[str, float] = field(default_factory=dict)
    accuracy_median: float | None = None
    """The median of ``client_accuracy``, beside the mean ``accuracy``: one client among three or
    more cannot move it past the others' scores (`edgefd.runtime.scores`)."""
    suspect_scores: dict[str, str] = field(default_factory=dict)
    """Clients whose score keeps away from the others', and why (`edgefd.runtime.scores`): noted,
    still counted in the mean."""
    server_model_accuracy: dict[str, float] = field(default_factory=dict)
    """Accuracy on the whole test set of each model the server trains for itself
    (``ServerRole.server_models``): in a simulation on the whole test set, in a deployment on the
    server's held-out set (`edgefd server --holdout-dir`; empty without one)."""
    rejected: dict[str, str] = field(default_factory=dict)
    """Clients whose message of this round did not fit what the method accepts, and why
    (``edgefd.algorithms.schema``): dropped, the round went on without them."""
    held: dict[str, str] = field(default_factory=dict)
    """Clients that held the round open, and how: step requests past the cap their declared data
    makes (refused), or (a deployment) a steps phase still going at its hard deadline, cut there.
    Empty for a round no client held."""
    faults: dict[str, str] = field(default_factory=dict)
    """Clients whose host process died during the round (a Ray actor's worker, `--backend ray`),
    and what became of them: they miss the round, as a straggler does, and go on from their state
    at the end of an earlier round. Empty for a round without one."""
    lost: list[str] = field(default_factory=list)
    """What the round got from no client at all: LOST_UPLINKS (none of the selected clients'
    uplinks was taken: none arrived in time, or each was refused; round 0: the hellos) and
    LOST_EVALUATION (no client's accuracy came back: the round has none). Empty for a round that
    went well."""
