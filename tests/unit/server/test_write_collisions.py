"""Which stored objects, written after a write's checks read the store, could have refused it."""

from __future__ import annotations

from typing import Any

import pytest

from meshplane.model.resource import Resource
from meshplane.server.access_checks import collides_with_access_checks
from meshplane.server.intent_checks import collides_with_intent_claims
from meshplane_testing.resources import resource, stored

BACKENDS = [{"host": "127.0.0.1", "port": 9001}]


def api(name: str, base_path: str, project: str = "shop", **spec: Any) -> Resource:
    return resource("API", name, {"basePath": base_path, "backends": BACKENDS, **spec}, project)


def subscription(name: str, application: str, api_name: str, project: str = "shop") -> Resource:
    return resource("Subscription", name, {"application": application, "api": api_name}, project)


def ingress(name: str, *hosts: str) -> Resource:
    spec = {
        "hosts": list(hosts),
        "entities": [{"name": "public", "tls": {"mode": "SIMPLE", "credentialName": "cert"}}],
        "routes": [{"match": {"prefix": "/"}, "to": {"service": "web", "port": 8080}}],
    }
    return resource("IngressIntent", name, spec)


def service(name: str, service_name: str, port: int, cloud: str | None = None, project: str = "shop") -> Resource:
    spec: dict[str, Any] = {"service": {"name": service_name, "port": port}}
    if cloud is not None:
        spec["placement"] = {"logicalCloud": cloud}
    return resource("ServiceIntent", name, spec, project)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (api("a", "/orders"), api("b", "/orders", project="other"), True),
        (api("a", "/orders/{id}"), api("b", "/orders/items"), True),
        (api("a", "/orders"), api("b", "/billing"), False),
        (api("a", "/orders", hostnames=["a.example.com"]), api("b", "/orders", hostnames=["b.example.com"]), False),
        (subscription("s1", "mobile", "orders"), subscription("s2", "mobile", "orders"), True),
        (subscription("s1", "mobile", "orders"), subscription("s2", "mobile", "billing"), False),
        (subscription("s1", "mobile", "orders"), subscription("s2", "mobile", "orders", project="other"), False),
        (api("orders", "/orders"), subscription("orders", "mobile", "orders"), False),
    ],
)
def test_access_checks(a: Resource, b: Resource, expected: bool) -> None:
    assert collides_with_access_checks(a, stored(b)) is expected
    assert collides_with_access_checks(b, stored(a)) is expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (ingress("i1", "shop.example.com", "www.example.com"), ingress("i2", "shop.example.com"), True),
        (ingress("i1", "shop.example.com"), ingress("i2", "admin.example.com"), False),
        (service("s1", "orders", 8080, "retail"), service("s2", "orders", 8080, "retail"), True),
        (service("s1", "orders", 8080, "retail"), service("s2", "orders", 8080, "ops"), False),
        (service("s1", "orders", 8080), service("s2", "orders", 9090), False),
        (service("s1", "orders", 8080), service("s2", "orders", 8080, project="other"), False),
    ],
)
def test_intent_claims(a: Resource, b: Resource, expected: bool) -> None:
    assert collides_with_intent_claims(a, stored(b)) is expected
    assert collides_with_intent_claims(b, stored(a)) is expected
