"""EgressIntent → Istio: how a cluster's workloads reach one external application, and which may.

Per cluster where the intent applies (`placement_targets`), in the intent's namespace there:

- a ServiceEntry (MESH_EXTERNAL) for the hosts, or for the addresses under a synthesized host
  `<intent>.<project>.external` (Istio needs a host even when matching is by address);
- route `proxy`: a ServiceEntry for the third-party proxy, at an address of its own (`proxy_address`),
  and a VirtualService sending the hosts' traffic to it (the proxy must forward transparently, by SNI
  or Host header);
- route `egressGateway`: in `istio-system` (see `GATEWAY_NAMESPACE` for why), a Gateway on the
  egress gateway, a DestinationRule with one subset per host, one VirtualService per host (mesh →
  egress gateway over ISTIO_MUTUAL, egress gateway → external host, the application's TLS kept
  end to end unless the mesh originates it), and a DENY AuthorizationPolicy on the egress gateway
  (see `_gateway_policy`);
- ports with `tlsOrigination`: the ServiceEntry port's `targetPort`, and per host a DestinationRule
  opening TLS to it (`_origination_rules`), where the sidecar or the egress gateway reads it;
- in each client's namespace, the client workload's Sidecar (`<client>-sidecar`, `app=<client>`)
  whose egress lists what this intent lets it reach, besides the mesh (`SIDECAR_BASE_HOSTS`);
  Istio honours one Sidecar per workload, so the cluster's render merges those of several intents.

Who may: only the egress gateway enforces `clients`, by workload identity (and only where the
cluster keeps pods from going out around it). `direct` and `proxy` traffic meets no Istio proxy but
the caller's own, so there `clients` only scope the Sidecars and the namespaces the entries are
exported to.

Names: `<intent>-<purpose>` in the intent's namespace; in `istio-system`, which every project
shares, `shared_object_name`'s DNS labels (istiod refuses a Gateway whose name has a dot).
VirtualServices always name their Gateway `<namespace>/<name>`. The model refuses what the gateway
cannot carry: ports its Service lacks (`EGRESS_GATEWAY_PORTS`) and resolution NONE.

Only clients whose logical cloud includes the cluster get anything there; the ServiceEntries and
VirtualServices are exported only to the namespaces that need them.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from dataclasses import dataclass

from meshplane.model.intents import (
    EgressIntentSpec,
    EgressPort,
    EgressProxy,
    EgressVia,
    Resolution,
    ServiceProtocol,
)
from meshplane.model.resource import Resource
from meshplane.server.render.fleet import Fleet, cloud_members, owner_labels, placement_targets
from meshplane.server.render.names import (
    object_name,
    principal,
    service_host,
    shared_object_name,
    sidecar_hosts,
    sidecar_name,
)

NETWORKING = "networking.istio.io/v1"
SECURITY = "security.istio.io/v1"

GATEWAY_NAMESPACE = "istio-system"
"""Where the egress gateway runs, and so where its Gateway, DestinationRule, VirtualServices and
AuthorizationPolicy go: an AuthorizationPolicy's selector only reaches workloads of its own
namespace, and clients of any namespace find a DestinationRule in the destination's namespace."""
EGRESS_GATEWAY_SELECTOR = {"istio": "egressgateway"}
EGRESS_GATEWAY_HOST = service_host("istio-egressgateway", GATEWAY_NAMESPACE)
NAMED_PROXY_ADDRESSES = ipaddress.ip_network("240.241.0.0/16")
"""Where a third-party proxy known by name gets the address its ServiceEntry needs (see `proxy_address`):
reserved space (240/4), so no real host's, and apart from Istio's own allocation range (240.240.0.0/16)."""


def _name(intent: Resource, purpose: str) -> str:
    """In the intent's namespace: `<intent>-<purpose>`."""
    return object_name(intent.metadata.name, purpose)


def _gateway_side_name(intent: Resource, purpose: str) -> str:
    """In `istio-system`, which every project shares: a DNS label unique across projects."""
    return shared_object_name(intent.metadata.project or "", intent.metadata.name, purpose)


