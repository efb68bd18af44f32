"""ServiceIntent renders read against Istio's semantics: what istiod accepts and what its proxies match."""

from __future__ import annotations

import re

import pytest
import yaml

from meshplane.model.intents import REQUIRED_PATH_NORMALIZATION
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import InvalidObject, Resource
from meshplane.server.render.cluster import render_cluster as full_render
from meshplane.server.render.fleet import Fleet
from meshplane.server.render.ingress import render_ingress_intent
from meshplane.server.render.service import render_service_intent
from meshplane_testing.istio_schema import validate_istio

from .service_scenario import SCENARIO, fleet_from_docs, objects_of, render_cluster

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@pytest.fixture(scope="module")
def scenario() -> Fleet:
    return fleet_from_docs([d for d in yaml.safe_load_all(SCENARIO) if d])


def service_intent(name: str, spec: dict, project: str = "shop") -> Resource:
    return REGISTRY.parse({"kind": "ServiceIntent", "metadata": {"name": name, "project": project}, "spec": spec})


def refusal(spec: dict) -> dict[str, str]:
    """The field errors of a ServiceIntent that must not be stored."""
    with pytest.raises(InvalidObject) as caught:
        service_intent("bad", spec)
    return {e.path: e.message for e in caught.value.errors}


def valid(objects: list[dict]) -> list[dict]:
    for obj in objects:
        assert validate_istio(obj) == [], obj["metadata"]
    return objects


# --- #13: istiod refuses a Gateway whose name is not a DNS label ----------------------------------


@pytest.mark.parametrize("cluster", ["core-1", "edge-1", "edge-2"])
def test_every_gateway_name_is_a_dns_label_as_istiod_requires(scenario: Fleet, cluster: str) -> None:
    gateways = objects_of(render_cluster(scenario, cluster), "Gateway")
    assert gateways
    assert all(DNS_LABEL.match(name) for name in gateways), sorted(gateways)


def test_the_east_west_gateway_name_meets_no_gateway_an_intent_renders(scenario: Fleet) -> None:
    ingress = REGISTRY.parse(
        {
            "kind": "IngressIntent",
            "metadata": {"name": "meshplane", "project": "shop"},
            "spec": {
                "hosts": ["shop.example.com"],
                "entities": [{"name": "eastwest"}, {"name": "west"}],
                "routes": [{"match": {"prefix": "/"}, "to": {"service": "orders", "port": 8080}}],
                "placement": {"logicalCloud": "retail"},
            },
        }
    )
    fleet = Fleet(scenario.clusters, scenario.logical_clouds, scenario.service_intents, ingress_intents=[ingress])
    objects = full_render(fleet, "edge-1")
    names = [o["metadata"]["name"] for o in objects if o["kind"] == "Gateway" and o["metadata"]["namespace"] == "shop"]
    assert "meshplane-eastwest" in names
    assert len(names) == len(set(names)) == 3, names


# --- #4: claims exist only where a RequestAuthentication validated the token ---------------------

ISSUER = {
    "issuer": "https://auth.example.com",
    "jwksUri": "https://auth.example.com/jwks.json",
    "audiences": ["orders"],
}


def orders_spec(**extra: object) -> dict:
    return {
        "service": {"name": "orders", "port": 8080},
        "placement": {"logicalCloud": "retail"},
        "clients": [
            {
                "service": {"name": "cart"},
                "access": [{"action": "ALLOW", "jwtClaims": {"groups": "buyers"}}],
            }
        ],
        **extra,
    }


def test_a_claim_condition_without_an_issuer_is_refused_with_its_field_path() -> None:
    errors = refusal(orders_spec())
    assert list(errors) == ["spec.clients[0].access[0].jwtClaims"]
    assert "authentication.jwt" in errors["spec.clients[0].access[0].jwtClaims"]


def test_an_iss_claim_naming_no_configured_issuer_is_refused() -> None:
    spec = orders_spec(authentication={"jwt": [ISSUER]})
    spec["clients"][0]["access"][0]["jwtClaims"] = {"iss": "https://other.example.com"}
    assert list(refusal(spec)) == ["spec.clients[0].access[0].jwtClaims.iss"]


