"""ServiceIntent → the Istio objects one cluster needs: pure, deterministic, no I/O.

The mesh is Istio multi-primary on several networks without remote secrets: each cluster's istiod
knows only its own Services, and a cluster reaches another cluster's replicas through that cluster's
east-west gateway, which passes Istio mTLS through by SNI (AUTO_PASSTHROUGH on 15443).

What a cluster gets for one intent:

- a **server cluster** (the placement puts replicas there), in the server's namespace:
  PeerAuthentication (the mTLS mode; one per app's pods, shared with port-level modes when several
  intents select them), AuthorizationPolicy `-allow` (always: with no allowed client
  it admits nobody) and `-deny` (when there are DENY rules; Istio evaluates DENY first),
  DestinationRule (ISTIO_MUTUAL, load balancing, circuit breaking, locality failover), VirtualService
  (timeout / retries, HTTP protocols only, when given), and the namespace's east-west Gateway when a
  client runs in a cluster without replicas. Clients there call the local Service; its local
  endpoints are the only ones this cluster's istiod knows, so failover stays within the cluster.
- a **client-only cluster** (a client runs there, no replica), in each client namespace and exported
  to that namespace only: per server namespace, a ServiceEntry for the server's host with a VIP and
  one endpoint per server cluster's east-west gateway (server clusters without one are unreachable
  and skipped; a host with no reachable cluster is not rendered at all), a DestinationRule
  (ISTIO_MUTUAL: the SNI the east-west gateway routes on) and the VirtualService. Clients resolve
  the host through Istio's DNS proxy (`ISTIO_META_DNS_CAPTURE`), which answers with the VIP. With
  mTLS DISABLE nothing crosses clusters: the gateway only passes Istio mTLS through.
- every cluster where a client service runs: a Sidecar for it, scoping its egress to the hosts of
  this intent (plus `./*` and `istio-system/*`); `merge_sidecars` folds the Sidecars that several
  intents render for one workload into the single one Istio honours.

A **headless** Service's callers connect to the pod address they resolved (Istio's ORIGINAL_DST):
its DestinationRule has no load balancer, and the model refuses one. A server **without a sidecar**
gets only the DestinationRule (plaintext, or SIMPLE TLS to the TLS it terminates) and the
VirtualService, both applied by the callers' sidecars: no PeerAuthentication, AuthorizationPolicy
or RequestAuthentication, since nothing on its pods would enforce them (the model refuses access
rules and issuers for it), and nothing crosses clusters (its mtls is DISABLE).

Paths in the policies hold only because istiod normalizes request paths first: the mesh must run
with `REQUIRED_PATH_NORMALIZATION` (meshplane.model.intents), and the model refuses paths that no
normalized request has.

User-facing routes (an IngressIntent of the project routing to the service's name and port) make the
ingress gateway a caller: the ALLOW policy admits its identity (`INGRESS_GATEWAY_SERVICE_ACCOUNT`
in `istio-system`) on the routed paths, the server's DestinationRule is exported to `istio-system`
too, and where the ingress applies in a cluster without replicas, that cluster gets the
ServiceEntry and DestinationRule in the ingress's namespace, exported to `istio-system` (and to `.`
when clients run there): a gateway sees only what is exported to its own namespace.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from meshplane.model.durations import duration_seconds
from meshplane.model.intents import (
    Action,
    IngressIntentSpec,
    IntentClient,
    MtlsMode,
    RouteMatch,
    ServerTlsMode,
    ServiceIntentSpec,
    TlsMode,
    TrafficPolicy,
)
from meshplane.model.meta import Placement
from meshplane.model.resource import Resource
from meshplane.server.render.authn import request_authentication
from meshplane.server.render.egress import GATEWAY_NAMESPACE
from meshplane.server.render.fleet import (
    GROUP_LABEL,
    OWNER_NAME,
    ClusterInfo,
    Fleet,
    cloud_members,
    owner_labels,
    placement_targets,
)
from meshplane.server.render.names import (
    CLUSTER_DOMAIN,
    EAST_WEST_GATEWAY,
    EAST_WEST_PORT,
    EAST_WEST_SELECTOR,
    HostKey,
    allocate_vips,
    object_name,
    principal,
    service_host,
    sidecar_hosts,
    sidecar_name,
)

NETWORKING = "networking.istio.io/v1"
SECURITY = "security.istio.io/v1"

INGRESS_GATEWAY_SERVICE_ACCOUNT = "istio-ingressgateway-service-account"
"""The identity of the stock ingress gateway (in `istio-system`): the caller of user-facing routes.
Ingress gateways of several entities must run as it too for their routes to be admitted."""

ENDPOINT_CLUSTER_LABEL = f"{GROUP_LABEL}/cluster"
"""On a ServiceEntry endpoint: the cluster whose east-west gateway it is."""
OWNERS_ANNOTATION = f"{GROUP_LABEL}/intents"
"""On a merged Sidecar: every intent that asked for it."""

_REGION_LABELS = ("topology.kubernetes.io/region", "region")
_ZONE_LABELS = ("topology.kubernetes.io/zone", "zone")

# Istio fails over by locality only when outlier detection can eject the failing endpoints.
_FAILOVER_OUTLIER_DEFAULTS = {"consecutive5xxErrors": 5, "interval": "10s", "baseEjectionTime": "30s"}


@dataclass(frozen=True)
class _PlacedClient:
    """A client of the intent and where it runs: cluster -> namespace (empty for CIDR-only clients)."""

    client: IntentClient
    clusters: Mapping[str, str]


@dataclass(frozen=True)
class _IngressRoutes:
    """An IngressIntent routing to this service, where it applies: cluster -> namespace, and the
    paths routed here (None: the whole service, when a TLS passthrough or non-HTTP hides them)."""

    clusters: Mapping[str, str]
    paths: tuple[str, ...] | None


@dataclass(frozen=True)
class _RemoteHost:
    """The server's host in one namespace, as a cluster without replicas reaches it."""

    namespace: str
    host: str
    vip: str
    gateways: tuple[tuple[str, ClusterInfo], ...]
    """(cluster, info) of every server cluster in that namespace with an east-west gateway."""


