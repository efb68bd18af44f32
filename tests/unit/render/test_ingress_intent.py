"""IngressIntent rendering: a golden scenario, Istio schema validity, DNS records and properties.

Golden files: `tests/unit/render/golden/ingress/<cluster>.yaml`, regenerated like the egress ones
(`MESHPLANE_REGENERATE_GOLDEN=1`), reviewed, checked in. The scenario's clusters and logical clouds
are the egress scenario's.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshplane.model.intents import LogicalCloudSpec
from meshplane.model.resource import Resource
from meshplane.server.render.fleet import OWNER_NAME, OWNER_PROJECT, Fleet, placement_targets
from meshplane.server.render.ingress import render_ingress_intent
from meshplane_testing.istio_schema import validate_istio
from meshplane_testing.render_scenarios import (
    CLUSTERS,
    GATEWAY_NAMESPACE,
    GOLDEN,
    by_kind,
    check_golden,
    fleet_clouds,
    parse,
    project_namespaces,
    render_all,
    scenario_clusters,
    scenario_fleet,
    shuffled,
    to_yaml,
)

from .ingress_strategies import ingress_fleets

DNS_SERVER_LABEL = "meshplane.io/dns-server"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def ingress_scenario() -> list[Resource]:
    return [
        # The storefront for customers, in retail: HTTPS, a canary split, published to two DNS servers.
        parse(
            "IngressIntent",
            "storefront",
            {
                "hosts": ["shop.example.com", "www.shop.example.com"],
                "dns": [
                    {"server": "public-dns", "zone": "example.com"},
                    {"server": "partner-dns", "zone": "www.shop.example.com"},
                ],
                "entities": [{"name": "public", "tls": {"mode": "SIMPLE", "credentialName": "shop-cert"}}],
                "routes": [
                    {"match": {"prefix": "/"}, "to": {"service": "web", "port": 8080}},
                    {
                        "match": {"prefix": "/api"},
                        "split": [
                            {"service": "orders", "port": 8080, "weight": 90},
                            {"service": "orders-canary", "port": 8080, "weight": 10},
                        ],
                    },
                    {"match": {"exact": "/healthz"}, "to": {"service": "web", "port": 8081}},
                ],
                "access": [
                    {"action": "ALLOW", "sources": {"ipBlocks": ["0.0.0.0/0"]}},
                    {"action": "DENY", "sources": {"ipBlocks": ["192.0.2.0/24"]}},
                ],
                "placement": {"logicalCloud": "retail"},
            },
        ),
        # The same storefront again, for staff, in ops: mutual TLS or plain HTTP from the office.
        parse(
            "IngressIntent",
            "storefront-ops",
            {
                "hosts": ["ops.shop.example.com"],
                "dns": [{"server": "internal-dns", "zone": "shop.example.com"}],
                "entities": [
                    {"name": "staff", "tls": {"mode": "MUTUAL", "credentialName": "ops-cert"}},
                    {"name": "office"},
                ],
                "routes": [{"match": {"prefix": "/"}, "to": {"service": "web", "port": 8080}}],
                "access": [
                    {
                        "action": "ALLOW",
                        "sources": {"requestPrincipals": ["https://idp.example.com/*"]},
                        "jwtClaims": {"groups": "ops"},
                    },
                    {"action": "ALLOW", "sources": {"ipBlocks": ["10.0.0.0/8"]}},
                ],
                "placement": {"logicalCloud": "ops"},
                "authentication": {
                    "jwt": [{"issuer": "https://idp.example.com", "jwksUri": "https://idp.example.com/keys"}]
                },
            },
        ),
    ]


def check_dns_endpoint(obj: dict) -> None:
    """The shape external-dns' DNSEndpoint CRD takes."""
    assert obj["apiVersion"] == "externaldns.k8s.io/v1alpha1"
    assert set(obj) == {"apiVersion", "kind", "metadata", "spec"}
    assert obj["metadata"]["name"] and obj["metadata"]["namespace"]
    assert DNS_SERVER_LABEL in obj["metadata"]["labels"]
    assert set(obj["spec"]) == {"endpoints"} and obj["spec"]["endpoints"]
    for endpoint in obj["spec"]["endpoints"]:
        assert set(endpoint) == {"dnsName", "recordType", "targets", "recordTTL"}
        assert isinstance(endpoint["recordTTL"], int) and endpoint["recordTTL"] > 0
        assert endpoint["recordType"] in ("A", "AAAA", "CNAME")
        assert endpoint["targets"] and all(isinstance(t, str) and t for t in endpoint["targets"])


def check_valid(obj: dict) -> None:
    if obj["kind"] == "DNSEndpoint":
        check_dns_endpoint(obj)
    else:
        assert validate_istio(obj) == [], (obj["kind"], obj["metadata"]["name"])


