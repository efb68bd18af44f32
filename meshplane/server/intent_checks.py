"""Write-time checks that span objects: what an intent names must exist, and what it claims must be free.

Single-object rules live in the models; these need the store. Unknown references are 422 with the
field path; a host or service port another intent already claims is 409.
"""

from __future__ import annotations

from pydantic import ValidationError

from meshplane.model.intents import (
    EgressIntentSpec,
    IngressIntentSpec,
    LogicalCloudSpec,
    RouteTarget,
    ServiceIntentSpec,
    ServiceProtocol,
    TlsMode,
)
from meshplane.model.resource import FieldError, InvalidObject, Resource
from meshplane.model.stored import StoredObject
from meshplane.server.manifests import stored_cluster_info
from meshplane.server.problems import Problem
from meshplane.server.render.fleet import Fleet, placement_targets
from meshplane.server.render.ingress import is_zone_apex, only_hostnames, passthrough_route
from meshplane.store.store import Store


async def check_intent(store: Store, resource: Resource) -> int | None:
    """Raise InvalidObject (422) or Problem(409) when an intent does not fit with what is stored. Returns the
    revision as of which other claimants were weighed, when they were (see collides_with_intent_claims)."""
    spec = resource.spec
    project = resource.metadata.project or ""
    if not isinstance(spec, ServiceIntentSpec | EgressIntentSpec | IngressIntentSpec):
        return None
    clouds = {o.name for o in (await store.list("LogicalCloud", project))[0]}
    errors = []
    if spec.placement.logical_cloud and spec.placement.logical_cloud not in clouds:
        errors.append(_unknown_cloud("spec.placement.logicalCloud", spec.placement.logical_cloud))
    if isinstance(spec, ServiceIntentSpec | EgressIntentSpec):
        for index, client in enumerate(spec.clients):
            cloud = client.service.logical_cloud if client.service else None
            if cloud and cloud not in clouds:
                errors.append(_unknown_cloud(f"spec.clients[{index}].service.logicalCloud", cloud))
    if isinstance(spec, IngressIntentSpec):
        served = [(o.name, o.spec["service"]) for o in (await store.list("ServiceIntent", project))[0]]
        services = {service["name"] for _, service in served}
        for index, route in enumerate(spec.routes):
            for target in route.targets:
                if target.service not in services:
                    errors.append(
                        FieldError(
                            path=f"spec.routes[{index}]",
                            message=f"no ServiceIntent in project {project!r} serves {target.service!r}",
                        )
                    )
        errors += _passthrough_to_http(spec, served)
        if any(is_zone_apex(h, t.zone) for h in spec.hosts for t in spec.dns):
            clusters, _ = await store.list("Cluster")
            errors += apex_cnames(resource, clusters, (await store.list("LogicalCloud", project))[0])
    if isinstance(spec, ServiceIntentSpec) and spec.service.protocol.is_http:
        errors += _http_behind_passthrough(spec, (await store.list("IngressIntent", project))[0])
    if errors:
        raise InvalidObject(errors)
    return await _check_claims(store, resource)


def apex_cnames(resource: Resource, clusters: list[StoredObject], clouds: list[StoredObject]) -> list[FieldError]:
    """A host at the apex of one of its DNS zones whose serving clusters declare hostname ingress addresses
    only: its record would be a CNAME, which no DNS server keeps beside the zone's SOA and NS records."""
    spec: IngressIntentSpec = resource.spec
    project = resource.metadata.project or ""
    fleet = Fleet(
        clusters={o.name: stored_cluster_info(o) for o in clusters},
        logical_clouds={(project, o.name): LogicalCloudSpec.model_validate(o.spec) for o in clouds},
    )
    targets = placement_targets(fleet, project, spec.placement)
    addresses = {a for c in targets for a in fleet.clusters[c].ingress_addresses}
    if not only_hostnames(addresses):
        return []
    listed = ", ".join(sorted(addresses))
    return [
        FieldError(
            path=f"spec.hosts[{index}]",
            message=(
                f"{host} is the apex of zone {target.zone} on DNS server {target.server}, where a CNAME cannot "
                f"be, and the clusters serving it have hostname ingress addresses only ({listed}): give one "
                "of them an IP address (spec.ingressGateway.addresses) or publish a name below the zone"
            ),
        )
        for index, host in enumerate(spec.hosts)
        for target in spec.dns
        if is_zone_apex(host, target.zone)
    ]