def render_service_intent(intent: Resource, fleet: Fleet, cluster: str) -> list[dict]:
    """The Istio objects `cluster` needs for `intent`, sorted by (kind, namespace, name).

    Shared objects (the east-west Gateway) carry the project's labels but no intent's: several
    intents render them identically, and they stay while any intent still renders them.
    """
    spec: ServiceIntentSpec = intent.spec
    project = intent.metadata.project or ""
    servers = placement_targets(fleet, project, spec.placement)
    clients = _place_clients(fleet, project, spec)
    ingress = _ingress_routes(intent, fleet)
    callers = {c for placed in clients for c in placed.clusters} | {c for i in ingress for c in i.clusters}
    remote_only = callers - servers.keys()

    objects: list[dict] = []
    if cluster in servers:
        namespace = servers[cluster]
        local_host = service_host(spec.service.name, namespace)
        objects += _server_objects(intent, fleet, clients, ingress, cluster, namespace, bool(remote_only))
        reachable = {ns: [f"{namespace}/{local_host}"] for ns in _client_namespaces(clients, cluster)}
    elif cluster in remote_only and spec.mtls is not MtlsMode.DISABLE:
        hosts = _remote_hosts(intent, fleet, servers)
        client_namespaces = _client_namespaces(clients, cluster)
        gateway_namespaces = {i.clusters[cluster] for i in ingress if cluster in i.clusters}
        several = len(set(servers.values())) > 1
        for remote in hosts:
            objects += _remote_host_objects(intent, remote, client_namespaces, gateway_namespaces, several)
        reachable = {ns: [f"{ns}/{remote.host}" for remote in hosts] for ns in client_namespaces}
    else:
        reachable = {}
    objects += _sidecars(intent, clients, cluster, reachable)
    # A deep copy: no two objects (or places in one) share a list or dict a caller might mutate,
    # and YAML dumps carry no anchors.
    return json.loads(json.dumps(sorted(objects, key=_sort_key)))


