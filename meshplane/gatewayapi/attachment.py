"""Which listeners a route attaches to: the parentRef's sectionName and port, the listener's
`allowedRoutes` (namespaces and kinds), and a shared hostname; and, when none, the reason the route's status
gives."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from meshplane.gatewayapi.hostnames import intersection
from meshplane.gatewayapi.objects import Kind, Listener, ParentRef, items, mapping, strings

NO_MATCHING_PARENT = "NoMatchingParent"
NOT_ALLOWED_BY_LISTENERS = "NotAllowedByListeners"
NO_MATCHING_LISTENER_HOSTNAME = "NoMatchingListenerHostname"


@dataclass(frozen=True)
class Attachment:
    """A route on one listener, with the hostnames it serves there."""

    listener: Listener
    hostnames: tuple[str, ...]


def namespace_allowed(
    listener: Listener, gateway_namespace: str, route_namespace: str, labels: Mapping[str, Mapping[str, str]]
) -> bool:
    """`allowedRoutes.namespaces`: Same (the default), All, or Selector over the route namespace's labels."""
    namespaces = mapping(listener.allowed_routes.get("namespaces"))
    origin = namespaces.get("from") or "Same"
    if origin == "All":
        return True
    if origin == "Selector":
        return selects(mapping(namespaces.get("selector")), labels.get(route_namespace, {}))
    return route_namespace == gateway_namespace


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels and matchExpressions) applied to labels."""
    for key, value in mapping(selector.get("matchLabels")).items():
        if labels.get(key) != value:
            return False
    for expression in items(selector.get("matchExpressions")):
        key, operator, values = (
            str(expression.get("key")),
            expression.get("operator"),
            strings(expression.get("values")),
        )
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def attach(
    ref: ParentRef,
    listeners: Sequence[tuple[Listener, Sequence[Kind]]],
    route_kind: Kind,
    route_hostnames: Sequence[str],
    namespace_allows: Mapping[str, bool],
) -> tuple[list[Attachment], str | None]:
    """The listeners (valid ones, with the kinds each accepts) `ref` attaches the route to, or the reason it
    attaches to none. `namespace_allows` says, by listener name, whether the route's namespace may attach."""
    named = [
        (listener, kinds)
        for listener, kinds in listeners
        if (ref.section_name is None or listener.name == ref.section_name)
        and (ref.port is None or listener.port == ref.port)
    ]
    if not named:
        return [], NO_MATCHING_PARENT
    allowed = [listener for listener, kinds in named if route_kind in kinds and namespace_allows[listener.name]]
    if not allowed:
        return [], NOT_ALLOWED_BY_LISTENERS
    attached = []
    for listener in allowed:
        hostnames = intersection(listener.hostname, route_hostnames)
        if hostnames:
            attached.append(Attachment(listener, tuple(hostnames)))
    if not attached:
        return [], NO_MATCHING_LISTENER_HOSTNAME
    return attached, None
