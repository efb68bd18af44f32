"""EgressIntents on real Istio: meshplane renders them for one cluster, its istiod configures the sidecars and the
stock egress gateway, and a pod's TLS calls reach hosts outside the mesh the way each intent routes them.

External hosts stand on the fabric at their own addresses, relayed to one TLS server of the test; the
third-party proxy is an SNI-forwarding proxy of the test (what a `via: proxy` render needs: the sidecar
hands it the application's TLS as is). Hosts of `resolution: DNS` have their names in a name server on the
fabric, which the pods and the egress gateway resolve through (their own resolv.conf), so their Envoys look
the host up as in a cluster. Which route a connection took is read from the proxies' Envoy stats: each
outbound cluster counts its connections, per upstream address.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from meshplane.model.intents import LogicalCloudSpec
from meshplane.model.resource import Resource
from meshplane.security.ca import create_ca, issue_server_certificate
from meshplane.server.render.cluster import render_cluster
from meshplane.server.render.fleet import ClusterInfo
from meshplane.server.render.fleet import Fleet as MeshplaneFleet
from meshplane_testing.dns import DnsServer, start_fabric_name_server
from meshplane_testing.envoy import EnvoyProcess
from meshplane_testing.eventually import eventually
from meshplane_testing.istio import (
    EGRESS,
    Fleet,
    Gateway,
    IstioCluster,
    Pod,
    ServicePort,
    Workload,
    envoy_stats,
    start_gateway,
    upstream_connections,
    upstream_connections_by_host,
)
from meshplane_testing.render_scenarios import parse
from meshplane_testing.sni_proxy import SniProxy, run_sni_proxy
from meshplane_testing.upstream import run_upstream

pytestmark = pytest.mark.timeout(300)

PROJECT = "travel"
CLOUD = "trips"
NAMESPACE = "egress-traffic"
ELSEWHERE = "egress-elsewhere"
"""A namespace no intent names: its pods see none of the entries."""
CLIENT, INTRUDER, STRANGER = "booking", "intruder", "stranger"
STATIC_NAME = "fares.partner.test"
"""The name on the certificate of the host known by address only (the client's TLS asks for it)."""
GATEWAY_HOST = "api.hotels.test"
PROXIED_HOST = "api.cars.test"
PROXY_PORT = 3128
STATIC_CLUSTER = "outbound|443||static-fares.travel.external"
GATEWAY_CLUSTER = f"outbound|443||{GATEWAY_HOST}"
DNS_ZONE = "partners.test"
RESOLVED_HOST = f"flights.{DNS_ZONE}"
"""Reached directly: the client's sidecar resolves it."""
RESOLVED_VIA_GATEWAY_HOST = f"trains.{DNS_ZONE}"
"""Reached through the egress gateway, which resolves it."""


def _intents(addresses: dict[str, str]) -> list[Resource]:
    client = [{"service": {"name": CLIENT}}]
    placement = {"logicalCloud": CLOUD}
    tls = [{"number": 443, "protocol": "TLS"}]
    return [
        parse(
            "EgressIntent",
            "static-fares",
            {
                "addresses": [addresses["static"]],
                "ports": tls,
                "resolution": "STATIC",
                "clients": client,
                "placement": placement,
            },
            PROJECT,
        ),
        parse(
            "EgressIntent",
            "hotels",
            {
                "hosts": [GATEWAY_HOST],
                "addresses": [addresses["gateway"]],
                "ports": tls,
                "resolution": "STATIC",
                "route": {"via": "egressGateway"},
                "clients": client,
                "placement": placement,
            },
            PROJECT,
        ),
        parse(
            "EgressIntent",
            "flights",
            {"hosts": [RESOLVED_HOST], "ports": tls, "resolution": "DNS", "clients": client, "placement": placement},
            PROJECT,
        ),
        parse(
            "EgressIntent",
            "trains",
            {
                "hosts": [RESOLVED_VIA_GATEWAY_HOST],
                "ports": tls,
                "resolution": "DNS",
                "route": {"via": "egressGateway"},
                "clients": client,
                "placement": placement,
            },
            PROJECT,
        ),
        parse(
            "EgressIntent",
            "cars",
            {
                "hosts": [PROXIED_HOST],
                "ports": tls,
                "resolution": "DNS",
                "route": {"via": "proxy", "proxy": {"address": addresses["proxy"], "port": PROXY_PORT}},
                "clients": client,
                "placement": placement,
            },
            PROJECT,
        ),
    ]


def _render(cluster: IstioCluster, addresses: dict[str, str]) -> list[dict]:
    cloud = LogicalCloudSpec.model_validate({"clusters": [{"name": cluster.name, "namespace": NAMESPACE}]})
    fleet = MeshplaneFleet(
        clusters={cluster.name: ClusterInfo(cluster.name)},
        logical_clouds={(PROJECT, CLOUD): cloud},
        egress_intents=_intents(addresses),
    )
    return render_cluster(fleet, cluster.name)


@dataclass(frozen=True)
class Setting:
    pods: dict[str, Pod]
    egress: Gateway
    proxy: SniProxy
    addresses: dict[str, str]
    trust: ssl.SSLContext
    unrelated_seen: list[dict]
    names: DnsServer


def _pod(cluster: IstioCluster, name: str, namespace: str) -> Workload:
    ports = (ServicePort("http", 80, 8080),)
    return Workload(name, namespace, cluster.new_address(), {"app": name}, ports, service_account=name, sidecar=True)


@pytest.fixture(scope="module")
def setting(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setting]:
    cluster = fleet["cluster-b"]
    ca = create_ca()
    pair = issue_server_certificate(
        ca, [STATIC_NAME, GATEWAY_HOST, PROXIED_HOST, RESOLVED_HOST, RESOLVED_VIA_GATEWAY_HOST]
    )
    directory = Path(tmp_path_factory.mktemp("egress-tls"))
    (directory / "tls.crt").write_bytes(pair.certificate_pem())
    (directory / "tls.key").write_bytes(pair.key_pem())
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(directory / "tls.crt", directory / "tls.key")
    # "proxied": where DNS would have sent the client for PROXIED_HOST; nothing is there, the proxy route takes it.
    # "nowhere": what a client dials for a host its proxies resolve; nothing is there either.
    kinds = ("static", "gateway", "proxy", "proxied", "unrelated", "resolved", "resolved-via-gateway", "dns", "nowhere")
    addresses = {key: cluster.new_address() for key in kinds}
    rendered = _render(cluster, addresses)
    records = {RESOLVED_HOST: addresses["resolved"], RESOLVED_VIA_GATEWAY_HOST: addresses["resolved-via-gateway"]}
    resolver = addresses["dns"]
    with (
        start_fabric_name_server(cluster.fabric, resolver, DNS_ZONE, records, cluster.log_dir) as names,
        start_gateway(cluster, EGRESS, resolver=resolver) as egress,
        run_upstream("partner", tls=server) as (partner_port, _),
        run_upstream("unrelated") as (unrelated_port, unrelated_seen),
        run_sni_proxy({PROXIED_HOST: partner_port}) as proxy,
        cluster.fabric.host(addresses["static"], {443: partner_port}),
        cluster.fabric.host(addresses["gateway"], {443: partner_port}),
        cluster.fabric.host(addresses["proxy"], {PROXY_PORT: proxy.port}),
        cluster.fabric.host(addresses["unrelated"], {PROXY_PORT: unrelated_port}),
        cluster.fabric.host(addresses["resolved"], {443: partner_port}),
        cluster.fabric.host(addresses["resolved-via-gateway"], {443: partner_port}),
        cluster.serve(_pod(cluster, CLIENT, NAMESPACE), resolver=resolver) as client,
        cluster.serve(_pod(cluster, INTRUDER, NAMESPACE), resolver=resolver) as intruder,
        cluster.serve(_pod(cluster, STRANGER, ELSEWHERE), resolver=resolver) as stranger,
    ):
        cluster.apply_all(rendered)
        try:
            yield Setting(
                {CLIENT: client, INTRUDER: intruder, STRANGER: stranger},
                egress,
                proxy,
                addresses,
                ssl.create_default_context(cadata=ca.certificate_pem().decode()),
                unrelated_seen,
                names,
            )
        finally:
            for obj in rendered:
                cluster.delete(obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])


