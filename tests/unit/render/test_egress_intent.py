"""EgressIntent rendering: a golden scenario, Istio schema validity and properties over generated fleets.

Golden files: `tests/unit/render/golden/egress/<cluster>.yaml`. After a deliberate change to the
renderer, regenerate them with `MESHPLANE_REGENERATE_GOLDEN=1 .venv/bin/pytest tests/unit/render`,
review the diff, and check them in.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshplane.model.resource import InvalidObject, Resource
from meshplane.server.render.egress import NAMED_PROXY_ADDRESSES, proxy_address, render_egress_intent
from meshplane.server.render.fleet import OWNER_NAME, OWNER_PROJECT, Fleet, placement_targets
from meshplane.server.render.offline import project_documents
from meshplane_testing.istio_schema import validate_istio
from meshplane_testing.render_scenarios import (
    CLUSTERS,
    GATEWAY_NAMESPACE,
    GOLDEN,
    PROJECTS,
    _cloud_placement,
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

from .istio_authz import Connection, admitted

# --- the scenario: three clusters, two logical clouds, the payments app instantiated in both ---------


def egress_scenario() -> list[Resource]:
    return [
        # The payment provider, for the storefront: through the egress gateway, TLS and plain HTTP.
        parse(
            "EgressIntent",
            "payments",
            {
                "hosts": ["api.payments.example"],
                "ports": [{"number": 443, "protocol": "TLS"}, {"number": 80, "protocol": "HTTP"}],
                "resolution": "DNS",
                "route": {"via": "egressGateway"},
                "clients": [
                    {"service": {"name": "cart"}},
                    {"service": {"name": "checkout", "serviceAccount": "checkout-sa"}},
                ],
                "placement": {"logicalCloud": "retail"},
            },
        ),
        # The same app again, for operations: its sandbox, through the corporate proxy.
        parse(
            "EgressIntent",
            "payments-ops",
            {
                "hosts": ["sandbox.payments.example"],
                "ports": [{"number": 443, "protocol": "TLS"}],
                "route": {"via": "proxy", "proxy": {"address": "10.40.0.5", "port": 3128}},
                "clients": [{"service": {"name": "reporting"}}],
                "placement": {"logicalCloud": "ops"},
            },
        ),
        # A partner's API that wants a client certificate: the egress gateway opens TLS with it.
        parse(
            "EgressIntent",
            "partner",
            {
                "hosts": ["api.partner.example"],
                "ports": [
                    {
                        "number": 80,
                        "protocol": "HTTP",
                        "tlsOrigination": {"mode": "MUTUAL", "credentialName": "partner-client"},
                    }
                ],
                "route": {"via": "egressGateway"},
                "clients": [{"service": {"name": "checkout", "serviceAccount": "checkout-sa"}}],
                "placement": {"logicalCloud": "retail"},
            },
        ),
        # A database outside the mesh, known only by its addresses, reached directly from core-1.
        parse(
            "EgressIntent",
            "ledger-db",
            {
                "addresses": ["203.0.113.11", "203.0.113.10"],
                "ports": [{"number": 5432, "protocol": "TCP", "name": "postgres"}],
                "resolution": "STATIC",
                "clients": [{"service": {"name": "billing"}}, {"service": {"name": "cart", "logicalCloud": "retail"}}],
                "placement": {"logicalCloud": "ops", "clusters": ["core-1"]},
            },
        ),
    ]


# --- golden and schema ---------------------------------------------------------------------------


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_egress_scenario_matches_the_reviewed_golden_yaml(cluster: str) -> None:
    intents = egress_scenario()
    objects = render_all(render_egress_intent, intents, scenario_fleet(egress_intents=intents), cluster)
    check_golden(GOLDEN / "egress" / f"{cluster}.yaml", to_yaml(objects))


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_every_rendered_egress_object_is_valid_for_istio(cluster: str) -> None:
    intents = egress_scenario()
    objects = render_all(render_egress_intent, intents, scenario_fleet(egress_intents=intents), cluster)
    assert objects
    for obj in objects:
        assert validate_istio(obj) == [], obj["metadata"]["name"]


def test_egress_gateway_route_steers_mesh_traffic_through_the_gateway_and_admits_only_the_clients() -> None:
    intents = egress_scenario()
    objects = render_egress_intent(intents[0], scenario_fleet(egress_intents=intents), "edge-2")

    (gateway,) = by_kind(objects, "Gateway")
    assert gateway["metadata"]["namespace"] == GATEWAY_NAMESPACE
    assert gateway["spec"]["selector"] == {"istio": "egressgateway"}
    (route,) = by_kind(objects, "VirtualService")
    assert route["spec"]["gateways"] == ["mesh", f"{GATEWAY_NAMESPACE}/{gateway['metadata']['name']}"]
    assert route["spec"]["tls"][0]["match"][0]["sniHosts"] == ["api.payments.example"]
    assert route["spec"]["tcp"][0]["route"][0]["destination"]["host"] == "api.payments.example"
    (policy,) = by_kind(objects, "AuthorizationPolicy")
    assert policy["spec"]["action"] == "DENY"
    assert policy["spec"]["rules"] == [
        {
            "from": [
                {"source": {"notPrincipals": ["cluster.local/ns/shop/sa/cart", "cluster.local/ns/shop/sa/checkout-sa"]}}
            ],
            "when": [{"key": "connection.sni", "values": ["api.payments.example"]}],
        }
    ]
    assert sorted(s["metadata"]["name"] for s in by_kind(objects, "Sidecar")) == ["cart-sidecar", "checkout-sidecar"]


def test_addresses_without_hosts_get_a_synthesized_host_and_static_endpoints() -> None:
    intents = egress_scenario()
    (entry,) = by_kind(
        render_egress_intent(intents[3], scenario_fleet(egress_intents=intents), "core-1"), "ServiceEntry"
    )
    assert entry["spec"]["hosts"] == ["ledger-db.shop.external"]
    assert entry["spec"]["resolution"] == "STATIC"
    assert entry["spec"]["endpoints"] == [{"address": "203.0.113.10"}, {"address": "203.0.113.11"}]


@pytest.mark.parametrize("proxy", ["10.40.0.5", "proxy.corp.example"])
def test_a_proxy_entry_has_an_address_so_its_port_stays_open_to_other_destinations(proxy: str) -> None:
    """Defect #11 of issue 18: the proxy's TCP entry had no address, so every sidecar it is exported to sent
    all its traffic on the proxy's port there, whatever the destination."""
    intents = egress_scenario()
    spec = {**intents[1].spec.model_dump(by_alias=True, exclude_none=True)}
    spec["route"] = {"via": "proxy", "proxy": {"address": proxy, "port": 3128}}
    intent = parse("EgressIntent", "payments-ops", spec)
    fleet = scenario_fleet(egress_intents=[intent])
    entries = {e["metadata"]["name"]: e for e in by_kind(render_egress_intent(intent, fleet, "core-1"), "ServiceEntry")}
    (address,) = entries["payments-ops-proxy"]["spec"]["addresses"]
    if proxy == "10.40.0.5":
        assert address == proxy
    else:
        assert ipaddress.ip_address(address) in NAMED_PROXY_ADDRESSES
        other = parse("EgressIntent", "ledger-proxy", spec, project="bank")
        assert address == proxy_address(other.spec.route.proxy)