def merge_sidecars(objects: Iterable[dict]) -> list[dict]:
    """Fold Sidecars of one workload (same namespace and name) rendered by several intents into one.

    Egress hosts are united; labels keep what all of them share, and `meshplane.io/intents` lists
    the intents. Other objects pass through. The result is sorted like a render's.
    """
    merged: dict[tuple[str, str], dict] = {}
    owners: dict[tuple[str, str], set[str]] = {}
    rest: list[dict] = []
    for obj in objects:
        if obj.get("kind") != "Sidecar":
            rest.append(obj)
            continue
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        labels = obj["metadata"].get("labels", {})
        owned = set(obj["metadata"].get("annotations", {}).get(OWNERS_ANNOTATION, "").split(",")) - {""}
        if OWNER_NAME in labels:
            owned.add(labels[OWNER_NAME])
        owners.setdefault(key, set()).update(owned)
        if key not in merged:
            merged[key] = json.loads(json.dumps(obj))
            continue
        into = merged[key]
        kept = into["metadata"].get("labels", {})
        into["metadata"]["labels"] = {k: v for k, v in kept.items() if labels.get(k) == v}
        hosts = set(into["spec"]["egress"][0]["hosts"]) | set(obj["spec"]["egress"][0]["hosts"])
        into["spec"]["egress"][0]["hosts"] = sidecar_hosts(key[0], hosts)
    for key, obj in merged.items():
        if len(owners[key]) > 1:
            obj["metadata"]["labels"].pop(OWNER_NAME, None)
            obj["metadata"]["annotations"] = {OWNERS_ANNOTATION: ",".join(sorted(owners[key]))}
    return sorted([*rest, *merged.values()], key=_sort_key)


# --- where things run ---------------------------------------------------------------------------


def _place_clients(fleet: Fleet, project: str, spec: ServiceIntentSpec) -> list[_PlacedClient]:
    """Every client with the clusters it runs in: every cluster of its logical cloud."""
    placed = []
    for client in spec.clients:
        clusters: dict[str, str] = {}
        if client.service is not None:
            cloud = client.service.logical_cloud or spec.placement.logical_cloud
            if cloud is not None:
                clusters = cloud_members(fleet, project, cloud)
            else:
                clusters = placement_targets(fleet, project, Placement())
            if client.service.namespace is not None:
                clusters = dict.fromkeys(clusters, client.service.namespace)
        placed.append(_PlacedClient(client, clusters))
    return placed


def _client_namespaces(clients: list[_PlacedClient], cluster: str) -> list[str]:
    return sorted({p.clusters[cluster] for p in clients if cluster in p.clusters})


def _host_key(project: str, spec: ServiceIntentSpec, namespace: str) -> HostKey:
    return HostKey(project, spec.placement.logical_cloud or "", namespace, spec.service.name)


def _fleet_vips(fleet: Fleet, intent: Resource) -> dict[HostKey, str]:
    """VIPs of every service host in the fleet, so no two hosts anywhere share one.

    The intent being rendered replaces any stored version of itself.
    """
    intents = {(i.metadata.project, i.metadata.name): i for i in fleet.service_intents}
    intents[(intent.metadata.project, intent.metadata.name)] = intent
    keys = set()
    for other in intents.values():
        project = other.metadata.project or ""
        for namespace in placement_targets(fleet, project, other.spec.placement).values():
            keys.add(_host_key(project, other.spec, namespace))
    return allocate_vips(keys)


def _remote_hosts(intent: Resource, fleet: Fleet, servers: Mapping[str, str]) -> list[_RemoteHost]:
    """The server's hosts (one per server namespace) reachable through at least one east-west gateway."""
    spec: ServiceIntentSpec = intent.spec
    project = intent.metadata.project or ""
    vips = _fleet_vips(fleet, intent)
    out = []
    for namespace in sorted(set(servers.values())):
        gateways = tuple(
            (name, fleet.clusters[name])
            for name in sorted(servers)
            if servers[name] == namespace and fleet.clusters[name].east_west is not None
        )
        if gateways:
            key = _host_key(project, spec, namespace)
            out.append(_RemoteHost(namespace, service_host(spec.service.name, namespace), vips[key], gateways))
    return out


