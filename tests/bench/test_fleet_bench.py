"""benchmarks/fleet.py: a reduced load test (50 devices, 2 rounds) against a real Mosquitto and a real
`edgefd server`, and the pieces the devices replay with."""

import json
import shutil

import fleet
import numpy as np
import pytest
from fleet import saturated_part
from fleet_devices import Recorded, with_device_ids

from edgefd.protocol import Payload

needs_mosquitto = pytest.mark.skipif(
    shutil.which("mosquitto") is None, reason="needs Mosquitto (scripts/install.sh installs it)"
)


@needs_mosquitto
def test_fifty_devices_run_fd_and_fedcache_rounds_against_one_server(tmp_path, capsys):
    out = tmp_path / "fleet.json"
    argv = [
        "--methods", "fd", "fedcache", "--clients", "50", "--rounds", "2",
        "--samples-per-client", "20", "--devices-per-process", "25", "--dataset", "digits",
        "--out", str(tmp_path / "runs"), "--json", str(out),
    ]  # fmt: skip
    assert fleet.main(argv) == 0
    results = json.loads(out.read_text())
    assert [(r["method"], r["clients"]) for r in results] == [("fd", 50), ("fedcache", 50)]
    for result in results:
        assert result["ok"], result["problem"]
        assert result["rounds_done"] == 2 and result["late_uplinks"] == 0 and result["rejected"] == 0
        assert result["uplink_latency_p50"] is not None and result["uplink_latency_p95"] >= result["uplink_latency_p50"]
        assert result["messages_per_second"] > 0 and result["server_peak_rss_mb"] > 0
        runs = tmp_path / "runs" / f"{result['method']}-50"
        lines = [json.loads(line) for line in (runs / "server" / "metrics.jsonl").read_text().splitlines()]
        assert [line["round"] for line in lines] == [0, 1, 2]
        recorded = Recorded.load(runs / "recorded.npz")
        for line in lines[1:]:  # every device's uplink was taken, and every device answered its evaluation
            assert len(line["selected"]) == 50 and line["late"] == [] and line["rejected"] == {}
            accuracies = list(line["client_accuracy"].values())
            assert len(accuracies) == 50 and accuracies == pytest.approx([recorded.accuracy] * 50)
            assert line["bytes_up"] > 0
        assert lines[-1]["bytes_down"] > 0  # round 2's downlinks carry what round 1's uplinks gave
    assert "| fedcache | 50 |" in capsys.readouterr().out


def test_a_recorded_uplink_takes_each_devices_own_sample_ids(tmp_path):
    logits = np.arange(12, dtype=np.float32).reshape(3, 4)
    recorded = Payload("fedcache.logits", {"ids": np.array([7, 8, 9], np.int32), "logits": logits})
    mine = with_device_ids(recorded, np.array([40, 41, 42, 43, 44], np.int32))
    assert mine is not None and mine.kind == "fedcache.logits"
    np.testing.assert_array_equal(mine.arrays["ids"], [40, 41, 42, 43, 44])
    np.testing.assert_array_equal(mine.arrays["logits"], logits[[0, 1, 2, 0, 1]])  # the recorded rows, repeated
    table = Payload("fd.logits", {"logits": np.ones((10, 10), np.float32), "counts": np.ones(10)})
    same = with_device_ids(table, np.array([1, 2], np.int32))  # no ids: the arrays travel as recorded
    assert same is not None and same.arrays["logits"].shape == (10, 10)
    assert with_device_ids(None, None) is None

    Recorded(table, 0.25).save(tmp_path / "r.npz")
    loaded = Recorded.load(tmp_path / "r.npz")
    assert loaded.accuracy == 0.25 and loaded.uplink is not None and loaded.uplink.kind == "fd.logits"
    np.testing.assert_array_equal(loaded.uplink.arrays["counts"], np.ones(10))


def test_the_part_that_saturates_first_is_named_from_the_cpu_it_used():
    assert saturated_part({"server": 0.97, "broker": 0.2, "devices": 0.5}, cores=2).startswith("server")
    assert saturated_part({"server": 0.3, "broker": 0.9, "devices": 0.5}, cores=2).startswith("broker")
    assert saturated_part({"server": 0.6, "broker": 0.2, "devices": 1.0}, cores=2).startswith("the machine's 2 cores")
    assert saturated_part({"server": 0.3, "broker": 0.1, "devices": 0.2}, cores=2).startswith("none")
    assert saturated_part({}, cores=2).startswith("-")