def test_a_client_gets_a_sidecar_only_where_its_logical_cloud_runs() -> None:
    intents = egress_scenario()
    fleet = scenario_fleet(egress_intents=intents)
    # ledger-db is on core-1 only; its retail client `cart` does not run there.
    sidecars = by_kind(render_egress_intent(intents[3], fleet, "core-1"), "Sidecar")
    assert [(s["metadata"]["namespace"], s["metadata"]["name"]) for s in sidecars] == [("ops", "billing-sidecar")]


# --- what Istio makes of it -----------------------------------------------------------------------

EGRESS_GATEWAY = {"istio": "egressgateway", "app": "istio-egressgateway"}
"""The labels of the stock egress gateway's pods (in GATEWAY_NAMESPACE); its Service maps 80 -> 8080 and
443 -> 8443."""
POD_ADDRESS = "10.1.2.3"
CART = "cluster.local/ns/shop/sa/cart"
STRANGER = "cluster.local/ns/shop/sa/intruder"
EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "intents"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def allowed(objects: list[dict], peer: str | None, sni: str, port: int) -> bool:
    """Whether the egress gateway lets a client's connection for `sni` through on its `port`: the mesh leg
    (mTLS from the client's sidecar, TLS passthrough inside) is a TCP chain, where `peer` is the caller."""
    connection = Connection(POD_ADDRESS, peer=peer, sni=sni, http=False, port=port)
    return admitted(objects, connection, EGRESS_GATEWAY, GATEWAY_NAMESPACE)


