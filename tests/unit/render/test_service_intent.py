"""ServiceIntent rendering: golden output per cluster, Istio's schemas, and properties over generated fleets.

Golden files: `golden/service/<cluster>.yaml` hold what each cluster of the scenario below receives
(all its service intents rendered, Sidecars merged). After an intended change of the renderer,
regenerate them with

    MESHPLANE_REGENERATE_GOLDEN=1 .venv/bin/pytest tests/unit/render/test_service_intent.py -k golden

and review the diff before checking it in: it is the reviewed contract of what the mesh receives.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshplane.model.intents import LogicalCloudSpec
from meshplane.model.kinds import EastWestGateway
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import Resource
from meshplane.server.render.fleet import (
    OWNER_NAME,
    OWNER_PROJECT,
    ClusterInfo,
    Fleet,
    cloud_members,
    placement_targets,
)
from meshplane.server.render.names import VIP_NETWORK, HostKey, allocate_vips
from meshplane.server.render.service import render_service_intent
from meshplane_testing.istio_schema import validate_istio

from .service_scenario import SCENARIO, fleet_from_docs, objects_of, render_cluster

GOLDEN = Path(__file__).parent / "golden" / "service"
REGENERATE = os.environ.get("MESHPLANE_REGENERATE_GOLDEN") == "1"


def to_yaml(objects: list[dict]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False, width=120)


@pytest.fixture(scope="module")
def scenario() -> Fleet:
    return fleet_from_docs([d for d in yaml.safe_load_all(SCENARIO) if d])


# --- golden -------------------------------------------------------------------------------------


@pytest.mark.parametrize("cluster", ["core-1", "edge-1", "edge-2"])
def test_golden_each_cluster_receives_the_reviewed_objects(scenario: Fleet, cluster: str) -> None:
    path = GOLDEN / f"{cluster}.yaml"
    rendered = to_yaml(render_cluster(scenario, cluster))
    if REGENERATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered)
    assert path.read_text() == rendered, f"{path.name} differs: regenerate (see module docstring) and review"


@pytest.mark.parametrize("cluster", ["core-1", "edge-1", "edge-2"])
def test_every_rendered_object_validates_against_istio_crds(scenario: Fleet, cluster: str) -> None:
    objects = render_cluster(scenario, cluster)
    assert objects
    for obj in objects:
        assert validate_istio(obj) == [], obj["metadata"]


def test_the_validator_catches_what_an_apiserver_would_refuse() -> None:
    good = {
        "apiVersion": "networking.istio.io/v1",
        "kind": "DestinationRule",
        "metadata": {"name": "orders-dr", "namespace": "shop"},
        "spec": {"host": "orders", "trafficPolicy": {"outlierDetection": {"interval": "10s"}}},
    }
    assert validate_istio(good) == []
    assert validate_istio({**good, "kind": "Gadget"})[0].startswith("no served Istio CRD")
    typo = {**good, "spec": {"host": "orders", "trafficPolcy": {}}}
    assert any("trafficPolcy" in e for e in validate_istio(typo))
    bad_enum = {**good, "spec": {"host": "orders", "trafficPolicy": {"tls": {"mode": "MTLS"}}}}
    assert any("spec.trafficPolicy.tls.mode" in e for e in validate_istio(bad_enum))
    bad_duration = {**good, "spec": {"host": "o", "trafficPolicy": {"outlierDetection": {"interval": "10 s"}}}}
    assert any("duration" in e for e in validate_istio(bad_duration))
    assert any("host" in e for e in validate_istio({**good, "spec": {}}))
    assert any("metadata.namespace" in e for e in validate_istio({**good, "metadata": {"name": "x"}}))


# --- behaviours of the scenario, stated one by one ------------------------------------------------


def test_server_cluster_gets_allow_and_deny_policies_with_principals_of_every_client_namespace(
    scenario: Fleet,
) -> None:
    objects = render_cluster(scenario, "core-1")
    policies = objects_of(objects, "AuthorizationPolicy", "ops")
    allow, deny = policies["orders-ops-allow"]["spec"], policies["orders-ops-deny"]["spec"]
    allowed = {p for rule in allow["rules"] for f in rule["from"] for p in f["source"].get("principals", [])}
    assert allowed == {"cluster.local/ns/ops/sa/reporting", "cluster.local/ns/shop/sa/cart"}
    assert any(f["source"].get("ipBlocks") == ["10.20.0.0/16"] for rule in allow["rules"] for f in rule["from"])
    assert deny["action"] == "DENY"
    assert deny["rules"] == [
        {
            "from": [{"source": {"principals": ["cluster.local/ns/shop/sa/cart"]}}],
            "to": [{"operation": {"ports": ["9090"], "paths": ["/orders.v1.Orders/DeleteOrder"]}}],
        }
    ]


def test_client_only_cluster_reaches_remote_replicas_through_their_east_west_gateways(scenario: Fleet) -> None:
    objects = render_cluster(scenario, "core-1")
    entry = objects_of(objects, "ServiceEntry", "ops")["orders-se"]["spec"]
    assert entry["hosts"] == ["orders.shop.svc.cluster.local"]
    assert entry["resolution"] == "STATIC"
    assert [e["address"] for e in entry["endpoints"]] == ["203.0.113.11", "203.0.113.12"]
    assert ipaddress.ip_address(entry["addresses"][0]) in VIP_NETWORK
    rule = objects_of(objects, "DestinationRule", "ops")["orders-dr"]["spec"]
    assert rule["host"] == entry["hosts"][0]
    assert rule["trafficPolicy"]["tls"] == {"mode": "ISTIO_MUTUAL"}


def test_a_gateway_named_by_dns_makes_the_entry_resolve_by_dns(scenario: Fleet) -> None:
    entry = objects_of(render_cluster(scenario, "edge-2"), "ServiceEntry", "shop")["orders-ops-se"]["spec"]
    assert entry["resolution"] == "DNS"
    assert {e["address"] for e in entry["endpoints"]} == {"ew.core-1.example.net", "203.0.113.11"}


def test_a_server_cluster_without_east_west_gateway_is_left_out_of_remote_entries(scenario: Fleet) -> None:
    clusters = dict(scenario.clusters)
    clusters["edge-2"] = ClusterInfo("edge-2", clusters["edge-2"].labels, None)
    fleet = Fleet(clusters, scenario.logical_clouds, scenario.service_intents)
    orders = next(i for i in fleet.service_intents if i.metadata.name == "orders")
    entry = objects_of(render_service_intent(orders, fleet, "core-1"), "ServiceEntry")["orders-se"]["spec"]
    assert [e["labels"]["meshplane.io/cluster"] for e in entry["endpoints"]] == ["edge-1"]


def test_sidecars_of_one_workload_from_two_intents_merge_into_one(scenario: Fleet) -> None:
    sidecar = objects_of(render_cluster(scenario, "edge-1"), "Sidecar", "shop")["cart-sidecar"]
    assert sidecar["spec"]["egress"][0]["hosts"] == [
        "./*",
        "istio-system/*",
        "ops/orders.ops.svc.cluster.local",
    ]
    assert sidecar["metadata"]["annotations"] == {"meshplane.io/intents": "ledger,orders,orders-ops,stock"}
    assert OWNER_NAME not in sidecar["metadata"]["labels"]


def _one_app_twice(first_mode: str, second_mode: str) -> Fleet:
    """orders' pods in edge-1 behind two Services of the retail cloud, each with an intent and an mTLS mode."""
    docs = [d for d in yaml.safe_load_all(SCENARIO) if d and d["kind"] in ("Cluster", "LogicalCloud")]
    for name, service, port, mode in (
        ("orders", "orders", 8080, first_mode),
        ("orders-admin", "admin", 9090, second_mode),
    ):
        spec = {
            "service": {"name": service, "app": "orders", "port": port},
            "placement": {"logicalCloud": "retail", "clusters": ["edge-1"]},
            "mtls": mode,
            "clients": [{"service": {"name": "cart"}}],
        }
        docs.append(
            {
                "apiVersion": "meshplane.io/v1alpha1",
                "kind": "ServiceIntent",
                "metadata": {"name": name, "project": "shop"},
                "spec": spec,
            }
        )
    return fleet_from_docs(docs)


