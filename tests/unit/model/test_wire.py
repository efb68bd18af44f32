"""Resources to the messages delivered to agents and back."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from meshplane.model.registry import REGISTRY
from meshplane.model.resource import InvalidObject
from meshplane.model.wire import from_message, integral, plain_struct, resource_name, to_message
from meshplane.proto.v1 import resources_pb2
from meshplane_testing.translate_factories import api_specs

API = REGISTRY.get("API")

label_values = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?\Z")
labels = st.dictionaries(st.sampled_from(["team", "tier", "example.com/zone"]), label_values, max_size=3)


def api(spec: dict[str, Any], **metadata: Any) -> Any:
    return REGISTRY.parse({"kind": "API", "metadata": {"name": "orders", "project": "shop", **metadata}, "spec": spec})


def test_resource_name_is_project_slash_name_or_just_the_name() -> None:
    assert resource_name("shop", "orders") == "shop/orders"
    assert resource_name(None, "edge-1") == "edge-1"


def test_to_message_carries_identity_and_spec_but_no_status() -> None:
    resource = api(
        {"basePath": "/orders", "backends": [{"host": "h", "port": 9001, "weight": 7}]},
        labels={"team": "checkout"},
        uid="u-1",
        generation=3,
    )

    message = to_message(API, resource)

    assert isinstance(message, resources_pb2.API)
    assert (message.metadata.name, message.metadata.project, message.metadata.uid) == ("orders", "shop", "u-1")
    assert (message.metadata.generation, dict(message.metadata.labels)) == (3, {"team": "checkout"})
    assert message.spec["basePath"] == "/orders"


def test_round_trip_gives_integers_back_as_integers() -> None:
    resource = api({"basePath": "/o", "backends": [{"host": "h", "port": 9001, "weight": 100}]})

    back = from_message(API, to_message(API, resource))

    backend = back.spec.to_wire()["backends"][0]
    assert (backend["port"], backend["weight"]) == (9001, 100)
    assert all(type(backend[key]) is int for key in ("port", "weight"))


@settings(max_examples=50, deadline=None)
@given(spec=api_specs(), labels=labels, generation=st.integers(1, 2**40))
def test_round_trip_preserves_every_valid_api(spec: dict[str, Any], labels: dict[str, str], generation: int) -> None:
    resource = api(spec, labels=labels, generation=generation, uid="u-1", origin="cluster/edge-1")

    back = from_message(API, to_message(API, resource))

    assert back.spec == resource.spec
    assert back.metadata == resource.metadata


def test_from_message_validates_what_it_receives() -> None:
    message = to_message(API, api({"basePath": "/o", "backends": [{"host": "h", "port": 1}]}))
    message.spec["backends"][0]["port"] = 70000

    with pytest.raises(InvalidObject) as caught:
        from_message(API, message)

    assert caught.value.errors[0].path == "spec.backends[0].port"


def test_only_delivered_kinds_convert() -> None:
    project = REGISTRY.parse({"kind": "Project", "metadata": {"name": "shop"}, "spec": {}})

    with pytest.raises(ValueError, match="not delivered"):
        to_message(REGISTRY.get("Project"), project)


@pytest.mark.parametrize(
    "value",
    [
        {"a": 1, "b": 1.5, "c": [1, 2.0, "x", None, True, {"d": 3}], "e": {"f": None}, "g": False, "h": ""},
        {"big": 1e20, "negative": -3.0, "zero": -0.0, "nested": [[{"deep": [0.25]}]]},
        {},
    ],
)
def test_a_struct_reads_back_as_plain_json_with_whole_numbers_as_ints(value: dict) -> None:
    struct = struct_pb2.Struct()
    struct.update(value)
    assert plain_struct(struct) == integral(json_format.MessageToDict(struct))


def test_a_struct_with_a_number_json_cannot_carry_is_refused() -> None:
    struct = struct_pb2.Struct()
    struct.update({"x": float("inf")})
    with pytest.raises(ValueError, match="not a JSON number"):
        plain_struct(struct)
