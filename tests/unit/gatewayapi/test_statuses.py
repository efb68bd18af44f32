"""Every status reason `program` writes, from the state that calls for it."""

from __future__ import annotations

from typing import Any

import pytest

from meshplane.gatewayapi.program import program
from meshplane.gatewayapi.state import TRANSITION_PLACEHOLDER, CertificatePair, GatewayApiState
from meshplane_testing.gatewayapi_objects import (
    backend,
    gateway,
    gateway_class,
    listener,
    reference_grant,
    route,
    rule,
    service,
    state,
)

SERVICES = {("default", "svc"): service(("127.0.0.2", 9000)), ("other", "svc"): service(("127.0.0.3", 9000))}
HTTP = listener("http", 80)


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {entry["type"]: (entry["status"], entry["reason"]) for entry in status["conditions"]}


def route_parent(given: GatewayApiState, name: str = "r", kind: str = "HTTPRoute") -> dict[str, tuple[str, str]]:
    (parent,) = program(given).statuses[(kind, "default", name)]["parents"]
    assert parent["controllerName"] == given.controller
    return conditions(parent)


def listener_status(given: GatewayApiState, index: int = 0) -> dict[str, Any]:
    return program(given).statuses[("Gateway", "default", "gw")]["listeners"][index]


def test_only_classes_of_our_controller_are_accepted_and_their_gateways_served() -> None:
    given = state(
        gateway_class(),
        gateway_class("someone-else", "example.com/other"),
        gateway("gw", HTTP),
        gateway("theirs", HTTP, class_name="someone-else"),
    )
    statuses = program(given).statuses
    assert conditions(statuses[("GatewayClass", "", "meshplane")]) == {
        "Accepted": ("True", "Accepted"),
        "SupportedVersion": ("True", "SupportedVersion"),
    }
    features = [entry["name"] for entry in statuses[("GatewayClass", "", "meshplane")]["supportedFeatures"]]
    assert features == sorted(features), "sorted, as the specification asks"
    assert {"Gateway", "HTTPRoute", "GRPCRoute", "ReferenceGrant", "HTTPRouteQueryParamMatching"} <= set(features)
    assert "HTTPRouteRetry" not in features, "claimed only once its conformance tests pass"
    assert ("GatewayClass", "", "someone-else") not in statuses
    assert ("Gateway", "default", "theirs") not in statuses
    gateway_status = statuses[("Gateway", "default", "gw")]
    assert conditions(gateway_status) == {"Accepted": ("True", "Accepted"), "Programmed": ("True", "Programmed")}
    assert gateway_status["addresses"] == [{"type": "IPAddress", "value": "127.0.0.1"}]


def test_a_gateway_without_an_address_is_accepted_but_not_programmed() -> None:
    statuses = program(state(gateway("gw", HTTP), addresses={})).statuses
    gateway_status = statuses[("Gateway", "default", "gw")]
    assert conditions(gateway_status)["Programmed"] == ("False", "AddressNotAssigned")
    assert gateway_status["addresses"] == []
    assert (
        program(state(gateway("gw", HTTP), addresses={})).resources.get(
            "type.googleapis.com/envoy.config.listener.v3.Listener"
        )
        == {}
    )


def test_every_condition_carries_the_generation_and_the_placeholder_time() -> None:
    given = state(gateway("gw", HTTP, generation=7), route("r", rule(backend("svc")), generation=3), services=SERVICES)
    statuses = program(given).statuses
    gateway_conditions = statuses[("Gateway", "default", "gw")]["conditions"]
    gateway_conditions += statuses[("Gateway", "default", "gw")]["listeners"][0]["conditions"]
    assert {(c["observedGeneration"], c["lastTransitionTime"]) for c in gateway_conditions} == {
        (7, TRANSITION_PLACEHOLDER)
    }
    route_conditions = statuses[("HTTPRoute", "default", "r")]["parents"][0]["conditions"]
    assert {c["observedGeneration"] for c in route_conditions} == {3}


def test_an_unsupported_protocol_is_not_accepted_and_the_gateway_lists_it_invalid() -> None:
    given = state(gateway("gw", HTTP, listener("tcp", 9000, "TCP")))
    status = program(given).statuses[("Gateway", "default", "gw")]
    assert conditions(status)["Accepted"] == ("True", "ListenersNotValid")
    tcp = conditions(status["listeners"][1])
    assert tcp["Accepted"] == ("False", "UnsupportedProtocol")
    assert tcp["Programmed"] == ("False", "Invalid")


