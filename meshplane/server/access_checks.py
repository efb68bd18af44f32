"""Write-time checks for API management kinds that need the store.

What a RateLimitPolicy targets must exist (422 with the field path; what a Subscription names is checked as
every kind's references are, see references); an application subscribes to an API once (409); a token client
(issuer and client id) is one application's in a project (409), and so is a client certificate's
subject, SAN or fingerprint (409); an API whose routes would meet another's at a
gateway is refused (409, see api_conflicts; another project's API is not named).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, NamedTuple

from meshplane.model.access import (
    ApplicationSpec,
    ClientCertificate,
    PolicyTarget,
    RateLimitPolicySpec,
    SubscriptionSpec,
    TargetKind,
)
from meshplane.model.kinds import APISpec
from meshplane.model.meta import Placement, origin_cluster
from meshplane.model.resource import FieldError, InvalidObject, Resource
from meshplane.model.stored import StoredObject
from meshplane.server.api_conflicts import first_clash, hosts_overlap, share_a_route_table, templated
from meshplane.server.placement import placed_clusters, served_placement
from meshplane.server.problems import Problem
from meshplane.server.references import missing
from meshplane.store.errors import NotFound
from meshplane.store.store import Store


class KnownApis(NamedTuple):
    """The clusters (name -> labels) and APIs (project, name, spec) a route check weighs, as of `revision`."""

    clusters: Mapping[str, Mapping[str, str]]
    apis: Iterable[tuple[str, str, APISpec | Mapping[str, Any]]]
    revision: int


ApiLookup = Callable[[APISpec, int], Awaitable[KnownApis]]
"""The clusters and the APIs a server holds in memory that may meet the given one (at least those: see
api_conflicts.route_bucket), as of a revision at least the given one, so a write need not read every API back
from the store; without one, the store is read."""


async def check_access(
    store: Store, resource: Resource, lookup: ApiLookup | None = None, seen_from: int = 0
) -> int | None:
    """Refuse what does not fit with what is stored (a `lookup` includes at least the write at `seen_from`).
    Returns the revision as of which the objects of the resource's own kind were weighed, when they were (see
    collides_with_access_checks)."""
    spec = resource.spec
    project = resource.metadata.project or ""
    if isinstance(spec, APISpec):
        return await _check_api_routes(store, resource, spec, lookup, seen_from)
    if isinstance(spec, SubscriptionSpec):
        return await _check_subscription(store, project, resource.metadata.name, spec)
    if isinstance(spec, ApplicationSpec) and (spec.client_ids or spec.client_certificates):
        return await _check_client_ids(store, project, resource.metadata.name, spec)
    if isinstance(spec, RateLimitPolicySpec):
        await _check_target(store, project, spec.target)
    return None


def collides_with_access_checks(resource: Resource, other: StoredObject) -> bool:
    """Whether a stored object the checks here did not see could have refused `resource`: an API whose routes
    may meet its routes, or a subscription of the same application to the same API. May say yes too often,
    never too rarely."""
    spec = resource.spec
    if other.kind != resource.kind:
        return False
    if isinstance(spec, APISpec):
        return _may_meet(spec, *_routing_of(other.spec))
    if isinstance(spec, SubscriptionSpec):
        pair = (other.spec.get("application"), other.spec.get("api"))
        return other.project == resource.metadata.project and pair == (spec.application, spec.api)
    if isinstance(spec, ApplicationSpec):
        return other.project == resource.metadata.project and bool(_client_pairs(spec) & _stored_client_pairs(other))
    return False


def _client_pairs(spec: ApplicationSpec) -> set[tuple[str, str]]:
    """What the application is recognised by: (issuer, client id) of its token clients, and
    ("certificate <way>", value) of its client certificates."""
    certificates = {(f"certificate {way}", value) for c in spec.client_certificates for way, value in _ways(c)}
    return {(client.issuer, client.client_id) for client in spec.client_ids} | certificates


def _stored_client_pairs(stored: StoredObject) -> set[tuple[str, str]]:
    return _client_pairs(ApplicationSpec.model_validate(stored.spec))


def _ways(certificate: ClientCertificate) -> list[tuple[str, str]]:
    return [(way, value) for way, value in certificate.model_dump().items() if value is not None]


async def _stored_api(store: Store, project: str, name: str) -> StoredObject | None:
    try:
        return await store.get("API", project, name)
    except NotFound:
        return None


async def _check_subscription(store: Store, project: str, name: str, spec: SubscriptionSpec) -> int:
    """An application subscribes to an API once (that both exist is a reference check, done before)."""
    subscriptions, revision = await store.list("Subscription", project)
    for other in subscriptions:
        if other.name != name and (other.spec["application"], other.spec["api"]) == (spec.application, spec.api):
            raise Problem(
                409, f"application {spec.application} is already subscribed to API {spec.api} by {other.name}"
            )
    return revision


async def _check_client_ids(store: Store, project: str, name: str, spec: ApplicationSpec) -> int:
    """A token's client, or a client certificate, names one application: two that claim it would both answer
    for it."""
    applications, revision = await store.list("Application", project)
    wanted = _client_pairs(spec)
    for other in applications:
        shared = wanted & _stored_client_pairs(other) if other.name != name else set()
        if shared:
            issuer, client = min(shared)
            what = (
                f"{issuer} {client!r}"
                if issuer.startswith("certificate ")
                else f"client id {client!r} of issuer {issuer}"
            )
            raise Problem(409, f"{what} already belongs to application {other.name}")
    return revision


async def _check_target(store: Store, project: str, target: PolicyTarget) -> None:
    api_name = target.api if target.kind is TargetKind.SUBSCRIPTION_PLAN else target.name
    if api_name is None:
        return
    path = "spec.target.api" if target.kind is TargetKind.SUBSCRIPTION_PLAN else "spec.target.name"
    stored = await _stored_api(store, project, api_name)
    if stored is None:
        raise InvalidObject([missing(path, "API", api_name, project)])
    if target.operation is not None:
        api = APISpec.model_validate(stored.spec)
        wanted = (target.operation.method.upper(), target.operation.path)
        if not any((op.method.value, op.path) == wanted for op in api.operations):
            message = f"API {api_name} declares no operation {wanted[0]} {wanted[1]}"
            raise InvalidObject([FieldError(path="spec.target.operation", message=message)])


async def _check_api_routes(
    store: Store, resource: Resource, spec: APISpec, lookup: ApiLookup | None, seen_from: int
) -> int:
    me = (resource.metadata.project or "", resource.metadata.name)
    clusters, apis, revision = await lookup(spec, seen_from) if lookup is not None else await _stored_apis(store)
    served = served_placement(spec.placement, resource.metadata.origin)
    mine = placed_clusters(served, clusters)
    others: list[tuple[str | None, APISpec]] = []
    for project, name, other in apis:
        base_path, hostnames = _routing_of(other)
        if (project, name) == me or not _may_meet(spec, base_path, hostnames):
            continue
        other_spec = other if isinstance(other, APISpec) else APISpec.model_validate(other)
        if not share_a_route_table(me[0], spec, project, other_spec):
            continue
        if _meet(served, mine, other_spec.placement, clusters):
            others.append((f"{project}/{name}" if project == me[0] else None, other_spec))
    found = first_clash(spec, others)
    if found is not None:
        name, where = found
        who = f"API {name}" if name is not None else "an API of another project"
        raise Problem(409, f"{who} already answers {where} on a shared hostname; its routes would shadow these")
    return revision


async def _stored_apis(store: Store) -> KnownApis:
    clusters, _ = await store.list("Cluster")
    apis, revision = await store.list("API")
    known = [(o.project, o.name, _served_spec(o)) for o in apis]
    return KnownApis({c.name: c.labels for c in clusters}, known, revision)


def _served_spec(stored: StoredObject) -> Mapping[str, Any]:
    """A stored API with the placement it is served by (see `served_placement`), still in its stored form."""
    if origin_cluster(stored.origin) is None:
        return stored.spec
    return {**stored.spec, "placement": served_placement(Placement(), stored.origin).to_wire()}


def _routing_of(spec: APISpec | Mapping[str, Any]) -> tuple[str | None, list[str]]:
    if isinstance(spec, APISpec):
        return spec.base_path, spec.hostnames
    return spec.get("basePath"), spec.get("hostnames", ["*"])


def _may_meet(spec: APISpec, base_path: str | None, hostnames: list[str]) -> bool:
    """A cheap first look on the stored form: APIs on disjoint hosts, or whose basePaths part at a literal
    segment, never meet, and most pairs are ruled out here without validating the other API. An API attached
    to Gateway API routes has no routes of its own to meet."""
    if spec.base_path is None or base_path is None:
        return False
    if not any(hosts_overlap(mine, theirs) for mine in spec.hostnames for theirs in hostnames):
        return False
    for mine, theirs in zip(spec.base_path.split("/")[1:], base_path.split("/")[1:], strict=False):
        if mine != theirs and not templated(mine) and not templated(theirs):
            return False
    return True


def _meet(a: Placement, placed_a: frozenset[str], b: Placement, clusters: dict[str, dict[str, str]]) -> bool:
    """Two APIs meet on a gateway if some cluster takes both, or (no cluster yet) they ask for the same ones."""
    return a == b or bool(placed_a & placed_clusters(b, clusters))
