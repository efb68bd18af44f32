"""CRDs generated from the models: current in deploy/crds, structural, and driven by the registry."""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import Field
from typer.testing import CliRunner

from meshplane.cli import app
from meshplane.model.base import WireModel
from meshplane.model.crds import (
    GENERATED_HEADER,
    UnstructuralSchema,
    crd_files,
    custom_resource_definition,
    custom_resource_definitions,
)
from meshplane.model.registry import REGISTRY, KindInfo, KindRegistry, Scope
from meshplane.proto.v1 import resources_pb2

DEPLOY_CRDS = Path(__file__).resolve().parents[3] / "deploy" / "crds"
REGENERATE = "run `make deploy-manifests` (the chart's crds/ and deploy/crds) and commit the result"
# Keywords of Kubernetes' JSONSchemaProps that our generator may emit.
ALLOWED_KEYWORDS = {
    "description",
    "type",
    "format",
    "enum",
    "default",
    "nullable",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "required",
    "properties",
    "items",
    "additionalProperties",
    "x-kubernetes-list-type",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
}
TYPES = {"object", "array", "string", "integer", "number", "boolean"}
PYTHON_TYPES = {"object": dict, "array": list, "string": str, "integer": int, "number": (int, float), "boolean": bool}


def schema_nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from schema_nodes(child, f"{path}.{name}")
    if "items" in node:
        yield from schema_nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from schema_nodes(node["additionalProperties"], f"{path}.*")


