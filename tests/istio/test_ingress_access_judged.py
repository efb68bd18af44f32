"""The ingress access policies as istiod's own generator and traffic simulation read them.

The same shared-gateway cases as tests/unit/render/test_ingress_access.py, judged by
meshplane_testing.istio_judge instead of the Python oracle: one intent's DENY by request principal
or claim beside another intent's TLS passthrough host; intents allowing a source range (over HTTPS,
and over plain HTTP whatever the letter case of the Host) beside a host no meshplane intent names
(an administrator's own Gateway, HTTPS and plain HTTP).
"""

from __future__ import annotations

import pytest

from meshplane.model.resource import Resource
from meshplane.server.render.ingress import render_ingress_intent
from meshplane.server.render.names import shared_object_name
from meshplane_testing.render_scenarios import parse, scenario_fleet

judging = pytest.importorskip("meshplane_testing.istio_judge", reason="the istiod judge is not in this tree")

IDP = "https://idp.example.com"
OUTSIDE = "203.0.113.9"
SIMPLE = {"name": "public", "tls": {"mode": "SIMPLE", "credentialName": "cert"}}
PLAIN = {"name": "office"}
TOKEN_RULES = [
    {"action": "DENY", "sources": {"requestPrincipals": [f"{IDP}/banned"]}},
    {"action": "DENY", "jwtClaims": {"groups": "banned"}},
    {"action": "ALLOW", "sources": {"requestPrincipals": [f"{IDP}/*"]}},
]


def _intent(name: str, host: str, entities: list[dict], access: list[dict]) -> Resource:
    spec = {
        "hosts": [host],
        "entities": entities,
        "routes": [{"match": {"prefix": "/"}, "to": {"service": "web", "port": 8443}}],
        "access": access,
        "authentication": {"jwt": [{"issuer": IDP, "jwksUri": f"{IDP}/keys"}]},
        "placement": {"logicalCloud": "retail"},
    }
    return parse("IngressIntent", name, spec)


def _unnamed_host() -> list[dict]:
    """other.example.com on the same gateway pods, by a Gateway no intent renders."""
    servers = [
        {
            "port": {"number": 443, "name": "https-other", "protocol": "HTTPS"},
            "hosts": ["./other.example.com"],
            "tls": {"mode": "SIMPLE", "credentialName": "other-cert"},
        },
        {"port": {"number": 80, "name": "http-other", "protocol": "HTTP"}, "hosts": ["./other.example.com"]},
    ]
    route = {"destination": {"host": "web.shop.svc.cluster.local", "port": {"number": 8443}}}
    return [
        {
            "apiVersion": "networking.istio.io/v1",
            "kind": "Gateway",
            "metadata": {"name": "other", "namespace": "shop"},
            "spec": {"selector": {"istio": "ingressgateway"}, "servers": servers},
        },
        {
            "apiVersion": "networking.istio.io/v1",
            "kind": "VirtualService",
            "metadata": {"name": "other", "namespace": "shop"},
            "spec": {"hosts": ["other.example.com"], "gateways": ["shop/other"], "http": [{"route": [route]}]},
        },
    ]


def _call(name: str, host: str, ip: str = OUTSIDE, **how: object) -> object:
    base = {"source": judging.INGRESS_GATEWAY, "router": True, "host": host, "remote_ip": ip, "source_ip": ip}
    return judging.Call(name, **{"port": 443, "tls": "tls", "sni": host, "path": "/", **base, **how})


def _verdict(entity: dict) -> object:
    office_only = [{"action": "ALLOW", "sources": {"ipBlocks": ["10.0.0.0/8"]}}]
    intents = [
        _intent("lan", "lan.example.com", [PLAIN], office_only),
        _intent("shop", "shop.example.com", [entity], TOKEN_RULES),
        _intent("legacy", "tls.example.com", [{"name": "legacy", "tls": {"mode": "PASSTHROUGH"}}], []),
        _intent("office", "office.example.com", [SIMPLE], office_only),
    ]
    fleet = scenario_fleet(ingress_intents=intents)
    rendered = [o for intent in intents for o in render_ingress_intent(intent, fleet, "edge-1")]
    workloads = [judging.namespace("shop"), *judging.workload("shop", "web", "10.10.0.5", 8443)]
    calls = [
        _call("passthrough", "tls.example.com", protocol="TLS", path=""),
        _call("unnamed https", "other.example.com"),
        _call("unnamed http", "other.example.com", port=80, tls="", sni=""),
        _call("office from outside", "office.example.com"),
        _call("office from 10/8", "office.example.com", ip="10.1.2.3"),
        _call("lan from outside", "lan.example.com", port=80, tls="", sni=""),
        _call("lan from outside, host in other letters", "LAN.Example.com:80", port=80, tls="", sni=""),
        _call("lan from 10/8", "lan.example.com", ip="10.1.2.3", port=80, tls="", sni=""),
    ]
    return judging.judge([*judging.stock_gateways(), *workloads, *rendered, *_unnamed_host()], calls)


@pytest.mark.parametrize("entity", [SIMPLE, PLAIN], ids=["https", "plain-http"])
def test_token_rules_of_one_intent_reach_neither_a_passthrough_host_nor_an_unnamed_one(entity: dict) -> None:
    verdict = _verdict(entity)
    assert [f for f in verdict.validation if f.errors or f.warnings] == []
    for name in ("passthrough", "unnamed https", "unnamed http", "office from 10/8", "lan from 10/8"):
        assert verdict.result(name).allowed, verdict.result(name).raw
    for name, policy in (
        ("office from outside", "office-ingress.public.shop"),
        ("lan from outside", "lan-ingress.office.shop"),
        ("lan from outside, host in other letters", "lan-ingress.office.shop"),
    ):
        denied = verdict.result(name)
        assert denied.decision == "deny" and policy in denied.denied_by, denied.raw


def test_https_entities_bind_the_gateway_services_target_port_with_routes_of_their_own() -> None:
    """Gateway port 443 is the Service port: istiod listens on its targetPort (8443 on the stock gateway),
    and gives each HTTPS server a route table of its own, which is why the SNI alone scopes its rules."""
    verdict = _verdict(SIMPLE)
    https, plain = verdict.result("office from 10/8"), verdict.result("lan from 10/8")
    assert (https.listener, plain.listener) == ("0.0.0.0_8443", "0.0.0.0_8080")
    assert https.route_config == f"https.443.https.{shared_object_name('shop', 'office', 'public-gateway')}.shop"
    assert plain.route_config == "http.8080"
