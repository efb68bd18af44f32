"""User-facing DNS with its real consumer: what meshplane renders for an IngressIntent's `dns`, applied by
the agent's applier to a cluster's API server, published by external-dns (CRD source, RFC 2136 with
TSIG) into bind9, and answered to a DNS query.

Each cluster is its API server and, per DNS server, its external-dns owning records under the cluster's
name (TXT registry). Each test uses host names of its own, so the zones they share never mix their
records.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshplane.model.intents import DEFAULT_RECORD_TTL, LogicalCloudSpec
from meshplane.model.kinds import EastWestGateway
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import Resource
from meshplane.server.render.cluster import render_cluster
from meshplane.server.render.fleet import ClusterInfo, Fleet
from meshplane.server.render.ingress import DNS_API_VERSION, DNS_SERVER_LABEL
from meshplane.server.render.offline import project_documents
from meshplane_testing.dns import (
    DnsServer,
    apply_as_agent,
    dnsendpoint_crd,
    dnsendpoint_path,
    start_bind9,
    start_external_dns,
)
from meshplane_testing.eventually import eventually
from meshplane_testing.kube import KubeAPIServer, start_kube_apiserver
from meshplane_testing.meshplane import run_agent, run_server
from meshplane_testing.races import object_path

PROJECT = "shop"
CLOUD = "retail"
NAMESPACE = "shop"
ZONE = "example.com"
ADDRESSES = {"edge-1": "198.51.100.11", "edge-2": "198.51.100.12"}
"""Each cluster's ingress gateway address, which the user-facing hosts it serves resolve to."""
EAST_WEST = {"edge-1": "192.0.2.11", "edge-2": "192.0.2.12"}
"""Each cluster's east-west gateway, which no public record may name."""
PUBLISHED = 30.0
"""external-dns syncs every second; its first pass waits for its caches, and the machine is shared."""


def cluster_info(name: str) -> ClusterInfo:
    """A cluster of the fleet: its east-west gateway, and the ingress address its DNS records point at."""
    return ClusterInfo(name, {"tier": "edge"}, EastWestGateway(address=EAST_WEST[name], port=15443), (ADDRESSES[name],))


def fleet(serving: list[str], intents: list[Resource]) -> Fleet:
    """Both clusters; the logical cloud, and so the intents placed on it, spans the `serving` ones."""
    cloud = LogicalCloudSpec.model_validate({"clusters": [{"name": c, "namespace": NAMESPACE} for c in serving]})
    return Fleet(
        clusters={name: cluster_info(name) for name in ADDRESSES},
        logical_clouds={(PROJECT, CLOUD): cloud},
        ingress_intents=intents,
    )


def ingress_intent(name: str, hosts: list[str], servers: list[str]) -> Resource:
    return REGISTRY.parse(
        {
            "kind": "IngressIntent",
            "metadata": {"name": name, "project": PROJECT},
            "spec": {
                "hosts": hosts,
                "dns": [{"server": server, "zone": ZONE} for server in servers],
                "entities": [{"name": "public", "tls": {"mode": "SIMPLE", "credentialName": f"{name}-cert"}}],
                "routes": [{"match": {"prefix": "/"}, "to": {"service": "orders", "port": 8080}}],
                "placement": {"logicalCloud": CLOUD},
            },
        }
    )


def dns_endpoints(fleet: Fleet, cluster: str) -> list[dict]:
    """The DNSEndpoints among everything rendered for `cluster`."""
    return [o for o in render_cluster(fleet, cluster) if o["kind"] == "DNSEndpoint"]


def rendered_targets(fleet: Fleet, server: str, host: str) -> list[str]:
    """The A targets the fleet's renders give `host` on `server`, over every cluster: what DNS should answer."""
    targets = {
        target
        for cluster in fleet.clusters
        for obj in dns_endpoints(fleet, cluster)
        if obj["metadata"]["labels"][DNS_SERVER_LABEL] == server
        for endpoint in obj["spec"]["endpoints"]
        if endpoint["dnsName"] == host and endpoint["recordType"] == "A"
        for target in endpoint["targets"]
    }
    assert targets, f"nothing rendered for {host} on {server}"
    return sorted(targets)


SYNCS = 3.0
"""Long enough for three syncs of every external-dns: what holds that long is not between two of them."""