def subset_name(intent: Resource, index: int) -> str:
    """A DestinationRule subset name: a DNS label, unique among every project's subsets of the
    egress gateway host (Istio merges their DestinationRules in one namespace)."""
    key = f"{intent.metadata.project}/{intent.kind}/{intent.metadata.name}/{index}"
    suffix = f"-{index}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"
    return intent.metadata.name[: 63 - len(suffix)].rstrip("-") + suffix


def k8s_object(api_version: str, kind: str, name: str, namespace: str, labels: dict[str, str], spec: dict) -> dict:
    """A namespaced Kubernetes object; `spec` is copied so that no two places of the output share a list."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": json.loads(json.dumps(spec)),
    }


def gateway_ref(namespace: str, name: str) -> str:
    """How a VirtualService names a Gateway: always `<namespace>/<name>`, because Istio reads a bare
    name with a dot (as qualified names have) as the legacy `<name>.<namespace>` form."""
    return f"{namespace}/{name}"


def sort_objects(objects: list[dict]) -> list[dict]:
    return sorted(objects, key=lambda o: (o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]))


@dataclass(frozen=True, order=True)
class _Client:
    namespace: str
    name: str
    service_account: str
    trust_domain: str

    @property
    def principal(self) -> str:
        return principal(self.trust_domain, self.namespace, self.service_account)


def _clients_here(
    fleet: Fleet, intent: Resource, spec: EgressIntentSpec, cluster: str, namespace: str
) -> list[_Client]:
    """The clients that run in `cluster`: those whose logical cloud (default: the intent's) has it."""
    project = intent.metadata.project or ""
    found: set[_Client] = set()
    for client in spec.clients:
        service = client.service
        cloud = service.logical_cloud or spec.placement.logical_cloud
        if cloud is None:
            client_ns = service.namespace or namespace
        else:
            members = cloud_members(fleet, project, cloud)
            if cluster not in members:
                continue
            client_ns = service.namespace or members[cluster]
        found.add(_Client(client_ns, service.name, service.service_account or service.name, fleet.trust_domain))
    return sorted(found)


def _hosts(intent: Resource, spec: EgressIntentSpec) -> list[str]:
    if spec.hosts:
        return sorted(set(spec.hosts))
    return [f"{intent.metadata.name}.{intent.metadata.project}.external"]


def _port_name(port: EgressPort) -> str:
    return port.name or f"{port.protocol.value.lower()}-{port.number}"


def _ports(spec: EgressIntentSpec) -> list[EgressPort]:
    return sorted({p.number: p for p in spec.ports}.values(), key=lambda p: p.number)


def _service_entry(intent: Resource, spec: EgressIntentSpec, namespace: str, export_to: list[str]) -> dict:
    body: dict = {
        "hosts": _hosts(intent, spec),
        "location": "MESH_EXTERNAL",
        "ports": [_service_entry_port(p) for p in _ports(spec)],
        "resolution": spec.resolution.value,
        "exportTo": export_to,
    }
    addresses = sorted(set(spec.addresses), key=ipaddress.ip_address)
    if addresses:
        body["addresses"] = addresses
    if spec.resolution is Resolution.STATIC:
        body["endpoints"] = [{"address": a} for a in addresses]
    return k8s_object(NETWORKING, "ServiceEntry", _name(intent, "external"), namespace, owner_labels(intent), body)


def _service_entry_port(port: EgressPort) -> dict:
    """With TLS origination the application's port is not the host's: the endpoints are `targetPort`."""
    out: dict = {"number": port.number, "name": _port_name(port), "protocol": port.protocol.value}
    if port.tls_origination is not None:
        out["targetPort"] = port.tls_origination.target_port
    return out


def _origination_rules(intent: Resource, spec: EgressIntentSpec, namespace: str, export_to: list[str]) -> list[dict]:
    """A DestinationRule per host for the ports whose TLS the mesh originates.

    Through the egress gateway it lives in the gateway's namespace and is exported nowhere else: the
    gateway opens the TLS and reads the credential from a Secret there. Direct, the clients'
    sidecars open it, and see the rule where they see the ServiceEntry. The SNI and the names the
    host's certificate must carry are both given: an explicit SNI turns Istio's own name check off.
    """
    originated = [p for p in _ports(spec) if p.tls_origination is not None]
    if not originated:
        return []
    through_gateway = spec.route.via is EgressVia.EGRESS_GATEWAY
    home = GATEWAY_NAMESPACE if through_gateway else namespace
    audience = [GATEWAY_NAMESPACE] if through_gateway else export_to
    objects = []
    for index, host in enumerate(_hosts(intent, spec)):
        settings = []
        for port in originated:
            assert port.tls_origination is not None
            tls: dict = {"mode": port.tls_origination.mode.value}
            if port.tls_origination.credential_name is not None:
                tls["credentialName"] = port.tls_origination.credential_name
            tls.update({"sni": host, "subjectAltNames": [host]})
            settings.append({"port": {"number": port.number}, "tls": tls})
        name = _gateway_side_name(intent, f"tls-{index}") if through_gateway else _name(intent, f"tls-{index}")
        body: dict = {"host": host, "exportTo": audience, "trafficPolicy": {"portLevelSettings": settings}}
        if through_gateway:
            # istiod reads a DestinationRule's credential Secret only for the workloads it selects.
            body["workloadSelector"] = {"matchLabels": dict(EGRESS_GATEWAY_SELECTOR)}
        objects.append(k8s_object(NETWORKING, "DestinationRule", name, home, owner_labels(intent), body))
    return objects


def _sni_routable(spec: EgressIntentSpec) -> bool:
    """TLS can be told apart by SNI only when the intent names real hosts."""
    return bool(spec.hosts)


def proxy_address(proxy: EgressProxy) -> str:
    """The address of the proxy's ServiceEntry: without one, its TCP port would bind `0.0.0.0:<port>` in every
    namespace it is exported to and carry all that port's traffic to the proxy, whatever the destination.

    An IP proxy has its own. A named one gets a fixed address of `NAMED_PROXY_ADDRESSES` derived from its
    name: nothing dials it (the hosts' routes name the proxy's cluster, which resolves the name), so it
    only keeps the listener off every other destination; intents naming one proxy agree on it.
    """
    try:
        return str(ipaddress.ip_address(proxy.address))
    except ValueError:
        digest = int.from_bytes(hashlib.sha256(proxy.address.encode()).digest()[:4], "big")
        return str(NAMED_PROXY_ADDRESSES[1 + digest % (NAMED_PROXY_ADDRESSES.num_addresses - 2)])


def _proxy_objects(
    intent: Resource, spec: EgressIntentSpec, namespace: str, export_to: list[str]
) -> tuple[list[dict], str]:
    """The proxy's ServiceEntry and the VirtualService sending the hosts to it; and the proxy's host."""
    proxy = spec.route.proxy
    assert proxy is not None  # the model guarantees it for via=proxy
    labels = owner_labels(intent)
    try:
        ipaddress.ip_address(proxy.address)
        proxy_host = f"{intent.metadata.name}-proxy.{intent.metadata.project}.external"
        resolution, endpoints = "STATIC", [{"address": proxy.address}]
    except ValueError:
        proxy_host, resolution, endpoints = proxy.address, "DNS", []
    proxy_entry: dict = {
        "hosts": [proxy_host],
        "location": "MESH_EXTERNAL",
        "ports": [{"number": proxy.port, "name": f"tcp-{proxy.port}", "protocol": "TCP"}],
        "resolution": resolution,
        "addresses": [proxy_address(proxy)],
        "exportTo": export_to,
    }
    if endpoints:
        proxy_entry["endpoints"] = endpoints
    to_proxy = [{"destination": {"host": proxy_host, "port": {"number": proxy.port}}}]
    hosts = _hosts(intent, spec)
    http, tls, tcp = [], [], []
    for port in _ports(spec):
        if port.protocol.is_http:
            http.append({"match": [{"port": port.number}], "route": to_proxy})
        elif port.protocol is ServiceProtocol.TLS and _sni_routable(spec):
            tls.append({"match": [{"port": port.number, "sniHosts": hosts}], "route": to_proxy})
        else:
            tcp.append({"match": [{"port": port.number}], "route": to_proxy})
    route_spec: dict = {"hosts": hosts, "exportTo": export_to}
    route_spec.update({k: v for k, v in (("http", http), ("tls", tls), ("tcp", tcp)) if v})
    return [
        k8s_object(NETWORKING, "ServiceEntry", _name(intent, "proxy"), namespace, labels, proxy_entry),
        k8s_object(NETWORKING, "VirtualService", _name(intent, "proxy"), namespace, labels, route_spec),
    ], proxy_host


def _gateway_objects(
    intent: Resource, spec: EgressIntentSpec, fleet: Fleet, cluster: str, export_to: list[str]
) -> list[dict]:
    labels = owner_labels(intent)
    hosts = _hosts(intent, spec)
    ports = _ports(spec)
    gateway_name = _gateway_side_name(intent, "egress")
    gateway = gateway_ref(GATEWAY_NAMESPACE, gateway_name)
    servers = []
    for port in ports:
        # The mesh leg is always ISTIO_MUTUAL so that the gateway sees each client's identity;
        # TLS from the application stays inside it, untouched, all the way to the external host.
        # Hosts bound as `./<host>`: only VirtualServices of istio-system (ours) attach to them, not
        # a tenant's from its own namespace claiming the host on the shared gateway.
        protocol = "HTTPS" if port.protocol.is_http else "TLS"
        servers.append(
            {
                "port": {"number": port.number, "name": f"{protocol.lower()}-{port.number}", "protocol": protocol},
                "hosts": [f"./{h}" for h in hosts],
                "tls": {"mode": "ISTIO_MUTUAL"},
            }
        )
    objects = [
        k8s_object(
            NETWORKING,
            "Gateway",
            gateway_name,
            GATEWAY_NAMESPACE,
            labels,
            {"selector": dict(EGRESS_GATEWAY_SELECTOR), "servers": servers},
        )
    ]
    subsets = []
    for index, host in enumerate(hosts):
        subset = subset_name(intent, index)
        subsets.append(
            {
                "name": subset,
                "trafficPolicy": {
                    "portLevelSettings": [
                        {"port": {"number": p.number}, "tls": {"mode": "ISTIO_MUTUAL", "sni": host}} for p in ports
                    ]
                },
            }
        )
        # One VirtualService per host: behind ISTIO_MUTUAL the gateway tells hosts apart only by the
        # server (SNI) a VirtualService's hosts bind to, so hosts cannot share one.
        http, tls, tcp = [], [], []
        for port in ports:
            to_gateway = [
                {"destination": {"host": EGRESS_GATEWAY_HOST, "subset": subset, "port": {"number": port.number}}}
            ]
            to_external = [{"destination": {"host": host, "port": {"number": port.number}}}]
            if port.protocol.is_http:
                http.append({"match": [{"gateways": ["mesh"], "port": port.number}], "route": to_gateway})
                http.append({"match": [{"gateways": [gateway], "port": port.number}], "route": to_external})
                continue
            if port.protocol is ServiceProtocol.TLS and _sni_routable(spec):
                tls.append(
                    {"match": [{"gateways": ["mesh"], "port": port.number, "sniHosts": [host]}], "route": to_gateway}
                )
            else:
                tcp.append({"match": [{"gateways": ["mesh"], "port": port.number}], "route": to_gateway})
            tcp.append({"match": [{"gateways": [gateway], "port": port.number}], "route": to_external})
        route_spec: dict = {"hosts": [host], "gateways": ["mesh", gateway], "exportTo": export_to}
        route_spec.update({k: v for k, v in (("http", http), ("tls", tls), ("tcp", tcp)) if v})
        objects.append(
            k8s_object(
                NETWORKING,
                "VirtualService",
                _gateway_side_name(intent, f"egress-{index}"),
                GATEWAY_NAMESPACE,
                labels,
                route_spec,
            )
        )
    objects.append(
        k8s_object(
            NETWORKING,
            "DestinationRule",
            _gateway_side_name(intent, "egress"),
            GATEWAY_NAMESPACE,
            labels,
            {"host": EGRESS_GATEWAY_HOST, "exportTo": export_to, "subsets": subsets},
        )
    )
    objects.append(_gateway_policy(intent, fleet, cluster, hosts))
    return objects


def _gateway_principals(fleet: Fleet, intent: Resource, cluster: str) -> dict[str, set[str]]:
    """host -> the principals any intent lets through the egress gateway of `cluster` to it.

    Several intents (of any project) may name one host; each admits its own clients, so what one
    intent's policy refuses is what none of them admits. The intent being rendered replaces any
    stored version of itself.
    """
    intents = {(i.metadata.project, i.metadata.name): i for i in fleet.egress_intents}
    intents[(intent.metadata.project, intent.metadata.name)] = intent
    allowed: dict[str, set[str]] = {}
    for other in intents.values():
        spec: EgressIntentSpec = other.spec
        if spec.route.via is not EgressVia.EGRESS_GATEWAY:
            continue
        targets = placement_targets(fleet, other.metadata.project or "", spec.placement)
        if cluster not in targets:
            continue
        clients = {c.principal for c in _clients_here(fleet, other, spec, cluster, targets[cluster])}
        for host in _hosts(other, spec):
            allowed.setdefault(host, set()).update(clients)
    return allowed


def _gateway_policy(intent: Resource, fleet: Fleet, cluster: str, hosts: list[str]) -> dict:
    """A DENY on the egress gateway: connections to this intent's hosts from anyone not admitted.

    DENY, not ALLOW: an ALLOW policy on the shared gateway would close every host no intent names.
    The hosts are told apart by SNI, which the DestinationRule sets to the host on the mesh leg and
    which the gateway routes by (Envoy compares it lower-cased, as the model's hosts are). Ports
    are left out: the gateway's filters see its pods' target ports, not the Service's. A host no
    client may reach is closed to all.
    """
    admitted = _gateway_principals(fleet, intent, cluster)
    by_principals: dict[tuple[str, ...], list[str]] = {}
    for host in hosts:
        by_principals.setdefault(tuple(sorted(admitted.get(host, set()))), []).append(host)
    rules = []
    for principals, group in sorted(by_principals.items(), key=lambda item: item[1]):
        rule: dict = {}
        if principals:
            rule["from"] = [{"source": {"notPrincipals": list(principals)}}]
        rule["when"] = [{"key": "connection.sni", "values": group}]
        rules.append(rule)
    return k8s_object(
        SECURITY,
        "AuthorizationPolicy",
        _gateway_side_name(intent, "egress"),
        GATEWAY_NAMESPACE,
        owner_labels(intent),
        {"selector": {"matchLabels": dict(EGRESS_GATEWAY_SELECTOR)}, "action": "DENY", "rules": rules},
    )


def render_egress_intent(intent: Resource, fleet: Fleet, cluster: str) -> list[dict]:
    """The objects `cluster` needs for one EgressIntent, sorted by (kind, namespace, name)."""
    spec: EgressIntentSpec = intent.spec
    targets = placement_targets(fleet, intent.metadata.project or "", spec.placement)
    if cluster not in targets:
        return []
    namespace = targets[cluster]
    via = spec.route.via
    clients = _clients_here(fleet, intent, spec, cluster, namespace)
    audience = {namespace, *(c.namespace for c in clients)}
    if via is EgressVia.EGRESS_GATEWAY:
        audience.add(GATEWAY_NAMESPACE)
    export_to = sorted(audience)

    objects = [
        _service_entry(intent, spec, namespace, export_to),
        *_origination_rules(intent, spec, namespace, export_to),
    ]
    hosts = _hosts(intent, spec)
    reachable = [f"{namespace}/{h}" for h in hosts]
    if via is EgressVia.PROXY:
        proxy_objects, proxy_host = _proxy_objects(intent, spec, namespace, export_to)
        objects += proxy_objects
        reachable.append(f"{namespace}/{proxy_host}")
    elif via is EgressVia.EGRESS_GATEWAY:
        gateway_export = sorted({GATEWAY_NAMESPACE, *(c.namespace for c in clients)})
        objects += _gateway_objects(intent, spec, fleet, cluster, gateway_export)
        reachable += [f"{GATEWAY_NAMESPACE}/{h}" for h in hosts]
        reachable.append(f"{GATEWAY_NAMESPACE}/{EGRESS_GATEWAY_HOST}")

    labels = owner_labels(intent)
    for client_ns, client_name in {(c.namespace, c.name) for c in clients}:
        objects.append(
            k8s_object(
                NETWORKING,
                "Sidecar",
                sidecar_name(client_name),
                client_ns,
                labels,
                {
                    "workloadSelector": {"labels": {"app": client_name}},
                    "egress": [{"hosts": sidecar_hosts(client_ns, reachable)}],
                },
            )
        )
    return sort_objects(objects)