@needs_mosquitto
def test_the_load_test_spreads_its_devices_over_bridged_site_brokers(tmp_path):
    out = tmp_path / "fleet.json"
    argv = [
        "--methods", "fd", "--clients", "20", "--rounds", "2", "--topology", "bridge:2",
        "--samples-per-client", "20", "--devices-per-process", "10", "--dataset", "digits",
        "--out", str(tmp_path / "runs"), "--json", str(out),
    ]  # fmt: skip
    assert fleet.main(argv) == 0
    (result,) = json.loads(out.read_text())
    assert result["ok"], result["problem"]
    assert result["topology"] == "bridge:2" and result["rounds_done"] == 2 and result["late_uplinks"] == 0
    urls = result["broker_urls"]  # the two device processes dialled the two sites, the server the central
    assert len(set(urls["devices"])) == 2 and urls["server"] not in urls["devices"]


def test_an_unknown_topology_is_refused_with_the_choices(capsys):
    assert fleet.main(["--topology", "rabbit"]) == 2
    assert "mosquitto, rabbitmq:N, bridge:N" in capsys.readouterr().err


def test_the_page_opens_in_one_round_of_each_pair_and_the_effect_is_the_pairs_ratio(tmp_path):
    opened = fleet.page_open_rounds(20)
    assert len(opened) == 10 and all(len(opened & {first, first + 1}) == 1 for first in range(1, 20, 2))
    assert opened == fleet.page_open_rounds(20)  # the same draw every run
    assert sum(r % 2 for r in opened) == 5  # open on the first round of half the pairs...
    assert fleet.page_open_rounds(20, seed=1) != opened  # ...in an order the seed draws

    rng = np.random.default_rng(1)
    seconds = {r: float(rng.uniform(1.0, 2.0)) for r in range(1, 21)}  # rounds that drift...
    for r in opened:
        seconds[r] = seconds[r + 1 if r % 2 else r - 1] * 1.10  # ...and an open page that costs 10%
    effect = fleet.paired_page_effect(seconds, opened)
    assert effect["pairs"] == 10 and effect["open_rounds"] == sorted(opened)
    assert effect["ratio"] == pytest.approx(1.10, abs=1e-3)
    low, high = effect["ratio_95"]
    assert low <= 1.10 + 1e-3 and high >= 1.10 - 1e-3 and low > 1.05  # the interval holds it, and excludes 1
    assert fleet.paired_page_effect({1: 1.0, 2: 1.0}, {1})["ratio_95"] is None  # too few pairs for an interval

    metrics = tmp_path / "metrics.jsonl"
    viewer = fleet.PageViewer("http://127.0.0.1:1/", metrics, open_rounds={2})
    metrics.write_text("{}\n")  # round 0 written: round 1 runs, the page is closed
    assert not viewer._is_open()
    metrics.write_text("{}\n{}\n")  # round 2 runs
    assert viewer._is_open()


@needs_mosquitto
def test_the_alternating_page_run_reports_its_paired_rounds(tmp_path, capsys):
    out = tmp_path / "fleet.json"
    argv = [
        "--methods", "fd", "--clients", "10", "--rounds", "10", "--dashboard", "alternate",
        "--samples-per-client", "20", "--devices-per-process", "10", "--dataset", "digits",
        "--out", str(tmp_path / "runs"), "--json", str(out),
    ]  # fmt: skip
    assert fleet.main(argv) == 0
    (result,) = json.loads(out.read_text())
    assert result["ok"], result["problem"]
    assert result["dashboard"] == "alternate"
    effect = result["page_effect"]
    assert effect["pairs"] == 5 and effect["open_rounds"] == sorted(fleet.page_open_rounds(10))
    assert effect["ratio"] > 0 and 0 < effect["ratio_95"][0] <= effect["ratio_95"][1]
    assert 0 < result["page_cpu_seconds"] and 0 < effect["page_cores_while_open"] < 1
    assert "round seconds with the page open / closed" in capsys.readouterr().out
    assert fleet.main(["--dashboard", "alternate", "--rounds", "4"]) == 2
