"""The method interface's shared parts: params from text and their allowed values, and the
registration's refusal of a method whose server declares no schema for what its clients send."""

import dataclasses
from collections.abc import Generator, Sequence
from dataclasses import dataclass

import pytest

from edgefd.algorithms.base import (
    ClientRole,
    MissingSchema,
    ServerRole,
    check_schemas,
    list_methods,
    register_method,
    sent_verbs,
    unregister_method,
)
from edgefd.algorithms.params import check_choices, make_params
from edgefd.algorithms.schema import MessageSchema
from edgefd.protocol import Payload
from edgefd.settings import setting


@dataclass
class ToyParams:
    mode: str = setting("fast", "fast | slow", choices=("fast", "slow"), aliases={"quick": "fast"})
    variant: str | None = setting(None, "a | b; None: by mode", choices=("a", "b"))
    name: str = setting("free", "any text")


def test_choices_are_normalised_aliased_and_refused_by_name():
    assert make_params(ToyParams, {"mode": " SLOW "}).mode == "slow"
    assert make_params(ToyParams, {"mode": "quick"}).mode == "fast"
    assert make_params(ToyParams, {"variant": "none"}).variant is None  # None passes where allowed
    assert make_params(ToyParams, {"name": "Anything"}).name == "Anything"  # no choices: untouched
    with pytest.raises(ValueError, match=r"param mode: expected one of fast, slow, got 'medium'"):
        make_params(ToyParams, {"mode": "medium"})
    params = ToyParams(variant="c")
    with pytest.raises(ValueError, match=r"param variant: expected one of a, b, got 'c'"):
        check_choices(params)


CHOICE_FIELDS = [
    (spec.name, f.name) for spec in list_methods() for f in dataclasses.fields(spec.params) if f.metadata.get("choices")
]


def test_every_method_declares_its_text_choices():
    methods = {name for name, _ in CHOICE_FIELDS}
    assert {"dfl", "fedcache", "fedd2s", "fedict", "fedgkt", "fedmd", "fedzkt"} <= methods


@pytest.mark.parametrize(("method", "field"), CHOICE_FIELDS)
def test_every_declared_choice_is_checked_by_the_method_itself(method, field):
    """Built directly (not from text), each method's params still refuse a value outside the choices."""
    spec = next(s for s in list_methods() if s.name == method)
    with pytest.raises(ValueError, match=rf"param {field}: expected one of"):
        spec.params(**{field: "no-such-choice"})


# ---------------------------------------------------------------------- a schema for every verb a client sends on
class Uploader(ClientRole):
    """Sends a round uplink (and, in the subclasses, a hello or step requests)."""

    def train_round(self, round: int, downlink: Payload | None) -> Payload:
        return Payload("n")


class Greeter(Uploader):
    def hello(self) -> Payload:
        return Payload("hi")


class Asker(Uploader):
    def train_steps(self, round: int) -> Generator[Payload, Payload, None]:
        yield Payload("ask")


class Silent(ClientRole):
    """Trains and sends nothing (Local): its ``-> None`` says so."""

    def train_round(self, round: int, downlink: Payload | None) -> None:
        return None


class Deaf(ServerRole):
    """Declares no schema at all."""

    def downlink(self, round: int, client_id: str) -> Payload | None:
        return None

    def aggregate(self, round: int, uplinks: dict[str, Payload]) -> dict[str, float]:
        return {}


class TakesUplinks(Deaf):
    def uplink_schemas(self, client_id: str) -> Sequence[MessageSchema]:
        return (MessageSchema("n"),)


class TakesEverything(TakesUplinks):  # the uplink's schema inherited
    def hello_schemas(self, client_id: str) -> Sequence[MessageSchema]:
        return (MessageSchema("hi"),)

    def request_schemas(self, client_id: str) -> Sequence[MessageSchema]:
        return (MessageSchema("ask"),)


@pytest.fixture
def registry():
    """The names of the registered methods, asked anew; a method the test registers is taken away
    after it (`unregister_method`: the registry is shared by the suite)."""
    before = {spec.name for spec in list_methods()}
    yield lambda: {spec.name for spec in list_methods()}
    for name in {spec.name for spec in list_methods()} - before:
        unregister_method(name)


@pytest.mark.parametrize(
    ("client", "server", "verb", "hook", "client_hook"),
    [
        (Uploader, Deaf, "'train'", "uplink_schemas", "Uploader.train_round"),
        (Greeter, TakesUplinks, "'hello'", "hello_schemas", "Greeter.hello"),
        (Asker, TakesUplinks, "'step'", "request_schemas", "Asker.train_steps"),
    ],
)
def test_a_method_whose_server_declares_no_schema_for_a_verb_its_client_sends_on_is_refused(
    registry, client, server, verb, hook, client_hook
):
    with pytest.raises(MissingSchema) as refused:
        register_method("unschemed", "sends what its server cannot take", client, server, ToyParams)
    text = str(refused.value)
    assert text.startswith("method 'unschemed': ")
    assert f"{client_hook} sends" in text and f"on {verb}" in text  # what is sent, on which verb
    assert f"Add to {server.__name__}:\n    def {hook}(self, client_id: str) -> Sequence[MessageSchema]:" in text
    assert "docs/ADDING_A_METHOD.md" in text
    assert "unschemed" not in registry()


def test_the_refusal_names_every_missing_schema_once_and_offers_the_none_annotation_for_an_uplink(registry):
    with pytest.raises(MissingSchema) as refused:
        register_method("unschemed", "sends everything", type("Both", (Greeter, Asker), {}), Deaf, ToyParams)
    text = str(refused.value)
    assert [hook for hook in ("hello_schemas", "uplink_schemas", "request_schemas") if f"def {hook}(" in text] == [
        "hello_schemas",
        "uplink_schemas",
        "request_schemas",
    ]
    assert text.count("def uplink_schemas(") == 1  # 'train' and 'steps' both need it: said once
    assert "on 'train' and 'steps'" in text
    assert "annotate it `-> None`" in text


def test_a_method_registers_when_its_server_declares_what_its_clients_send(registry):
    register_method("quiet", "sends nothing", Silent, Deaf, ToyParams)  # a verb never sent needs no schema
    register_method("greets", "sends everything", type("Both", (Greeter, Asker), {}), TakesEverything, ToyParams)
    assert {"quiet", "greets"} <= registry()


def test_every_registered_method_declares_a_schema_for_each_verb_its_clients_send_on():
    sent = {spec.name: sent_verbs(spec.client) for spec in list_methods()}
    assert sent == {
        "dfl": ["train"],
        "fd": ["train"],
        "fedavg": ["train"],
        "fedcache": ["hello", "train", "steps", "step"],
        "fedd2s": ["train"],
        "fedgkt": ["hello", "train"],
        "fedict": ["hello", "train"],
        "fedmd": ["train"],
        "fedzkt": ["train"],
        "local": [],
    }
    for spec in list_methods():
        check_schemas(spec.name, spec.client, spec.server)