def _example_objects(cluster: str) -> list[dict]:
    docs = [d for f in ("clusters.yaml", "external.yaml") for d in yaml.safe_load_all((EXAMPLES / f).read_text())]
    return [o for o in project_documents(docs, cluster) if o.get("apiVersion", "").endswith("istio.io/v1")]


def test_a_declared_client_passes_the_egress_gateway_on_the_ports_the_gateway_listens_on() -> None:
    intents = egress_scenario()
    objects = render_egress_intent(intents[0], scenario_fleet(egress_intents=intents), "edge-2")
    # The gateway's filters see the target port: 8443 for the mesh leg of 443, 8080 for 80.
    for port in (8443, 8080):
        assert allowed(objects, CART, "api.payments.example", port)
        assert not allowed(objects, STRANGER, "api.payments.example", port)
    example = _example_objects("edge-2")
    assert allowed(example, CART, "api.payments.example", 8443)
    assert not allowed(example, STRANGER, "api.payments.example", 8443)
    assert not allowed(example, None, "api.payments.example", 8443)


def test_the_egress_gateway_policy_closes_only_the_hosts_of_its_intent() -> None:
    intents = egress_scenario()
    objects = render_egress_intent(intents[0], scenario_fleet(egress_intents=intents), "edge-2")
    # A host no meshplane intent names (another team's Gateway on the same pods) stays as it was.
    assert allowed(objects, STRANGER, "downloads.vendor.example", 8443)
    # Case does not get around the policy: the SNI reaches the filters lower-cased.
    assert not allowed(objects, STRANGER, "API.Payments.Example", 8443)
    assert [p["spec"]["action"] for p in by_kind(objects, "AuthorizationPolicy")] == ["DENY"]


def test_two_intents_for_one_host_each_admit_their_own_clients() -> None:
    base = {
        "hosts": ["api.payments.example"],
        "ports": [{"number": 443, "protocol": "TLS"}],
        "route": {"via": "egressGateway"},
        "placement": {"logicalCloud": "retail"},
    }
    shop = parse("EgressIntent", "pay", {**base, "clients": [{"service": {"name": "cart"}}]})
    bank = parse("EgressIntent", "pay", {**base, "clients": [{"service": {"name": "teller"}}]}, project="bank")
    fleet = Fleet(clusters=scenario_clusters(), logical_clouds=fleet_clouds(), egress_intents=[shop, bank])
    objects = render_all(render_egress_intent, fleet.egress_intents, fleet, "edge-2")
    assert allowed(objects, CART, "api.payments.example", 8443)
    assert allowed(objects, "cluster.local/ns/bank/sa/teller", "api.payments.example", 8443)
    assert not allowed(objects, STRANGER, "api.payments.example", 8443)


def test_an_egress_only_client_still_reaches_the_mesh_through_its_sidecar() -> None:
    intents = egress_scenario()
    fleet = scenario_fleet(egress_intents=intents)
    for intent, cluster in (
        (intents[0], "edge-2"),
        (intents[1], "core-1"),
        (intents[2], "edge-2"),
        (intents[3], "core-1"),
    ):
        sidecars = by_kind(render_egress_intent(intent, fleet, cluster), "Sidecar")
        assert sidecars
        for sidecar in sidecars:
            hosts = sidecar["spec"]["egress"][0]["hosts"]
            assert {"./*", "istio-system/*"} <= set(hosts), sidecar["metadata"]["name"]


