"""The enforcer feed and the limiter feed: what the agent serves its enforcers and rate limiters, the same
objects as the gateways get, in the shapes those services take (see meshplane/proto/v1/enforcer.proto and
rls_conf.proto)."""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf.message import Message

from meshplane.agent.translate.apis import Api
from meshplane.agent.translate.config import GatewaySettings
from meshplane.agent.translate.entitlements import Entitlements
from meshplane.agent.translate.limits import LimitPlan
from meshplane.dataplane import (
    ENFORCER_API_TYPE,
    ENFORCER_APPLICATION_TYPE,
    ENFORCER_SUBSCRIPTION_TYPE,
    RATELIMIT_CONFIG_TYPE,
)
from meshplane.model.access import KeyMode
from meshplane.proto.v1 import enforcer_pb2

Resources = dict[str, dict[str, Message]]
"""type URL -> resource name -> message."""


def enforcer_feed(apis: Iterable[Api], entitlements: Entitlements) -> Resources:
    """APIs with opaque keys, every application with the digests of its keys still in force, and every
    subscription; the enforcer checks expiry itself, so a key running out needs no new push."""
    out: Resources = {ENFORCER_API_TYPE: {}, ENFORCER_APPLICATION_TYPE: {}, ENFORCER_SUBSCRIPTION_TYPE: {}}
    for api in apis:
        auth = api.spec.authentication
        if auth is None or auth.api_key is None or auth.api_key.mode is not KeyMode.OPAQUE:
            continue
        out[ENFORCER_API_TYPE][f"{api.project}/{api.name}"] = enforcer_pb2.EnforcerApi(
            project=api.project, name=api.name, key_header=auth.api_key.header or "", key_query=auth.api_key.query or ""
        )
    keys: dict[tuple[str, str], list[enforcer_pb2.KeyDigest]] = {}
    for key in entitlements.keys:
        if not key.revoked:
            digest = enforcer_pb2.KeyDigest(id=key.id, sha256=key.sha256, expires_unix=int(key.expires or 0))
            keys.setdefault((key.project, key.application), []).append(digest)
    for project, name in sorted(entitlements.applications):
        out[ENFORCER_APPLICATION_TYPE][f"{project}/{name}"] = enforcer_pb2.EnforcerApplication(
            project=project, name=name, keys=keys.get((project, name), [])
        )
    for project, name, spec in entitlements.all_subscriptions:
        out[ENFORCER_SUBSCRIPTION_TYPE][f"{project}/{name}"] = enforcer_pb2.EnforcerSubscription(
            project=project,
            name=name,
            application=spec.application,
            api=spec.api,
            plan=spec.plan,
            active=spec.state.value == "active",
        )
    return out


def limiter_feed(apis: Iterable[Api], settings: GatewaySettings, entitlements: Entitlements) -> Resources:
    config = LimitPlan.of(list(apis), settings, entitlements).ratelimit_config()
    return {RATELIMIT_CONFIG_TYPE: {config.name: config}}
