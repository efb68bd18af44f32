"""The check itself: a request's API, key and subscription against a snapshot, with no I/O."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import Enum
from urllib.parse import parse_qsl

from envoy.service.auth.v3 import attribute_context_pb2, external_auth_pb2

from meshplane.dataplane import CONTEXT_API
from meshplane.enforcer.snapshot import ApiEntry, KeyEntry, Snapshot


class Denial(Enum):
    """Why a request is refused: its HTTP status and the reason its caller reads."""

    UNKNOWN_API = (403, "unknown API")
    MISSING_KEY = (401, "missing API key")
    INVALID_KEY = (401, "invalid API key")
    EXPIRED_KEY = (401, "expired API key")
    NOT_SUBSCRIBED = (403, "not subscribed")
    SUBSCRIPTION_BLOCKED = (403, "subscription blocked")

    def __init__(self, status: int, reason: str) -> None:
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Allow:
    api: ApiEntry
    key: KeyEntry
    plan: str


def presented_key(api: ApiEntry, http: attribute_context_pb2.AttributeContext.HttpRequest) -> str:
    """The key in the API's header, else in its query parameter (URL-decoded); "" when there is none."""
    if api.key_header and (key := http.headers.get(api.key_header, "")):
        return key
    if api.key_query:
        query = http.path.partition("?")[2].partition("#")[0]
        for name, value in parse_qsl(query):
            if name == api.key_query and value:
                return value
    return ""


def decide(snapshot: Snapshot, request: external_auth_pb2.CheckRequest, now: float) -> Allow | Denial:
    """Allow a request that carries a live key of an application subscribed to the route's API.

    A route naming no API, or one the enforcer does not know, is a misconfiguration and never allowed.
    """
    attributes = request.attributes
    api = snapshot.apis.get(attributes.context_extensions.get(CONTEXT_API, ""))
    if api is None:
        return Denial.UNKNOWN_API
    key = presented_key(api, attributes.request.http)
    if not key:
        return Denial.MISSING_KEY
    # Looked up by digest: the key itself is never compared, kept or logged.
    entry = snapshot.keys.get(hashlib.sha256(key.encode()).digest())
    if entry is None or entry.project != api.project:
        return Denial.INVALID_KEY
    if entry.expires_unix and entry.expires_unix <= now:
        return Denial.EXPIRED_KEY
    subscription = snapshot.subscriptions.get((api.project, entry.application, api.name))
    if subscription is None:
        return Denial.NOT_SUBSCRIBED
    if not subscription.active:
        return Denial.SUBSCRIPTION_BLOCKED
    return Allow(api, entry, subscription.plan)