def answers_stay(server: DnsServer, host: str, expected: list[str]) -> None:
    deadline = time.monotonic() + SYNCS
    while time.monotonic() < deadline:
        assert server.answers(host) == expected, f"{server.name} stopped answering {host} A {expected}"
        time.sleep(0.1)


def answers_become(server: DnsServer, host: str, expected: list[str]) -> None:
    try:
        eventually(lambda: server.answers(host) == expected, timeout=PUBLISHED, interval=0.5, what="the answer")
    except TimeoutError:
        raise AssertionError(
            f"after {PUBLISHED}s {server.name} answers {host} A {server.answers(host)}, not {expected}"
        ) from None


@pytest.fixture(scope="module")
def edge_1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    """Cluster edge-1's API server with external-dns's DNSEndpoint CRD; its own, since its agent prunes."""
    with start_kube_apiserver(tmp_path_factory.mktemp("kube-edge-1"), [dnsendpoint_crd()]) as server:
        yield server


@pytest.fixture(scope="module")
def edge_2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    with start_kube_apiserver(tmp_path_factory.mktemp("kube-edge-2"), [dnsendpoint_crd()]) as server:
        yield server


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dns-logs")


@pytest.fixture(scope="module")
def public_dns(logs: Path) -> Iterator[DnsServer]:
    with start_bind9(logs, "public-dns", ZONE) as server:
        yield server


@pytest.fixture(scope="module")
def partner_dns(logs: Path) -> Iterator[DnsServer]:
    with start_bind9(logs, "partner-dns", ZONE) as server:
        yield server


def test_a_rendered_record_set_is_published_and_answered(edge_1: KubeAPIServer, public_dns: DnsServer, logs: Path):
    intent = ingress_intent("storefront", ["shop.example.com"], ["public-dns"])
    rendered = fleet(["edge-1"], [intent])
    with start_external_dns(edge_1, public_dns, "edge-1", logs):
        apply_as_agent(edge_1, dns_endpoints(rendered, "edge-1"))
        expected = rendered_targets(rendered, "public-dns", "shop.example.com")
        assert expected == [ADDRESSES["edge-1"]]
        answers_become(public_dns, "shop.example.com", expected)
        apply_as_agent(edge_1, [])
        answers_become(public_dns, "shop.example.com", [])


def _fleet_documents(intent: Resource) -> list[dict]:
    """The north API's documents for edge-1 serving `intent`: its Cluster, the project, the logical cloud
    and the service the intent routes to."""
    return [
        {
            "apiVersion": "meshplane.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "edge-1", "labels": {"tier": "edge"}},
            "spec": {
                "eastWestGateway": {"address": EAST_WEST["edge-1"], "port": 15443},
                "ingressGateway": {"addresses": [ADDRESSES["edge-1"]]},
            },
        },
        {"apiVersion": "meshplane.io/v1alpha1", "kind": "Project", "metadata": {"name": PROJECT}, "spec": {}},
        {
            "apiVersion": "meshplane.io/v1alpha1",
            "kind": "LogicalCloud",
            "metadata": {"name": CLOUD, "project": PROJECT},
            "spec": {"clusters": [{"name": "edge-1", "namespace": NAMESPACE}]},
        },
        {
            "apiVersion": "meshplane.io/v1alpha1",
            "kind": "ServiceIntent",
            "metadata": {"name": "orders", "project": PROJECT},
            "spec": {
                "service": {"name": "orders", "port": 8080, "protocol": "HTTP"},
                "placement": {"logicalCloud": CLOUD},
            },
        },
        intent.to_wire(),
    ]


def test_an_intent_through_the_server_and_agent_is_answered_and_its_deletion_unpublishes_it(
    edge_1: KubeAPIServer, public_dns: DnsServer, logs: Path, tmp_path: Path
):
    """The whole chain: north API, render, delivery to the agent, its apply, external-dns, bind9."""
    host = "checkout.example.com"
    intent = ingress_intent("checkout", [host], ["public-dns"])
    documents = _fleet_documents(intent)
    rendered = [o for o in project_documents(documents, "edge-1") if o["kind"] == "DNSEndpoint"]
    (expected,) = {tuple(e["targets"]) for o in rendered for e in o["spec"]["endpoints"] if e["dnsName"] == host}
    with (
        run_server(tmp_path) as server,
        run_agent(tmp_path, "edge-1", server, kubeconfig=edge_1.kubeconfig),
        start_external_dns(edge_1, public_dns, "edge-1", logs),
        server.http() as http,
    ):
        for doc in documents:
            response = http.put(object_path(doc), json=doc)
            assert response.status_code in (200, 201), response.text
        answers_become(public_dns, host, sorted(expected))
        assert http.delete(object_path(intent.to_wire())).status_code == 200
        answers_become(public_dns, host, [])


