"""Names shared by the agent and the data-plane services it feeds (enforcer, rate limiter): xDS type
URLs, the node clusters each service announces, rate-limit descriptor keys and identity headers."""

from __future__ import annotations

from meshplane.proto.v1 import enforcer_pb2, rls_conf_pb2


def _type_url(message: type) -> str:
    return f"type.googleapis.com/{message.DESCRIPTOR.full_name}"  # type: ignore[attr-defined]


ENFORCER_API_TYPE = _type_url(enforcer_pb2.EnforcerApi)
ENFORCER_APPLICATION_TYPE = _type_url(enforcer_pb2.EnforcerApplication)
ENFORCER_SUBSCRIPTION_TYPE = _type_url(enforcer_pb2.EnforcerSubscription)
ENFORCER_TYPES = (ENFORCER_API_TYPE, ENFORCER_APPLICATION_TYPE, ENFORCER_SUBSCRIPTION_TYPE)
RATELIMIT_CONFIG_TYPE = _type_url(rls_conf_pb2.RateLimitConfig)

ENFORCER_NODE_CLUSTER = "meshplane-enforcer"
"""`node.cluster` an enforcer announces on the agent's ADS; the agent serves it the ENFORCER_TYPES."""
RATELIMITER_NODE_CLUSTER = "meshplane-ratelimiter"
"""`node.cluster` a rate limiter announces; the agent serves it RATELIMIT_CONFIG_TYPE."""

RATELIMIT_DOMAIN = "meshplane"
DESCRIPTOR_API = "api"
"""Descriptor entry naming the API, `project/name`."""
DESCRIPTOR_OPERATION = "operation"
"""Descriptor entry naming an operation, `METHOD path`."""
DESCRIPTOR_APPLICATION = "application"
"""Descriptor entry naming the calling application, `project/name`."""

KEY_APPLICATION_UID_CLAIM = "uid"
"""Claim of a signed API key: the uid of the application the server issued it to, which gateways match."""

CONTEXT_API = "api"
"""ext_authz context extension on a route: the API it belongs to, `project/name`."""

APPLICATION_HEADER = "x-meshplane-application"
PLAN_HEADER = "x-meshplane-plan"
KEY_ID_HEADER = "x-meshplane-key-id"
IDENTITY_HEADERS = (APPLICATION_HEADER, PLAN_HEADER, KEY_ID_HEADER)
"""Headers the gateway sets for the upstream; whatever a client sends under these names is dropped."""

QUOTA_DOMAIN_API = "meshplane/api"
QUOTA_DOMAIN_OPERATION = "meshplane/operation"
QUOTA_DOMAIN_APPLICATION = "meshplane/application"
"""The RLQS domains of API-wide, operation and per-application limits: one quota stream each per gateway."""
QUOTA_API_HEADER = "x-meshplane-quota-api"
"""Set by a route whose API has a global limit enforced by quota: its `project/name`, the bucket's id."""
QUOTA_OPERATION_HEADER = "x-meshplane-quota-operation"
"""Set by a route whose operation has one: `project/name METHOD path` (API names hold no spaces)."""
QUOTA_CALLER_API_HEADER = "x-meshplane-quota-caller-api"
QUOTA_CALLER_HEADER = "x-meshplane-quota-caller"
"""Set by a route whose API has per-application global limits: its `project/name`, and the verified caller
as the limits name it (empty, so no bucket, for a request with no verified caller)."""
QUOTA_HEADERS = (QUOTA_API_HEADER, QUOTA_OPERATION_HEADER, QUOTA_CALLER_API_HEADER, QUOTA_CALLER_HEADER)
"""Meant for the gateway's quota filters alone: dropped from what clients send, and before the upstream."""