def _duplicated_egress_hosts(sidecar: dict) -> list[str]:
    """What istiod's validation warns of: a host listed twice, or one its namespace's `*` already covers."""
    seen: dict[str, set[str]] = {}
    duplicated = []
    for host in sidecar["spec"]["egress"][0]["hosts"]:
        namespace, name = host.split("/", 1)
        services = seen.setdefault(sidecar["metadata"]["namespace"] if namespace == "." else namespace, set())
        if (name != "*" and (name in services or "*" in services)) or (name == "*" and services):
            duplicated.append(host)
        services.add(name)
    return duplicated


def test_no_egress_sidecar_lists_a_host_twice() -> None:
    intents = egress_scenario()
    fleet = scenario_fleet(egress_intents=intents)
    for cluster in CLUSTERS:
        for sidecar in by_kind(render_all(render_egress_intent, intents, fleet, cluster), "Sidecar"):
            assert _duplicated_egress_hosts(sidecar) == [], (cluster, sidecar["metadata"]["name"])
    for sidecar in by_kind(_example_objects("edge-2"), "Sidecar"):
        assert _duplicated_egress_hosts(sidecar) == [], sidecar["metadata"]["name"]


def test_egress_gateway_names_are_dns_labels_unique_across_projects() -> None:
    long_intent, long_project = "i" * 63, "p" * 63
    spec = {
        "hosts": ["a.example", "b.example"],
        "ports": [{"number": 443, "protocol": "TLS"}],
        "route": {"via": "egressGateway"},
        "clients": [{"service": {"name": "cart"}}],
        "placement": {"clusters": ["edge-1"]},
    }
    # Joined naively with '-', these two would meet: a-egress-b-egress-c.
    intents = [
        parse("EgressIntent", long_intent, spec, project=long_project),
        parse("EgressIntent", "a-egress-b", spec, project="c"),
        parse("EgressIntent", "a", spec, project="b-egress-c"),
    ]
    fleet = Fleet(clusters=scenario_clusters(), logical_clouds=fleet_clouds(), egress_intents=intents)
    seen: set[tuple[str, str]] = set()
    for intent in intents:
        objects = render_egress_intent(intent, fleet, "edge-1")
        for obj in objects:
            if obj["metadata"]["namespace"] != GATEWAY_NAMESPACE:
                continue
            name = obj["metadata"]["name"]
            assert DNS_LABEL.match(name), name
            assert (obj["kind"], name) not in seen
            seen.add((obj["kind"], name))
            assert validate_istio(obj) == [], name
        (gateway,) = by_kind(objects, "Gateway")
        for route in by_kind(objects, "VirtualService"):
            named = [g for g in route["spec"]["gateways"] if g != "mesh"]
            assert named == [f"{GATEWAY_NAMESPACE}/{gateway['metadata']['name']}"]
            for match in route["spec"].get("tls", []) + route["spec"].get("tcp", []) + route["spec"].get("http", []):
                for gateway_name in match["match"][0]["gateways"]:
                    assert gateway_name == "mesh" or DNS_LABEL.match(gateway_name.split("/", 1)[1])


def test_only_virtual_services_of_the_gateway_namespace_bind_to_the_egress_gateway() -> None:
    """A Gateway host without a namespace takes VirtualServices from any namespace: another tenant's
    could claim the host on the shared gateway and send every project's egress elsewhere."""
    intents = egress_scenario()
    fleet = scenario_fleet(egress_intents=intents)
    for intent in (intents[0], intents[2]):
        (gateway,) = by_kind(render_egress_intent(intent, fleet, "edge-2"), "Gateway")
        for server in gateway["spec"]["servers"]:
            assert all(host.startswith("./") for host in server["hosts"]), server


def _refusal(spec: dict) -> str:
    with pytest.raises(InvalidObject) as caught:
        parse("EgressIntent", "db", spec)
    return str(caught.value)


def test_the_egress_gateway_refuses_ports_its_service_does_not_have() -> None:
    message = _refusal(
        {
            "hosts": ["db.example"],
            "addresses": ["203.0.113.7"],
            "ports": [{"number": 443, "protocol": "TLS"}, {"number": 5432, "protocol": "TCP"}],
            "route": {"via": "egressGateway"},
        }
    )
    assert "ports[1]" in message and "5432" in message and "80, 443" in message


