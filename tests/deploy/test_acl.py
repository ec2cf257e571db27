"""The broker ACL is generated from the verb table: the shipped template is the generator's output,
and a verb added to the table is one a client may answer on."""

from pathlib import Path

import pytest

from edgefd.deploy import acl
from edgefd.runtime.verbs import VERBS, Verb, register_verb, unregister_verb

SHIPPED = Path(__file__).resolve().parents[2] / "server" / "mosquitto" / "acl"


def device_writes(text: str) -> set[str]:
    return {line.split()[2].rsplit("/", 1)[1] for line in text.splitlines() if line.startswith("pattern write")}


def test_the_shipped_acl_is_the_one_the_verb_table_generates():
    assert SHIPPED.read_text() == acl.render(), "run `python3 -m edgefd.deploy.acl > server/mosquitto/acl`"


def test_a_device_may_write_the_verbs_it_answers_or_asks_on_and_its_status_only():
    writes = device_writes(acl.render())
    assert writes == {name for name, spec in VERBS.items() if spec.answers} | {"%u"}  # %u: status/%u
    assert "stop" not in writes and "config" not in writes


def test_a_new_verb_is_in_the_generated_acl():
    register_verb(Verb("nudge", lambda app, message, ask: None))
    try:
        assert "nudge" in device_writes(acl.render())
    finally:
        unregister_verb("nudge")
    assert "nudge" not in device_writes(acl.render())


def test_one_runs_acl_and_a_bad_run_name(capsys):
    assert acl.main(["--run", "demo"]) == 0
    text = capsys.readouterr().out
    assert "@RUN@/" not in text.split("\n# The server")[1] and "edgefd/demo/up/%u/train" in text
    with pytest.raises(ValueError, match="run name"):
        acl.render("a/b")