def _ingress_routes(intent: Resource, fleet: Fleet) -> list[_IngressRoutes]:
    """The project's IngressIntents with a route to this service's name and port."""
    spec: ServiceIntentSpec = intent.spec
    project = intent.metadata.project or ""
    out = []
    for ingress in fleet.ingress_intents:
        if (ingress.metadata.project or "") != project:
            continue
        ingress_spec: IngressIntentSpec = ingress.spec
        routed = [
            route.match
            for route in ingress_spec.routes
            if any(t.service == spec.service.name and t.port == spec.service.port for t in route.targets)
        ]
        if not routed:
            continue
        passthrough = any(e.tls is not None and e.tls.mode is TlsMode.PASSTHROUGH for e in ingress_spec.entities)
        paths = None if passthrough or not spec.service.protocol.is_http else tuple(map(_policy_path, routed))
        out.append(_IngressRoutes(placement_targets(fleet, project, ingress_spec.placement), paths))
    return out


def _policy_path(match: RouteMatch) -> str:
    """A route's match as an authorization path: a VirtualService prefix is a plain string prefix,
    as is a trailing `*` in a policy path."""
    return match.exact if match.exact is not None else f"{match.prefix}*"


# --- server side --------------------------------------------------------------------------------


def _server_objects(
    intent: Resource,
    fleet: Fleet,
    clients: list[_PlacedClient],
    ingress: list[_IngressRoutes],
    cluster: str,
    namespace: str,
    remote_callers: bool,
) -> list[dict]:
    spec: ServiceIntentSpec = intent.spec
    name = intent.metadata.name
    labels = owner_labels(intent)
    host = service_host(spec.service.name, namespace)
    selector = {"matchLabels": {"app": _app(spec)}}
    export_to = sorted({namespace, *_client_namespaces(clients, cluster)})
    # The local ingress gateway follows the traffic policy too; timeouts and retries it has its own.
    gateway_here = any(i.clusters.get(cluster) == namespace for i in ingress)
    rule_export_to = sorted({*export_to, GATEWAY_NAMESPACE}) if gateway_here else export_to
    routing = [
        _destination_rule(intent, object_name(name, "dr"), namespace, host, rule_export_to),
        *_virtual_services(intent, object_name(name, "vs"), namespace, host, export_to),
    ]
    if not spec.service.sidecar:
        # Nothing on the server's pods would enforce a policy or take mTLS: the model refuses
        # what only a sidecar could keep, and nothing crosses clusters (mtls is DISABLE).
        return routing
    out = [_peer_authentication(intent, fleet, cluster, namespace)]
    reaching = [i for i in ingress if namespace in i.clusters.values()]
    rules = _authorization_rules(spec, clients, reaching, fleet.trust_domain)
    allow_spec: dict = {"selector": selector, "action": "ALLOW"}
    if rules[Action.ALLOW]:
        allow_spec["rules"] = rules[Action.ALLOW]
    out.append(_object(SECURITY, "AuthorizationPolicy", object_name(name, "allow"), namespace, labels, allow_spec))
    if rules[Action.DENY]:
        deny_spec = {"selector": selector, "action": "DENY", "rules": rules[Action.DENY]}
        out.append(_object(SECURITY, "AuthorizationPolicy", object_name(name, "deny"), namespace, labels, deny_spec))
    out += request_authentication(
        intent, spec.authentication, object_name(name, "jwt"), namespace, selector["matchLabels"]
    )
    out += routing
    east_west = fleet.clusters[cluster].east_west
    if remote_callers and east_west is not None and spec.mtls is not MtlsMode.DISABLE:
        out.append(_east_west_gateway(intent, namespace))
    return out


_STRICTNESS = (MtlsMode.DISABLE, MtlsMode.PERMISSIVE, MtlsMode.STRICT)