def test_a_tcp_port_needs_addresses() -> None:
    message = _refusal({"hosts": ["db.example"], "ports": [{"number": 5432, "protocol": "TCP"}]})
    assert "ports[0]" in message and "addresses" in message


def test_resolution_none_cannot_go_through_the_egress_gateway() -> None:
    message = _refusal(
        {
            "hosts": ["*.example.com"],
            "ports": [{"number": 443, "protocol": "TLS"}],
            "resolution": "NONE",
            "route": {"via": "egressGateway"},
        }
    )
    assert "NONE" in message and "egress gateway" in message


# --- TLS origination --------------------------------------------------------------------------------


def _originating(via: str, tls: dict) -> Resource:
    return parse(
        "EgressIntent",
        "partner",
        {
            "hosts": ["api.partner.example"],
            "ports": [{"number": 80, "protocol": "HTTP", "tlsOrigination": tls}],
            "route": {"via": via},
            "clients": [{"service": {"name": "cart"}}],
            "placement": {"logicalCloud": "retail"},
        },
    )


def _origination_tls(objects: list[dict]) -> tuple[dict, dict]:
    """The DestinationRule for the external host and its port-80 TLS settings."""
    (rule,) = [r for r in by_kind(objects, "DestinationRule") if r["spec"]["host"] == "api.partner.example"]
    (setting,) = rule["spec"]["trafficPolicy"]["portLevelSettings"]
    assert setting["port"] == {"number": 80}
    return rule, setting["tls"]


def test_the_sidecar_originates_tls_to_the_target_port_and_checks_the_host_name() -> None:
    intent = _originating("direct", {"mode": "SIMPLE"})
    objects = render_egress_intent(intent, scenario_fleet(egress_intents=[intent]), "edge-2")
    (entry,) = by_kind(objects, "ServiceEntry")
    assert entry["spec"]["ports"] == [{"number": 80, "name": "http-80", "protocol": "HTTP", "targetPort": 443}]
    rule, tls = _origination_tls(objects)
    assert rule["metadata"]["namespace"] == "shop"
    assert rule["spec"]["exportTo"] == entry["spec"]["exportTo"]
    # An explicit SNI turns off Istio's automatic name check: the names are given with it.
    assert tls == {"mode": "SIMPLE", "sni": "api.partner.example", "subjectAltNames": ["api.partner.example"]}
    for obj in objects:
        assert validate_istio(obj) == [], obj["metadata"]["name"]


def test_the_egress_gateway_originates_mutual_tls_with_the_credential_of_its_namespace() -> None:
    intent = _originating("egressGateway", {"mode": "MUTUAL", "credentialName": "partner-client", "targetPort": 8443})
    objects = render_egress_intent(intent, scenario_fleet(egress_intents=[intent]), "edge-2")
    (entry,) = by_kind(objects, "ServiceEntry")
    assert entry["spec"]["ports"][0]["targetPort"] == 8443
    rule, tls = _origination_tls(objects)
    # Read by the gateway only: in its namespace, seen by no sidecar.
    assert rule["metadata"]["namespace"] == GATEWAY_NAMESPACE
    assert rule["spec"]["exportTo"] == [GATEWAY_NAMESPACE]
    assert DNS_LABEL.match(rule["metadata"]["name"])
    assert tls == {
        "mode": "MUTUAL",
        "credentialName": "partner-client",
        "sni": "api.partner.example",
        "subjectAltNames": ["api.partner.example"],
    }
    # The mesh leg stays Istio mTLS to the gateway, which sends the request on to the host's port 80.
    (route,) = by_kind(objects, "VirtualService")
    assert [r["route"][0]["destination"]["host"] for r in route["spec"]["http"]] == [
        "istio-egressgateway.istio-system.svc.cluster.local",
        "api.partner.example",
    ]
    for obj in objects:
        assert validate_istio(obj) == [], obj["metadata"]["name"]


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ({"ports": [{"number": 443, "protocol": "TLS", "tlsOrigination": {}}]}, "must speak HTTP"),
        ({"hosts": ["*.partner.example"], "resolution": "NONE"}, "none a wildcard"),
        ({"route": {"via": "proxy", "proxy": {"address": "10.0.0.9", "port": 3128}}}, "not through a proxy"),
        ({"ports": [{"number": 80, "protocol": "HTTP", "tlsOrigination": {"mode": "MUTUAL"}}]}, "MUTUAL needs"),
        (
            {"ports": [{"number": 80, "protocol": "HTTP", "tlsOrigination": {"credentialName": "c"}}]},
            "route via egressGateway",
        ),
    ],
)
def test_tls_origination_is_refused_where_it_cannot_work(change: dict, refused: str) -> None:
    spec = {
        "hosts": ["api.partner.example"],
        "ports": [{"number": 80, "protocol": "HTTP", "tlsOrigination": {"mode": "SIMPLE"}}],
        "route": {"via": "direct"},
        **change,
    }
    message = _refusal(spec)
    assert "tlsOrigination" in message and refused in message


