"""Offline validation of rendered Istio objects against Istio's CRD schemas (OpenAPI v3).

`validate_istio(obj)` picks the CRD by apiVersion and kind and validates `spec` against the
version's `openAPIV3Schema.properties.spec` with jsonschema, as a kube-apiserver with strict field
validation would, as far as a JSON Schema can tell:

- unknown fields are errors (the apiserver prunes them, which silently loses config), except under
  `x-kubernetes-preserve-unknown-fields`;
- `x-kubernetes-int-or-string` admits both; `nullable` admits null;
- of the CEL rules (`x-kubernetes-validations`), the common ones are checked (durations, port ranges,
  no wildcards, unique port numbers, port-name keys); the rest are left to a real apiserver.

It also checks the metadata a namespaced custom resource needs (name, namespace, labels).
The CRD file is `../shared/schemas/istio/crd-all.gen.yaml` beside the repository, or
`$MESHPLANE_ISTIO_CRDS`.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from meshplane_testing.process import MissingRequirement

CRD_FILE = Path(
    os.environ.get(
        "MESHPLANE_ISTIO_CRDS",
        Path(__file__).resolve().parents[1].parent / "shared" / "schemas" / "istio" / "crd-all.gen.yaml",
    )
)

_GO_DURATION = re.compile(r"^(\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)((\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))*$")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PORT_NAME = re.compile(r"^[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def _go_duration_seconds(text: str) -> float | None:
    if not isinstance(text, str) or not _GO_DURATION.match(text):
        return None
    return sum(float(n) * _UNIT_SECONDS[u] for n, _, u in re.findall(r"(\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)", text))


def _duration_at_least_1ms(value: Any) -> bool:
    seconds = _go_duration_seconds(value)
    return seconds is not None and seconds >= 0.001


# CEL rules that appear often in Istio's CRDs, as Python predicates; a rule not listed is not checked.
_CEL: dict[str, Callable[[Any], bool]] = {
    "duration(self) >= duration('1ms')": _duration_at_least_1ms,
    "0 < self && self <= 65535": lambda v: isinstance(v, int) and 0 < v <= 65535,
    '!self.contains("*")': lambda v: "*" not in v,
    "self.all(key, key.size() != 0)": lambda v: all(k != "" for k in v),
    'self.all(key, !key.contains("*"))': lambda v: all("*" not in k for k in v),
    'self.all(key, size(key) < 63 && key.matches("^[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?$"))': lambda v: all(
        len(k) < 63 and _PORT_NAME.match(k) for k in v
    ),
    "self.all(l1, self.exists_one(l2, l1.number == l2.number))": lambda v: len({p.get("number") for p in v}) == len(v),
}


def _cel_keyword(validator, rules, instance, schema) -> Iterator[jsonschema.ValidationError]:
    for rule, message in rules:
        try:
            ok = _CEL[rule](instance)
        except (TypeError, AttributeError):
            ok = False
        if not ok:
            yield jsonschema.ValidationError(f"{message} (rule: {rule})")


_Validator = jsonschema.validators.extend(jsonschema.Draft7Validator, {"x-cel": _cel_keyword})


def _strict(schema: Any) -> Any:
    """The schema as jsonschema reads it: closed objects, int-or-string, nullable, known CEL rules."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key.startswith("x-kubernetes-") or key in ("description", "nullable"):
            continue
        if key in ("properties", "patternProperties", "definitions"):
            out[key] = {name: _strict(sub) for name, sub in value.items()}
        else:
            out[key] = _strict(value)
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.pop("anyOf", None)
        out["type"] = ["integer", "string"]
    if schema.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    known = [
        (r["rule"].strip(), r.get("message", "CEL rule failed"))
        for r in schema.get("x-kubernetes-validations", [])
        if r.get("rule", "").strip() in _CEL
    ]
    if known:
        out["x-cel"] = known
    return out


@functools.cache
def _validators() -> dict[tuple[str, str], Any]:
    """(apiVersion, kind) -> validator of `spec`, for every served version of every CRD."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with crd_file().open() as stream:
        crds = [doc for doc in yaml.load_all(stream, Loader=loader) if doc]
    out = {}
    for crd in crds:
        group = crd["spec"]["group"]
        kind = crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if not version.get("served", True):
                continue
            spec_schema = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
            out[(f"{group}/{version['name']}", kind)] = _Validator(_strict(spec_schema))
    return out


def crd_file() -> Path:
    """Istio's CRDs, or MissingRequirement saying where they were looked for."""
    if not CRD_FILE.is_file():
        raise MissingRequirement(f"Istio's CRD schemas are not at {CRD_FILE} (set MESHPLANE_ISTIO_CRDS to their file)")
    return CRD_FILE


def known_kinds() -> set[tuple[str, str]]:
    return set(_validators())


def validate_istio(obj: dict) -> list[str]:
    """Every reason the apiserver (with Istio's CRDs) would refuse `obj`; empty when it is valid."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    validator = _validators().get((api_version, kind))
    if validator is None:
        return [f"no served Istio CRD for apiVersion {api_version!r}, kind {kind!r}"]
    errors = _metadata_errors(obj.get("metadata"))
    extra = set(obj) - {"apiVersion", "kind", "metadata", "spec"}
    if extra:
        errors.append(f"unexpected top-level fields: {sorted(extra)}")
    if "spec" not in obj:
        return [*errors, "spec: missing"]
    for error in sorted(validator.iter_errors(obj["spec"]), key=lambda e: list(map(str, e.absolute_path))):
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        errors.append(f"spec{path}: {error.message}")
    return errors


def _metadata_errors(meta: Any) -> list[str]:
    if not isinstance(meta, dict):
        return ["metadata: missing"]
    errors = []
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        errors.append(f"metadata.name: {name!r} is not a DNS-1123 subdomain")
    if not isinstance(namespace, str) or not _DNS_LABEL.match(namespace):
        errors.append(f"metadata.namespace: {namespace!r} is not a DNS-1123 label (Istio kinds are namespaced)")
    for key, value in (meta.get("labels") or {}).items():
        if not _LABEL_KEY.match(key) or not isinstance(value, str) or not _LABEL_VALUE.match(value):
            errors.append(f"metadata.labels: {key!r}: {value!r} is not a valid label")
    for key, value in (meta.get("annotations") or {}).items():
        if not isinstance(value, str):
            errors.append(f"metadata.annotations: {key!r} is not a string")
    return errors