def test_two_dns_servers_answer_each_the_records_labelled_for_it(
    edge_1: KubeAPIServer, public_dns: DnsServer, partner_dns: DnsServer, logs: Path
):
    """Both servers hold the same zone: only the `meshplane.io/dns-server` label tells external-dns apart."""
    both = ingress_intent("market", ["market.example.com"], ["public-dns", "partner-dns"])
    partner_only = ingress_intent("partners", ["partners.example.com"], ["partner-dns"])
    rendered = fleet(["edge-1"], [both, partner_only])
    with (
        start_external_dns(edge_1, public_dns, "edge-1", logs),
        start_external_dns(edge_1, partner_dns, "edge-1", logs),
    ):
        apply_as_agent(edge_1, dns_endpoints(rendered, "edge-1"))
        answers_become(
            partner_dns, "partners.example.com", rendered_targets(rendered, "partner-dns", "partners.example.com")
        )
        for server in (public_dns, partner_dns):
            answers_become(server, "market.example.com", rendered_targets(rendered, server.name, "market.example.com"))
        assert public_dns.answers("partners.example.com") == []
        apply_as_agent(edge_1, [])
        for server in (public_dns, partner_dns):
            answers_become(server, "market.example.com", [])
        answers_become(partner_dns, "partners.example.com", [])


def _one_writer_endpoint(name: str, host: str, targets: list[str], record_type: str = "A") -> dict:
    """A DNSEndpoint as one writer of a name renders it: one record set, every serving cluster's address."""
    return {
        "apiVersion": DNS_API_VERSION,
        "kind": "DNSEndpoint",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {DNS_SERVER_LABEL: "public-dns"}},
        "spec": {"endpoints": [{"dnsName": host, "recordType": record_type, "targets": targets}]},
    }


def test_a_record_set_whose_targets_change_is_updated_in_the_dns_server(
    edge_1: KubeAPIServer, public_dns: DnsServer, logs: Path
):
    """A second cluster starts serving the host: its address joins the record set, then leaves it."""
    host = "cart.example.com"
    with start_external_dns(edge_1, public_dns, "edge-1", logs):
        for serving in (["edge-1"], ["edge-1", "edge-2"], ["edge-2"]):
            targets = sorted(ADDRESSES[c] for c in serving)
            apply_as_agent(edge_1, [_one_writer_endpoint("cart-dns.public-dns", host, targets)])
            answers_become(public_dns, host, targets)
        apply_as_agent(edge_1, [])
        answers_become(public_dns, host, [])


def test_deleting_the_dnsendpoint_removes_its_records_and_their_ownership(
    edge_1: KubeAPIServer, public_dns: DnsServer, logs: Path
):
    host = "orders.example.com"
    intent = ingress_intent("orders-web", [host], ["public-dns"])
    rendered = fleet(["edge-1"], [intent])
    (endpoint,) = dns_endpoints(rendered, "edge-1")
    with start_external_dns(edge_1, public_dns, "edge-1", logs):
        apply_as_agent(edge_1, [endpoint])
        answers_become(public_dns, host, rendered_targets(rendered, "public-dns", host))
        ownership = eventually(lambda: _ownership(public_dns, host), timeout=PUBLISHED, what=f"TXT ownership of {host}")
        assert "external-dns/owner=edge-1" in ownership
        with edge_1.client() as client:
            response = client.delete(dnsendpoint_path(NAMESPACE, endpoint["metadata"]["name"]))
            assert response.status_code == 200, response.text
        answers_become(public_dns, host, [])
        eventually(lambda: not _ownership(public_dns, host), timeout=PUBLISHED, what=f"no TXT ownership of {host}")


def _ownership(server: DnsServer, host: str) -> str:
    """external-dns's TXT ownership records of `host`'s A record set, whatever their naming scheme."""
    return " ".join(record for name in (host, f"a-{host}") for record in server.answers(name, "TXT"))