def test_two_intents_of_one_app_share_one_peer_authentication_with_each_mode_on_its_port() -> None:
    """Istio honours one workload-level PeerAuthentication per workload (the oldest): two intents selecting the
    same pods with a PeerAuthentication each left one of them without its mode. They share one, each intent's
    mode on its own port and the strictest on the pods' other ports, rendered the same by both intents."""
    fleet = _one_app_twice("STRICT", "PERMISSIVE")
    peers = objects_of(render_cluster(fleet, "edge-1"), "PeerAuthentication", "shop")
    assert list(peers) == ["orders-peer"]
    assert peers["orders-peer"]["spec"] == {
        "selector": {"matchLabels": {"app": "orders"}},
        "mtls": {"mode": "STRICT"},
        "portLevelMtls": {"8080": {"mode": "STRICT"}, "9090": {"mode": "PERMISSIVE"}},
    }
    labels = peers["orders-peer"]["metadata"]["labels"]
    assert OWNER_NAME not in labels and labels[OWNER_PROJECT] == "shop"
    first, second = fleet.service_intents
    assert objects_of(render_service_intent(first, fleet, "edge-1"), "PeerAuthentication") == peers
    assert objects_of(render_service_intent(second, fleet, "edge-1"), "PeerAuthentication") == peers
    alike = objects_of(render_cluster(_one_app_twice("PERMISSIVE", "PERMISSIVE"), "edge-1"), "PeerAuthentication")
    assert alike["orders-peer"]["spec"]["mtls"] == {"mode": "PERMISSIVE"}


