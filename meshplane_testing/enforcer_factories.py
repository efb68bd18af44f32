"""Enforcer resources as an agent sends them, and check requests as a gateway makes them."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from envoy.service.auth.v3 import external_auth_pb2
from envoy.service.discovery.v3 import discovery_pb2

from meshplane.dataplane import CONTEXT_API
from meshplane.enforcer.state import EnforcerState
from meshplane.proto.v1 import enforcer_pb2
from meshplane.xds.client import DeltaUpdate
from meshplane.xds.resource import VersionedResource, pack

NOW = 1_800_000_000
"""The clock of decision tests, in Unix seconds."""


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def _split(name: str) -> tuple[str, str]:
    project, _, local = name.partition("/")
    return project, local


def api(name: str = "shop/orders", *, header: str = "x-api-key", query: str = "api_key") -> VersionedResource:
    project, local = _split(name)
    return pack(name, enforcer_pb2.EnforcerApi(project=project, name=local, key_header=header, key_query=query))


def key(secret: str, key_id: str, expires: int = 0) -> enforcer_pb2.KeyDigest:
    return enforcer_pb2.KeyDigest(id=key_id, sha256=digest(secret), expires_unix=expires)


def application(name: str, *keys: enforcer_pb2.KeyDigest) -> VersionedResource:
    project, local = _split(name)
    return pack(name, enforcer_pb2.EnforcerApplication(project=project, name=local, keys=keys))


def subscription(name: str, application: str, api: str, plan: str = "gold", active: bool = True) -> VersionedResource:
    project, local = _split(name)
    message = enforcer_pb2.EnforcerSubscription(
        project=project, name=local, application=application, api=api, plan=plan, active=active
    )
    return pack(name, message)


def by_type(*resources: VersionedResource) -> dict[str, dict[str, VersionedResource]]:
    """Resources grouped as a cache snapshot holds them: type URL -> name -> resource."""
    grouped: dict[str, dict[str, VersionedResource]] = {}
    for resource in resources:
        grouped.setdefault(resource.body.type_url, {})[resource.name] = resource
    return grouped


def update(type_url: str, *resources: VersionedResource, removed: Sequence[str] = ()) -> DeltaUpdate:
    entries = [discovery_pb2.Resource(name=r.name, version=r.version, resource=r.body) for r in resources]
    return DeltaUpdate(type_url, entries, list(removed), nonce="1")


async def loaded(*resources: VersionedResource) -> EnforcerState:
    """A state that took `resources`, one update per type."""
    state = EnforcerState()
    for type_url, named in by_type(*resources).items():
        await state.apply(update(type_url, *named.values()))
    return state


def check_request(
    api: str | None = "shop/orders", headers: Mapping[str, str] | None = None, path: str = "/orders/items"
) -> external_auth_pb2.CheckRequest:
    request = external_auth_pb2.CheckRequest()
    if api is not None:
        request.attributes.context_extensions[CONTEXT_API] = api
    http = request.attributes.request.http
    http.method, http.path = "GET", path
    http.headers.update(headers or {})
    return request