def test_a_route_kind_not_served_makes_the_listener_say_invalid_route_kinds() -> None:
    kinds = {"kinds": [{"kind": "HTTPRoute"}, {"kind": "TCPRoute"}]}
    status = listener_status(state(gateway("gw", listener("http", 80, allowedRoutes=kinds))))
    assert conditions(status)["ResolvedRefs"] == ("False", "InvalidRouteKinds")
    assert status["supportedKinds"] == [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}]


def https(*refs: dict[str, Any]) -> dict[str, Any]:
    return listener("https", 443, "HTTPS", tls={"mode": "Terminate", "certificateRefs": list(refs)})


@pytest.mark.parametrize(
    ("ref", "grants", "secrets", "reason"),
    [
        ({"name": "missing"}, [], {}, "InvalidCertificateRef"),
        ({"name": "cert", "kind": "ConfigMap"}, [], {}, "InvalidCertificateRef"),
        ({"name": "cert", "namespace": "certs"}, [], {("certs", "cert")}, "RefNotPermitted"),
        (
            {"name": "cert", "namespace": "certs"},
            [reference_grant("certs", "Gateway", "default", "Secret", name="another")],
            {("certs", "cert")},
            "RefNotPermitted",
        ),
        (
            {"name": "cert", "namespace": "certs"},
            [reference_grant("certs", "HTTPRoute", "default", "Secret")],
            {("certs", "cert")},
            "RefNotPermitted",
        ),
    ],
)
def test_a_certificate_ref_that_cannot_be_used_says_why(
    ref: dict[str, Any], grants: list[dict[str, Any]], secrets: set[tuple[str, str]], reason: str
) -> None:
    pairs = {key: CertificatePair("cert", "key") for key in secrets}
    status = listener_status(state(gateway("gw", https(ref)), *grants, secrets=pairs))
    assert conditions(status)["ResolvedRefs"] == ("False", reason)
    assert conditions(status)["Programmed"] == ("False", "Invalid")


def test_a_reference_grant_lets_a_gateway_use_a_secret_of_another_namespace() -> None:
    grant = reference_grant("certs", "Gateway", "default", "Secret")
    given = state(
        gateway("gw", https({"name": "cert", "namespace": "certs"})),
        grant,
        secrets={("certs", "cert"): CertificatePair("cert", "key")},
    )
    done = program(given)
    assert conditions(done.statuses[("Gateway", "default", "gw")]["listeners"][0])["ResolvedRefs"] == (
        "True",
        "ResolvedRefs",
    )
    assert done.secrets_wanted == {("certs", "cert")}
    assert list(done.resources["type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"]) == [
        "gwapi/certs/cert"
    ]


def test_listeners_sharing_a_port_conflict_on_protocol_or_hostname() -> None:
    given = state(
        gateway(
            "gw",
            listener("a", 80, hostname="a.example.com"),
            listener("b", 80, hostname="a.example.com"),
            listener("c", 443, "HTTP"),
            https({"name": "cert"}),
        )
    )
    statuses = program(given).statuses[("Gateway", "default", "gw")]["listeners"]
    reasons = [conditions(entry)["Conflicted"] for entry in statuses]
    assert reasons == [("True", "HostnameConflict")] * 2 + [("True", "ProtocolConflict")] * 2


@pytest.mark.parametrize(
    ("parent", "listeners", "hostnames", "reason"),
    [
        ({"name": "gw", "sectionName": "nope"}, [HTTP], None, "NoMatchingParent"),
        ({"name": "gw", "port": 81}, [HTTP], None, "NoMatchingParent"),
        ({"name": "gw"}, [listener("http", 80, allowedRoutes={"kinds": [{"kind": "GRPCRoute"}]})], None,
         "NotAllowedByListeners"),
        ({"name": "gw"}, [listener("http", 80, hostname="a.example.com")], ["b.example.com"],
         "NoMatchingListenerHostname"),
    ],
)  # fmt: skip
def test_a_route_that_attaches_to_no_listener_says_why(
    parent: dict[str, Any], listeners: list[dict[str, Any]], hostnames: list[str] | None, reason: str
) -> None:
    given = state(gateway("gw", *listeners), route("r", rule(), parents=[parent], hostnames=hostnames))
    assert route_parent(given)["Accepted"] == ("False", reason)
    assert program(given).statuses[("Gateway", "default", "gw")]["listeners"][0]["attachedRoutes"] == 0


