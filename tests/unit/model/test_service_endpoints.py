"""ServiceEndpoint's shape and names, and API backends that name a service instead of a host."""

from __future__ import annotations

from typing import Any

import pytest

from meshplane.model.meta import check_name
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import InvalidObject
from meshplane.model.services import endpoint_name
from meshplane_testing import documents


def api_with(*backends: dict[str, Any]) -> dict[str, Any]:
    return documents.api("orders", project="shop", backends=list(backends))


def errors(doc: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(InvalidObject) as caught:
        REGISTRY.parse(doc)
    return {error.path: error.message for error in caught.value.errors}


def test_a_backend_may_name_a_service_instead_of_a_host() -> None:
    parsed = REGISTRY.parse(api_with({"service": "orders.shop", "port": 8080}))
    [backend] = parsed.spec.backends  # type: ignore[attr-defined]
    assert (backend.service, backend.host, backend.port) == ("orders.shop", None, 8080)
    assert parsed.to_wire()["spec"]["backends"][0] == {
        "service": "orders.shop",
        "port": 8080,
        "protocol": "http",
        "basePath": "/",
        "weight": 100,
    }


def test_a_backend_needs_exactly_one_of_host_and_service_and_the_error_names_the_field() -> None:
    found = errors(
        api_with(
            {"host": "10.0.0.1", "port": 80},
            {"port": 80},
            {"host": "10.0.0.1", "service": "orders.shop", "port": 80},
        )
    )
    assert found == {
        "spec.backends[1].host": "a backend needs a host or a service",
        "spec.backends[2].service": "a backend has a host or a service, not both",
    }


@pytest.mark.parametrize("reference", ["orders", "orders.shop.svc", "Orders.shop", "orders.", ".shop"])
def test_a_service_is_name_dot_namespace(reference: str) -> None:
    assert list(errors(api_with({"service": reference, "port": 80}))) == ["spec.backends[0].service"]


def test_service_endpoints_are_read_only_project_objects_that_stay_at_the_server() -> None:
    info = REGISTRY.resolve("serviceendpoints")
    assert (info.kind, info.namespaced, info.writable, info.exposed, info.delivered) == (
        "ServiceEndpoint",
        True,
        False,
        True,
        False,
    )


def test_a_service_endpoint_speaks_kubernetes_field_names() -> None:
    doc = {
        "kind": "ServiceEndpoint",
        "metadata": {"name": "edge-1-shop-orders-0", "project": "shop"},
        "spec": {
            "cluster": "edge-1",
            "namespace": "shop",
            "service": "orders",
            "ports": [{"name": "http", "port": 8080, "targetPort": "http"}, {"port": 9090, "protocol": "UDP"}],
            "clusterIPs": ["10.96.0.10", "fd00::10"],
            "eastWestGateway": {"address": "203.0.113.7", "port": 15443},
        },
    }
    spec = REGISTRY.parse(doc).to_wire()["spec"]
    assert spec["clusterIPs"] == ["10.96.0.10", "fd00::10"]
    assert spec["ports"] == [
        {"name": "http", "port": 8080, "protocol": "TCP", "targetPort": "http"},
        {"port": 9090, "protocol": "UDP"},
    ]


def test_endpoint_names_are_dns_labels_and_tell_apart_what_dashes_would_merge() -> None:
    first, second = endpoint_name("edge-1", "a-b", "c"), endpoint_name("edge-1", "a", "b-c")
    assert first.startswith("edge-1-a-b-c-") and second.startswith("edge-1-a-b-c-")
    assert first != second
    assert endpoint_name("edge-1", "a-b", "c") == first
    for name in (first, second, endpoint_name("e" * 63, "n" * 63, "s" * 63), endpoint_name("x", "y-" * 30 + "z", "w")):
        assert check_name(name) == name
