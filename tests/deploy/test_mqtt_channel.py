"""What a deployed round's record says of its figures."""

import json

from edgefd.deploy.mqtt_channel import SELF_REPORTED, DeployedRoundRecord, self_reported_said
from edgefd.metrics.results import RunWriter


def deployed(**figures):
    return DeployedRoundRecord(1, 0.583, 0.29, 10, 10, 1.0, ["c0", "c1", "c2"], [], **figures)


def test_a_deployed_round_line_in_metrics_jsonl_names_the_figures_the_devices_reported_themselves(tmp_path):
    record = deployed(client_accuracy={"c0": 0.35, "c1": 0.4, "c2": 1.0}, accuracy_median=0.4)
    RunWriter(tmp_path).add(record)
    line = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert line["self_reported"] == ["client_accuracy", "accuracy", "accuracy_std", "accuracy_median"]
    assert set(line["self_reported"]) == set(SELF_REPORTED) and all(name in line for name in SELF_REPORTED)
    assert "server_model_accuracy" not in line["self_reported"]  # the server's own score, on its held-out set


def test_the_round_log_says_the_median_first_and_names_the_suspect_scores():
    said = self_reported_said(deployed(accuracy_median=0.4, suspect_scores={"c2": "far above"}))
    assert said == "median 40.00% (mean 58.30%, self-reported), suspect: c2"
