"""One cluster's data plane with keys, tokens and rate limits declared at the server, for the access tests."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import ec

from meshplane_testing import documents
from meshplane_testing.envoy import EnvoyProcess, run_envoy
from meshplane_testing.identity import IdentityProvider
from meshplane_testing.meshplane import (
    AgentProcess,
    ServerProcess,
    run_agent,
    run_enforcer,
    run_ratelimiter,
)
from meshplane_testing.north import put
from meshplane_testing.process import free_port
from meshplane_testing.redis import RedisServer

ISSUER = "https://idp.test"


@contextlib.contextmanager
def data_plane(
    tmp: Path,
    server: ServerProcess,
    cluster: str,
    redis: RedisServer | None,
    *,
    enforcer: bool = True,
    limiter: bool = True,
    keys_filter: Path | None = None,
    global_limits: str = "exact",
    failure_mode: str = "open",
) -> Iterator[tuple[AgentProcess, EnvoyProcess, dict[str, Any]]]:
    """An agent with its enforcer and rate limiter (each optional) and one Envoy; with `keys_filter` (its
    .wasm) the gateway checks opaque keys itself; `global_limits` and the rate limiter's `failure_mode` as the
    agent's options."""
    ports = {"enforcer": free_port(), "ratelimiter": free_port()}
    extra = ["--global-limits", global_limits, "--ratelimiter-failure-mode", failure_mode]
    if keys_filter is not None:
        extra += ["--keys-filter", str(keys_filter)]
    if enforcer:
        extra += ["--enforcer-address", f"127.0.0.1:{ports['enforcer']}"]
    if limiter:
        extra += ["--ratelimiter-address", f"127.0.0.1:{ports['ratelimiter']}"]
    with contextlib.ExitStack() as stack:
        agent = stack.enter_context(run_agent(tmp, cluster, server, extra=extra))
        services: dict[str, Any] = {}
        if enforcer:
            services["enforcer"] = stack.enter_context(
                run_enforcer(tmp, agent.xds_port, name=f"enforcer-{cluster}", port=ports["enforcer"])
            )
        if limiter:
            services["ratelimiter"] = stack.enter_context(
                run_ratelimiter(
                    tmp,
                    agent.xds_port,
                    redis.url if redis else None,
                    name=f"ratelimiter-{cluster}",
                    port=ports["ratelimiter"],
                )
            )
        envoy = stack.enter_context(run_envoy(tmp, f"gw-{cluster}", agent.xds_port))
        envoy.wait_listener(agent.gateway_port)
        yield agent, envoy, services


def declare(api: httpx.Client, port: int, idp: IdentityProvider) -> dict[str, str]:
    """The APIs, applications, subscriptions and keys every case below uses; the keys by role."""
    signed = {"apiKey": {"header": "x-api-key"}}
    opaque = {"apiKey": {"mode": "opaque", "header": "x-api-key", "query": "key"}}
    put(
        api,
        documents.api(
            "signed",
            basePath="/signed",
            backends=[documents.backend(port)],
            authentication=signed,
            operations=[{"method": "GET", "path": "/items"}],
        ),
    )
    put(
        api,
        documents.api(
            "opaque",
            basePath="/opaque",
            backends=[documents.backend(port)],
            authentication=opaque,
            operations=[{"method": "GET", "path": "/items"}],
        ),
    )
    user_auth = {"jwt": {"issuer": ISSUER, "audiences": ["orders"], "jwks": idp.jwks}}
    user_ops = [{"method": "GET", "path": "/me"}, {"method": "POST", "path": "/orders", "scopes": ["orders:write"]}]
    put(
        api,
        documents.api(
            "users",
            basePath="/users",
            backends=[documents.backend(port)],
            authentication=user_auth,
            operations=user_ops,
        ),
    )
    global_limit = {"requestsPerUnit": 3, "unit": "second", "scope": "global"}
    put(
        api,
        documents.api("limited", basePath="/limited", backends=[documents.backend(port)], rateLimit=global_limit),
    )
    put(
        api,
        documents.api(
            "local",
            basePath="/local",
            backends=[documents.backend(port)],
            rateLimit={"requestsPerUnit": 3, "unit": "second"},
        ),
    )
    cors = {
        "allowOrigins": ["https://app.example"],
        "allowMethods": ["GET"],
        "allowHeaders": ["x-api-key"],
        "maxAge": "10m",
    }
    put(
        api,
        documents.api("cors", basePath="/cors", backends=[documents.backend(port)], authentication=signed, cors=cors),
    )
    for app in ("good", "lonely", "blocked"):
        put(api, documents.application(app, description=f"the {app} app"))
    for target in ("signed", "opaque", "cors"):
        put(
            api,
            documents.subscription(f"good-{target}", application="good", api=target, plan="gold"),
        )
        put(
            api,
            documents.subscription(f"blocked-{target}", application="blocked", api=target, state="blocked"),
        )
    keys = {
        role: issue(api, app)["key"] for role, app in (("good", "good"), ("lonely", "lonely"), ("blocked", "blocked"))
    }
    keys["imported"] = secrets.token_urlsafe(32)
    issue(api, "good", key=keys["imported"])
    keys["expired"] = issue(api, "good", expiresIn="1s")["key"]
    revoked = issue(api, "good")
    keys["revoked"] = revoked["key"]
    assert api.delete(f"/v1/projects/{PROJECT}/applications/good/keys/{revoked['id']}").json()["revoked"]
    header = jwt.get_unverified_header(keys["good"])
    claims = jwt.decode(keys["good"], options={"verify_signature": False})
    keys["forged"] = jwt.encode(
        claims, ec.generate_private_key(ec.SECP256R1()), algorithm="ES256", headers={"kid": header["kid"]}
    )
    keys["unknown"] = secrets.token_urlsafe(40)
    return keys


PROJECT = "default"


def issue(api: httpx.Client, app: str, **body: Any) -> dict[str, Any]:
    response = api.post(f"/v1/projects/{PROJECT}/applications/{app}/keys", json=body)
    assert response.status_code == 201, response.text
    return response.json()