def test_a_jwt_rule_needs_exactly_one_key_source() -> None:
    errors = refusal(orders_spec(authentication={"jwt": [{"issuer": "https://auth.example.com"}]}))
    assert any(path.startswith("spec.authentication.jwt[0]") for path in errors), errors


def test_the_servers_pods_validate_tokens_of_the_declared_issuers(scenario: Fleet) -> None:
    intent = service_intent("orders-jwt", orders_spec(authentication={"jwt": [ISSUER]}))
    server = valid(render_service_intent(intent, scenario, "edge-1"))
    (authn,) = objects_of(server, "RequestAuthentication").values()
    assert authn["metadata"] == {
        "name": "orders-jwt-jwt",
        "namespace": "shop",
        "labels": authn["metadata"]["labels"],
    }
    assert authn["spec"] == {
        "selector": {"matchLabels": {"app": "orders"}},
        "jwtRules": [
            {
                "issuer": "https://auth.example.com",
                "jwksUri": "https://auth.example.com/jwks.json",
                "audiences": ["orders"],
            }
        ],
    }
    allow = objects_of(server, "AuthorizationPolicy")["orders-jwt-allow"]["spec"]
    assert [r["when"] for r in allow["rules"] if "when" in r] == [
        [{"key": "request.auth.claims[groups]", "values": ["buyers"]}]
    ]
    # Tokens are validated where the policy is enforced: on the server, not in client-only clusters.
    assert not objects_of(render_service_intent(intent, scenario, "core-1"), "RequestAuthentication")


def ingress_spec(**extra: object) -> dict:
    return {
        "hosts": ["shop.example.com"],
        "entities": [{"name": "public", "tls": {"mode": "SIMPLE", "credentialName": "shop-cert"}}],
        "routes": [{"match": {"prefix": "/"}, "to": {"service": "orders", "port": 8080}}],
        "access": [{"action": "ALLOW", "sources": {"requestPrincipals": ["https://auth.example.com/*"]}}],
        "placement": {"logicalCloud": "retail"},
        **extra,
    }


def test_an_ingress_token_condition_without_an_issuer_is_refused() -> None:
    with pytest.raises(InvalidObject) as caught:
        REGISTRY.parse(
            {"kind": "IngressIntent", "metadata": {"name": "web", "project": "shop"}, "spec": ingress_spec()}
        )
    assert [e.path for e in caught.value.errors] == ["spec.access[0].sources.requestPrincipals"]


def test_the_ingress_gateway_validates_tokens_of_the_declared_issuers(scenario: Fleet) -> None:
    doc = {"kind": "IngressIntent", "metadata": {"name": "web", "project": "shop"}}
    intent = REGISTRY.parse({**doc, "spec": ingress_spec(authentication={"jwt": [ISSUER]})})
    objects = valid([o for o in render_ingress_intent(intent, scenario, "edge-1") if o["kind"] != "DNSEndpoint"])
    (authn,) = objects_of(objects, "RequestAuthentication").values()
    assert authn["metadata"]["namespace"] == "istio-system"
    assert authn["spec"]["selector"] == {"matchLabels": {"istio": "ingressgateway"}}
    assert [r["issuer"] for r in authn["spec"]["jwtRules"]] == ["https://auth.example.com"]


# --- #9: CIDR clients are callers outside the mesh ---------------------------------------------


def test_cidr_clients_under_strict_mtls_are_refused_with_the_reason() -> None:
    spec = orders_spec(mtls="STRICT", clients=[{"cidrs": ["10.20.0.0/16"]}])
    errors = refusal(spec)
    assert list(errors) == ["spec.clients[0].cidrs"]
    assert "PERMISSIVE" in errors["spec.clients[0].cidrs"]