def test_when_the_serving_cluster_changes_the_new_one_takes_the_name_over(
    edge_1: KubeAPIServer, edge_2: KubeAPIServer, public_dns: DnsServer, logs: Path
):
    """The intent moves from edge-1 to edge-2: edge-1's external-dns deletes the records it owns, and
    edge-2's, which left another owner's records alone until then, publishes its own."""
    host = "moving.example.com"
    intent = ingress_intent("moving", [host], ["public-dns"])
    clusters = {"edge-1": edge_1, "edge-2": edge_2}
    with (
        start_external_dns(edge_1, public_dns, "edge-1", logs),
        start_external_dns(edge_2, public_dns, "edge-2", logs),
    ):
        try:
            for serving in (["edge-1"], ["edge-2"]):
                rendered = fleet(serving, [intent])
                for name, kube in clusters.items():
                    apply_as_agent(kube, dns_endpoints(rendered, name))
                answers_become(public_dns, host, rendered_targets(rendered, "public-dns", host))
            assert "owner=edge-2" in _ownership(public_dns, host)
        finally:
            for kube in clusters.values():
                apply_as_agent(kube, [])
            answers_become(public_dns, host, [])


def test_every_cluster_serving_a_host_is_in_its_one_record_set(
    edge_1: KubeAPIServer, edge_2: KubeAPIServer, public_dns: DnsServer, logs: Path
):
    """Each cluster's agent applies what it receives to its own API server, read by its own external-dns."""
    host = "shared.example.com"
    intent = ingress_intent("shared", [host], ["public-dns"])
    rendered = fleet(["edge-1", "edge-2"], [intent])
    clusters = {"edge-1": edge_1, "edge-2": edge_2}
    with (
        start_external_dns(edge_1, public_dns, "edge-1", logs),
        start_external_dns(edge_2, public_dns, "edge-2", logs),
    ):
        try:
            for name, kube in clusters.items():
                apply_as_agent(kube, dns_endpoints(rendered, name))
            expected = rendered_targets(rendered, "public-dns", host)
            answers_become(public_dns, host, expected)
            answers_stay(public_dns, host, expected)
        finally:
            for kube in clusters.values():
                apply_as_agent(kube, [])
            answers_become(public_dns, host, [])


def test_clusters_sharing_an_owner_id_delete_each_others_records(
    edge_1: KubeAPIServer, edge_2: KubeAPIServer, public_dns: DnsServer, logs: Path
):
    """Why each cluster's external-dns owns records under its own id: with one id for all, a cluster that
    writes nothing for a name deletes it on every sync (policy sync), and the writer adds it back."""
    host = "owned.example.com"
    with (
        start_external_dns(edge_1, public_dns, "edge-1", logs, owner="meshplane") as writer,
        start_external_dns(edge_2, public_dns, "edge-2", logs, owner="meshplane") as other,
    ):
        apply_as_agent(edge_1, [_one_writer_endpoint("owned-dns.public-dns", host, [ADDRESSES["edge-1"]])])
        eventually(
            lambda: (
                other.log().count(f"Removing RR: {host} 0 A") >= 2 and writer.log().count(f"Adding RR: {host} 0 A") >= 2
            ),
            timeout=PUBLISHED,
            what=f"{host} to be removed by edge-2 and added back by edge-1 twice",
        )
        apply_as_agent(edge_1, [])
        answers_become(public_dns, host, [])


def test_the_records_of_a_lost_writer_stay_and_the_next_writer_cannot_take_them_over(
    edge_1: KubeAPIServer, edge_2: KubeAPIServer, public_dns: DnsServer, logs: Path
):
    """A limit of an owner id per cluster: edge-1 wrote the record set, then it is lost with its external-dns;
    edge-2 writes the name now, but its external-dns leaves another owner's records alone, so the name keeps
    pointing at edge-1 until edge-1's external-dns (or an operator) deletes them."""
    host = "stranded.example.com"
    both = sorted(ADDRESSES.values())
    with start_external_dns(edge_1, public_dns, "edge-1", logs):
        apply_as_agent(edge_1, [_one_writer_endpoint("stranded-dns.public-dns", host, both)])
        answers_become(public_dns, host, both)
    with start_external_dns(edge_2, public_dns, "edge-2", logs) as next_writer:
        apply_as_agent(edge_2, [_one_writer_endpoint("stranded-dns.public-dns", host, [ADDRESSES["edge-2"]])])
        eventually(
            lambda: (
                f'{host} 0 IN A  {ADDRESSES["edge-2"]} [] because owner id does not match (found: \\"edge-1\\"'
                in next_writer.log()
            ),
            timeout=PUBLISHED,
            what="edge-2's external-dns to skip edge-1's record set",
        )
        answers_stay(public_dns, host, both)
        apply_as_agent(edge_2, [])
    apply_as_agent(edge_1, [])
    with start_external_dns(edge_1, public_dns, "edge-1", logs):
        answers_become(public_dns, host, [])