def _call(setting: Setting, who: str, where: str, name: str) -> int | None:
    """GET https://<name>/ from pod `who`, connecting to address `where` as if DNS had answered it."""
    try:
        return setting.pods[who].request(setting.addresses[where], 443, "/", {"Host": name}, setting.trust, name).status
    except OSError:
        return None


def _envoy(pod_or_gateway: Pod | Gateway) -> EnvoyProcess:
    envoy = pod_or_gateway.envoy if isinstance(pod_or_gateway, Gateway) else pod_or_gateway.sidecar
    assert envoy is not None
    return envoy


def _connections(pod_or_gateway: Pod | Gateway, cluster: str) -> int:
    return upstream_connections(_envoy(pod_or_gateway), cluster)


def _arrives_via(setting: Setting, who: str, where: str, name: str, carrier: Pod | Gateway, cluster: str) -> bool:
    """A call answered 200 whose connection `carrier`'s outbound `cluster` counted: the route taken once istiod's
    configuration is in (before it, a sidecar passes any call through)."""
    before = _connections(carrier, cluster)
    return _call(setting, who, where, name) == 200 and _connections(carrier, cluster) > before


def _denied_at(gateway: Gateway) -> int:
    return sum(value for name, value in envoy_stats(gateway.envoy).items() if name.endswith("rbac.denied"))


