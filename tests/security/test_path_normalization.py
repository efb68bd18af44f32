"""A DENY by path holds against `//` only where the proxy merges slashes: why MERGE_SLASHES is required.

Real Envoy, configured as istiod configures a sidecar's HTTP connection manager under each mesh
`pathNormalization` (pilot's listener builder: BASE = normalize_path; MERGE_SLASHES = normalize_path
and merge_slashes), with the RBAC filter istiod renders for an AuthorizationPolicy DENY on
`paths: ["/orders/admin/*"]` (a prefix match on the URL path).
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshplane.model.intents import REQUIRED_PATH_NORMALIZATION
from meshplane_testing.envoy import envoy_binary, run_envoy_config
from meshplane_testing.process import free_port

pytestmark = pytest.mark.envoy

HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
RBAC = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"
ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"

NORMALIZATIONS = {
    "BASE": {"normalize_path": True},
    "MERGE_SLASHES": {"normalize_path": True, "merge_slashes": True},
}
"""Istio's mesh setting -> the connection manager fields istiod sets for it."""


def listener(name: str, port: int, normalization: dict) -> dict:
    deny_admin = {
        "action": "DENY",
        "policies": {
            "ns[shop]-policy[orders-deny]-rule[0]": {
                "permissions": [{"url_path": {"path": {"prefix": "/orders/admin/"}}}],
                "principals": [{"any": True}],
            }
        },
    }
    manager = {
        "@type": HCM,
        "stat_prefix": name,
        "path_with_escaped_slashes_action": "KEEP_UNCHANGED",
        **normalization,
        "route_config": {
            "virtual_hosts": [
                {
                    "name": "orders",
                    "domains": ["*"],
                    "routes": [{"match": {"prefix": "/"}, "direct_response": {"status": 200}}],
                }
            ]
        },
        "http_filters": [
            {"name": "envoy.filters.http.rbac", "typed_config": {"@type": RBAC, "rules": deny_admin}},
            {"name": "envoy.filters.http.router", "typed_config": {"@type": ROUTER}},
        ],
    }
    return {
        "name": name,
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
        "filter_chains": [
            {"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}]}
        ],
    }


@pytest.fixture(scope="module")
def ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    envoy_binary()
    ports = {mode: free_port() for mode in NORMALIZATIONS}
    bootstrap = {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": free_port()}}},
        "static_resources": {"listeners": [listener(m, p, NORMALIZATIONS[m]) for m, p in ports.items()]},
    }
    tmp_path: Path = tmp_path_factory.mktemp("path-normalization")
    with run_envoy_config(tmp_path, "path-normalization", bootstrap) as envoy:
        for port in ports.values():
            envoy.wait_listener(port)
        yield ports


def status(port: int, path: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    finally:
        connection.close()


def test_istios_default_normalization_lets_a_double_slash_past_a_path_deny(ports: dict[str, int]) -> None:
    assert status(ports["BASE"], "/orders/admin/users") == 403
    assert status(ports["BASE"], "/orders/./admin/users") == 403
    assert status(ports["BASE"], "/orders//admin/users") == 200


def test_the_required_normalization_closes_it(ports: dict[str, int]) -> None:
    required = ports[REQUIRED_PATH_NORMALIZATION]
    for path in ("/orders/admin/users", "/orders//admin/users", "//orders///admin/users", "/orders/./admin//users"):
        assert status(required, path) == 403, path
    assert status(required, "/orders/list") == 200