# --- golden and schema ---------------------------------------------------------------------------


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_ingress_scenario_matches_the_reviewed_golden_yaml(cluster: str) -> None:
    intents = ingress_scenario()
    objects = render_all(render_ingress_intent, intents, scenario_fleet(ingress_intents=intents), cluster)
    check_golden(GOLDEN / "ingress" / f"{cluster}.yaml", to_yaml(objects))


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_every_rendered_ingress_object_is_valid(cluster: str) -> None:
    intents = ingress_scenario()
    objects = render_all(render_ingress_intent, intents, scenario_fleet(ingress_intents=intents), cluster)
    assert objects
    for obj in objects:
        check_valid(obj)


def test_routes_go_most_specific_first_with_split_weights() -> None:
    intents = ingress_scenario()
    (route,) = by_kind(render_ingress_intent(intents[0], scenario_fleet(), "edge-1"), "VirtualService")
    http = route["spec"]["http"]
    assert [r["match"][0]["uri"] for r in http] == [{"exact": "/healthz"}, {"prefix": "/api"}, {"prefix": "/"}]
    assert [(d["destination"]["host"], d["weight"]) for d in http[1]["route"]] == [
        ("orders.shop.svc.cluster.local", 90),
        ("orders-canary.shop.svc.cluster.local", 10),
    ]


def _records(objects: list[dict]) -> dict[str, list[tuple[str, str, list[str]]]]:
    return {
        r["metadata"]["labels"][DNS_SERVER_LABEL]: [
            (e["dnsName"], e["recordType"], e["targets"]) for e in r["spec"]["endpoints"]
        ]
        for r in by_kind(objects, "DNSEndpoint")
    }


def _writers(intent: Resource, fleet: Fleet) -> dict[str, dict[str, list[tuple[str, str, list[str]]]]]:
    """cluster -> its DNS records of `intent`, for the clusters that have any."""
    out = {c: _records(render_ingress_intent(intent, fleet, c)) for c in fleet.clusters}
    return {c: records for c, records in out.items() if records}


def test_one_cluster_writes_each_record_set_with_the_ingress_addresses_of_every_serving_cluster() -> None:
    """external-dns cannot merge one name's records across owners: one writer, every serving cluster's
    ingress address in its targets, and never an east-west gateway (mTLS passthrough, not user-facing)."""
    storefront = ingress_scenario()[0]
    both = [("A", ["203.0.113.11", "203.0.113.12"]), ("AAAA", ["2001:db8::12"])]
    assert _writers(storefront, scenario_fleet()) == {
        "edge-1": {
            "partner-dns": [("www.shop.example.com", kind, targets) for kind, targets in both],
            "public-dns": [
                (host, kind, targets) for host in ("shop.example.com", "www.shop.example.com") for kind, targets in both
            ],
        }
    }


def test_when_the_writing_cluster_leaves_the_next_serving_cluster_by_name_writes_the_records() -> None:
    storefront = ingress_scenario()[0]
    clusters = scenario_clusters()
    clouds = fleet_clouds()
    clouds[("shop", "retail")] = LogicalCloudSpec.model_validate(
        {"clusters": [{"name": "edge-2", "namespace": "shop"}]}
    )
    records = {"public-dns", "partner-dns"}
    left = _writers(storefront, Fleet(clusters=clusters, logical_clouds=clouds))
    assert set(left) == {"edge-2"} and set(left["edge-2"]) == records
    clusters["edge-1"] = dataclasses.replace(clusters["edge-1"], ingress_addresses=())
    unknown = _writers(storefront, Fleet(clusters=clusters, logical_clouds=fleet_clouds()))
    assert unknown == left
    assert {t for e in unknown["edge-2"]["public-dns"] for t in e[2]} == {"203.0.113.12", "2001:db8::12"}


def test_a_hostname_address_becomes_a_cname_only_where_no_serving_cluster_has_an_ip() -> None:
    """DNS allows one CNAME per name and nothing beside it."""
    storefront = ingress_scenario()[0]
    clusters = scenario_clusters()
    clusters["edge-1"] = dataclasses.replace(clusters["edge-1"], ingress_addresses=("lb-b.example.net",))
    clusters["edge-2"] = dataclasses.replace(clusters["edge-2"], ingress_addresses=("lb-a.example.net",))
    cname = _writers(storefront, Fleet(clusters=clusters, logical_clouds=fleet_clouds()))
    assert cname["edge-1"]["public-dns"] == [
        (host, "CNAME", ["lb-a.example.net"]) for host in ("shop.example.com", "www.shop.example.com")
    ]
    assert "partner-dns" not in cname["edge-1"]  # its zone's apex: no CNAME there
    clusters["edge-2"] = dataclasses.replace(clusters["edge-2"], ingress_addresses=("lb-a.example.net", "203.0.113.12"))
    mixed = _writers(storefront, Fleet(clusters=clusters, logical_clouds=fleet_clouds()))
    assert mixed["edge-1"]["partner-dns"] == [("www.shop.example.com", "A", ["203.0.113.12"])]


