"""The run's summary: the robust figures beside the mean, and which one a run is reported by."""

from dataclasses import dataclass

from edgefd.metrics.results import SELF_REPORTED_SUMMARY, final_accuracy_said, run_summary, summarise
from edgefd.runtime.config import SimulationConfig


def line(round, accuracy, median, server=None, suspect=None):
    return {
        "round": round,
        "accuracy": accuracy,
        "accuracy_std": 0.0,
        "accuracy_median": median,
        "bytes_up": 1,
        "bytes_down": 1,
        "server_model_accuracy": server or {},
        "suspect_scores": suspect or {},
    }


SPOOFED = [
    line(0, 0.409, 0.126, suspect={}),
    line(1, 0.55, 0.33),
    line(2, 0.583, 0.40, suspect={"c2": "far above"}),
]
"""One device of three says 1.0 every round (issue 48): the mean 0.583, the honest ones 0.35 and 0.40."""


@dataclass
class NoParams:
    pass


def test_the_summary_keeps_the_mean_and_adds_the_median_the_server_score_and_the_suspects():
    summary = summarise([*SPOOFED[:2], line(2, 0.583, 0.40, {"global_model": 0.38}, {"c2": "far above"})])
    assert summary["final_accuracy"] == 0.583
    assert summary["final_accuracy_median"] == 0.40
    assert summary["final_server_accuracy"] == 0.38
    assert summary["suspect_scores"] == {"c2": 1}
    older = summarise([{"round": 1, "accuracy": 0.5, "bytes_up": 1, "bytes_down": 1}])  # a file from before
    assert older["final_accuracy_median"] is None and older["final_server_accuracy"] is None


def test_a_simulation_is_reported_by_its_mean_a_deployment_by_what_no_device_moves_alone():
    config = SimulationConfig(algo="fd", dataset="digits", clients=3, rounds=2)
    simulated = run_summary(config, SPOOFED, {}, NoParams(), 1.0)
    assert (simulated["headline_accuracy_of"], simulated["self_reported"]) == ("final_accuracy", [])
    assert final_accuracy_said(simulated) == "58.30%"

    deployed = run_summary(config, SPOOFED, {}, NoParams(), 1.0, self_reported=True)
    assert deployed["self_reported"] == list(SELF_REPORTED_SUMMARY)
    assert (deployed["headline_accuracy_of"], deployed["headline_accuracy"]) == ("final_accuracy_median", 0.40)
    assert final_accuracy_said(deployed) == "40.00% (the devices' median, self-reported; mean 58.30%)"

    held_out = [*SPOOFED[:2], line(2, 0.583, 0.40, {"global_model": 0.38})]
    scored = run_summary(config, held_out, {}, NoParams(), 1.0, self_reported=True)
    assert (scored["headline_accuracy_of"], scored["headline_accuracy"]) == ("final_server_accuracy", 0.38)
    assert final_accuracy_said(scored) == (
        "38.00% (the server's global model on its held-out set; devices' self-reported: median 40.00%, mean 58.30%)"
    )
