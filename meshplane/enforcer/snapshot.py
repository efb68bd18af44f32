"""The enforcer's configuration as lookup tables, rebuilt per update so a check is a few dict lookups."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from meshplane.proto.v1 import enforcer_pb2


@dataclass(frozen=True, slots=True)
class ApiEntry:
    project: str
    name: str
    key_header: str
    """Lower-case request header carrying the key; "" = keys are not read from headers."""
    key_query: str
    """Query parameter carrying the key; "" = keys are not read from the query."""


@dataclass(frozen=True, slots=True)
class KeyEntry:
    project: str
    application: str
    key_id: str
    expires_unix: int
    """0 = never expires."""


@dataclass(frozen=True, slots=True)
class SubscriptionEntry:
    plan: str
    active: bool


SubscriptionKey = tuple[str, str, str]
"""(project, application, api): what a subscription ties together, names local to the project."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Replaced whole, never changed in place: a check that started on one configuration finishes on it."""

    apis: Mapping[str, ApiEntry] = field(default_factory=dict)
    """By "project/name", as routes name them."""
    keys: Mapping[bytes, KeyEntry] = field(default_factory=dict)
    """By SHA-256 digest of the key."""
    subscriptions: Mapping[SubscriptionKey, SubscriptionEntry] = field(default_factory=dict)


def index_apis(apis: Iterable[enforcer_pb2.EnforcerApi]) -> Mapping[str, ApiEntry]:
    return {
        f"{api.project}/{api.name}": ApiEntry(api.project, api.name, api.key_header.lower(), api.key_query)
        for api in apis
    }


def index_keys(applications: Iterable[enforcer_pb2.EnforcerApplication]) -> Mapping[bytes, KeyEntry]:
    """ValueError when two keys share a digest: the lookup could not tell whose key it is."""
    table: dict[bytes, KeyEntry] = {}
    for app in applications:
        for key in app.keys:
            entry = KeyEntry(app.project, app.name, key.id, key.expires_unix)
            if (other := table.setdefault(key.sha256, entry)) is not entry:
                raise ValueError(
                    f"key {key.id} of {app.project}/{app.name} has the digest of key {other.key_id}"
                    f" of {other.project}/{other.application}"
                )
    return table


def index_subscriptions(
    subscriptions: Iterable[enforcer_pb2.EnforcerSubscription],
) -> Mapping[SubscriptionKey, SubscriptionEntry]:
    """When several subscriptions tie one application to one API, a blocked one wins (never allow by
    accident), else the first by name."""
    table: dict[SubscriptionKey, SubscriptionEntry] = {}
    for sub in sorted(subscriptions, key=lambda s: (s.project, s.name)):
        key = (sub.project, sub.application, sub.api)
        held = table.get(key)
        if held is None or (held.active and not sub.active):
            table[key] = SubscriptionEntry(sub.plan, sub.active)
    return table