def test_a_cidr_rule_matches_only_plaintext_peers_so_the_east_west_gateway_never_counts_as_one(
    scenario: Fleet,
) -> None:
    # Remote mesh callers arrive through the east-west gateway: their direct peer is the gateway's
    # address, which a broad range may contain. They carry a principal; callers outside the mesh do not.
    intent = service_intent(
        "orders-cidr",
        orders_spec(mtls="PERMISSIVE", clients=[{"service": {"name": "cart"}}, {"cidrs": ["10.0.0.0/8"]}]),
    )
    allow = objects_of(render_service_intent(intent, scenario, "edge-1"), "AuthorizationPolicy")["orders-cidr-allow"]
    sources = [f["source"] for rule in allow["spec"]["rules"] for f in rule["from"]]
    assert {"ipBlocks": ["10.0.0.0/8"], "notPrincipals": ["*"]} in sources
    assert all("remoteIpBlocks" not in s for s in sources)
    assert all(s.get("notPrincipals") == ["*"] for s in sources if "ipBlocks" in s)


# --- #3: a user-facing route reaches the service -----------------------------------------------

GATEWAY_PRINCIPAL = "cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account"


def storefront(service: str, routes: list[dict], **extra: object) -> Resource:
    spec = {
        "hosts": ["shop.example.com"],
        "entities": [{"name": "public", "tls": {"mode": "SIMPLE", "credentialName": "shop-cert"}}],
        "routes": routes,
        "placement": {"logicalCloud": "retail"},
        **extra,
    }
    return REGISTRY.parse(
        {"kind": "IngressIntent", "metadata": {"name": "storefront", "project": "shop"}, "spec": spec}
    )


def web_fleet(scenario: Fleet, clients: list[dict], ingress: list[Resource]) -> tuple[Resource, Fleet]:
    """web serves in edge-1 only; the retail cloud's ingress also runs in edge-2, where web has no replica."""
    web = service_intent(
        "web",
        {
            "service": {"name": "web", "port": 8080},
            "placement": {"logicalCloud": "retail", "clusters": ["edge-1"]},
            "clients": clients,
        },
    )
    return web, Fleet(scenario.clusters, scenario.logical_clouds, [web], ingress_intents=ingress)


def test_the_servers_allow_policy_admits_the_ingress_gateway_on_the_routed_paths(scenario: Fleet) -> None:
    routes = [
        {"match": {"prefix": "/shop"}, "to": {"service": "web", "port": 8080}},
        {"match": {"exact": "/healthz"}, "to": {"service": "web", "port": 8080}},
        {"match": {"prefix": "/other"}, "to": {"service": "other", "port": 8080}},
    ]
    web, fleet = web_fleet(scenario, [], [storefront("web", routes)])
    allow = objects_of(valid(render_service_intent(web, fleet, "edge-1")), "AuthorizationPolicy")["web-allow"]["spec"]
    assert allow["rules"] == [
        {
            "from": [{"source": {"principals": [GATEWAY_PRINCIPAL]}}],
            "to": [{"operation": {"ports": ["8080"], "paths": ["/healthz", "/shop*"]}}],
        }
    ]


def test_an_ingress_route_to_another_port_opens_nothing(scenario: Fleet) -> None:
    wrong_port = storefront("web", [{"match": {"prefix": "/"}, "to": {"service": "web", "port": 9090}}])
    web, fleet = web_fleet(scenario, [], [wrong_port])
    allow = objects_of(render_service_intent(web, fleet, "edge-1"), "AuthorizationPolicy")["web-allow"]["spec"]
    assert "rules" not in allow


def test_a_remote_service_is_visible_to_the_ingress_gateway_where_it_has_no_replica(scenario: Fleet) -> None:
    route = [{"match": {"prefix": "/"}, "to": {"service": "web", "port": 8080}}]
    web, fleet = web_fleet(scenario, [], [storefront("web", route)])
    edge_2 = valid(render_service_intent(web, fleet, "edge-2"))
    entry = objects_of(edge_2, "ServiceEntry", "shop")["web-se"]["spec"]
    rule = objects_of(edge_2, "DestinationRule", "shop")["web-dr"]["spec"]
    assert entry["hosts"] == ["web.shop.svc.cluster.local"] and entry["exportTo"] == ["istio-system"]
    assert [e["address"] for e in entry["endpoints"]] == ["203.0.113.11"]
    assert rule["exportTo"] == ["istio-system"] and rule["trafficPolicy"]["tls"] == {"mode": "ISTIO_MUTUAL"}
    # The server cluster opens the namespace to east-west traffic for it.
    assert "meshplane-eastwest" in objects_of(render_service_intent(web, fleet, "edge-1"), "Gateway", "shop")


