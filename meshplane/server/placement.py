"""Placement: which clusters an object goes to. Pure: labels in, cluster names out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from meshplane.model.meta import Placement, origin_cluster
from meshplane.model.registry import REGISTRY, Follows
from meshplane.model.stored import ObjectKey


def placed_clusters(placement: Placement, clusters: Mapping[str, Mapping[str, str]]) -> frozenset[str]:
    """The names of the clusters (name -> labels) that the placement selects."""
    return frozenset(name for name, labels in clusters.items() if placement.selects(name, dict(labels)))


def served_placement(placement: Placement, origin: str | None) -> Placement:
    """Where an object is served: one a cluster made stays on that cluster (whose agent serves it already)
    whatever placement it asks for, until an admin adopts it; any other goes where its placement says."""
    cluster = origin_cluster(origin)
    return placement if cluster is None else Placement(clusters=[cluster])


FOLLOWED = "API"
"""The kind followers are placed with (see `Follows`)."""
GATEWAY = "Gateway"
"""Placed by its own placement, as an API is; certificates follow the Gateways (and the APIs) that name them."""
LEADING = frozenset({FOLLOWED, GATEWAY})
"""The kinds whose placement followers' placement is computed from."""


def follows(kind: str) -> bool:
    """Placed where the APIs it touches are placed, rather than by a placement of its own."""
    return REGISTRY.get(kind).follows is not None


class _HasSpec(Protocol):
    spec: Any


def followers_placement(
    project: str, objects: Mapping[ObjectKey, _HasSpec], placed: Mapping[ObjectKey, frozenset[str]]
) -> dict[ObjectKey, frozenset[str]]:
    """Where each follower of one project goes, from where its APIs are placed (see `Follows`): a
    subscription with its API, an application (and its keys) wherever the project has an API, a policy with
    the API it targets (or, for a plan, with the subscriptions on that plan)."""
    by: dict[Follows | None, dict[ObjectKey, Any]] = {}
    for key, obj in objects.items():
        if key[1] == project:
            by.setdefault(REGISTRY.get(key[0]).follows, {})[key] = obj.spec
    out: dict[ObjectKey, frozenset[str]] = {}

    def api(name: str | None) -> frozenset[str]:
        return placed.get((FOLLOWED, project, name or ""), frozenset())

    subscriptions = by.get(Follows.NAMED_API, {})
    for key, spec in subscriptions.items():
        out[key] = api(spec.api)
    # Any application may call any API of its project once subscribed: every gateway of the project knows
    # every application and key, so a valid key without a subscription is refused as such (403), not as
    # unknown (401), on the native and the enforcer path alike.
    everywhere = frozenset().union(*(api(key[2]) for key in by.get(None, {}) if key[0] == FOLLOWED))
    for key in by.get(Follows.PROJECT_APIS, {}):
        out[key] = everywhere
    for key, spec in by.get(Follows.APPLICATION, {}).items():
        out[key] = out.get(("Application", project, spec.application), frozenset())
    leaders = [(key, spec) for key, spec in by.get(None, {}).items() if key[0] in LEADING]
    for key in by.get(Follows.GATEWAY_REFS, {}):
        naming = (placed.get(leader, frozenset()) for leader, spec in leaders if key[2] in spec.certificate_refs())
        out[key] = frozenset().union(*naming)
    for key, spec in by.get(Follows.POLICY_TARGET, {}).items():
        target = spec.target
        if target.kind.value != "SubscriptionPlan":
            out[key] = api(target.name)
        elif target.api is not None:
            out[key] = api(target.api)
        else:
            plan = [out[k] for k, s in subscriptions.items() if s.plan == target.name]
            out[key] = frozenset().union(*plan)
    return out