def _peer_authentication(intent: Resource, fleet: Fleet, cluster: str, namespace: str) -> dict:
    """The PeerAuthentication of the server's pods, shared by every intent of the project that selects them.

    Istio honours one workload-level PeerAuthentication per workload (the oldest), so intents of one app
    (several Services over the same pods) cannot each have theirs: the intent sorting first names the
    one they share, each intent's mode holds on its pods' port and the strictest on the pods' other
    ports. Every sharing intent renders it identically, with the project's labels but no intent's.
    """
    project = intent.metadata.project or ""
    app = _app(intent.spec)
    sharing = sorted(
        (
            other
            for other in fleet.service_intents
            if (other.metadata.project or "") == project
            and other.spec.service.sidecar
            and _app(other.spec) == app
            and placement_targets(fleet, project, other.spec.placement).get(cluster) == namespace
        ),
        key=lambda other: other.metadata.name,
    )
    selector = {"matchLabels": {"app": app}}
    if len(sharing) <= 1:
        spec: dict = {"selector": selector, "mtls": {"mode": intent.spec.mtls.value}}
        return _object(
            SECURITY,
            "PeerAuthentication",
            object_name(intent.metadata.name, "peer"),
            namespace,
            owner_labels(intent),
            spec,
        )
    by_port: dict[str, MtlsMode] = {}
    for other in sharing:
        port = str(other.spec.service.target_port or other.spec.service.port)
        by_port[port] = max(by_port.get(port, MtlsMode.DISABLE), other.spec.mtls, key=_STRICTNESS.index)
    spec = {
        "selector": selector,
        "mtls": {"mode": max(by_port.values(), key=_STRICTNESS.index).value},
        "portLevelMtls": {
            port: {"mode": mode.value} for port, mode in sorted(by_port.items(), key=lambda kv: int(kv[0]))
        },
    }
    labels = {k: v for k, v in owner_labels(intent).items() if k != OWNER_NAME}
    return _object(
        SECURITY, "PeerAuthentication", object_name(sharing[0].metadata.name, "peer"), namespace, labels, spec
    )


def _app(spec: ServiceIntentSpec) -> str:
    """The `app` label of the server's pods."""
    return spec.service.app or spec.service.name


def _authorization_rules(
    spec: ServiceIntentSpec, clients: list[_PlacedClient], ingress: list[_IngressRoutes], trust_domain: str
) -> dict[Action, list[dict]]:
    """ALLOW and DENY rules from the clients' access rules, deduplicated and in a canonical order.

    A client with no identity to match (its logical cloud has no cluster) gets no rule: a rule
    without sources would match every caller. User-facing routes (`ingress`) admit the ingress
    gateway's identity on their paths; the same identity whichever cluster's gateway forwards.
    """
    rules: dict[Action, dict[str, dict]] = {Action.ALLOW: {}, Action.DENY: {}}
    # Every rule on the pods' port of this service: Istio drops HTTP-only conditions from a DENY rule
    # on the pods' TCP ports, which would refuse the client every other port; and an ALLOW for this
    # service grants nothing on the pods' other ports.
    ports = [str(spec.service.target_port or spec.service.port)]
    gateway = {"source": {"principals": [principal(trust_domain, GATEWAY_NAMESPACE, INGRESS_GATEWAY_SERVICE_ACCOUNT)]}}
    for routes in ingress:
        operation: dict = {"ports": ports}
        if routes.paths is not None:
            operation["paths"] = sorted(set(routes.paths))
        rule: dict = {"from": [gateway], "to": [{"operation": operation}]}
        rules[Action.ALLOW][_canonical(rule)] = rule
    for placed in clients:
        sources = _sources(placed, trust_domain)
        if not sources:
            continue
        for access in placed.client.access:
            operation = {"ports": ports}
            rule = {"from": sources, "to": [{"operation": operation}]}
            if spec.service.protocol.is_http:
                if access.methods:
                    operation["methods"] = sorted({m.value for m in access.methods})
                if access.paths:
                    operation["paths"] = sorted(set(access.paths))
                when = [
                    {"key": f"request.headers[{header.lower()}]", "values": [value]}
                    for header, value in sorted(access.headers.items(), key=lambda kv: kv[0].lower())
                ]
                when += [
                    {"key": f"request.auth.claims[{claim}]", "values": [value]}
                    for claim, value in sorted(access.jwt_claims.items())
                ]
                if when:
                    rule["when"] = when
            rules[access.action][_canonical(rule)] = rule
    return {action: [by_key[k] for k in sorted(by_key)] for action, by_key in rules.items()}