def test_a_remote_service_seen_by_clients_and_the_ingress_gateway_is_exported_to_both(scenario: Fleet) -> None:
    route = [{"match": {"prefix": "/"}, "to": {"service": "web", "port": 8080}}]
    web, fleet = web_fleet(scenario, [{"service": {"name": "cart"}}], [storefront("web", route)])
    edge_2 = valid(render_service_intent(web, fleet, "edge-2"))
    assert objects_of(edge_2, "ServiceEntry", "shop")["web-se"]["spec"]["exportTo"] == [".", "istio-system"]
    assert objects_of(edge_2, "DestinationRule", "shop")["web-dr"]["spec"]["exportTo"] == [".", "istio-system"]


# --- #10: paths are matched after the mesh's normalization ------------------------------------


@pytest.mark.parametrize(
    "path", ["/orders//admin/*", "/orders/./admin", "/orders/../admin/*", "/orders/%2Fadmin", "\\orders", "orders/*"]
)
def test_a_path_normalization_never_yields_is_refused(path: str) -> None:
    spec = orders_spec(clients=[{"service": {"name": "cart"}, "access": [{"action": "DENY", "paths": [path]}]}])
    errors = refusal(spec)
    assert list(errors) == ["spec.clients[0].access[0].paths[0]"]
    assert "MERGE_SLASHES" in errors["spec.clients[0].access[0].paths[0]"]


@pytest.mark.parametrize("path", ["/orders/admin/*", "*/admin", "*", "/orders.v1.Orders/Get", "/a%20b", "/x/{*}/y"])
def test_normalized_paths_are_accepted(path: str) -> None:
    spec = orders_spec(clients=[{"service": {"name": "cart"}, "access": [{"action": "DENY", "paths": [path]}]}])
    assert service_intent("ok", spec).spec.clients[0].access[0].paths == [path]


def test_the_required_normalization_merges_slashes() -> None:
    # Istio's default (BASE) leaves '//' alone: a DENY on /orders/admin/* would miss /orders//admin/x.
    assert REQUIRED_PATH_NORMALIZATION in ("MERGE_SLASHES", "DECODE_AND_MERGE_SLASHES")


# --- EMCO: consistent hashing and connection pools ---------------------------------------------


def traffic_policy_of(spec: dict, scenario: Fleet, cluster: str = "edge-1") -> dict:
    objects = valid(render_service_intent(service_intent("orders-lb", spec), scenario, cluster))
    return objects_of(objects, "DestinationRule")["orders-lb-dr"]["spec"]["trafficPolicy"]


@pytest.mark.parametrize(
    ("hashing", "rendered"),
    [
        ({"httpCookie": {"name": "session", "ttl": "1h"}}, {"httpCookie": {"name": "session", "ttl": "3600s"}}),
        ({"httpHeaderName": "x-user"}, {"httpHeaderName": "x-user"}),
        ({"useSourceIp": True}, {"useSourceIp": True}),
    ],
)
def test_consistent_hashing_keeps_a_session_on_one_endpoint(scenario: Fleet, hashing: dict, rendered: dict) -> None:
    spec = orders_spec(clients=[], trafficPolicy={"consistentHash": hashing, "localityFailover": True})
    balancer = traffic_policy_of(spec, scenario)["loadBalancer"]
    assert balancer == {"consistentHash": rendered, "localityLbSetting": {"enabled": True}}