def test_the_east_west_gateway_is_rendered_only_where_other_clusters_call_in(scenario: Fleet) -> None:
    gateways = {
        cluster: [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in render_cluster(scenario, cluster)]
        for cluster in ("core-1", "edge-1", "edge-2")
    }
    namespaces = {c: [ns for ns, name in objs if name == "meshplane-eastwest"] for c, objs in gateways.items()}
    # retail's orders is called from core-1 (edge-1, edge-2 serve it); ops' orders from edge-2.
    assert namespaces == {
        "core-1": ["ops"],
        "edge-1": ["ops", "shop"],
        "edge-2": ["shop"],
    }


def test_non_http_services_get_neither_operations_nor_virtual_services(scenario: Fleet) -> None:
    doc = {
        "apiVersion": "meshplane.io/v1alpha1",
        "kind": "ServiceIntent",
        "metadata": {"name": "db", "project": "shop"},
        "spec": {
            "service": {"name": "db", "port": 5432, "protocol": "TCP"},
            "placement": {"logicalCloud": "retail"},
            "trafficPolicy": {"timeout": "1s"},
            "clients": [{"service": {"name": "orders"}}],
        },
    }
    objects = render_service_intent(REGISTRY.parse(doc), scenario, "edge-1")
    assert not objects_of(objects, "VirtualService")
    assert objects_of(objects, "AuthorizationPolicy")["db-allow"]["spec"]["rules"] == [
        {
            "from": [{"source": {"principals": ["cluster.local/ns/shop/sa/orders"]}}],
            "to": [{"operation": {"ports": ["5432"]}}],
        }
    ]


def test_an_intent_without_clients_admits_nobody(scenario: Fleet) -> None:
    doc = {
        "apiVersion": "meshplane.io/v1alpha1",
        "kind": "ServiceIntent",
        "metadata": {"name": "lonely", "project": "shop"},
        "spec": {"service": {"name": "lonely", "port": 80}, "placement": {"logicalCloud": "retail"}},
    }
    allow = objects_of(render_service_intent(REGISTRY.parse(doc), scenario, "edge-1"), "AuthorizationPolicy")
    assert allow["lonely-allow"]["spec"] == {"selector": {"matchLabels": {"app": "lonely"}}, "action": "ALLOW"}


