"""CustomResourceDefinitions for the kinds an agent applies, generated from the models the server validates with.

The registry says which kinds exist and their names; each kind's pydantic model gives the OpenAPI v3
schema, rewritten into the *structural* dialect Kubernetes requires (no `$ref`, no `anyOf` with
null, no `const`, draft-4 exclusive bounds, `x-kubernetes-preserve-unknown-fields` where the
model allows extra fields). A construct with no structural equivalent is an error here, so a new
kind cannot silently produce a CRD that the API server refuses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from meshplane.model.kinds import OWN_TRAFFIC, OWN_TRAFFIC_NEEDED, own_traffic_needed, own_traffic_refused
from meshplane.model.registry import REGISTRY, KindInfo, KindRegistry
from meshplane.model.resource import API_GROUP, API_VERSION

CRD_VERSION = API_VERSION.split("/", 1)[1]
CATEGORY = "meshplane"
GENERATED_HEADER = "# Generated from meshplane's models by `meshplane crds --out deploy/crds`; do not edit.\n"

# Extra `kubectl get` columns per kind (Age is added to every kind).
PRINTER_COLUMNS: Mapping[str, list[dict[str, str]]] = {
    "API": [
        {"name": "Base Path", "type": "string", "jsonPath": ".spec.basePath"},
        {"name": "Version", "type": "string", "jsonPath": ".spec.version"},
    ],
}
_ATTACHED = "has(self.targetRefs) && size(self.targetRefs) > 0"
_PRESENT = {"basePath": "has(self.basePath)", "operations": "has(self.operations) && size(self.operations) > 0"}
_PRESENT["backends"] = "has(self.backends) && size(self.backends) > 0"


# Rules across a spec's fields (the models' `field_problems`) that the API server can check with CEL, each
# reported at its field with the model's message.
def _rule(rule: str, path: str, message: str) -> dict[str, str]:
    return {"rule": rule, "fieldPath": f".{path}", "message": message}


SPEC_RULES: Mapping[str, list[dict[str, str]]] = {
    "API": [
        *(_rule(f"({_ATTACHED}) || ({_PRESENT[p]})", p, own_traffic_needed(p)) for p in OWN_TRAFFIC_NEEDED),
        *(_rule(f"!({_ATTACHED}) || !({_PRESENT[p]})", p, own_traffic_refused(p)) for p in OWN_TRAFFIC),
    ],
}
AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}

# JSON-schema keywords with the same meaning in Kubernetes' JSONSchemaProps, copied as they are.
_KEPT = {
    "type",
    "format",
    "description",
    "enum",
    "default",
    "maximum",
    "minimum",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "maxProperties",
    "minProperties",
    "multipleOf",
    "required",
    "nullable",
}
# Keywords that only document or only matter to pydantic; Kubernetes has no use for them.
_DROPPED = {"title", "examples", "readOnly", "writeOnly", "deprecated", "$comment"}
# The order keys are written in, so that the generated YAML reads top-down and diffs stay small.
_KEY_ORDER = [
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
    "x-kubernetes-list-type",
    "x-kubernetes-preserve-unknown-fields",
    "required",
    "properties",
    "items",
    "additionalProperties",
]


class UnstructuralSchema(ValueError):
    """A model's JSON schema uses a construct that a Kubernetes structural schema cannot express."""

    def __init__(self, kind: str, path: str, problem: str):
        self.kind = kind
        self.path = path
        super().__init__(f"{kind}: schema at {path or '<root>'}: {problem}")


def crd_name(info: KindInfo) -> str:
    return f"{info.plural}.{API_GROUP}"


def custom_resource_definitions(registry: KindRegistry = REGISTRY) -> list[dict[str, Any]]:
    """One apiextensions.k8s.io/v1 CRD for every kind delivered to clusters that users write, in registry order."""
    return [custom_resource_definition(info) for info in registry.delivered() if info.writable]


def custom_resource_definition(info: KindInfo) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name(info), "labels": {"app.kubernetes.io/part-of": "meshplane"}},
        "spec": {
            "group": API_GROUP,
            "names": {
                "kind": info.kind,
                "listKind": f"{info.kind}List",
                "plural": info.plural,
                "singular": info.kind.lower(),
                "categories": [CATEGORY],
            },
            # A project maps to a namespace; cluster-scoped kinds stay cluster-scoped.
            "scope": "Namespaced" if info.namespaced else "Cluster",
            "versions": [
                {
                    "name": CRD_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [*PRINTER_COLUMNS.get(info.kind, []), AGE_COLUMN],
                    "schema": {"openAPIV3Schema": object_schema(info)},
                }
            ],
        },
    }


def object_schema(info: KindInfo) -> dict[str, Any]:
    """The structural schema of a whole CR: our spec, Kubernetes' metadata, a status only the system writes."""
    model_schema = info.model.model_json_schema(by_alias=True)
    converter = _Converter(info.kind, model_schema.get("$defs", {}))
    spec = converter.convert(model_schema["properties"]["spec"], "spec")
    if rules := SPEC_RULES.get(info.kind):
        spec["x-kubernetes-validations"] = rules
    status: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if status_description := (info.status.__doc__ or "").strip():
        status = {"description": status_description, **status}
    where = "its namespace is its project" if info.namespaced else "cluster-scoped"
    return {
        "description": f"A meshplane {info.kind}, as in the control plane's API; {where}.",
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        "required": ["spec"],
    }


