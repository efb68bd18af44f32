"""Cross-namespace references: allowed only where a ReferenceGrant in the referent's namespace says so."""

from __future__ import annotations

from collections.abc import Mapping

from meshplane.gatewayapi.objects import items, metadata, spec
from meshplane.gatewayapi.state import KubeObject, ObjectKey


def permitted(
    grants: Mapping[ObjectKey, KubeObject],
    source: tuple[str, str, str],
    target: tuple[str, str, str, str],
) -> bool:
    """Whether an object (group, kind, namespace) may name (group, kind, namespace, name). A reference within
    one namespace always may; across namespaces, a grant in the target's namespace must list both sides (a
    grant's `to` without a name covers every object of that kind)."""
    from_group, from_kind, from_namespace = source
    to_group, to_kind, to_namespace, to_name = target
    if from_namespace == to_namespace:
        return True
    for grant in grants.values():
        if str(metadata(grant).get("namespace") or "") != to_namespace:
            continue
        body = spec(grant)
        froms = any(
            str(entry.get("group") or "") == from_group
            and entry.get("kind") == from_kind
            and entry.get("namespace") == from_namespace
            for entry in items(body.get("from"))
        )
        tos = any(
            str(entry.get("group") or "") == to_group
            and entry.get("kind") == to_kind
            and entry.get("name") in (None, "", to_name)
            for entry in items(body.get("to"))
        )
        if froms and tos:
            return True
    return False
