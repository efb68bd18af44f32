"""Entitlements: who may call what at what rate, the consumer side of a cluster's objects, indexed for the
translator.

Built from the held Applications, Subscriptions, RateLimitPolicies, ApplicationKey records and the
KeySet. References to objects this cluster does not hold (a deleted application, an API placed
elsewhere) simply grant nothing, and a key serves only the application it was issued to (by uid), never
a later one of the same name.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from meshplane.model.access import (
    ApplicationKeySpec,
    ApplicationSpec,
    ClientCertificate,
    KeySetSpec,
    RateLimit,
    RateLimitPolicySpec,
    SubscriptionSpec,
    SubscriptionState,
    TargetKind,
)
from meshplane.model.resource import Resource

KEY_CLOCK_SKEW = 5
"""Seconds an API key's `exp` may be off by: the server and its gateways keep time with NTP."""


@dataclass(frozen=True)
class Grant:
    """An active subscription: `application` (a name in the API's project, `uid` its identity) may call the
    API on `plan`."""

    application: str
    plan: str
    uid: str


@dataclass(frozen=True)
class KeyRecord:
    project: str
    id: str
    application: str
    application_uid: str | None
    sha256: bytes
    expires: float | None
    revoked: bool
    signing_key_id: str | None = None
    token_expires: float | None = None

    def usable(self, now: float) -> bool:
        return not self.revoked and (self.expires is None or self.expires > now)

    def verifiable(self, now: float, signing_key_ids: set[str]) -> bool:
        """Whether a gateway could still take the key's signature: issued under a signing key the KeySet
        still holds (or an unknown one), and not past its own `exp` (give or take the clock skew allowed)."""
        if self.signing_key_id is not None and self.signing_key_id not in signing_key_ids:
            return False
        return self.token_expires is None or self.token_expires + KEY_CLOCK_SKEW > now


@dataclass(frozen=True)
class Limits:
    """The limits that apply to one API: its own, per operation, per plan (every policy that limits the
    plan, subscribed to or not), and per subscribed application (its plan's)."""

    api: list[RateLimit] = field(default_factory=list)
    operations: dict[tuple[str, str], list[RateLimit]] = field(default_factory=dict)
    plans: dict[str, list[RateLimit]] = field(default_factory=dict)
    applications: dict[str, list[RateLimit]] = field(default_factory=dict)

    def __hash__(self) -> int:
        """By value, once built (Entitlements.limits fills it, nothing changes it after): the translator
        keeps what it derives from an API for as long as the limits that apply to it stay the same."""
        return hash(
            (
                tuple(self.api),
                *(
                    tuple((key, tuple(limits)) for key, limits in by.items())
                    for by in (self.operations, self.plans, self.applications)
                ),
            )
        )


