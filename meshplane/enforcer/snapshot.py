"""The enforcer's configuration as lookup tables, rebuilt per update so a check is a few dict lookups."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

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


Indexed = tuple[Mapping[Any, Any], list[str]]
"""A table of the snapshot, and what was left out of it (each a sentence naming the entry and why)."""


def index_apis(apis: Iterable[enforcer_pb2.EnforcerApi]) -> Indexed:
    table = {
        f"{api.project}/{api.name}": ApiEntry(api.project, api.name, api.key_header.lower(), api.key_query)
        for api in apis
    }
    return table, []


def index_keys(applications: Iterable[enforcer_pb2.EnforcerApplication]) -> Indexed:
    """Keys by digest. A digest several keys share is left out with all of them: which application presents
    it could not be told, and guessing would let one subscriber speak as another."""
    table: dict[bytes, KeyEntry] = {}
    sharing: dict[bytes, list[KeyEntry]] = {}
    for app in applications:
        for key in app.keys:
            entry = KeyEntry(app.project, app.name, key.id, key.expires_unix)
            if (other := table.setdefault(key.sha256, entry)) is not entry:
                sharing.setdefault(key.sha256, [other]).append(entry)
    skipped = []
    for digest, entries in sharing.items():
        del table[digest]
        named = ", ".join(f"key {e.key_id} of {e.project}/{e.application}" for e in entries)
        skipped.append(f"{named} share one digest: none of them is served")
    return table, skipped


def index_subscriptions(subscriptions: Iterable[enforcer_pb2.EnforcerSubscription]) -> Indexed:
    """When several subscriptions tie one application to one API, a blocked one wins (never allow by
    accident), else the first by name."""
    table: dict[SubscriptionKey, SubscriptionEntry] = {}
    for sub in sorted(subscriptions, key=lambda s: (s.project, s.name)):
        key = (sub.project, sub.application, sub.api)
        held = table.get(key)
        if held is None or (held.active and not sub.active):
            table[key] = SubscriptionEntry(sub.plan, sub.active)
    return table, []