def test_external_dns_skips_a_record_set_whose_targets_mix_address_families(
    edge_1: KubeAPIServer, public_dns: DnsServer, logs: Path
):
    """What a renderer merging every serving cluster's address must keep: one family per record set.

    An A endpoint with an IPv6 target is refused whole, the IPv4 target with it; split into an A and an
    AAAA endpoint, both are published.
    """
    host = "dual.example.com"
    mixed = _one_writer_endpoint("dual-dns.public-dns", host, ["198.51.100.11", "2001:db8::12"])
    split = {
        **mixed,
        "spec": {
            "endpoints": [
                {"dnsName": host, "recordType": "A", "targets": ["198.51.100.11"]},
                {"dnsName": host, "recordType": "AAAA", "targets": ["2001:db8::12"]},
            ]
        },
    }
    with start_external_dns(edge_1, public_dns, "edge-1", logs) as external_dns:
        apply_as_agent(edge_1, [mixed])
        eventually(
            lambda: f"Skipping endpoint [:{host}] due to invalid configuration" in external_dns.log(),
            timeout=PUBLISHED,
            what="external-dns to refuse the mixed record set",
        )
        assert public_dns.answers(host) == []
        apply_as_agent(edge_1, [split])
        answers_become(public_dns, host, ["198.51.100.11"])
        assert public_dns.answers(host, "AAAA") == ["2001:db8::12"]
        apply_as_agent(edge_1, [])
        answers_become(public_dns, host, [])


def test_a_cname_at_the_zone_apex_is_never_published(edge_1: KubeAPIServer, public_dns: DnsServer, logs: Path):
    """What a renderer pointing a host at ingress hostnames must keep: no CNAME where the zone's SOA is.

    bind9 drops such an update without an error, and external-dns sends it again every sync.
    """
    apex = _one_writer_endpoint("apex-dns.public-dns", ZONE, ["lb-1.cloud.test"], "CNAME")
    with start_external_dns(edge_1, public_dns, "edge-1", logs) as external_dns:
        apply_as_agent(edge_1, [apex])
        eventually(
            lambda: external_dns.log().count(f"Adding RR: {ZONE} 0 CNAME lb-1.cloud.test") >= 2,
            timeout=PUBLISHED,
            what="external-dns to send the apex CNAME twice",
        )
        assert public_dns.answers(ZONE, "CNAME") == []
        apply_as_agent(edge_1, [])


def test_a_rendered_record_set_is_published_with_its_ttl(edge_1: KubeAPIServer, public_dns: DnsServer, logs: Path):
    """external-dns publishes a DNSEndpoint with no recordTTL with TTL 0 over RFC 2136 (no resolver keeps the
    answer): the renderer always sets one, its default or the intent's DNS target's."""
    host = "ttl.example.com"
    intent = ingress_intent("ttl", [host], ["public-dns"])
    with start_external_dns(edge_1, public_dns, "edge-1", logs):
        apply_as_agent(edge_1, dns_endpoints(fleet(["edge-1"], [intent]), "edge-1"))
        answers_become(public_dns, host, [ADDRESSES["edge-1"]])
        assert public_dns.ttls(host) == {DEFAULT_RECORD_TTL}
        spec = intent.spec.to_wire()
        spec["dns"][0]["ttl"] = 300
        chosen = REGISTRY.parse(
            {"kind": "IngressIntent", "metadata": {"name": "ttl", "project": PROJECT}, "spec": spec}
        )
        apply_as_agent(edge_1, dns_endpoints(fleet(["edge-1"], [chosen]), "edge-1"))
        eventually(lambda: public_dns.ttls(host) == {300}, timeout=PUBLISHED, what=f"{host} published with TTL 300")
        apply_as_agent(edge_1, [])
        answers_become(public_dns, host, [])