# --- properties over generated fleets -----------------------------------------------------------

INTENT_NAMES = ("pay", "pay-ops", "db", "a", "a-b")
SHARED_HOSTS = ("h0.example.com", "h1.example.com", "h2.example.com")
CLIENT_NAMES = ("cart", "billing", "web")


@st.composite
def egress_specs(draw: st.DrawFn, index: int) -> dict:
    """Intents over a small pool of hosts, so that several intents, of one project or two, share one."""
    via = draw(st.sampled_from(["direct", "egressGateway", "proxy"]))
    through_gateway = via == "egressGateway"
    with_hosts = draw(st.booleans())
    hosts = draw(st.lists(st.sampled_from(SHARED_HOSTS), min_size=1, max_size=2, unique=True)) if with_hosts else []
    addresses = [f"203.0.113.{index * 4 + i}" for i in range(draw(st.integers(0 if with_hosts else 1, 2)))]
    resolutions = ["DNS", *(["STATIC"] if addresses else [])] if with_hosts else ["STATIC"]
    if not through_gateway:
        resolutions.append("NONE")
    resolution = draw(st.sampled_from(resolutions))
    port_numbers = [80, 443] if through_gateway else [80, 443, 5432, 8443]
    protocols = ["HTTP", "TLS", "GRPC", *(["TCP"] if addresses else [])]
    numbers = draw(st.lists(st.sampled_from(port_numbers), min_size=1, max_size=3, unique=True))
    ports = [{"number": n, "protocol": draw(st.sampled_from(protocols))} for n in numbers]
    if hosts and via != "proxy":
        for port in ports:
            if port["protocol"] == "HTTP" and draw(st.booleans()):
                port["tlsOrigination"] = (
                    {"mode": "MUTUAL", "credentialName": "client-cert"} if through_gateway else {"mode": "SIMPLE"}
                )
    route: dict = {"via": via}
    if via == "proxy":
        route["proxy"] = {"address": draw(st.sampled_from(["10.0.0.9", "proxy.corp.example"])), "port": 3128}
    clients = [
        {"service": {"name": name, "logicalCloud": draw(st.sampled_from(["retail", "ops"]))}}
        for name in draw(st.lists(st.sampled_from(CLIENT_NAMES), max_size=3, unique=True))
    ]
    placement = draw(
        st.sampled_from(
            [{"logicalCloud": "retail"}, {"logicalCloud": "ops"}, {"logicalCloud": "ops", "clusters": ["edge-1"]}]
        )
    )
    spec = {"ports": ports, "resolution": resolution, "route": route, "clients": clients, "placement": placement}
    if hosts:
        spec["hosts"] = hosts
    if addresses:
        spec["addresses"] = addresses
    return spec


@st.composite
def egress_fleets(draw: st.DrawFn) -> Fleet:
    intents = []
    for project in PROJECTS:
        names = draw(st.lists(st.sampled_from(INTENT_NAMES), max_size=3, unique=True))
        for name in names:
            spec = draw(egress_specs(len(intents)))
            intents.append(parse("EgressIntent", name, spec, project=project))
    return Fleet(clusters=scenario_clusters(), logical_clouds=fleet_clouds(), egress_intents=intents)


