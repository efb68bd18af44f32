"""HTTPRoute and GRPCRoute as the control plane keeps them: the Gateway API's spec, refused where its CRD
refuses, with field paths; a status of the cluster's parents entries; never delivered."""

from __future__ import annotations

from typing import Any

import pytest

from meshplane.model.registry import REGISTRY
from meshplane.model.resource import InvalidObject


def route_doc(kind: str = "HTTPRoute", **spec: Any) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": "shop", "project": "team-a"}, "spec": spec}


def error_paths(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidObject) as caught:
        REGISTRY.parse(doc)
    return [error.path for error in caught.value.errors]


FULL_HTTP_RULE = {
    "name": "orders",
    "matches": [
        {
            "path": {"type": "PathPrefix", "value": "/orders"},
            "headers": [{"type": "Exact", "name": "x-team", "value": "a"}],
            "queryParams": [{"type": "RegularExpression", "name": "v", "value": "^[0-9]+$"}],
            "method": "GET",
        }
    ],
    "filters": [
        {"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "x-a", "value": "1"}]}},
        {"type": "ResponseHeaderModifier", "responseHeaderModifier": {"remove": ["server"]}},
        {"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}},
        {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "shadow", "port": 80}, "percent": 10}},
        {"type": "CORS", "cors": {"allowOrigins": ["https://shop.example"], "maxAge": 60}},
    ],
    "backendRefs": [
        {"group": "", "kind": "Service", "name": "orders", "port": 8080, "weight": 3},
        {"name": "orders-v2", "namespace": "team-b", "port": 8080, "weight": 1},
    ],
    "timeouts": {"request": "10s", "backendRequest": "1500ms"},
}


def test_an_http_route_with_every_standard_field_is_taken_as_written() -> None:
    spec = {
        "parentRefs": [
            {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "edge", "sectionName": "http"}
        ],
        "hostnames": ["shop.example", "*.shop.example"],
        "rules": [
            FULL_HTTP_RULE,
            {"filters": [{"type": "RequestRedirect", "requestRedirect": {"scheme": "https", "statusCode": 301}}]},
        ],
    }

    route = REGISTRY.parse(route_doc(**spec))

    assert route.to_wire()["spec"] == spec
    assert route.status.to_wire() == {"parents": []}


def test_a_grpc_route_with_method_and_header_matches_is_taken() -> None:
    spec = {
        "parentRefs": [{"name": "edge"}],
        "rules": [
            {
                "matches": [
                    {"method": {"service": "shop.Orders", "method": "Get"}, "headers": [{"name": "x-a", "value": "1"}]}
                ],
                "backendRefs": [{"name": "orders", "port": 50051}],
            }
        ],
    }

    assert REGISTRY.parse(route_doc("GRPCRoute", **spec)).to_wire()["spec"] == spec


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"parentRefs": [{"name": "edge", "sectionname": "http"}]}, "spec.parentRefs[0].sectionname"),
        ({"parentRefs": [{"sectionName": "http"}]}, "spec.parentRefs[0].name"),
        ({"parentRefs": [{"name": "edge", "port": 70000}]}, "spec.parentRefs[0].port"),
        ({"hostnames": ["Shop.Example"]}, "spec.hostnames[0]"),
        ({"rules": [{"matches": [{"path": {"type": "Glob", "value": "/*"}}]}]}, "spec.rules[0].matches[0].path.type"),
        ({"rules": [{"matches": [{"method": "FETCH"}]}]}, "spec.rules[0].matches[0].method"),
        ({"rules": [{"timeouts": {"request": "10 seconds"}}]}, "spec.rules[0].timeouts.request"),
        ({"rules": [{"retry": {"attempts": 2}}]}, "spec.rules[0].retry"),
        ({"rules": [{"backendRefs": [{"name": "a", "weight": -1}]}]}, "spec.rules[0].backendRefs[0].weight"),
        ({"rules": [{"filters": [{"type": "ExternalAuth"}]}]}, "spec.rules[0].filters[0].type"),
        (
            {"rules": [{"filters": [{"type": "RequestRedirect", "requestRedirect": {"statusCode": 307}}]}]},
            "spec.rules[0].filters[0].requestRedirect.statusCode",
        ),
        ({"rules": [{}] * 17}, "spec.rules"),
    ],
)
def test_an_http_route_field_the_crd_refuses_is_refused_at_its_path(spec: dict[str, Any], path: str) -> None:
    assert path in error_paths(route_doc(**spec))


def test_a_filter_without_the_configuration_its_type_names_is_refused() -> None:
    doc = route_doc(rules=[{"filters": [{"type": "URLRewrite", "requestHeaderModifier": {"remove": ["a"]}}]}])

    with pytest.raises(InvalidObject) as caught:
        REGISTRY.parse(doc)

    assert [e.path for e in caught.value.errors] == ["spec.rules[0].filters[0]"]
    assert "needs urlRewrite" in caught.value.errors[0].message


def test_a_path_modifier_naming_the_other_replacement_is_refused() -> None:
    path = {"type": "ReplaceFullPath", "replacePrefixMatch": "/"}
    doc = route_doc(rules=[{"filters": [{"type": "URLRewrite", "urlRewrite": {"path": path}}]}])

    assert error_paths(doc) == ["spec.rules[0].filters[0].urlRewrite.path"]


def test_a_grpc_route_takes_no_http_only_filter_nor_an_empty_method_match() -> None:
    redirect = {"type": "RequestRedirect", "requestRedirect": {"scheme": "https"}}
    doc = route_doc("GRPCRoute", rules=[{"filters": [redirect], "matches": [{"method": {"type": "Exact"}}]}])

    assert set(error_paths(doc)) >= {"spec.rules[0].filters[0].type", "spec.rules[0].matches[0].method"}


def test_routes_stay_at_the_server_and_only_a_cluster_makes_them() -> None:
    for kind, plural in (("HTTPRoute", "httproutes"), ("GRPCRoute", "grpcroutes")):
        info = REGISTRY.get(kind)

        assert (info.plural, info.namespaced, info.cluster_made) == (plural, True, True)
        assert not info.delivered
        assert not info.writable
        assert REGISTRY.resolve(plural) is info
