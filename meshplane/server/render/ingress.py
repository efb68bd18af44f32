"""IngressIntent → Istio and external-dns: user-facing hosts on a cluster's ingress gateway.

Per cluster where the intent applies (`placement_targets`):

- in the intent's namespace, a Gateway per entity (`gateway_name`: a DNS label): HTTPS 443 with the
  entity's TLS mode and credential, a TLS 443 server for PASSTHROUGH, HTTP 80 without TLS. The hosts
  are bound as `./<host>`, so only VirtualServices of the intent's namespace can claim them. With
  one entity the Gateway selects the stock ingress gateway (`istio: ingressgateway`); with several,
  each selects its own gateway pods (`meshplane.io/ingress-entity: <entity>` as well), since
  servers for one host and port with different TLS settings cannot share gateway pods.
  `port.number` is the gateway Service's port: istiod binds its targetPort (8443 / 8080 on istioctl's
  istio-ingressgateway, 443 / 80 in the gateway Helm chart, which lowers the unprivileged port
  range), translating through the Services that select the gateway pods (`resolvePorts`,
  pilot/pkg/model/gateway.go); pods no Service selects get the number as it is, which a gateway
  marked unprivileged skips below 1024, so each entity's own pods need a Service like the stock one.
  The access policies match no port, so they hold whichever target port a cluster uses.
  `credentialName` is a Secret of `istio-system` (the gateway's namespace), whatever namespace the
  Gateway object is in: istiod serves a gateway no other namespace's Secrets. Nothing here names a
  Secret of the intent's namespace;
- a VirtualService (`<intent>-ingress`) binding the hosts to those Gateways: HTTP routes, most
  specific match first, to `<service>.<namespace>.svc.cluster.local` with split weights, and for
  PASSTHROUGH entities a TLS route by SNI to the least specific route's targets;
- in `istio-system`, where the ingress gateway runs, a DENY AuthorizationPolicy per entity for the
  access rules (ingress_access.py: why DENY only, and how no rule reaches another intent's hosts or
  a TLS passthrough chain);
- in one cluster only (`dns_writer`: the first serving cluster by name whose ingress addresses are
  known), a DNSEndpoint (external-dns) per DNS server in `spec.dns`, labelled
  `meshplane.io/dns-server`, named `<intent>-dns.<server>`: per host of that server's zones one record
  set whose targets are the ingress addresses (`ClusterSpec.ingressGateway`) of every serving cluster
  (A / AAAA; a CNAME only when none has an IP). Never the east-west gateway: it passes mesh mTLS
  through on 15443 and serves no user. One writer, because external-dns will not merge one name's
  records across owners: each cluster's external-dns runs with its own `--txt-owner-id` and
  `--policy=sync`. When the writer stops serving the intent (or loses its addresses), the next
  cluster by name writes: the old writer's external-dns deletes the records it owns, and the new
  one creates them on its next sync (until then it leaves another owner's records alone).

Request principals and JWT claims are set only from tokens a RequestAuthentication validated on the
ingress gateway: `spec.authentication.jwt` renders it (`<intent>-ingress-jwt.<project>`, authn.py).
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict

from meshplane.model.intents import (
    DEFAULT_RECORD_TTL,
    DnsTarget,
    Entity,
    IngressIntentSpec,
    IngressRoute,
    RouteTarget,
    TlsMode,
)
from meshplane.model.resource import Resource
from meshplane.server.render.authn import request_authentication
from meshplane.server.render.egress import (
    GATEWAY_NAMESPACE,
    NETWORKING,
    gateway_ref,
    k8s_object,
    sort_objects,
)
from meshplane.server.render.fleet import GROUP_LABEL, Fleet, owner_labels, placement_targets
from meshplane.server.render.ingress_access import access_policy
from meshplane.server.render.names import object_name, service_host, shared_object_name

INGRESS_GATEWAY_SELECTOR = {"istio": "ingressgateway"}
ENTITY_LABEL = f"{GROUP_LABEL}/ingress-entity"
DNS_SERVER_LABEL = f"{GROUP_LABEL}/dns-server"
"""external-dns of each DNS server runs with `--label-filter=meshplane.io/dns-server=<server>`."""
DNS_API_VERSION = "externaldns.k8s.io/v1alpha1"


def _entities(spec: IngressIntentSpec) -> list[Entity]:
    return sorted({e.name: e for e in spec.entities}.values(), key=lambda e: e.name)


def gateway_name(intent: Resource, entity: Entity) -> str:
    """istiod refuses a Gateway whose name is not a DNS label (and a VirtualService naming one). The
    intent's namespace may be shared by several projects' intents, so the name is `shared_object_name`'s."""
    return shared_object_name(intent.metadata.project or "", intent.metadata.name, f"{entity.name}-gateway")