def test_a_hash_is_one_key_and_excludes_a_simple_balancer() -> None:
    both = {"httpHeaderName": "x-user", "useSourceIp": True}
    assert any("consistentHash" in p for p in refusal(orders_spec(clients=[], trafficPolicy={"consistentHash": both})))
    explicit = {"loadBalancer": "RANDOM", "consistentHash": {"useSourceIp": True}}
    assert list(refusal(orders_spec(clients=[], trafficPolicy=explicit))) == ["spec.trafficPolicy.consistentHash"]


def test_cookie_and_header_hashing_need_http() -> None:
    spec = orders_spec(clients=[], trafficPolicy={"consistentHash": {"httpHeaderName": "x-user"}})
    spec["service"]["protocol"] = "TCP"
    assert list(refusal(spec)) == ["spec.trafficPolicy.consistentHash"]


def test_connection_pool_limits_requests_in_flight_and_per_connection(scenario: Fleet) -> None:
    breaker = {"maxConnections": 10, "http2MaxRequests": 200, "maxRequestsPerConnection": 50}
    spec = orders_spec(clients=[], trafficPolicy={"circuitBreaker": breaker})
    assert traffic_policy_of(spec, scenario)["connectionPool"] == {
        "tcp": {"maxConnections": 10},
        "http": {"http2MaxRequests": 200, "maxRequestsPerConnection": 50},
    }


def test_http_request_limits_on_a_tcp_service_are_refused_not_dropped() -> None:
    spec = orders_spec(clients=[], trafficPolicy={"circuitBreaker": {"http2MaxRequests": 200}})
    spec["service"]["protocol"] = "TCP"
    assert list(refusal(spec)) == ["spec.trafficPolicy.circuitBreaker"]


# --- EMCO: headless services ---------------------------------------------------------------------


def headless_spec(**traffic: object) -> dict:
    spec = orders_spec(clients=[{"service": {"name": "cart"}}], trafficPolicy=traffic)
    spec["service"]["headless"] = True
    return spec


@pytest.mark.parametrize(
    ("traffic", "field"),
    [
        ({"loadBalancer": "LEAST_REQUEST"}, "spec.trafficPolicy.loadBalancer"),
        ({"consistentHash": {"useSourceIp": True}}, "spec.trafficPolicy.consistentHash"),
        ({"localityFailover": True}, "spec.trafficPolicy.localityFailover"),
    ],
)
def test_balancing_a_headless_service_is_refused(traffic: dict, field: str) -> None:
    errors = refusal(headless_spec(**traffic))
    assert list(errors) == [field]
    assert "pod address" in errors[field]


def test_a_headless_services_destination_rule_promises_no_balancer(scenario: Fleet) -> None:
    objects = valid(render_service_intent(service_intent("orders-hl", headless_spec(timeout="2s")), scenario, "edge-1"))
    policy = objects_of(objects, "DestinationRule")["orders-hl-dr"]["spec"]["trafficPolicy"]
    assert policy == {"tls": {"mode": "ISTIO_MUTUAL"}}
    # Access is enforced on the server's pods as for any service.
    assert objects_of(objects, "AuthorizationPolicy")["orders-hl-allow"]["spec"]["rules"]


# --- EMCO: servers without a sidecar -------------------------------------------------------------


def plain_spec(**service: object) -> dict:
    spec = orders_spec(mtls="DISABLE", clients=[{"service": {"name": "cart"}}])
    spec["service"].update({"sidecar": False, **service})
    return spec