def _sources(placed: _PlacedClient, trust_domain: str) -> list[dict]:
    """Who the client is: its principal in every namespace it runs in, and / or its CIDRs (either matches).

    CIDRs are `ipBlocks` (the direct peer) of plaintext callers: see `IntentClient` for why neither
    `remoteIpBlocks` nor any mesh caller.
    """
    sources = []
    service = placed.client.service
    if service is not None and placed.clusters:
        account = service.service_account or service.name
        principals = sorted({principal(trust_domain, ns, account) for ns in placed.clusters.values()})
        sources.append({"source": {"principals": principals}})
    if placed.client.cidrs:
        # Plaintext peers only: a mesh caller's direct peer may be the east-west gateway, whose
        # address a range can contain, and it is matched by its principal instead.
        sources.append({"source": {"ipBlocks": sorted(set(placed.client.cidrs)), "notPrincipals": ["*"]}})
    return sources


def _east_west_gateway(intent: Resource, namespace: str) -> dict:
    """The namespace's services, opened to other clusters through the east-west gateway.

    Hosts are narrowed to the namespace, so a tenant's Gateway never exposes another's services, and
    the object is identical for every intent that serves from this namespace.
    """
    labels = {k: v for k, v in owner_labels(intent).items() if k != OWNER_NAME}
    spec = {
        "selector": dict(EAST_WEST_SELECTOR),
        "servers": [
            {
                "port": {"number": EAST_WEST_PORT, "name": "tls", "protocol": "TLS"},
                "tls": {"mode": "AUTO_PASSTHROUGH"},
                "hosts": [f"*.{namespace}.svc.{CLUSTER_DOMAIN}"],
            }
        ],
    }
    return _object(NETWORKING, "Gateway", EAST_WEST_GATEWAY, namespace, labels, spec)


# --- client side --------------------------------------------------------------------------------


def _remote_host_objects(
    intent: Resource, remote: _RemoteHost, client_namespaces: list[str], gateway_namespaces: set[str], several: bool
) -> list[dict]:
    """The remote host's objects in each client namespace (for `.`) and, where an ingress routes to
    it, in the namespace it is served from (for the ingress gateway, in `istio-system`)."""
    objects = []
    for namespace in sorted({*client_namespaces, *(gateway_namespaces & {remote.namespace})}):
        export_to = ["."] if namespace in client_namespaces else []
        if namespace == remote.namespace and namespace in gateway_namespaces:
            export_to.append(GATEWAY_NAMESPACE)
        objects += _client_objects(intent, remote, namespace, several, export_to)
    return objects


def _client_objects(
    intent: Resource, remote: _RemoteHost, namespace: str, several: bool, export_to: list[str]
) -> list[dict]:
    """The remote host's objects in `namespace`, exported to `.` for clients there and / or to the
    ingress gateway's namespace for user-facing routes; the VirtualService (timeout, retries of
    calling sidecars) only to clients, since a gateway follows its own."""
    name = intent.metadata.name
    qualifier = remote.namespace if several else None
    objects = [
        _service_entry(intent, object_name(name, "se", qualifier), namespace, remote, export_to),
        _destination_rule(intent, object_name(name, "dr", qualifier), namespace, remote.host, export_to),
    ]
    if "." in export_to:
        objects += _virtual_services(intent, object_name(name, "vs", qualifier), namespace, remote.host, ["."])
    return objects