@dataclass
class Entitlements:
    applications: dict[tuple[str, str], str] = field(default_factory=dict)
    """(project, name) -> uid of every application this cluster holds."""
    client_ids: dict[tuple[str, str], list[tuple[str, str]]] = field(default_factory=dict)
    """(project, name) -> (issuer, client id) of each token client an application is known by."""
    client_certificates: dict[tuple[str, str], list[ClientCertificate]] = field(default_factory=dict)
    """(project, name) -> how the client certificates an application presents are recognised."""
    subscriptions: dict[tuple[str, str], list[Grant]] = field(default_factory=dict)
    """(project, api) -> active grants to applications this cluster holds."""
    all_subscriptions: list[tuple[str, str, SubscriptionSpec]] = field(default_factory=list)
    """(project, name, spec) of every subscription, active or blocked."""
    policies: list[tuple[str, str, RateLimitPolicySpec]] = field(default_factory=list)
    keys: list[KeyRecord] = field(default_factory=list)
    key_set: KeySetSpec | None = None

    @classmethod
    def of(cls, resources: Iterable[Resource]) -> Entitlements:
        entitlements = cls()
        subscriptions, keys = [], []
        for resource in sorted(resources, key=lambda r: (r.kind, r.metadata.project or "", r.metadata.name)):
            project, name, spec = resource.metadata.project or "", resource.metadata.name, resource.spec
            if resource.kind == "Application":
                entitlements.applications[(project, name)] = resource.metadata.uid or ""
                if isinstance(spec, ApplicationSpec) and spec.client_ids:
                    entitlements.client_ids[(project, name)] = [(c.issuer, c.client_id) for c in spec.client_ids]
                if isinstance(spec, ApplicationSpec) and spec.client_certificates:
                    entitlements.client_certificates[(project, name)] = list(spec.client_certificates)
            elif isinstance(spec, SubscriptionSpec):
                subscriptions.append((project, name, spec))
            elif isinstance(spec, RateLimitPolicySpec):
                entitlements.policies.append((project, name, spec))
            elif isinstance(spec, ApplicationKeySpec):
                keys.append(_key_record(project, name, spec))
            elif isinstance(spec, KeySetSpec):
                entitlements.key_set = spec
        entitlements.keys = [key for key in keys if entitlements.bound(key)]
        grants: dict[tuple[str, str], list[Grant]] = defaultdict(list)
        for project, _, spec in subscriptions:
            uid = entitlements.applications.get((project, spec.application))
            if spec.state is SubscriptionState.ACTIVE and uid is not None:
                grants[(project, spec.api)].append(Grant(spec.application, spec.plan, uid))
        entitlements.subscriptions = dict(grants)
        entitlements.all_subscriptions = subscriptions
        return entitlements

    def bound(self, key: KeyRecord) -> bool:
        """Whether a key record belongs to the application held under its name. A record from before keys
        were bound names no uid: those were always deleted with their application, so it is that one's."""
        uid = self.applications.get((key.project, key.application))
        return uid is not None and key.application_uid in (None, uid)

    def application_uids(self) -> list[str]:
        """Who a signed key may speak for here: the uids of the applications held."""
        return sorted(uid for uid in self.applications.values() if uid)

    def grants(self, project: str, api: str) -> list[Grant]:
        return self.subscriptions.get((project, api), [])

    def jwks(self) -> str | None:
        """The key set as Envoy's jwt_authn takes it inline; None when there is no key to check against."""
        if self.key_set is None or not self.key_set.keys:
            return None
        return json.dumps({"keys": self.key_set.keys}, sort_keys=True, separators=(",", ":"))

    def refused_key_ids(self, now: float) -> list[str]:
        """Signed keys that must stop working although their signature is good: revoked, or past the end
        their record sets (a rotation's overlap). Keys whose signature no longer passes (past their `exp`,
        or under a signing key retired from the KeySet) are left out, so the list stays bounded by the keys
        that could still be presented."""
        signing = {str(jwk.get("kid")) for jwk in self.key_set.keys} if self.key_set is not None else set()
        return sorted(key.id for key in self.keys if not key.usable(now) and key.verifiable(now, signing))

    def next_expiry(self, now: float) -> float | None:
        """When the next key record runs out, so the gateways can be told then."""
        ends = [key.expires for key in self.keys if not key.revoked and key.expires and key.expires > now]
        return min(ends) if ends else None

    @functools.cached_property
    def _policies_by_project(self) -> dict[str, list[RateLimitPolicySpec]]:
        """Asked of every API on every rebuild: most projects have no policy at all."""
        found: dict[str, list[RateLimitPolicySpec]] = defaultdict(list)
        for project, _, spec in self.policies:
            found[project].append(spec)
        return dict(found)

    def limits(self, project: str, api: str) -> Limits:
        limits = Limits()
        plans: dict[str, list[RateLimit]] = defaultdict(list)
        for spec in self._policies_by_project.get(project, ()):
            target = spec.target
            if target.kind is TargetKind.API and target.name == api:
                limits.api.append(spec.limit())
            elif target.kind is TargetKind.OPERATION and target.name == api and target.operation is not None:
                op = (target.operation.method.upper(), target.operation.path)
                limits.operations.setdefault(op, []).append(spec.limit())
            elif target.kind is TargetKind.SUBSCRIPTION_PLAN and target.api in (None, api):
                plans[target.name].append(spec.limit())
        limits.plans.update(sorted(plans.items()))
        for grant in self.grants(project, api):
            if grant.plan in plans:
                limits.applications[grant.application] = plans[grant.plan]
        return limits


def _key_record(project: str, name: str, spec: ApplicationKeySpec) -> KeyRecord:
    return KeyRecord(
        project,
        name,
        spec.application,
        spec.application_uid,
        bytes.fromhex(spec.sha256),
        _seconds(spec.expires),
        spec.revoked,
        spec.signing_key_id,
        _seconds(spec.token_expires),
    )


def _seconds(stamp: str | None) -> float | None:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None