PROPERTIES = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTIES
@given(egress_fleets(), st.integers(0, 2**16))
def test_egress_rendering_is_deterministic_and_independent_of_input_order(fleet: Fleet, seed: int) -> None:
    other = shuffled(fleet, seed)
    for cluster in CLUSTERS:
        first = to_yaml(render_all(render_egress_intent, fleet.egress_intents, fleet, cluster))
        again = to_yaml(render_all(render_egress_intent, fleet.egress_intents, fleet, cluster))
        reordered = to_yaml(render_all(render_egress_intent, other.egress_intents, other, cluster))
        assert first == again == reordered


@PROPERTIES
@given(egress_fleets())
def test_egress_objects_stay_in_their_project_and_logical_clouds(fleet: Fleet) -> None:
    for intent in fleet.egress_intents:
        project = intent.metadata.project
        targets = placement_targets(fleet, project, intent.spec.placement)
        for cluster in CLUSTERS:
            objects = render_egress_intent(intent, fleet, cluster)
            if cluster not in targets:
                assert objects == []
                continue
            allowed = project_namespaces(fleet, project, cluster) | {GATEWAY_NAMESPACE}
            for obj in objects:
                labels = obj["metadata"]["labels"]
                assert labels[OWNER_PROJECT] == project
                assert labels[OWNER_NAME] == intent.metadata.name
                assert obj["metadata"]["namespace"] in allowed
                if obj["kind"] == "Sidecar":
                    # a client's Sidecar lands in its own logical cloud's namespace in that cluster
                    workload = obj["spec"]["workloadSelector"]["labels"]["app"]
                    homes = {
                        ns
                        for client in intent.spec.clients
                        if client.service.name == workload
                        for c, ns in placement_targets(
                            fleet, project, _cloud_placement(client.service.logical_cloud)
                        ).items()
                        if c == cluster
                    }
                    assert obj["metadata"]["namespace"] in homes


@PROPERTIES
@given(egress_fleets())
def test_egress_names_never_collide_within_a_cluster(fleet: Fleet) -> None:
    for cluster in CLUSTERS:
        seen: dict[tuple[str, str, str], dict] = {}
        for obj in render_all(render_egress_intent, fleet.egress_intents, fleet, cluster):
            key = (obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
            if key in seen:
                # Only a client workload's Sidecar is shared: the cluster's render merges it.
                assert obj["kind"] == "Sidecar"
                assert obj["spec"]["workloadSelector"] == seen[key]["spec"]["workloadSelector"]
            seen[key] = obj


@PROPERTIES
@given(egress_fleets())
def test_only_the_allowed_clients_pass_the_egress_gateway(fleet: Fleet) -> None:
    for cluster in CLUSTERS:
        admitted: dict[str, set[str]] = {}
        for intent in fleet.egress_intents:
            project = intent.metadata.project
            targets = placement_targets(fleet, project, intent.spec.placement)
            if intent.spec.route.via.value != "egressGateway" or cluster not in targets:
                assert by_kind(render_egress_intent(intent, fleet, cluster), "AuthorizationPolicy") == []
                continue
            hosts = intent.spec.hosts or [f"{intent.metadata.name}.{project}.external"]
            for host in hosts:
                admitted.setdefault(host, set()).update(
                    f"cluster.local/ns/{ns}/sa/{client.service.name}"
                    for client in intent.spec.clients
                    for c, ns in placement_targets(
                        fleet, project, _cloud_placement(client.service.logical_cloud)
                    ).items()
                    if c == cluster
                )
        objects = render_all(render_egress_intent, fleet.egress_intents, fleet, cluster)
        everyone = {p for principals in admitted.values() for p in principals} | {STRANGER}
        for host in [*admitted, "unnamed.example.org"]:
            for who in everyone:
                expected = who in admitted.get(host, everyone)
                assert allowed(objects, who, host, 8443) is expected, (cluster, host, who)


@settings(max_examples=25, deadline=None)
@given(egress_fleets())
def test_generated_egress_objects_are_valid_for_istio(fleet: Fleet) -> None:
    for cluster in CLUSTERS:
        for obj in render_all(render_egress_intent, fleet.egress_intents, fleet, cluster):
            assert validate_istio(obj) == [], (obj["kind"], obj["metadata"]["name"])