def _ttls(intent: Resource, fleet: Fleet) -> dict[tuple[str, str], set[int | None]]:
    """(server, host) -> the recordTTLs its endpoints carry, over every cluster."""
    out: dict[tuple[str, str], set[int | None]] = {}
    for cluster in fleet.clusters:
        for obj in by_kind(render_ingress_intent(intent, fleet, cluster), "DNSEndpoint"):
            server = obj["metadata"]["labels"][DNS_SERVER_LABEL]
            for endpoint in obj["spec"]["endpoints"]:
                out.setdefault((server, endpoint["dnsName"]), set()).add(endpoint.get("recordTTL"))
    return out


def test_every_record_carries_a_ttl_the_default_or_its_dns_targets() -> None:
    """Without one external-dns publishes TTL 0, and no resolver keeps the answer."""
    storefront = ingress_scenario()[0]
    assert _ttls(storefront, scenario_fleet()) == {
        ("public-dns", "shop.example.com"): {60},
        ("public-dns", "www.shop.example.com"): {60},
        ("partner-dns", "www.shop.example.com"): {60},
    }
    spec = storefront.spec.to_wire()
    spec["dns"] = [
        {"server": "public-dns", "zone": "example.com", "ttl": 300},
        {"server": "public-dns", "zone": "www.shop.example.com", "ttl": 30},
        {"server": "partner-dns", "zone": "www.shop.example.com"},
    ]
    chosen = parse("IngressIntent", "storefront", spec)
    assert _ttls(chosen, scenario_fleet()) == {
        ("public-dns", "shop.example.com"): {300},
        ("public-dns", "www.shop.example.com"): {30},  # its closest zone's
        ("partner-dns", "www.shop.example.com"): {60},
    }


@pytest.mark.parametrize("ttl", [0, -1, 86401, "60s"])
def test_a_dns_ttl_out_of_range_is_refused(ttl: object) -> None:
    spec = ingress_scenario()[0].spec.to_wire()
    spec["dns"][0]["ttl"] = ttl
    with pytest.raises(ValueError, match="ttl"):
        parse("IngressIntent", "storefront", spec)


def test_no_dns_records_where_no_serving_cluster_has_an_ingress_address() -> None:
    clusters = {name: dataclasses.replace(info, ingress_addresses=()) for name, info in scenario_clusters().items()}
    fleet = Fleet(clusters=clusters, logical_clouds=fleet_clouds())
    assert render_ingress_intent(ingress_scenario()[0], fleet, "edge-1")
    assert _writers(ingress_scenario()[0], fleet) == {}


def test_several_entities_get_gateways_of_their_own() -> None:
    objects = render_ingress_intent(ingress_scenario()[1], scenario_fleet(), "core-1")
    selectors = sorted(tuple(sorted(g["spec"]["selector"].items())) for g in by_kind(objects, "Gateway"))
    assert selectors == [
        (("istio", "ingressgateway"), ("meshplane.io/ingress-entity", "office")),
        (("istio", "ingressgateway"), ("meshplane.io/ingress-entity", "staff")),
    ]


def _named(name: str, entities: list[str]) -> Resource:
    return parse(
        "IngressIntent",
        name,
        {
            "hosts": [f"{name[:40]}.example.com"],
            "entities": [{"name": e} for e in entities],
            "routes": [{"match": {"prefix": "/"}, "to": {"service": "web", "port": 8080}}],
            "placement": {"logicalCloud": "retail"},
        },
    )


def test_gateway_names_are_dns_labels_unique_per_intent_and_entity_however_long() -> None:
    """istiod refuses a Gateway whose name is not a DNS label, and a VirtualService naming one."""
    long = "storefront-" + "x" * 52
    intents = [_named(long, [f"{'e' * 62}1", f"{'e' * 62}2"]), _named("a", ["b-c"]), _named("a-b", ["c"])]
    fleet = scenario_fleet(ingress_intents=intents)
    names = []
    for intent in intents:
        objects = render_ingress_intent(intent, fleet, "edge-1")
        gateways = [g["metadata"]["name"] for g in by_kind(objects, "Gateway")]
        (route,) = by_kind(objects, "VirtualService")
        assert route["spec"]["gateways"] == sorted(f"shop/{g}" for g in gateways)
        names += gateways
    assert all(DNS_LABEL.match(n) for n in names), names
    assert len(names) == len(set(names)) == 4