def root_schema(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def crd_of(spec: type[WireModel]) -> dict[str, Any]:
    return custom_resource_definition(KindInfo("Widget", "widgets", Scope.PROJECT, spec, message=resources_pb2.API))


def spec_schema(spec: type[WireModel]) -> dict[str, Any]:
    return root_schema(crd_of(spec))["properties"]["spec"]


def test_deploy_crds_are_current() -> None:
    expected = crd_files()
    present = {path.name: path.read_text() for path in DEPLOY_CRDS.glob("*.yaml")}
    assert sorted(present) == sorted(expected), REGENERATE
    for name, text in expected.items():
        assert present[name] == text, f"deploy/crds/{name} is stale: {REGENERATE}"


def test_there_is_one_crd_per_delivered_kind() -> None:
    crds = custom_resource_definitions()
    names = [crd["spec"]["names"] for crd in crds]
    assert [n["kind"] for n in names] == [info.kind for info in REGISTRY.delivered() if info.writable]
    assert [n["plural"] for n in names] == [info.plural for info in REGISTRY.delivered() if info.writable]
    for crd in crds:
        assert crd["metadata"]["name"] == f"{crd['spec']['names']['plural']}.meshplane.io"
        assert crd["spec"]["group"] == "meshplane.io"
        assert crd["spec"]["scope"] == "Namespaced"
        (version,) = crd["spec"]["versions"]
        assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
        assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize("crd", custom_resource_definitions(), ids=lambda crd: crd["metadata"]["name"])
def test_schemas_follow_the_structural_rules(crd: dict[str, Any]) -> None:
    root = root_schema(crd)
    assert root["properties"]["metadata"] == {"type": "object"}, "metadata belongs to Kubernetes"
    assert root["properties"]["status"]["x-kubernetes-preserve-unknown-fields"] is True
    for path, node in schema_nodes(root):
        assert set(node) <= ALLOWED_KEYWORDS, f"{path}: {set(node) - ALLOWED_KEYWORDS}"
        assert node["type"] in TYPES, f"{path}: every node has a type"
        assert not ("properties" in node and "additionalProperties" in node), path
        assert set(node.get("required", [])) <= set(node.get("properties", {})), path
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            assert isinstance(node.get(bound, False), bool), f"{path}: OpenAPI v3 bounds are flags"
        if "default" in node:
            assert isinstance(node["default"], PYTHON_TYPES[node["type"]]), f"{path}: default of the wrong type"
            assert node["default"] in node.get("enum", [node["default"]]), path
            assert not path.startswith(".metadata"), path
        assert not (node.get("nullable") and "enum" in node), f"{path}: Kubernetes refuses null in an enum"


@pytest.mark.parametrize("crd", custom_resource_definitions(), ids=lambda crd: crd["metadata"]["name"])
def test_printer_columns_point_at_fields_of_the_schema(crd: dict[str, Any]) -> None:
    (version,) = crd["spec"]["versions"]
    columns = version["additionalPrinterColumns"]
    assert columns[-1] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    for column in columns[:-1]:
        node = root_schema(crd)
        for part in column["jsonPath"].removeprefix(".").split("."):
            node = node["properties"][part]
        assert node["type"] == column["type"]


def test_the_api_schema_carries_the_models_constraints() -> None:
    spec = root_schema(custom_resource_definitions()[0])["properties"]["spec"]
    backend = spec["properties"]["backends"]["items"]
    assert "required" not in spec, "basePath and backends, or targetRefs: the model's own check says which"
    assert spec["properties"]["targetRefs"]["items"]["properties"]["kind"]["enum"] == ["HTTPRoute"]
    assert backend["properties"]["port"] == {"type": "integer", "minimum": 1, "maximum": 65535}
    assert backend["properties"]["protocol"]["enum"] == ["http", "http2", "grpc"]
    assert backend["properties"]["protocol"]["default"] == "http"
    assert "nullable" not in backend["properties"]["retries"], "`retries: null` is pruned: absent, as in the model"
    assert spec["properties"]["placement"]["properties"]["clusterSelector"]["properties"]["matchLabels"] == {
        "type": "object",
        "additionalProperties": {"type": "string"},
    }


class Colour(StrEnum):
    RED = "red"
    BLUE = "blue"


class Part(WireModel):
    """A part of a widget."""

    size: int = Field(gt=0, lt=10)
    colour: Colour | None = None


class Loose(WireModel):
    model_config = WireModel.model_config | {"extra": "allow"}

    known: str = ""


class WidgetSpec(WireModel):
    parts: list[Part] = Field(default_factory=list)
    weights: dict[str, float] = Field(default_factory=dict)
    loose: Loose | None = None
    tags: set[str] = Field(default_factory=set)
    note: str | None = "none yet"


def test_a_new_kind_gets_a_crd_by_adding_it_to_the_registry() -> None:
    registry = KindRegistry([KindInfo("Widget", "widgets", Scope.PROJECT, WidgetSpec, message=resources_pb2.API)])

    (crd,) = custom_resource_definitions(registry)

    assert crd["metadata"]["name"] == "widgets.meshplane.io"
    assert crd["spec"]["names"] == {
        "kind": "Widget",
        "listKind": "WidgetList",
        "plural": "widgets",
        "singular": "widget",
        "categories": ["meshplane"],
    }
    assert crd["spec"]["versions"][0]["additionalPrinterColumns"] == [
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    ]


def test_optional_enums_dicts_sets_and_open_models_become_their_structural_forms() -> None:
    spec = spec_schema(WidgetSpec)["properties"]
    part = spec["parts"]["items"]
    assert part["description"] == "A part of a widget."
    assert part["properties"]["size"] == {
        "type": "integer",
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": 10,
        "exclusiveMaximum": True,
    }
    assert part["properties"]["colour"] == {"type": "string", "enum": ["red", "blue"]}
    assert spec["weights"] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert spec["loose"]["x-kubernetes-preserve-unknown-fields"] is True
    assert spec["note"] == {"type": "string", "default": "none yet", "nullable": True}, (
        "null is a value where it is not the default"
    )
    assert spec["tags"] == {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}


class Either(WireModel):
    value: int | str


class Tree(WireModel):
    children: list[Tree] = Field(default_factory=list)


class RequiredColour(WireModel):
    colour: Colour | None


@pytest.mark.parametrize(
    ("spec", "problem"), [(Either, "anyOf"), (Tree, "recursive"), (RequiredColour, "enum that may be null")]
)
def test_a_model_without_a_structural_schema_is_refused_with_its_field(spec: type[WireModel], problem: str) -> None:
    with pytest.raises(UnstructuralSchema) as caught:
        crd_of(spec)
    assert problem in str(caught.value)
    assert caught.value.path.startswith("spec")


def test_meshplane_crds_prints_every_crd_and_writes_deploy_files(tmp_path: Path) -> None:
    runner = CliRunner()

    printed = runner.invoke(app, ["crds"])
    stale = tmp_path / "meshplane.io_gadgets.yaml"
    stale.write_text(GENERATED_HEADER + "kind: CustomResourceDefinition\n")
    (tmp_path / "hand-written.yaml").write_text("kind: ConfigMap\n")
    written = runner.invoke(app, ["crds", "--out", str(tmp_path)])

    assert printed.exit_code == 0, printed.output
    assert list(yaml.safe_load_all(printed.stdout)) == custom_resource_definitions()
    assert written.exit_code == 0, written.output
    assert {p.name: p.read_text() for p in tmp_path.glob("meshplane.io_*.yaml")} == crd_files()
    assert not stale.exists()
    assert (tmp_path / "hand-written.yaml").exists()