def test_a_client_reaches_an_external_host_known_only_by_its_address(setting: Setting) -> None:
    client = setting.pods[CLIENT]
    eventually(
        lambda: _arrives_via(setting, CLIENT, "static", STATIC_NAME, client, STATIC_CLUSTER),
        timeout=60,
        what="the static host through the intent's ServiceEntry",
    )


def test_a_declared_client_reaches_an_external_host_through_the_egress_gateway(setting: Setting) -> None:
    eventually(
        lambda: _arrives_via(setting, CLIENT, "gateway", GATEWAY_HOST, setting.egress, GATEWAY_CLUSTER),
        timeout=60,
        what=f"{GATEWAY_HOST} through the egress gateway",
    )


def test_the_egress_gateway_refuses_a_client_the_intent_does_not_declare(setting: Setting) -> None:
    eventually(
        lambda: _arrives_via(setting, CLIENT, "gateway", GATEWAY_HOST, setting.egress, GATEWAY_CLUSTER),
        timeout=60,
        what=f"{GATEWAY_HOST} through the egress gateway",
    )
    denied = _denied_at(setting.egress)
    # Until the intruder's sidecar has the intent's routes, its call passes through to the host's address.
    eventually(
        lambda: _call(setting, INTRUDER, "gateway", GATEWAY_HOST) is None and _denied_at(setting.egress) > denied,
        timeout=60,
        what="the undeclared client refused by the egress gateway's RBAC",
    )


def test_a_client_reaches_an_external_host_through_a_third_party_proxy(setting: Setting) -> None:
    eventually(lambda: _call(setting, CLIENT, "proxied", PROXIED_HOST) == 200, timeout=60, what="via the proxy")
    assert PROXIED_HOST in setting.proxy.seen


def test_a_proxy_route_leaves_other_destinations_on_the_proxy_port_alone(setting: Setting) -> None:
    """Defect #11 of issue 18: the proxy's TCP ServiceEntry had no address, so the client's sidecar sent every
    connection on port 3128, whatever its destination, to the proxy."""
    eventually(lambda: _call(setting, CLIENT, "proxied", PROXIED_HOST) == 200, timeout=60, what="via the proxy")
    pod = setting.pods[CLIENT]

    def unrelated() -> int | None:
        try:
            return pod.request(setting.addresses["unrelated"], PROXY_PORT, "/", {"Host": "unrelated.test"}).status
        except OSError:
            return None

    assert unrelated() == 200
    assert setting.unrelated_seen


@pytest.mark.parametrize(
    ("host", "carrier"),
    [(RESOLVED_HOST, CLIENT), (RESOLVED_VIA_GATEWAY_HOST, "egress gateway")],
    ids=["direct", "via-egress-gateway"],
)
def test_a_client_reaches_an_external_host_its_proxies_resolve_by_dns(
    setting: Setting, host: str, carrier: str
) -> None:
    """`resolution: DNS`: the client dials an address where nothing listens, its sidecar picks the host's
    cluster by SNI, and the Envoy that leaves the mesh (the sidecar, or on `egressGateway` the gateway) connects
    to the address the fabric's name server answers for the host, never to the dialled one."""
    answer = setting.names.answers(host)
    assert len(answer) == 1 and answer[0] != setting.addresses["nowhere"]
    proxy = setting.pods[CLIENT] if carrier == CLIENT else setting.egress
    envoy = _envoy(proxy)
    cluster = f"outbound|443||{host}"

    def resolved_and_arrived() -> bool:
        before = upstream_connections_by_host(envoy, cluster).get(f"{answer[0]}:443", 0)
        if _call(setting, CLIENT, "nowhere", host) != 200:
            return False
        return upstream_connections_by_host(envoy, cluster).get(f"{answer[0]}:443", 0) > before

    eventually(resolved_and_arrived, timeout=60, what=f"{host} at its resolved address through {carrier}")
    assert set(upstream_connections_by_host(envoy, cluster)) == {f"{answer[0]}:443"}


def test_on_a_direct_route_an_undeclared_client_is_routed_differently_but_not_refused(setting: Setting) -> None:
    """As EgressClient says: with `direct`, `clients` scope the Sidecars and the namespaces the entries are
    exported to; it is no access control. An undeclared pod of the intent's namespace sees the entry and
    uses it; one of a namespace the entry is not exported to goes out as passthrough, and still arrives."""
    intruder, stranger = setting.pods[INTRUDER], setting.pods[STRANGER]
    eventually(
        lambda: _arrives_via(setting, INTRUDER, "static", STATIC_NAME, intruder, STATIC_CLUSTER),
        timeout=60,
        what="an undeclared client of the intent's namespace, through the entry",
    )
    assert _call(setting, STRANGER, "static", STATIC_NAME) == 200
    assert _connections(stranger, "PassthroughCluster") >= 1
    assert stranger.sidecar is not None
    assert STATIC_CLUSTER not in stranger.sidecar.admin("/clusters")[1]