def test_rendered_objects_share_no_structure_so_yaml_has_no_anchors(scenario: Fleet) -> None:
    doc = {
        "apiVersion": "meshplane.io/v1alpha1",
        "kind": "ServiceIntent",
        "metadata": {"name": "stock", "project": "shop"},
        "spec": {
            "service": {"name": "stock", "port": 80},
            "placement": {"logicalCloud": "retail"},
            "clients": [{"service": {"name": "cart"}, "access": [{"methods": ["GET"]}, {"methods": ["PUT"]}]}],
        },
    }
    text = to_yaml(render_service_intent(REGISTRY.parse(doc), scenario, "edge-1"))
    assert "&id" not in text and "*id" not in text


def test_vips_are_distinct_and_independent_of_key_order() -> None:
    keys = [HostKey("p", "c", f"ns{i}", "svc") for i in range(500)]
    forward, backward = allocate_vips(keys), allocate_vips(reversed(keys))
    assert forward == backward
    assert len(set(forward.values())) == len(keys)


# --- properties over generated fleets -----------------------------------------------------------

CLUSTERS = ["c0", "c1", "c2", "c3"]
PROJECTS = ["p0", "p1"]
SERVICE_NAMES = ["orders", "cart", "audit"]


def mtls_modes(clients: list[dict]) -> list[str]:
    modes = {"STRICT", "PERMISSIVE", "DISABLE"}
    if any("cidrs" in c for c in clients):
        modes.discard("STRICT")
    if any("service" in c for c in clients):
        modes.discard("DISABLE")
    return sorted(modes)


@st.composite
def fleets(draw: st.DrawFn) -> Fleet:
    clusters = {}
    for name in CLUSTERS:
        address = draw(st.sampled_from([None, f"198.51.100.{CLUSTERS.index(name) + 1}", f"ew.{name}.example"]))
        labels = {"region": draw(st.sampled_from(["r0", "r1"]))}
        east_west = EastWestGateway(address=address, port=15443) if address else None
        clusters[name] = ClusterInfo(name, labels, east_west)
    clouds: dict[tuple[str, str], LogicalCloudSpec] = {}
    intents: list[Resource] = []
    for project in PROJECTS:
        # Namespaces belong to one project: every one is prefixed with the project's name.
        cloud_names = [f"cloud{i}" for i in range(draw(st.integers(1, 2)))]
        for cloud in cloud_names:
            members = draw(st.lists(st.sampled_from(CLUSTERS), min_size=1, max_size=3, unique=True))
            namespace = f"{project}-{draw(st.sampled_from(['a', 'b']))}"
            clusters_ns = [{"name": m, "namespace": f"{namespace}{draw(st.sampled_from(['', 'x']))}"} for m in members]
            clouds[(project, cloud)] = LogicalCloudSpec.model_validate({"clusters": clusters_ns})
        for index in range(draw(st.integers(1, 3))):
            protocol = draw(st.sampled_from(["HTTP", "GRPC", "TCP"]))
            http = protocol != "TCP"
            clients = []
            for _ in range(draw(st.integers(0, 3))):
                access = [
                    {
                        "action": draw(st.sampled_from(["ALLOW", "DENY"])),
                        **({"methods": draw(st.lists(st.sampled_from(["GET", "POST"]), unique=True))} if http else {}),
                    }
                    for _ in range(draw(st.integers(1, 2)))
                ]
                if draw(st.booleans()):
                    service = {"name": draw(st.sampled_from(SERVICE_NAMES))}
                    if draw(st.booleans()):
                        service["logicalCloud"] = draw(st.sampled_from(cloud_names))
                    if draw(st.booleans()):
                        service["namespace"] = f"{project}-fixed"
                    clients.append({"service": service, "access": access})
                else:
                    clients.append({"cidrs": [f"10.{index}.{len(clients)}.0/24"], "access": access})
            cloud = draw(st.sampled_from([None, *cloud_names]))
            placement: dict = {"logicalCloud": cloud} if cloud else {}
            # Narrowed placements leave clusters where clients run but no replica does.
            narrowed = draw(st.lists(st.sampled_from(CLUSTERS), max_size=2, unique=True))
            if narrowed:
                placement["clusters"] = narrowed
            headless = draw(st.booleans())
            traffic: dict = {"timeout": "3s"}
            if not headless:
                # Callers of a headless Service pick the pod themselves: no balancing to ask for.
                traffic["localityFailover"] = draw(st.booleans())
                keys = [None, {"useSourceIp": True}, *([{"httpHeaderName": "x-user"}] if http else [])]
                if (hashing := draw(st.sampled_from(keys))) is not None:
                    traffic["consistentHash"] = hashing
            doc = {
                "apiVersion": "meshplane.io/v1alpha1",
                "kind": "ServiceIntent",
                "metadata": {"name": f"i{index}", "project": project},
                "spec": {
                    # One host per intent and namespace, as write-time validation ensures.
                    "service": {
                        "name": f"s{index}",
                        "app": "orders",
                        "port": 8080 + index,
                        "protocol": protocol,
                        "headless": headless,
                    },
                    "placement": placement,
                    # Callers outside the mesh (cidrs) need a server that accepts plaintext, and mesh
                    # callers (services) one that takes mTLS, where their principal is.
                    "mtls": draw(st.sampled_from(mtls_modes(clients))),
                    "trafficPolicy": traffic,
                    "clients": clients,
                },
            }
            intents.append(REGISTRY.parse(doc))
    return Fleet(clusters=clusters, logical_clouds=clouds, service_intents=intents)