def test_a_server_without_sidecar_gets_tls_it_terminates_and_no_policy_it_cannot_enforce(scenario: Fleet) -> None:
    tls = {"mode": "SIMPLE", "caConfigMap": "orders-ca", "sni": "orders.internal", "subjectAltNames": ["orders"]}
    intent = service_intent("legacy", plain_spec(tls=tls))
    objects = valid(render_service_intent(intent, scenario, "edge-1"))
    assert {o["kind"] for o in objects} == {"DestinationRule", "Sidecar"}
    rule = objects_of(objects, "DestinationRule")["legacy-dr"]["spec"]["trafficPolicy"]
    assert rule["tls"] == {
        "mode": "SIMPLE",
        "credentialName": "configmap://shop/orders-ca",
        "sni": "orders.internal",
        "subjectAltNames": ["orders"],
    }
    plaintext = valid(render_service_intent(service_intent("legacy", plain_spec()), scenario, "edge-1"))
    assert objects_of(plaintext, "DestinationRule")["legacy-dr"]["spec"]["trafficPolicy"]["tls"] == {"mode": "DISABLE"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"mtls": "STRICT"}, "spec.mtls"),
        ({"clients": [{"service": {"name": "cart"}, "access": [{"action": "DENY"}]}]}, "spec.clients[0].access[0]"),
        ({"clients": [{"service": {"name": "cart"}, "access": [{"methods": ["GET"]}]}]}, "spec.clients[0].access[0]"),
        ({"authentication": {"jwt": [ISSUER]}}, "spec.authentication.jwt"),
    ],
)
def test_what_only_a_servers_sidecar_could_enforce_is_refused_without_one(change: dict, field: str) -> None:
    errors = refusal({**plain_spec(), **change})
    assert field in errors, errors
    assert "sidecar" in errors[field]


def test_server_tls_is_only_for_servers_without_a_sidecar() -> None:
    spec = orders_spec(clients=[])
    spec["service"]["tls"] = {"mode": "SIMPLE"}
    assert list(refusal(spec)) == ["spec.service.tls"]


# --- policies hold on the service's own port ----------------------------------------------------


def test_every_rule_is_scoped_to_the_target_port_so_a_deny_never_widens_to_tcp_ports(scenario: Fleet) -> None:
    # Istio drops HTTP-only conditions from a DENY rule on a TCP port of the same pods: unscoped, a
    # DENY by path would refuse the client everything on every other port. It matches policy ports
    # against the pod's port, the Service's targetPort.
    spec = orders_spec(
        clients=[{"service": {"name": "cart"}, "access": [{"action": "ALLOW"}, {"action": "DENY", "paths": ["/x"]}]}]
    )
    spec["service"]["targetPort"] = 8081
    objects = render_service_intent(service_intent("orders-port", spec), scenario, "edge-1")
    policies = objects_of(objects, "AuthorizationPolicy")
    for name in ("orders-port-allow", "orders-port-deny"):
        for rule in policies[name]["spec"]["rules"]:
            assert [op["operation"]["ports"] for op in rule["to"]] == [["8081"]], (name, rule)


def test_the_target_port_defaults_to_the_service_port(scenario: Fleet) -> None:
    spec = orders_spec(clients=[{"service": {"name": "cart"}}])
    allow = objects_of(
        render_service_intent(service_intent("orders-port", spec), scenario, "edge-1"), "AuthorizationPolicy"
    )
    assert all(r["to"][0]["operation"]["ports"] == ["8080"] for r in allow["orders-port-allow"]["spec"]["rules"])


def test_a_sidecar_lists_no_host_its_own_namespace_wildcard_covers(scenario: Fleet) -> None:
    # istioctl warns of each as a duplicated egress host: './*' already names them.
    for cluster in ("core-1", "edge-1", "edge-2"):
        for sidecar in objects_of(render_cluster(scenario, cluster), "Sidecar").values():
            own = sidecar["metadata"]["namespace"]
            hosts = sidecar["spec"]["egress"][0]["hosts"]
            assert "./*" in hosts
            assert not [h for h in hosts if h.split("/")[0] == own], (cluster, own, hosts)


def test_service_clients_of_a_server_without_mtls_are_refused_since_no_principal_could_match() -> None:
    # Under DISABLE the caller's sidecar sends plaintext: the server's sidecar sees no principal, so
    # an ALLOW by principal refuses every declared client.
    errors = refusal(orders_spec(mtls="DISABLE", clients=[{"service": {"name": "cart"}}]))
    assert list(errors) == ["spec.clients[0].service"]
    assert "principal" in errors["spec.clients[0].service"]
    accepted = service_intent("ok", orders_spec(mtls="DISABLE", clients=[{"cidrs": ["10.0.0.0/8"]}]))
    assert accepted.spec.clients[0].cidrs == ["10.0.0.0/8"]
