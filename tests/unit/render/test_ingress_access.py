"""Who gets through the shared ingress gateway, judged by Istio's enforcement rules (istio_authz).

The gateway carries every intent's hosts and hosts no meshplane intent names: one intent's access
rules must hold for its hosts and reach no other host, on HTTP chains and on TLS passthrough ones.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from meshplane.model.resource import Resource
from meshplane.server.render.fleet import Fleet
from meshplane.server.render.ingress import render_ingress_intent
from meshplane_testing.render_scenarios import CLUSTERS, parse, scenario_fleet

from .ingress_strategies import ingress_fleets
from .istio_authz import Connection, admitted

GATEWAY = {"istio": "ingressgateway"}
OUTSIDE = "203.0.113.9"
OFFICE = "10.1.2.3"
IDP = "https://idp.example.com"
SIMPLE = {"name": "public", "tls": {"mode": "SIMPLE", "credentialName": "cert"}}
PASSTHROUGH = {"name": "legacy", "tls": {"mode": "PASSTHROUGH"}}
PLAIN = {"name": "office"}


def _intent(name: str, host: str, entities: list[dict], access: list[dict]) -> Resource:
    return parse(
        "IngressIntent",
        name,
        {
            "hosts": [host],
            "entities": entities,
            "routes": [{"match": {"prefix": "/"}, "to": {"service": "web", "port": 8443}}],
            "access": access,
            "authentication": {"jwt": [{"issuer": IDP, "jwksUri": f"{IDP}/keys"}]},
            "placement": {"logicalCloud": "retail"},
        },
    )


def _rendered(*intents: Resource) -> list[dict]:
    fleet = scenario_fleet(ingress_intents=list(intents))
    return [o for intent in intents for o in render_ingress_intent(intent, fleet, "edge-1")]


def https(host: str, ip: str, **request: object) -> Connection:
    return Connection(remote_ip=ip, sni=host, host=host, port=8443, **request)  # type: ignore[arg-type]


def plain(host: str, ip: str, **request: object) -> Connection:
    return Connection(remote_ip=ip, host=host, port=8080, **request)  # type: ignore[arg-type]


def passthrough(host: str, ip: str) -> Connection:
    return Connection(remote_ip=ip, sni=host, http=False, port=8443)


def _allow_office() -> Resource:
    return _intent("shop", "shop.example.com", [SIMPLE], [{"action": "ALLOW", "sources": {"ipBlocks": ["10.0.0.0/8"]}}])


# --- #6: rules constrain only the intent's own hosts ---------------------------------------------


def test_a_host_no_intent_names_stays_open_beside_an_intent_with_allow_rules() -> None:
    objects = _rendered(_allow_office())
    for unnamed in (https("other.example.com", OUTSIDE), plain("other.example.com", OUTSIDE)):
        assert admitted(objects, unnamed, GATEWAY)
    assert admitted(objects, passthrough("other.example.com", OUTSIDE), GATEWAY)
    assert not admitted(objects, https("shop.example.com", OUTSIDE), GATEWAY)
    assert admitted(objects, https("shop.example.com", OFFICE), GATEWAY)


def test_an_intent_without_access_rules_is_open_and_renders_no_policy() -> None:
    open_intent = _intent("blog", "blog.example.com", [SIMPLE], [])
    objects = _rendered(open_intent, _allow_office())
    assert not [o for o in _rendered(open_intent) if o["kind"] == "AuthorizationPolicy"]
    assert admitted(objects, https("blog.example.com", OUTSIDE), GATEWAY)


def test_allow_rules_by_source_range_and_by_jwt_claims_still_hold_with_deny_rules_first() -> None:
    ops = _intent(
        "ops",
        "ops.example.com",
        [SIMPLE],
        [
            {"action": "ALLOW", "sources": {"requestPrincipals": [f"{IDP}/*"]}, "jwtClaims": {"groups": "ops"}},
            {"action": "ALLOW", "sources": {"ipBlocks": ["10.0.0.0/8"]}},
            {"action": "DENY", "sources": {"ipBlocks": ["10.9.0.0/16"]}},
        ],
    )
    objects = _rendered(ops, _allow_office())
    host = "ops.example.com"
    assert admitted(objects, https(host, OUTSIDE, principal=f"{IDP}/alice", claims={"groups": "ops"}), GATEWAY)
    assert not admitted(objects, https(host, OUTSIDE, principal=f"{IDP}/alice", claims={"groups": "dev"}), GATEWAY)
    assert not admitted(objects, https(host, OUTSIDE, claims={"groups": "ops"}), GATEWAY)
    assert not admitted(objects, https(host, OUTSIDE), GATEWAY)
    assert admitted(objects, https(host, OFFICE), GATEWAY)
    assert not admitted(objects, https(host, "10.9.1.1"), GATEWAY)
    assert not admitted(objects, https(host, "10.9.1.1", principal=f"{IDP}/a", claims={"groups": "ops"}), GATEWAY)
    assert not admitted(objects, https("shop.example.com", OUTSIDE, principal=f"{IDP}/alice"), GATEWAY)


# --- #5: no rule with HTTP-only fields applies on a TLS passthrough chain --------------------------


def test_a_deny_by_request_principal_or_claim_never_closes_a_passthrough_host_on_the_same_gateway() -> None:
    legacy = _intent("legacy", "tls.example.com", [PASSTHROUGH], [])
    for entity in (SIMPLE, PLAIN):
        shop = _intent(
            "shop",
            "shop.example.com",
            [entity],
            [
                {"action": "DENY", "sources": {"requestPrincipals": [f"{IDP}/banned"]}},
                {"action": "DENY", "jwtClaims": {"groups": "banned"}},
                {"action": "ALLOW", "sources": {"requestPrincipals": [f"{IDP}/*"]}},
            ],
        )
        objects = _rendered(shop, legacy)
        connect = https if entity is SIMPLE else plain
        assert admitted(objects, passthrough("tls.example.com", OUTSIDE), GATEWAY), entity
        assert admitted(objects, connect("shop.example.com", OUTSIDE, principal=f"{IDP}/alice"), GATEWAY)
        assert not admitted(objects, connect("shop.example.com", OUTSIDE, principal=f"{IDP}/banned"), GATEWAY)
        claims = {"groups": "banned"}
        assert not admitted(objects, connect("shop.example.com", OUTSIDE, principal=f"{IDP}/a", claims=claims), GATEWAY)
        assert not admitted(objects, connect("shop.example.com", OUTSIDE), GATEWAY)


def test_source_range_rules_of_a_passthrough_intent_hold_on_its_own_tcp_chain_only() -> None:
    legacy = _intent(
        "legacy",
        "tls.example.com",
        [PASSTHROUGH],
        [
            {"action": "ALLOW", "sources": {"ipBlocks": ["10.0.0.0/8"]}},
            {"action": "DENY", "sources": {"ipBlocks": ["10.9.0.0/16"]}},
        ],
    )
    objects = _rendered(legacy)
    assert admitted(objects, passthrough("tls.example.com", OFFICE), GATEWAY)
    assert not admitted(objects, passthrough("tls.example.com", OUTSIDE), GATEWAY)
    assert not admitted(objects, passthrough("tls.example.com", "10.9.1.1"), GATEWAY)
    assert admitted(objects, passthrough("other-tls.example.com", OUTSIDE), GATEWAY)
    assert admitted(objects, https("shop.example.com", "10.9.1.1"), GATEWAY)
    assert admitted(objects, plain("shop.example.com", "10.9.1.1"), GATEWAY)


def test_each_entity_gets_the_rules_its_own_gateway_pods_can_check() -> None:
    """Several entities run on gateway pods of their own: a passthrough entity's pods see no request,
    so JWT rules admit nobody there, while source ranges hold on both."""
    both = _intent(
        "both",
        "both.example.com",
        [SIMPLE, PASSTHROUGH],
        [
            {"action": "ALLOW", "sources": {"requestPrincipals": [f"{IDP}/*"]}},
            {"action": "ALLOW", "sources": {"ipBlocks": ["10.0.0.0/8"]}},
        ],
    )
    objects = _rendered(both)
    public = {**GATEWAY, "meshplane.io/ingress-entity": "public"}
    legacy = {**GATEWAY, "meshplane.io/ingress-entity": "legacy"}
    assert admitted(objects, https("both.example.com", OUTSIDE, principal=f"{IDP}/alice"), public)
    assert not admitted(objects, https("both.example.com", OUTSIDE), public)
    assert admitted(objects, passthrough("both.example.com", OFFICE), legacy)
    assert not admitted(objects, passthrough("both.example.com", OUTSIDE), legacy)


# --- every generated fleet -------------------------------------------------------------------------


def _samples(host: str) -> list[Connection]:
    """Connections to `host` on every kind of chain, from several sources, with and without tokens."""
    name = host.replace("*", "any", 1)
    out = []
    for ip in (OFFICE, "192.0.2.7", OUTSIDE, "2001:db8::7"):
        out += [passthrough(name, ip)]
        for principal, claims in ((None, {}), (f"{IDP}/alice", {"groups": "ops"}), (f"{IDP}/bob", {})):
            out += [https(name, ip, principal=principal, claims=claims), plain(name, ip, principal=principal)]
    return out


def _pods(fleet: Fleet) -> list[dict[str, str]]:
    entities = {e.name for i in fleet.ingress_intents for e in i.spec.entities}
    return [GATEWAY] + [{**GATEWAY, "meshplane.io/ingress-entity": e} for e in sorted(entities)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ingress_fleets())
def test_an_intents_rules_decide_for_its_own_hosts_only(fleet: Fleet) -> None:
    """On every cluster and gateway pod: a host no intent names is open to every connection, and a
    connection to an intent's host is decided as that intent's policies alone would decide it."""
    for cluster in CLUSTERS:
        rendered = {
            (i.metadata.project, i.metadata.name): render_ingress_intent(i, fleet, cluster)
            for i in fleet.ingress_intents
        }
        everything = [o for objects in rendered.values() for o in objects]
        for labels in _pods(fleet):
            assert all(admitted(everything, c, labels) for c in _samples("unnamed.example.net"))
            for intent in fleet.ingress_intents:
                own = rendered[(intent.metadata.project, intent.metadata.name)]
                for host in intent.spec.hosts:
                    for conn in _samples(host):
                        assert admitted(everything, conn, labels) == admitted(own, conn, labels), (host, conn)