def _service_entry(intent: Resource, name: str, namespace: str, remote: _RemoteHost, export_to: list[str]) -> dict:
    spec: ServiceIntentSpec = intent.spec
    port_name = _port_name(spec)
    endpoints = []
    all_ips = True
    for cluster, info in remote.gateways:
        assert info.east_west is not None
        all_ips = all_ips and _is_ip(info.east_west.address)
        endpoint: dict = {"address": info.east_west.address, "labels": {ENDPOINT_CLUSTER_LABEL: cluster}}
        locality = _locality(info)
        if locality is not None:
            endpoint["locality"] = locality
        # No `network`: the address already is the remote network's gateway, and an endpoint on a
        # network istiod has no gateway for would be dropped.
        endpoint["ports"] = {port_name: info.east_west.port}
        endpoints.append(endpoint)
    entry = {
        "hosts": [remote.host],
        "addresses": [remote.vip],
        "exportTo": export_to,
        "location": "MESH_INTERNAL",
        "ports": [{"number": spec.service.port, "name": port_name, "protocol": spec.service.protocol.value}],
        "resolution": "STATIC" if all_ips else "DNS",
        "endpoints": endpoints,
    }
    return _object(NETWORKING, "ServiceEntry", name, namespace, owner_labels(intent), entry)


def _sidecars(
    intent: Resource, clients: list[_PlacedClient], cluster: str, reachable: Mapping[str, list[str]]
) -> list[dict]:
    """One Sidecar per client workload running in `cluster`, scoped to the hosts it may call."""
    hosts_by_workload: dict[tuple[str, str], set[str]] = {}
    for placed in clients:
        service = placed.client.service
        if service is None or cluster not in placed.clusters:
            continue
        namespace = placed.clusters[cluster]
        if reachable.get(namespace):
            hosts_by_workload.setdefault((namespace, service.name), set()).update(reachable[namespace])
    out = []
    for (namespace, workload), hosts in sorted(hosts_by_workload.items()):
        spec = {
            "workloadSelector": {"labels": {"app": workload}},
            "egress": [{"hosts": sidecar_hosts(namespace, hosts)}],
        }
        out.append(_object(NETWORKING, "Sidecar", sidecar_name(workload), namespace, owner_labels(intent), spec))
    return out


# --- traffic policy -----------------------------------------------------------------------------


def _destination_rule(intent: Resource, name: str, namespace: str, host: str, export_to: list[str]) -> dict:
    spec = {"host": host, "exportTo": export_to, "trafficPolicy": _traffic_policy(intent.spec, namespace)}
    return _object(NETWORKING, "DestinationRule", name, namespace, owner_labels(intent), spec)


def _traffic_policy(spec: ServiceIntentSpec, namespace: str) -> dict:
    wanted = spec.traffic_policy
    policy: dict = {"tls": _client_tls(spec, namespace)}
    if not spec.service.headless:
        # Callers of a headless Service connect to the pod address they resolved (ORIGINAL_DST).
        balancer = _balancer(wanted)
        if wanted.locality_failover:
            balancer["localityLbSetting"] = {"enabled": True}
        policy["loadBalancer"] = balancer
    breaker = wanted.circuit_breaker
    pool: dict = {}
    outlier: dict = {}
    if breaker is not None:
        if breaker.max_connections is not None:
            pool["tcp"] = {"maxConnections": breaker.max_connections}
        http = {
            key: value
            for key, value in (
                ("http1MaxPendingRequests", breaker.max_pending_requests),
                ("http2MaxRequests", breaker.http2_max_requests),
                ("maxRequestsPerConnection", breaker.max_requests_per_connection),
            )
            if value is not None
        }
        if http:
            pool["http"] = http
        if breaker.consecutive_errors is not None:
            outlier["consecutive5xxErrors"] = breaker.consecutive_errors
        if breaker.interval is not None:
            outlier["interval"] = _istio_duration(breaker.interval)
        if breaker.base_ejection_time is not None:
            outlier["baseEjectionTime"] = _istio_duration(breaker.base_ejection_time)
    if wanted.locality_failover:
        outlier = {**_FAILOVER_OUTLIER_DEFAULTS, **outlier}
    if pool:
        policy["connectionPool"] = pool
    if outlier:
        policy["outlierDetection"] = outlier
    return policy