def test_a_route_from_another_namespace_attaches_only_where_the_listener_allows() -> None:
    same = listener("same", 80)
    selected = listener(
        "selected", 81, allowedRoutes={"namespaces": {"from": "Selector", "selector": {"matchLabels": {"env": "x"}}}}
    )
    everyone = listener("all", 82, allowedRoutes={"namespaces": {"from": "All"}})
    foreign = route("r", rule(), namespace="apps", parents=[{"name": "gw", "namespace": "default"}])
    given = state(gateway("gw", same, selected, everyone), foreign, namespaces={"apps": {"env": "x"}})
    counts = [entry["attachedRoutes"] for entry in program(given).statuses[("Gateway", "default", "gw")]["listeners"]]
    assert counts == [0, 1, 1]
    given = state(gateway("gw", same, selected), foreign, namespaces={"apps": {"env": "y"}})
    (parent,) = program(given).statuses[("HTTPRoute", "apps", "r")]["parents"]
    assert conditions(parent)["Accepted"] == ("False", "NotAllowedByListeners")


def test_a_route_naming_no_gateway_of_ours_gets_no_status_entry() -> None:
    given = state(gateway("gw", HTTP), route("r", rule(), parents=[{"name": "elsewhere"}]))
    assert ("HTTPRoute", "default", "r") not in program(given).statuses


@pytest.mark.parametrize(
    ("ref", "reason"),
    [
        (backend("missing"), "BackendNotFound"),
        (backend("svc", port=9999), "BackendNotFound"),
        (backend("svc", kind="ConfigMap", group="core.example.com"), "InvalidKind"),
        (backend("svc", namespace="other"), "RefNotPermitted"),
    ],
)
def test_a_backend_that_cannot_be_resolved_says_why(ref: dict[str, Any], reason: str) -> None:
    given = state(gateway("gw", HTTP), route("r", rule(ref)), services=SERVICES)
    assert route_parent(given) == {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("False", reason)}


def test_a_reference_grant_lets_a_route_send_to_a_service_of_another_namespace() -> None:
    grant = reference_grant("other", "HTTPRoute", "default", "Service")
    given = state(gateway("gw", HTTP), route("r", rule(backend("svc", namespace="other"))), grant, services=SERVICES)
    assert route_parent(given)["ResolvedRefs"] == ("True", "ResolvedRefs")
    assert "gwapi/other/svc/8080" in program(given).resources["type.googleapis.com/envoy.config.cluster.v3.Cluster"]


def test_a_filter_not_served_keeps_the_route_from_being_accepted() -> None:
    given = state(gateway("gw", HTTP), route("r", rule(filters=[{"type": "ExtensionRef", "extensionRef": {}}])))
    assert route_parent(given)["Accepted"] == ("False", "UnsupportedValue")


def test_a_grpc_route_is_attached_and_its_backends_are_http2_clusters() -> None:
    given = state(gateway("gw", HTTP), route("g", rule(backend("svc")), kind="GRPCRoute"), services=SERVICES)
    assert route_parent(given, "g", "GRPCRoute") == {
        "Accepted": ("True", "Accepted"),
        "ResolvedRefs": ("True", "ResolvedRefs"),
    }
    assert list(program(given).resources["type.googleapis.com/envoy.config.cluster.v3.Cluster"]) == [
        "gwapi/default/svc/8080/h2"
    ]


def test_the_same_state_always_programs_the_same_output() -> None:
    objects = [gateway("gw", HTTP), route("b", rule(backend("svc"))), route("a", rule(backend("svc")))]
    first = program(state(*objects, services=SERVICES))
    second = program(state(*reversed(objects), services=SERVICES))
    assert first == second


@pytest.mark.parametrize(
    "bad_rule",
    [
        rule(backend("svc"), matches=[{"path": {"type": "RegularExpression", "value": "/(?=lookahead)"}}]),
        rule(backend("svc"), matches=[{"headers": [{"name": "x", "type": "RegularExpression", "value": "("}]}]),
        rule(backend("svc"), timeouts={"request": "forever"}),
        rule(backend("svc"), timeouts={"request": "1s", "backendRequest": "2s"}),
    ],
)
def test_a_route_envoy_could_not_take_is_refused_alone(bad_rule: dict[str, Any]) -> None:
    good = route("good", rule(backend("svc")), hostnames=["good.example.com"])
    given = state(gateway("gw", HTTP), route("r", bad_rule, hostnames=["bad.example.com"]), good, services=SERVICES)
    done = program(given)
    assert route_parent(given)["Accepted"] == ("False", "UnsupportedValue")
    (table,) = done.resources["type.googleapis.com/envoy.config.route.v3.RouteConfiguration"].values()
    served = {host.name: [r.name for r in host.routes] for host in table.virtual_hosts}
    assert served == {"good.example.com": ["default/good/0/0"], "*": []}