class _Converter:
    """Rewrites one pydantic JSON schema into Kubernetes' structural OpenAPI v3 dialect."""

    def __init__(self, kind: str, defs: Mapping[str, Any]):
        self.kind = kind
        self.defs = defs

    def convert(self, node: Mapping[str, Any], path: str, resolving: tuple[str, ...] = ()) -> dict[str, Any]:
        node, resolving = self._inline(node, path, resolving)
        node = self._unwrap_nullable(node, path)
        if "$ref" in node or "allOf" in node:
            return self.convert(node, path, resolving)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DROPPED or key in ("properties", "items", "additionalProperties"):
                continue
            if key == "const":
                out["enum"] = [value]
            elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
                # JSON Schema 2020 gives the bound; OpenAPI v3 (draft 4) a flag on minimum / maximum.
                out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
                out[key] = True
            elif key == "uniqueItems":
                if value:
                    out["x-kubernetes-list-type"] = "set"
            elif key in _KEPT:
                out[key] = value
            else:
                raise UnstructuralSchema(self.kind, path, f"{key!r} has no structural equivalent")
        if out.get("nullable") and "enum" in out:
            raise UnstructuralSchema(self.kind, path, "an enum that may be null (Kubernetes refuses null in enums)")
        if "type" not in out:
            raise UnstructuralSchema(self.kind, path, "no type (structural schemas type every node)")
        if "properties" in node:
            out["properties"] = {
                name: self.convert(child, f"{path}.{name}", resolving) for name, child in node["properties"].items()
            }
        if "items" in node:
            out["items"] = self.convert(node["items"], f"{path}[]", resolving)
            if out.get("x-kubernetes-list-type") == "set" and out["items"].get("type") in ("object", "array"):
                raise UnstructuralSchema(self.kind, path, "unique items must be scalars")
        extra = node.get("additionalProperties")
        if extra is True:
            out["x-kubernetes-preserve-unknown-fields"] = True
        elif isinstance(extra, Mapping):
            if "properties" in node:
                raise UnstructuralSchema(self.kind, path, "both properties and a schema for additional ones")
            out["additionalProperties"] = self.convert(extra, f"{path}.*", resolving)
        # additionalProperties: false needs no keyword: the API server prunes unknown fields, and
        # rejects them under fieldValidation=Strict.
        if out["type"] == "object" and not ({"properties", "additionalProperties"} & out.keys()):
            out["x-kubernetes-preserve-unknown-fields"] = True
        return {key: out[key] for key in sorted(out, key=_KEY_ORDER.index)}

    def _inline(
        self, node: Mapping[str, Any], path: str, resolving: tuple[str, ...]
    ) -> tuple[dict[str, Any], tuple[str, ...]]:
        """Replace `$ref` (and a one-element `allOf`) by the schema it names; sibling keywords win."""
        node = dict(node)
        if "allOf" in node:
            parts = node.pop("allOf")
            if len(parts) != 1:
                raise UnstructuralSchema(self.kind, path, "allOf with more than one schema")
            node = {**parts[0], **node}
        ref = node.pop("$ref", None)
        if ref is None:
            return node, resolving
        name = ref.removeprefix("#/$defs/")
        if name not in self.defs:
            raise UnstructuralSchema(self.kind, path, f"unresolvable $ref {ref!r}")
        if name in resolving:
            raise UnstructuralSchema(self.kind, path, f"recursive type {name} (structural schemas are finite)")
        return {**self.defs[name], **node}, (*resolving, name)

    def _unwrap_nullable(self, node: dict[str, Any], path: str) -> dict[str, Any]:
        """`anyOf: [X, {type: null}]` (an Optional field) becomes X, nullable where null is a value.

        For `X | None = None` a null means "absent": left non-nullable, the API server prunes a null
        before validating, so `field: null` is accepted and stored as absent, as the model reads it
        (and the enum check, which refuses null even when listed, never sees one). Where null differs
        from the default (another default, or none), the schema says `nullable: true`.
        """
        variants = node.get("anyOf")
        if variants is None:
            return node
        others = [v for v in variants if v != {"type": "null"}]
        if len(others) != 1 or len(others) == len(variants):
            raise UnstructuralSchema(self.kind, path, "anyOf other than Optional[X] (use one type per field)")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if "default" in rest and rest["default"] is None:
            del rest["default"]
            return {**others[0], **rest}
        return {**others[0], **rest, "nullable": True}


def crd_documents(crds: Iterable[Mapping[str, Any]]) -> str:
    """Multi-document YAML, as `kubectl apply -f` takes it."""
    return "".join(f"---\n{crd_yaml(crd)}" for crd in crds)


def crd_yaml(crd: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(crd), sort_keys=False, width=120)


def crd_files(registry: KindRegistry = REGISTRY) -> dict[str, str]:
    """File name → content for `deploy/crds/`: one file per kind, named as controller-gen names them."""
    return {
        f"{API_GROUP}_{crd['spec']['names']['plural']}.yaml": GENERATED_HEADER + crd_yaml(crd)
        for crd in custom_resource_definitions(registry)
    }
