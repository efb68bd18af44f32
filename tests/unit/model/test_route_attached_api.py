"""An API attached to Gateway API routes (`targetRefs`) instead of carrying traffic of its own: it has either
targetRefs or a basePath with backends, and each mistake is named at its field."""

from __future__ import annotations

from typing import Any

import pytest

from meshplane.model.registry import REGISTRY
from meshplane.model.resource import API_VERSION, InvalidObject

ROUTE = {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "orders"}


def api(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "API",
        "metadata": {"name": "orders", "project": "shop"},
        "spec": spec,
    }


def errors(doc: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(InvalidObject) as caught:
        REGISTRY.parse(doc)
    return {error.path: error.message for error in caught.value.errors}


def test_an_api_may_attach_to_an_http_route_with_no_base_path_or_backends_of_its_own() -> None:
    parsed = REGISTRY.parse(api(targetRefs=[ROUTE], authentication={"apiKey": {"header": "x-api-key"}}))
    [ref] = parsed.spec.target_refs  # type: ignore[attr-defined]
    assert (ref.kind, ref.name, ref.namespace, ref.section_name) == ("HTTPRoute", "orders", None, None)
    assert parsed.spec.base_path is None  # type: ignore[attr-defined]
    assert parsed.to_wire()["spec"]["targetRefs"] == [ROUTE]


def test_an_attached_api_carries_no_base_path_operations_or_backends_and_each_is_named() -> None:
    found = errors(
        api(
            targetRefs=[ROUTE],
            basePath="/orders",
            operations=[{"method": "GET", "path": "/"}],
            backends=[{"host": "10.0.0.1", "port": 80}],
        )
    )
    assert found == {
        "spec.basePath": "an API attached to routes (targetRefs) has no basePath of its own",
        "spec.operations": "an API attached to routes (targetRefs) has no operations of its own",
        "spec.backends": "an API attached to routes (targetRefs) has no backends of its own",
    }


def test_an_api_without_target_refs_still_needs_a_base_path_and_backends() -> None:
    assert errors(api()) == {
        "spec.basePath": "an API needs a basePath (or targetRefs naming the routes it attaches to)",
        "spec.backends": "an API needs backends (or targetRefs naming the routes it attaches to)",
    }


def test_a_target_ref_names_an_http_route_of_the_gateway_api_group() -> None:
    found = errors(api(targetRefs=[{**ROUTE, "kind": "Service"}, {**ROUTE, "group": "example.com"}]))
    assert set(found) == {"spec.targetRefs[0].kind", "spec.targetRefs[1].group"}


def test_a_route_is_targeted_once_per_api() -> None:
    found = errors(api(targetRefs=[ROUTE, {**ROUTE, "namespace": "shop"}, {**ROUTE, "namespace": "shop"}]))
    assert found == {"spec.targetRefs[2]": "names HTTPRoute shop/orders again"}


def test_a_section_name_is_refused_since_an_api_attaches_to_a_whole_route() -> None:
    found = errors(api(targetRefs=[{**ROUTE, "sectionName": "reads"}]))
    assert found == {"spec.targetRefs[0].sectionName": "an API attaches to a whole HTTPRoute, not one of its rules"}


def test_what_the_route_itself_decides_is_refused_on_an_attached_api() -> None:
    found = errors(
        api(
            targetRefs=[ROUTE],
            hostnames=["shop.example.com"],
            timeout="5s",
            retries={"attempts": 2},
            cors={"allowOrigins": ["*"]},
            shaping={"requestHeaderModifier": {"remove": ["x-a"]}},
            gateways=["edge"],
        )
    )
    reason = "an API attached to routes (targetRefs) leaves {} to its HTTPRoutes"
    assert found == {
        "spec.hostnames": reason.format("hostnames"),
        "spec.timeout": reason.format("timeouts"),
        "spec.retries": reason.format("retries"),
        "spec.cors": reason.format("CORS (the HTTPRoute's CORS filter)"),
        "spec.shaping": reason.format("shaping (the HTTPRoute's filters)"),
        "spec.gateways": reason.format("the Gateways (the HTTPRoute's parentRefs)"),
    }


def test_an_attached_api_takes_keys_or_tokens_not_client_certificates() -> None:
    found = errors(api(targetRefs=[ROUTE], authentication={"mtls": {}}))
    assert found == {
        "spec.authentication.mtls": "an API attached to routes takes API keys or tokens: "
        "a Gateway API listener asks no client certificate"
    }


def test_an_attached_api_reads_back_from_its_stored_form() -> None:
    parsed = REGISTRY.parse(api(targetRefs=[ROUTE], authentication={"apiKey": {}}))

    again = REGISTRY.parse({**parsed.to_wire(), "apiVersion": API_VERSION})
    assert again.spec == parsed.spec