def _selector(entity: Entity, several: bool) -> dict[str, str]:
    """The entity's gateway pods: with several entities, pods of its own (see the module's docstring)."""
    return {**INGRESS_GATEWAY_SELECTOR, ENTITY_LABEL: entity.name} if several else dict(INGRESS_GATEWAY_SELECTOR)


def _gateway(intent: Resource, entity: Entity, hosts: list[str], several: bool, namespace: str) -> dict:
    bound = [f"./{h}" for h in hosts]
    tls = entity.tls
    if tls is None:
        server: dict = {"port": {"number": 80, "name": "http", "protocol": "HTTP"}, "hosts": bound}
    elif tls.mode is TlsMode.PASSTHROUGH:
        server = {
            "port": {"number": 443, "name": "tls", "protocol": "TLS"},
            "hosts": bound,
            "tls": {"mode": "PASSTHROUGH"},
        }
    else:
        server = {
            "port": {"number": 443, "name": "https", "protocol": "HTTPS"},
            "hosts": bound,
            "tls": {"mode": tls.mode.value, "credentialName": tls.credential_name},
        }
    return k8s_object(
        NETWORKING,
        "Gateway",
        gateway_name(intent, entity),
        namespace,
        owner_labels(intent),
        {"selector": _selector(entity, several), "servers": [server]},
    )


def _specificity(route: IngressRoute) -> tuple:
    """Istio takes the first matching route: exact paths first, then longer prefixes."""
    match = route.match
    path = match.exact if match.exact is not None else match.prefix or ""
    return (match.exact is None, -len(path), path, [(t.service, t.port, t.weight) for t in route.targets])


def passthrough_route(spec: IngressIntentSpec) -> IngressRoute:
    """The route a PASSTHROUGH entity's connections take: SNI is all the gateway sees, so the catch-all
    (least specific) route decides, and its targets receive the client's TLS as it is."""
    return sorted(spec.routes, key=_specificity)[-1]


def _destinations(targets: list[RouteTarget], namespace: str, weighted: bool) -> list[dict]:
    out = []
    for target in targets:
        destination: dict = {
            "destination": {"host": service_host(target.service, namespace), "port": {"number": target.port}}
        }
        if weighted:
            destination["weight"] = target.weight
        out.append(destination)
    return out


def _virtual_service(intent: Resource, spec: IngressIntentSpec, gateways: dict[str, Entity], namespace: str) -> dict:
    """`gateways`: the entities by their Gateway's `<namespace>/<name>`."""
    hosts = sorted(set(spec.hosts))
    routes = sorted(spec.routes, key=_specificity)
    http = []
    for route in routes:
        uri = {"exact": route.match.exact} if route.match.exact is not None else {"prefix": route.match.prefix}
        http.append({"match": [{"uri": uri}], "route": _destinations(route.targets, namespace, bool(route.split))})
    body: dict = {"hosts": hosts, "gateways": sorted(gateways), "http": http}
    passthrough = sorted(n for n, e in gateways.items() if e.tls is not None and e.tls.mode is TlsMode.PASSTHROUGH)
    if passthrough:
        fallback = passthrough_route(spec)
        body["tls"] = [
            {
                "match": [{"gateways": passthrough, "port": 443, "sniHosts": hosts}],
                "route": _destinations(fallback.targets, namespace, bool(fallback.split)),
            }
        ]
    return k8s_object(
        NETWORKING,
        "VirtualService",
        object_name(intent.metadata.name, "ingress"),
        namespace,
        owner_labels(intent),
        body,
    )


def _in_zone(host: str, zone: str) -> bool:
    zone = zone.rstrip(".")
    bare = host.removeprefix("*.")
    return bare == zone or host.endswith(f".{zone}")


def is_zone_apex(host: str, zone: str) -> bool:
    """Where the zone's SOA and NS records are: no CNAME may be there (bind9 drops one without an error)."""
    return host == zone.rstrip(".")


