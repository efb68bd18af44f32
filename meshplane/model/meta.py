"""Object metadata, label selectors and placement: the parts every kind shares."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from meshplane.model.base import WireModel

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def check_name(value: str) -> str:
    """A DNS-1123 label: what Kubernetes accepts as a namespace or CR name."""
    if not _DNS_LABEL.match(value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 label (lower-case letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters)"
        )
    return value


def _check_labels(labels: dict[str, str]) -> dict[str, str]:
    for key, value in labels.items():
        if not _LABEL_KEY.match(key):
            raise ValueError(f"label key {key!r} is not a valid Kubernetes label key")
        if not _LABEL_VALUE.match(value):
            raise ValueError(f"label value {value!r} of {key!r} is not a valid Kubernetes label value")
    return labels


Name = Annotated[str, AfterValidator(check_name)]
Labels = Annotated[dict[str, str], AfterValidator(_check_labels)]

_CLUSTER_ORIGIN = "cluster/"


def cluster_origin(cluster: str) -> str:
    """The origin of what a cluster made: `cluster/<name>`."""
    return f"{_CLUSTER_ORIGIN}{cluster}"


def origin_cluster(origin: str | None) -> str | None:
    """The cluster that made an object of this origin; None for the control plane's own objects."""
    if origin is None or not origin.startswith(_CLUSTER_ORIGIN):
        return None
    return origin.removeprefix(_CLUSTER_ORIGIN)


class ObjectMeta(WireModel):
    """Kubernetes-shaped metadata; the server owns every field but name, project, labels, annotations."""

    name: Name
    project: Name | None = None
    labels: Labels = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    resource_version: str | None = None
    generation: int | None = None
    uid: str | None = None
    origin: str | None = None
    creation_timestamp: str | None = None


class SelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class SelectorRequirement(WireModel):
    key: str
    operator: SelectorOperator
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_fit_operator(self) -> SelectorRequirement:
        needs_values = self.operator in (SelectorOperator.IN, SelectorOperator.NOT_IN)
        if needs_values and not self.values:
            raise ValueError(f"operator {self.operator.value} needs at least one value")
        if not needs_values and self.values:
            raise ValueError(f"operator {self.operator.value} takes no values")
        return self

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        match self.operator:
            case SelectorOperator.IN:
                return present and labels[self.key] in self.values
            case SelectorOperator.NOT_IN:
                return not present or labels[self.key] not in self.values
            case SelectorOperator.EXISTS:
                return present
            case SelectorOperator.DOES_NOT_EXIST:
                return not present


class LabelSelector(WireModel):
    """Kubernetes label selector: every matchLabels pair and every expression must hold."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[SelectorRequirement] = Field(default_factory=list)

    def matches(self, labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            req.matches(labels) for req in self.match_expressions
        )


class Placement(WireModel):
    """Which clusters receive an object.

    Named clusters and selected clusters add up; with neither, every cluster qualifies.
    """

    clusters: list[Name] = Field(default_factory=list)
    cluster_selector: LabelSelector | None = None
    logical_cloud: Name | None = None

    def selects(self, cluster_name: str, cluster_labels: dict[str, str]) -> bool:
        if not self.clusters and self.cluster_selector is None:
            return True
        if cluster_name in self.clusters:
            return True
        return self.cluster_selector is not None and self.cluster_selector.matches(cluster_labels)


_SET_EXPR = re.compile(r"^\s*(\S+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_selector(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, current = [], 0, []
    for char in text:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def parse_label_selector(text: str) -> LabelSelector:
    """Parse kubectl's selector syntax: `a=b,c!=d,e in (x,y),f notin (z),g,!h`.

    ValueError names the term that does not parse, or the key or value that is not a valid label's.
    """
    match_labels: dict[str, str] = {}
    expressions: list[SelectorRequirement] = []
    for term in _split_selector(text):
        if set_match := _SET_EXPR.match(term):
            key, op, values = set_match.groups()
            operator = SelectorOperator.IN if op == "in" else SelectorOperator.NOT_IN
            items = [v.strip() for v in values.split(",") if v.strip()]
            if not items:
                raise ValueError(f"label selector term {term!r}: {op} needs at least one value")
            expressions.append(SelectorRequirement(key=key, operator=operator, values=items))
        elif "!=" in term:
            key, value = (p.strip() for p in term.split("!=", 1))
            expressions.append(SelectorRequirement(key=key, operator=SelectorOperator.NOT_IN, values=[value]))
        elif "=" in term:
            key, value = (p.strip() for p in term.replace("==", "=").split("=", 1))
            match_labels[key] = value
        elif term.startswith("!"):
            expressions.append(SelectorRequirement(key=term[1:].strip(), operator=SelectorOperator.DOES_NOT_EXIST))
        elif _LABEL_KEY.match(term):
            expressions.append(SelectorRequirement(key=term, operator=SelectorOperator.EXISTS))
        else:
            raise ValueError(f"cannot parse label selector term {term!r}")
    selector = LabelSelector(match_labels=match_labels, match_expressions=expressions)
    _check_selector_labels(selector)
    return selector


def _check_selector_labels(selector: LabelSelector) -> None:
    """A selector that names an impossible key or value is a typo, not a selector that matches nothing."""
    pairs = [*selector.match_labels.items()]
    pairs += [(req.key, value) for req in selector.match_expressions for value in req.values or [""]]
    for key, value in pairs:
        if not _LABEL_KEY.match(key):
            raise ValueError(f"label selector: {key!r} is not a label key")
        if not _LABEL_VALUE.match(value):
            raise ValueError(f"label selector: {value!r} (of {key!r}) is not a label value")