def _client_tls(spec: ServiceIntentSpec, namespace: str) -> dict:
    """Istio mTLS to a sidecar; to a server without one, plaintext or the TLS it terminates."""
    if spec.service.sidecar:
        return {"mode": "DISABLE" if spec.mtls is MtlsMode.DISABLE else "ISTIO_MUTUAL"}
    wanted = spec.service.tls
    if wanted is None or wanted.mode is ServerTlsMode.DISABLE:
        return {"mode": "DISABLE"}
    tls: dict = {"mode": "SIMPLE"}
    if wanted.ca_config_map is not None:
        # istiod hands a ConfigMap of the DestinationRule's own namespace to any sidecar.
        tls["credentialName"] = f"configmap://{namespace}/{wanted.ca_config_map}"
    if wanted.sni is not None:
        tls["sni"] = wanted.sni
    if wanted.subject_alt_names:
        tls["subjectAltNames"] = sorted(set(wanted.subject_alt_names))
    return tls


def _balancer(wanted: TrafficPolicy) -> dict:
    hashing = wanted.consistent_hash
    if hashing is None:
        return {"simple": wanted.load_balancer.value}
    if hashing.http_cookie is not None:
        cookie: dict = {"name": hashing.http_cookie.name}
        if hashing.http_cookie.path is not None:
            cookie["path"] = hashing.http_cookie.path
        if hashing.http_cookie.ttl is not None:
            cookie["ttl"] = _istio_duration(hashing.http_cookie.ttl)
        return {"consistentHash": {"httpCookie": cookie}}
    if hashing.http_header_name is not None:
        return {"consistentHash": {"httpHeaderName": hashing.http_header_name}}
    return {"consistentHash": {"useSourceIp": True}}


def _virtual_services(intent: Resource, name: str, namespace: str, host: str, export_to: list[str]) -> list[dict]:
    """Timeout and retries, applied by the calling sidecars: HTTP protocols only, and only when asked for."""
    spec: ServiceIntentSpec = intent.spec
    wanted = spec.traffic_policy
    if not spec.service.protocol.is_http or (wanted.timeout is None and wanted.retries is None):
        return []
    route: dict = {"route": [{"destination": {"host": host, "port": {"number": spec.service.port}}}]}
    if wanted.timeout is not None:
        route["timeout"] = _istio_duration(wanted.timeout)
    if wanted.retries is not None:
        retries: dict = {"attempts": wanted.retries.attempts}
        if wanted.retries.per_try_timeout is not None:
            retries["perTryTimeout"] = _istio_duration(wanted.retries.per_try_timeout)
        route["retries"] = retries
    vs = {"hosts": [host], "exportTo": export_to, "http": [route]}
    return [_object(NETWORKING, "VirtualService", name, namespace, owner_labels(intent), vs)]


# --- small pieces -------------------------------------------------------------------------------


def _object(api_version: str, kind: str, name: str, namespace: str, labels: Mapping[str, str], spec: dict) -> dict:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": spec,
    }


def _sort_key(obj: dict) -> tuple[str, str, str]:
    meta = obj.get("metadata", {})
    return (obj.get("kind", ""), meta.get("namespace", ""), meta.get("name", ""))


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _port_name(spec: ServiceIntentSpec) -> str:
    return f"{spec.service.protocol.value.lower()}-{spec.service.port}"


def _is_ip(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


def _locality(info: ClusterInfo) -> str | None:
    """`region[/zone]` from the cluster's labels (Kubernetes topology labels or plain region / zone)."""
    region = next((info.labels[k] for k in _REGION_LABELS if info.labels.get(k)), None)
    zone = next((info.labels[k] for k in _ZONE_LABELS if info.labels.get(k)), None)
    if region is None:
        return None
    return f"{region}/{zone}" if zone else region


def _istio_duration(text: str) -> str:
    """A user's duration (`1m30s`, `250ms`) as protobuf JSON wants it: seconds, at most millisecond precision."""
    millis = max(1, round(duration_seconds(text) * 1000))
    seconds, rest = divmod(millis, 1000)
    return f"{seconds}s" if rest == 0 else f"{seconds}.{rest:03d}".rstrip("0") + "s"