def shuffled(fleet: Fleet, rng: random.Random) -> Fleet:
    """The same fleet with every list and mapping given in another order."""

    def mix(items: list) -> list:
        items = list(items)
        rng.shuffle(items)
        return items

    clusters = dict(mix(list(fleet.clusters.items())))
    clouds = {
        key: spec.model_copy(update={"clusters": mix(spec.clusters)})
        for key, spec in mix(list(fleet.logical_clouds.items()))
    }
    intents = []
    for intent in mix(list(fleet.service_intents)):
        clients = [
            c.model_copy(update={"access": [a.model_copy(update={"methods": mix(a.methods)}) for a in mix(c.access)]})
            for c in mix(intent.spec.clients)
        ]
        intents.append(intent.model_copy(update={"spec": intent.spec.model_copy(update={"clients": clients})}))
    return Fleet(clusters=clusters, logical_clouds=clouds, service_intents=intents)


PROPERTY_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(fleet=fleets(), seed=st.integers(0, 2**32 - 1))
def test_rendering_is_deterministic_and_independent_of_input_order(fleet: Fleet, seed: int) -> None:
    other = shuffled(fleet, random.Random(seed))
    for cluster in CLUSTERS:
        first = to_yaml(render_cluster(fleet, cluster))
        assert to_yaml(render_cluster(fleet, cluster)) == first
        assert to_yaml(render_cluster(other, cluster)) == first


_NAMESPACE_REFS = [
    re.compile(r"/ns/([a-z0-9-]+)/sa/"),
    re.compile(r"\.([a-z0-9-]+)\.svc\.cluster\.local"),
    re.compile(r'"([a-z0-9-]+)/[^"]*\.svc\.cluster\.local"'),
]


