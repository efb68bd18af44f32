"""CORS preflights through a real Envoy: two APIs on one basePath each answer with their own policy, and a
request that looks like a preflight skips credentials only where its API has CORS.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from meshplane_testing import documents
from meshplane_testing.access_fleet import ISSUER
from meshplane_testing.envoy import run_envoy
from meshplane_testing.gateway import Gateway
from meshplane_testing.identity import IdentityProvider
from meshplane_testing.meshplane import run_agent, run_server
from meshplane_testing.north import put
from meshplane_testing.upstream import run_upstream

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(90)]

ORIGINS = {name: f"https://{name}.example" for name in ("a", "b", "one", "two")}


def cors(origin: str) -> dict[str, Any]:
    return {"allowOrigins": [ORIGINS[origin]], "allowMethods": ["GET"]}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("cors")
    users = {"jwt": {"issuer": ISSUER, "audiences": ["users"], "jwks": IdentityProvider(ISSUER, "users").jwks}}
    with (
        run_upstream("cors") as (port, _),
        run_server(tmp) as server,
        run_agent(tmp, "edge", server) as agent,
        run_envoy(tmp, "gw-edge", agent.xds_port) as envoy,
        server.http() as api,
    ):
        envoy.wait_listener(agent.gateway_port)
        backends = [documents.backend(port)]
        for name, path in (("a", "/a"), ("b", "/b")):
            operations = [{"method": "GET", "path": path}]
            put(
                api,
                documents.api(
                    f"shop-{name}", basePath="/shop", backends=backends, operations=operations, cors=cors(name)
                ),
            )
        for name in ("one", "two"):
            put(
                api,
                documents.api(
                    f"host-{name}", basePath="/h", hostnames=[f"{name}.example"], backends=backends, cors=cors(name)
                ),
            )
        put(api, documents.api("locked", backends=backends, authentication=users))
        put(api, documents.api("open-door", backends=backends, authentication=users, cors=cors("a")))
        gateway = Gateway(agent.gateway_port)
        gateway.wait_for("/open-door/x", lambda r: r.status_code != 404)
        gateway.wait_for("/h/x", lambda r: r.status_code != 404, headers={"host": "two.example"})
        yield gateway
        gateway.close()


PREFLIGHTS = [
    # case, path, host, origin, the origin allowed back (None: not allowed)
    ("first API on the basePath", "/shop/a", None, "a", "a"),
    ("second API on the basePath", "/shop/b", None, "b", "b"),
    ("second API, the first's origin", "/shop/b", None, "a", None),
    ("first API, the second's origin", "/shop/a", None, "b", None),
    ("first host", "/h/x", "one.example", "one", "one"),
    ("second host", "/h/x", "two.example", "two", "two"),
    ("second host, the first's origin", "/h/x", "two.example", "one", None),
]


@pytest.mark.parametrize(("case", "path", "host", "origin", "allowed"), PREFLIGHTS, ids=[c[0] for c in PREFLIGHTS])
def test_each_api_answers_its_preflights_with_its_own_policy(
    gateway: Gateway, case: str, path: str, host: str | None, origin: str, allowed: str | None
) -> None:
    headers = {"origin": ORIGINS[origin], "access-control-request-method": "GET", **({"host": host} if host else {})}
    response = gateway.request("OPTIONS", path, headers)

    assert response.headers.get("access-control-allow-origin") == (ORIGINS[allowed] if allowed else None), (
        case,
        response.status_code,
        dict(response.headers),
    )


def test_a_preflight_to_an_api_without_cors_is_still_authenticated(gateway: Gateway) -> None:
    asked = {"origin": ORIGINS["a"], "access-control-request-method": "GET"}

    locked = gateway.request("OPTIONS", "/locked/x", asked)
    answered = gateway.request("OPTIONS", "/open-door/x", asked)

    assert locked.status_code == 401, locked.text
    assert answered.status_code == 200, answered.text
    assert answered.headers["access-control-allow-origin"] == ORIGINS["a"]
