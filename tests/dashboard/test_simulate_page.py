"""`edgefd simulate --dashboard`: the page of a simulation follows its rounds."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from pathlib import Path

from edgefd import cli


def test_the_page_of_a_simulation_follows_its_rounds(tmp_path: Path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    flags = ["--rounds", "40", "--clients", "4", "--threads", "1", "--quiet", "--out", str(tmp_path / "run")]
    codes: list[int] = []
    run = threading.Thread(target=lambda: codes.append(cli.main(["simulate", *flags, "--dashboard", str(port)])))
    run.start()
    seen: list[dict] = []
    try:
        deadline = time.monotonic() + 120
        while run.is_alive() and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/state.json", timeout=5) as reply:
                    seen.append(json.loads(reply.read()))
            except OSError:
                pass  # not serving yet, or the run has just ended
            time.sleep(0.2)
    finally:
        run.join(180)
    assert codes == [0]
    rounds = [state["run"]["round"] for state in seen if state["run"]["round"] is not None]
    assert len(set(rounds)) >= 2, f"the page saw rounds {sorted(set(rounds))}"  # it moved while the run did
    assert rounds == sorted(rounds)
    last = seen[-1]
    assert last["run"]["mode"] == "simulate" and last["run"]["method"] == "fd"
    assert [d["id"] for d in last["devices"]] == ["client-0", "client-1", "client-2", "client-3"]
    assert all(d["online"] is None and d["bytes_up"] is None for d in last["devices"])  # no network here
    assert len(last["curve"]) == last["run"]["round"] + 1  # FD scores every round, and round 0 (before training)