def namespaces_named_by(intent: Resource, fleet: Fleet) -> tuple[set[str], set[str]]:
    """(namespaces, clusters) of the logical clouds an intent names, or that it defaults to."""
    project = intent.metadata.project
    spec = intent.spec
    placements = [placement_targets(fleet, project, spec.placement)]
    namespaces = set()
    for client in spec.clients:
        if client.service is None:
            continue
        cloud = client.service.logical_cloud or spec.placement.logical_cloud
        members = cloud_members(fleet, project, cloud) if cloud else dict.fromkeys(fleet.clusters, project)
        placements.append(members)
        if client.service.namespace:
            namespaces.add(client.service.namespace)
    namespaces |= {ns for p in placements for ns in p.values()}
    return namespaces, {c for p in placements for c in p}


@PROPERTY_SETTINGS
@given(fleet=fleets())
def test_no_object_leaks_across_projects_or_logical_clouds(fleet: Fleet) -> None:
    for intent in fleet.service_intents:
        namespaces, clusters = namespaces_named_by(intent, fleet)
        for cluster in CLUSTERS:
            objects = render_service_intent(intent, fleet, cluster)
            if objects:
                assert cluster in clusters
            for obj in objects:
                assert obj["metadata"]["labels"][OWNER_PROJECT] == intent.metadata.project
                assert obj["metadata"]["namespace"] in namespaces
                text = json.dumps(obj["spec"])
                referenced = {m for pattern in _NAMESPACE_REFS for m in pattern.findall(text)}
                referenced |= set(obj["spec"].get("exportTo", [])) - {"."}
                assert referenced <= namespaces, (obj, namespaces)


def expected_allowed(intent: Resource, fleet: Fleet) -> set[str]:
    """Principals and CIDRs of the clients with an ALLOW rule: computed from the spec, not the renderer."""
    project = intent.metadata.project
    spec = intent.spec
    out = set()
    for client in spec.clients:
        if not any(rule.action.value == "ALLOW" for rule in client.access):
            continue
        out |= set(client.cidrs)
        if client.service is not None:
            cloud = client.service.logical_cloud or spec.placement.logical_cloud
            members = cloud_members(fleet, project, cloud) if cloud else dict.fromkeys(fleet.clusters, project)
            account = client.service.service_account or client.service.name
            for namespace in members.values():
                out.add(f"cluster.local/ns/{client.service.namespace or namespace}/sa/{account}")
    return out


@PROPERTY_SETTINGS
@given(fleet=fleets())
def test_every_allowed_client_has_a_matching_allow_rule_and_nothing_else_does(fleet: Fleet) -> None:
    for intent in fleet.service_intents:
        servers = placement_targets(fleet, intent.metadata.project, intent.spec.placement)
        for cluster in servers:
            objects = render_service_intent(intent, fleet, cluster)
            allow = objects_of(objects, "AuthorizationPolicy")[f"{intent.metadata.name}-allow"]["spec"]
            assert allow["action"] == "ALLOW"
            granted = set()
            for rule in allow.get("rules", []):
                assert rule["from"], "a rule without sources would admit every caller"
                for source in rule["from"]:
                    granted |= set(source["source"].get("principals", [])) | set(source["source"].get("ipBlocks", []))
            assert granted == expected_allowed(intent, fleet)


@PROPERTY_SETTINGS
@given(fleet=fleets())
def test_names_and_vips_never_collide_within_a_cluster(fleet: Fleet) -> None:
    vip_of_host: dict[str, str] = {}
    host_of_vip: dict[str, str] = {}
    for cluster in CLUSTERS:
        objects = render_cluster(fleet, cluster)  # asserts that same names mean identical objects
        keys = [(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects]
        assert len(keys) == len(set(keys))
        for entry in objects_of(objects, "ServiceEntry").values():
            (host,), (vip,) = entry["spec"]["hosts"], entry["spec"]["addresses"]
            assert ipaddress.ip_address(vip) in VIP_NETWORK
            assert vip_of_host.setdefault(host, vip) == vip
            assert host_of_vip.setdefault(vip, host) == host


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleet=fleets())
def test_generated_renders_validate_against_istio_crds(fleet: Fleet) -> None:
    for cluster in CLUSTERS:
        for obj in render_cluster(fleet, cluster):
            assert validate_istio(obj) == [], obj
