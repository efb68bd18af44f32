"""The agent's admin HTTP endpoint: what it serves its gateways (`/config_dump`), `/metrics`, `/healthz`.

Served from the agent's own event loop, so a dump reads the caches between two updates, never
halfway through one. The dump holds every project's objects on the cluster: beyond loopback (or whenever
the operator gives a token file) it asks for a bearer token; the probes and metrics stay open.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
from google.protobuf import any_pb2, json_format
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from meshplane import secret_files
from meshplane.agent.api_figures import read_api_figures
from meshplane.agent.gateway import ENFORCERS, ENVOY_TYPE_ORDER, GATEWAYS, RATELIMITERS
from meshplane.agent.holdings import Holdings
from meshplane.agent.translate.gateways import SECRET_TYPE
from meshplane.config import AgentSettings, split_address
from meshplane.dataplane import ENFORCER_APPLICATION_TYPE, ENFORCER_TYPES, RATELIMIT_CONFIG_TYPE
from meshplane.model.access import readable
from meshplane.model.manifests import MANIFEST_TYPE
from meshplane.model.registry import REGISTRY
from meshplane.observability.metrics import metrics_endpoint
from meshplane.xds.cache import ResourceCache


def gateway_dump(
    cache: ResourceCache, group: str = GATEWAYS, type_urls: Sequence[str] = ENVOY_TYPE_ORDER
) -> list[dict[str, Any]]:
    """Each type a group of xDS clients is served (Envoy's for the gateways, ours for the enforcers and
    rate limiters): its set version and every resource as JSON.

    The Any carries its own type URL; the modules the translator imports let it be decoded.
    """
    dump = []
    for type_url in type_urls:
        resources = cache.resources(group, type_url)
        dump.append(
            {
                "typeUrl": type_url,
                "version": cache.version(group, type_url),
                "resources": [
                    {"name": name, "version": resource.version, **_shown(type_url, resource.body)}
                    for name, resource in sorted(resources.items())
                ],
            }
        )
    return dump


def _shown(type_url: str, body: any_pb2.Any) -> dict[str, Any]:
    """A served resource as the dump shows it: a secret (a private key, a CA bundle) by its name only."""
    if type_url == SECRET_TYPE:
        return {}
    return {"resource": json_format.MessageToDict(body, preserving_proto_field_name=True)}


def _kind_of(type_url: str) -> str:
    return "Manifest" if type_url == MANIFEST_TYPE else REGISTRY.by_type_url(type_url).kind


def config_dump(holdings: Holdings, cache: ResourceCache) -> dict[str, Any]:
    """What the agent holds from the control plane and what it serves its gateways, enforcers and rate
    limiters.

    `objects` are the delivered objects it holds, with their versions, then the APIs made in the cluster
    (`local`, served instead of the control plane's copy of them); one whose version the gateways
    rejected is marked, and `rejected` lists those versions (the gateways keep the last good one).
    """
    objects = []
    for held in holdings.objects():
        entry: dict[str, Any] = {
            "kind": _kind_of(held.type_url),
            "typeUrl": held.type_url,
            "name": held.name,
            "version": held.version,
            "rejected": held.rejected,
        }
        if held.local:
            entry["local"] = True
        entry["object"] = readable(held.object if isinstance(held.object, dict) else held.object.to_wire())
        objects.append(entry)
    return {
        "cluster": holdings.cluster,
        "gateways": gateway_dump(cache),
        "enforcers": _without_digests(gateway_dump(cache, ENFORCERS, ENFORCER_TYPES)),
        "ratelimiters": gateway_dump(cache, RATELIMITERS, (RATELIMIT_CONFIG_TYPE,)),
        "objects": objects,
        "rejected": [
            {"kind": _kind_of(type_url), "name": name, "version": version}
            for (type_url, name), version in sorted(holdings.rejected.items())
        ],
    }


def _without_digests(dump: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The enforcers' part of a dump without the key digests: they travel to the enforcers, never to a reader."""
    for entry in dump:
        if entry["typeUrl"] == ENFORCER_APPLICATION_TYPE:
            for resource in entry["resources"]:
                for key in resource["resource"].get("keys", []):
                    key.pop("sha256", None)
    return dump


TOKEN_FILE = "admin-token"


class AdminTokenError(ValueError):
    """The admin token file given cannot be read, or holds no token."""


def admin_token(settings: AgentSettings) -> str | None:
    """The bearer token the config dump asks for: the operator's `admin_token_file`; else, with the admin
    beyond loopback, one kept in the state directory (made on first start, readable by the agent's user
    only); else none. AdminTokenError when the file has no token."""
    if settings.admin_token_file is not None:
        return _read_token(settings.admin_token_file)
    host, _ = split_address(settings.admin_address)
    if _is_loopback(host):
        return None
    path = settings.state_dir / TOKEN_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # another agent on this state directory made it first
            secret_files.create(path, (secrets.token_urlsafe(32) + "\n").encode())
    return _read_token(path)


def _read_token(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise AdminTokenError(f"cannot read the admin token file {path}: {exc.strerror or exc}") from None
    if not token:
        raise AdminTokenError(f"the admin token file {path} is empty")
    return token


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


Endpoint = Callable[[Request], Awaitable[Response]]


def _bearer_only(token: str | None, endpoint: Endpoint) -> Endpoint:
    """`endpoint` for callers presenting `Authorization: Bearer <token>` (anyone when token is None)."""
    if token is None:
        return endpoint
    expected = f"Bearer {token}".encode()

    async def guarded(request: Request) -> Response:
        if not hmac.compare_digest(request.headers.get("authorization", "").encode(), expected):
            return PlainTextResponse(
                "the config dump needs the agent's admin token\n",
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="meshplane-agent"'},
            )
        return await endpoint(request)

    return guarded


def admin_app(
    holdings: Callable[[], Holdings],
    cache: ResourceCache,
    token: str | None = None,
    envoy_admin: str | None = None,
) -> Starlette:
    """The admin endpoints of an agent that holds `holdings()` and serves `cache`; with a token (see
    `admin_token`) the config dump asks for it. `/api_figures` reads the per-API figures of the gateway whose
    Envoy admin is `envoy_admin` (see `api_figures`)."""

    async def dump(request: Request) -> Response:
        return JSONResponse(config_dump(holdings(), cache))

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def figures(request: Request) -> Response:
        if envoy_admin is None:
            return PlainTextResponse("this agent knows no gateway admin address\n", status_code=404)
        try:
            read = await read_api_figures(envoy_admin)
        except httpx.HTTPError as exc:
            return PlainTextResponse(f"the gateway's stats cannot be read: {exc}\n", status_code=502)
        return JSONResponse({"apis": {name: api.as_dict() for name, api in read.items()}})

    return Starlette(
        routes=[
            Route("/config_dump", _bearer_only(token, dump)),
            Route("/metrics", metrics_endpoint),
            Route("/healthz", healthz),
            Route("/api_figures", figures),
        ]
    )