# --- properties over generated fleets -----------------------------------------------------------

PROPERTIES = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTIES
@given(ingress_fleets(), st.integers(0, 2**16))
def test_ingress_rendering_is_deterministic_and_independent_of_input_order(fleet: Fleet, seed: int) -> None:
    other = shuffled(fleet, seed)
    for cluster in CLUSTERS:
        first = to_yaml(render_all(render_ingress_intent, fleet.ingress_intents, fleet, cluster))
        again = to_yaml(render_all(render_ingress_intent, fleet.ingress_intents, fleet, cluster))
        reordered = to_yaml(render_all(render_ingress_intent, other.ingress_intents, other, cluster))
        assert first == again == reordered


@PROPERTIES
@given(ingress_fleets())
def test_ingress_objects_stay_in_their_project_and_logical_clouds(fleet: Fleet) -> None:
    for intent in fleet.ingress_intents:
        project = intent.metadata.project
        targets = placement_targets(fleet, project, intent.spec.placement)
        for cluster in CLUSTERS:
            objects = render_ingress_intent(intent, fleet, cluster)
            if cluster not in targets:
                assert objects == []
                continue
            for obj in objects:
                assert obj["metadata"]["labels"][OWNER_PROJECT] == project
                assert obj["metadata"]["labels"][OWNER_NAME] == intent.metadata.name
                assert obj["metadata"]["namespace"] in {targets[cluster], GATEWAY_NAMESPACE}
                assert obj["metadata"]["namespace"] in project_namespaces(fleet, project, cluster) | {GATEWAY_NAMESPACE}
                for route in obj["spec"].get("http", []):
                    for destination in route["route"]:
                        assert destination["destination"]["host"].endswith(f".{targets[cluster]}.svc.cluster.local")


@PROPERTIES
@given(ingress_fleets())
def test_ingress_names_never_collide_within_a_cluster(fleet: Fleet) -> None:
    for cluster in CLUSTERS:
        keys = [
            (o["kind"], o["metadata"]["namespace"], o["metadata"]["name"])
            for o in render_all(render_ingress_intent, fleet.ingress_intents, fleet, cluster)
        ]
        assert len(keys) == len(set(keys))


def _in_zone(host: str, zone: str) -> bool:
    return host.removeprefix("*.") == zone or host.endswith("." + zone)


@PROPERTIES
@given(ingress_fleets())
def test_each_record_set_has_one_writer_and_the_ingress_addresses_of_every_serving_cluster(fleet: Fleet) -> None:
    east_west = {info.east_west.address for info in fleet.clusters.values() if info.east_west}
    for intent in fleet.ingress_intents:
        targets = placement_targets(fleet, intent.metadata.project, intent.spec.placement)
        serving = sorted(c for c in targets if fleet.clusters[c].ingress_addresses)
        addresses = {a for c in serving for a in fleet.clusters[c].ingress_addresses}
        expected = {}
        for target in intent.spec.dns if serving else []:
            names = {h for h in intent.spec.hosts if _in_zone(h, target.zone)}
            if names:
                expected.setdefault(target.server, set()).update(names)
        writers = _writers(intent, fleet)
        assert list(writers) == ([serving[0]] if expected else [])
        for records in writers.values():
            assert {server: {e[0] for e in entries} for server, entries in records.items()} == expected
            got = {t for entries in records.values() for e in entries for t in e[2]}
            assert got == addresses and not got & east_west


@settings(max_examples=25, deadline=None)
@given(ingress_fleets())
def test_generated_ingress_objects_are_valid(fleet: Fleet) -> None:
    for cluster in CLUSTERS:
        for obj in render_all(render_ingress_intent, fleet.ingress_intents, fleet, cluster):
            check_valid(obj)


def test_no_cname_is_rendered_at_a_zone_apex() -> None:
    """Addresses reported after the intent was accepted may be hostnames only: the apex then gets no record
    (bind9 drops a CNAME there and external-dns sends it again every sync), the names below it still do."""
    spec = ingress_scenario()[0].spec.to_wire()
    spec["hosts"] = ["example.com", "shop.example.com"]
    apex = parse("IngressIntent", "storefront", spec)
    clusters = {
        name: dataclasses.replace(info, ingress_addresses=("lb-a.example.net",))
        for name, info in scenario_clusters().items()
    }
    records = _writers(apex, Fleet(clusters=clusters, logical_clouds=fleet_clouds()))
    assert records["edge-1"]["public-dns"] == [("shop.example.com", "CNAME", ["lb-a.example.net"])]
    with_ip = _writers(apex, scenario_fleet())
    assert [r[0] for r in with_ip["edge-1"]["public-dns"]] == ["example.com"] * 2 + ["shop.example.com"] * 2