def only_hostnames(addresses: set[str]) -> bool:
    """Whether records of these addresses are a CNAME: there are some, and none is an IP address."""
    return bool(addresses) and not any(_is_ip(a) for a in addresses)


def _record_sets(addresses: set[str]) -> list[tuple[str, list[str]]]:
    """(record type, targets): A and AAAA for the IP addresses; a CNAME only where there is no IP, to
    the first hostname (DNS allows one CNAME per name and nothing beside it)."""
    ips = sorted((ipaddress.ip_address(a) for a in addresses if _is_ip(a)), key=lambda ip: (ip.version, ip))
    if not ips:
        return [("CNAME", [min(addresses)])] if addresses else []
    by_type = {"A": [str(ip) for ip in ips if ip.version == 4], "AAAA": [str(ip) for ip in ips if ip.version == 6]}
    return [(kind, targets) for kind, targets in by_type.items() if targets]


def _is_ip(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


def dns_writer(fleet: Fleet, targets: dict[str, str]) -> str | None:
    """The one cluster that writes an intent's records: the first by name of those serving it whose
    ingress addresses are known (None when there is none)."""
    return min((c for c in targets if fleet.clusters[c].ingress_addresses), default=None)


def _dns_endpoints(intent: Resource, spec: IngressIntentSpec, fleet: Fleet, targets: dict[str, str]) -> list[dict]:
    writer = dns_writer(fleet, targets)
    if writer is None:
        return []
    addresses = {a for c in targets for a in fleet.clusters[c].ingress_addresses}
    zones: dict[str, list[DnsTarget]] = defaultdict(list)
    for target in spec.dns:
        zones[target.server].append(target)
    out = []
    for server in sorted(zones):
        # A host's TTL is its closest zone's (the longest that holds it) on that server.
        ttls: dict[str, int] = {}
        for target in sorted(zones[server], key=lambda t: len(t.zone.rstrip("."))):
            for host in spec.hosts:
                if _in_zone(host, target.zone):
                    ttls[host] = target.ttl or DEFAULT_RECORD_TTL
        if only_hostnames(addresses):  # refused at write time; left out should the addresses change since
            apexes = {h for h in ttls for t in zones[server] if is_zone_apex(h, t.zone)}
            ttls = {h: ttl for h, ttl in ttls.items() if h not in apexes}
        if not ttls:
            continue
        labels = {**owner_labels(intent), DNS_SERVER_LABEL: server}
        endpoints = [
            {"dnsName": n, "recordType": kind, "targets": records, "recordTTL": ttls[n]}
            for n in sorted(ttls)
            for kind, records in _record_sets(addresses)
        ]
        out.append(
            {
                "apiVersion": DNS_API_VERSION,
                "kind": "DNSEndpoint",
                "metadata": {
                    "name": object_name(intent.metadata.name, "dns", server),
                    "namespace": targets[writer],
                    "labels": labels,
                },
                "spec": {"endpoints": endpoints},
            }
        )
    return out


def render_ingress_intent(intent: Resource, fleet: Fleet, cluster: str) -> list[dict]:
    """The objects `cluster` needs for one IngressIntent, sorted by (kind, namespace, name)."""
    spec: IngressIntentSpec = intent.spec
    targets = placement_targets(fleet, intent.metadata.project or "", spec.placement)
    if cluster not in targets:
        return []
    namespace = targets[cluster]
    hosts = sorted(set(spec.hosts))
    entities = _entities(spec)
    objects = [_gateway(intent, e, hosts, len(entities) > 1, namespace) for e in entities]
    gateways = {gateway_ref(namespace, o["metadata"]["name"]): e for o, e in zip(objects, entities, strict=True)}
    objects.append(_virtual_service(intent, spec, gateways, namespace))
    policies = (access_policy(intent, spec, e, _selector(e, len(entities) > 1)) for e in entities)
    objects += [p for p in policies if p is not None]
    if cluster == dns_writer(fleet, targets):
        objects += _dns_endpoints(intent, spec, fleet, targets)
    jwt_name = shared_object_name(intent.metadata.project or "", intent.metadata.name, "ingress-jwt")
    objects += request_authentication(
        intent, spec.authentication, jwt_name, GATEWAY_NAMESPACE, INGRESS_GATEWAY_SELECTOR
    )
    return sort_objects(objects)