def collides_with_intent_claims(resource: Resource, other: StoredObject) -> bool:
    """Whether a stored object the claim checks did not see could have refused `resource`: an ingress intent
    sharing one of its hosts, or a service intent of its project claiming the same service port."""
    spec = resource.spec
    if other.kind != resource.kind:
        return False
    if isinstance(spec, IngressIntentSpec):
        return bool(set(spec.hosts) & set(other.spec.get("hosts", [])))
    if isinstance(spec, ServiceIntentSpec):
        return other.project == resource.metadata.project and _stored_claim(other) == _claimed_port(spec)
    return False


def _claimed_port(spec: ServiceIntentSpec) -> tuple[str | None, str, int]:
    return spec.placement.logical_cloud, spec.service.name, spec.service.port


def _stored_claim(other: StoredObject) -> tuple[str | None, str, int]:
    return (
        (other.spec.get("placement") or {}).get("logicalCloud"),
        other.spec["service"]["name"],
        other.spec["service"]["port"],
    )


def _tls_passed_to(spec: IngressIntentSpec) -> tuple[int, list[RouteTarget]]:
    """(route index, targets) that receive the client's TLS as it is: a PASSTHROUGH entity's route."""
    if not any(e.tls is not None and e.tls.mode is TlsMode.PASSTHROUGH for e in spec.entities):
        return -1, []
    route = passthrough_route(spec)
    return spec.routes.index(route), route.targets


def _tls_into_http(passed_by: str, target: tuple[str, int], declared_by: str, protocol: ServiceProtocol) -> str:
    service, port = target
    return (
        f"{passed_by} would pass the client's TLS through to {service} port {port}, which {declared_by} declares "
        f"{protocol.value}: declare the port TLS or TCP, or terminate TLS at the gateway (SIMPLE or MUTUAL)"
    )


def _passthrough_to_http(spec: IngressIntentSpec, served: list[tuple[str, dict]]) -> list[FieldError]:
    """A port a ServiceIntent declares HTTP would meet TLS bytes where its sidecar expects HTTP."""
    index, targets = _tls_passed_to(spec)
    declared = {(s["name"], s["port"]): (name, ServiceProtocol(s.get("protocol", "HTTP"))) for name, s in served}
    errors = []
    for target in targets:
        owner, protocol = declared.get((target.service, target.port), ("", ServiceProtocol.TCP))
        if protocol.is_http:
            message = _tls_into_http(
                "this IngressIntent", (target.service, target.port), f"ServiceIntent {owner}", protocol
            )
            errors.append(FieldError(path=f"spec.routes[{index}]", message=message))
    return errors


def _http_behind_passthrough(spec: ServiceIntentSpec, ingresses: list[StoredObject]) -> list[FieldError]:
    """The same rule from the other side: a port declared HTTP that an IngressIntent passes TLS to."""
    errors = []
    for other in ingresses:
        try:
            ingress = IngressIntentSpec.model_validate(other.spec)
        except ValidationError:
            continue  # it no longer validates, so it is not rendered either (manifests.py)
        _, targets = _tls_passed_to(ingress)
        if any((t.service, t.port) == (spec.service.name, spec.service.port) for t in targets):
            target = (spec.service.name, spec.service.port)
            message = _tls_into_http(f"IngressIntent {other.name}", target, "this ServiceIntent", spec.service.protocol)
            errors.append(FieldError(path="spec.service.protocol", message=message))
    return errors


def _unknown_cloud(path: str, name: str) -> FieldError:
    return FieldError(path=path, message=f"logical cloud {name!r} does not exist in this project")


async def _check_claims(store: Store, resource: Resource) -> int | None:
    """A user-facing host belongs to one IngressIntent, and a service port of a logical cloud to one
    ServiceIntent: two claimants would render conflicting Istio objects."""
    me = (resource.metadata.project, resource.metadata.name)
    spec = resource.spec
    if isinstance(spec, IngressIntentSpec):
        ingresses, revision = await store.list("IngressIntent")
        for other in ingresses:
            if (other.project, other.name) == me:
                continue
            taken = set(spec.hosts) & set(other.spec.get("hosts", []))
            if taken:
                raise Problem(
                    409, f"host {sorted(taken)[0]} is already claimed by IngressIntent {other.project}/{other.name}"
                )
        return revision
    if isinstance(spec, ServiceIntentSpec):
        mine = _claimed_port(spec)
        services, revision = await store.list("ServiceIntent", resource.metadata.project)
        for other in services:
            if (other.project, other.name) == me:
                continue
            if _stored_claim(other) == mine:
                owner = f"ServiceIntent {other.project}/{other.name}"
                raise Problem(409, f"service {mine[1]} port {mine[2]} is already claimed by {owner}")
        return revision
    return None