def test_a_malformed_number_is_a_reference_that_does_not_resolve() -> None:
    given = state(gateway("gw", HTTP), route("r", rule(backend("svc", port="eighty"))), services=SERVICES)  # type: ignore[arg-type]
    assert route_parent(given)["ResolvedRefs"] == ("False", "BackendNotFound")


def test_a_listener_on_a_port_the_agent_cannot_serve_says_port_unavailable() -> None:
    given = state(gateway("gw", HTTP, listener("other", 81)), unavailable_ports={("default", "gw"): frozenset({80})})
    listeners = program(given).statuses[("Gateway", "default", "gw")]["listeners"]
    assert conditions(listeners[0])["Accepted"] == ("False", "PortUnavailable")
    assert conditions(listeners[1])["Accepted"] == ("True", "Accepted")


def test_a_route_attaches_to_a_listener_whose_certificate_is_missing_though_it_is_not_served() -> None:
    given = state(gateway("gw", https({"name": "does-not-exist"})), route("r", rule(backend("svc"))), services=SERVICES)
    done = program(given)
    status = done.statuses[("Gateway", "default", "gw")]["listeners"][0]
    assert status["attachedRoutes"] == 1
    assert conditions(status)["Programmed"] == ("False", "Invalid")
    assert route_parent(given)["Accepted"] == ("True", "Accepted")
    assert done.resources["type.googleapis.com/envoy.config.listener.v3.Listener"] == {}


def test_a_gateway_with_no_accepted_listener_is_not_accepted() -> None:
    only_invalid = state(gateway("gw", listener("invalid", 1111, "INVALID")))
    assert conditions(program(only_invalid).statuses[("Gateway", "default", "gw")])["Accepted"] == (
        "False",
        "ListenersNotValid",
    )
    missing_certificate = state(gateway("gw", https({"name": "does-not-exist"})))
    assert conditions(program(missing_certificate).statuses[("Gateway", "default", "gw")])["Accepted"] == (
        "True",
        "ListenersNotValid",
    )


def test_a_gateway_given_the_address_and_port_of_an_older_one_does_not_take_the_port() -> None:
    older, younger = gateway("b-older", HTTP), gateway("a-younger", HTTP, listener("other", 81))
    younger["metadata"]["creationTimestamp"] = "2026-06-01T00:00:00Z"
    addresses = {("default", "b-older"): "127.0.0.9", ("default", "a-younger"): "127.0.0.9"}
    done = program(state(older, younger, addresses=addresses))
    young = done.statuses[("Gateway", "default", "a-younger")]["listeners"]
    assert [conditions(entry)["Accepted"] for entry in young] == [("False", "PortUnavailable"), ("True", "Accepted")]
    assert conditions(done.statuses[("Gateway", "default", "b-older")]["listeners"][0])["Accepted"] == (
        "True",
        "Accepted",
    )
    assert sorted(done.resources["type.googleapis.com/envoy.config.listener.v3.Listener"]) == [
        "gwapi/default/a-younger/81",
        "gwapi/default/b-older/80",
    ]


def test_of_an_http_and_a_grpc_route_sharing_a_listener_hostname_only_the_older_is_accepted() -> None:
    http_route = route("web", rule(backend("svc")), hostnames=["shop.example.com"], created="2026-02-01T00:00:00Z")
    grpc_route = route("rpc", rule(backend("svc")), kind="GRPCRoute", hostnames=["*.example.com"])
    elsewhere = route("other", rule(backend("svc")), kind="GRPCRoute", hostnames=["api.example.org"])
    given = state(gateway("gw", HTTP), http_route, grpc_route, elsewhere, services=SERVICES)
    assert route_parent(given, "rpc", "GRPCRoute")["Accepted"] == ("True", "Accepted")
    assert route_parent(given, "other", "GRPCRoute")["Accepted"] == ("True", "Accepted")
    assert route_parent(given, "web")["Accepted"] == ("False", "NotAllowedByListeners")
    assert listener_status(given)["attachedRoutes"] == 2


def test_a_redirect_and_a_rewrite_in_one_rule_are_incompatible_filters() -> None:
    filters = [
        {"type": "RequestRedirect", "requestRedirect": {"hostname": "a.example.com"}},
        {"type": "URLRewrite", "urlRewrite": {"hostname": "b.example.com"}},
    ]
    given = state(gateway("gw", HTTP), route("r", rule(filters=filters)))
    assert route_parent(given)["Accepted"] == ("False", "IncompatibleFilters")
