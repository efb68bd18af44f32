"""Rate limits compiled for the gateway: local ones into Envoy's local_ratelimit, global ones into the
ratelimit filter and the rate limiter's RateLimitConfig.

Each route lists the descriptors its requests produce (stage 0 for the global filter, stage 1 for the
local one): `api`, `api + operation`, and for the caller's plan `api + application` (global: the caller
from its verified key, one entry per subscribed application) or `api + plan + application` (local: the
plan from the check that let the caller in, the application a wildcard, so Envoy makes a bucket per
caller and subscriptions do not change the config). One filter per scope holds every bucket, so an
API's limit is shared by all of its routes. Several limits on the
same thing and scope keep the strictest; limits of different scopes all apply.

Both filters are always in the chain (the global one when the agent has a rate limiter), so the listener
never changes with limits. The local buckets live in the local filter's discovered config, which holds
local limits and nothing else: Envoy makes new buckets when that config is replaced, and keeps them
across any other change (a route table, a key, another API), since route tables carry only the
descriptors requests produce.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2, config_source_pb2, extension_pb2, grpc_service_pb2
from envoy.config.ratelimit.v3 import rls_pb2 as rls_config_pb2
from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2 as common_pb2
from envoy.extensions.filters.http.local_ratelimit.v3 import local_rate_limit_pb2
from envoy.extensions.filters.http.ratelimit.v3 import rate_limit_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.type.metadata.v3 import metadata_pb2
from envoy.type.v3 import percent_pb2, token_bucket_pb2
from google.protobuf import duration_pb2, wrappers_pb2

from meshplane.agent.translate.access import CLIENT_POLICY_KEY, EXT_AUTHZ, JWT, KEY_PAYLOAD, RBAC, service_cluster
from meshplane.agent.translate.apis import Api
from meshplane.agent.translate.common import duration, packed
from meshplane.agent.translate.config import GatewaySettings
from meshplane.agent.translate.entitlements import Entitlements, Limits
from meshplane.agent.translate.extensions import discovered_filter, extension_config
from meshplane.agent.translate.memo import by_identity
from meshplane.agent.translate.quotas import name_buckets, quota_filters
from meshplane.dataplane import (
    APPLICATION_HEADER,
    DESCRIPTOR_API,
    DESCRIPTOR_APPLICATION,
    DESCRIPTOR_OPERATION,
    PLAN_HEADER,
    QUOTA_API_HEADER,
    QUOTA_CALLER_API_HEADER,
    QUOTA_CALLER_HEADER,
    QUOTA_OPERATION_HEADER,
    RATELIMIT_DOMAIN,
)
from meshplane.model.access import KeyMode, LimitScope, RateLimit, RateUnit
from meshplane.model.kinds import Operation
from meshplane.proto.v1 import rls_conf_pb2

LOCAL_RATELIMIT = "envoy.filters.http.local_ratelimit"
GLOBAL_RATELIMIT = "envoy.filters.http.ratelimit"
RATELIMITER_CLUSTER = "meshplane.ratelimiter"
GLOBAL_STAGE, LOCAL_STAGE = 0, 1
DESCRIPTOR_PLAN = "plan"
LOCAL_CALLERS = 100_000
"""Callers of a locally limited plan whose buckets each gateway keeps (the least recently seen go first)."""
_UNITS = {
    RateUnit.SECOND: rls_conf_pb2.SECOND,
    RateUnit.MINUTE: rls_conf_pb2.MINUTE,
    RateUnit.HOUR: rls_conf_pb2.HOUR,
    RateUnit.DAY: rls_conf_pb2.DAY,
}


def strictest(limits: list[RateLimit]) -> RateLimit | None:
    return min(limits, key=lambda limit: limit.requests_per_unit / limit.unit.seconds, default=None)


@dataclass
class ApiLimits:
    """One API's limits of one scope."""

    api: RateLimit | None = None
    operations: dict[tuple[str, str], RateLimit] = field(default_factory=dict)
    plans: dict[str, RateLimit] = field(default_factory=dict)
    """Local only: each caller of the plan gets its own bucket."""
    applications: dict[str, RateLimit] = field(default_factory=dict)
    """Global only: the rate limiter is told each subscribed application."""

    def __bool__(self) -> bool:
        return self.api is not None or bool(self.operations) or bool(self.plans) or bool(self.applications)


@dataclass(frozen=True)
class Caller:
    """How a verified caller's application and plan become descriptor entries: read from a filter's dynamic
    metadata, or (after the keys filter) from the identity headers the gateway set."""

    application: route_components_pb2.RateLimit.Action
    plan: route_components_pb2.RateLimit.Action
    formatted: str
    """The application as an Envoy format string (empty when there is none), for quota buckets."""

    @classmethod
    def in_metadata(cls, application: tuple[str, list[str]], plan: tuple[str, list[str]]) -> Caller:
        """Each as (filter namespace, path)."""
        namespace, path = application
        return cls(
            _from_metadata(DESCRIPTOR_APPLICATION, *application),
            _from_metadata(DESCRIPTOR_PLAN, *plan),
            f"%DYNAMIC_METADATA({namespace}:{':'.join(path)})%",
        )

    @classmethod
    def in_headers(cls) -> Caller:
        return cls(
            _from_header(DESCRIPTOR_APPLICATION, APPLICATION_HEADER),
            _from_header(DESCRIPTOR_PLAN, PLAN_HEADER),
            f"%REQ({APPLICATION_HEADER})%",
        )


@dataclass
class LimitPlan:
    settings: GatewaySettings
    local: dict[tuple[str, str], ApiLimits] = field(default_factory=dict)
    shared: dict[tuple[str, str], ApiLimits] = field(default_factory=dict)
    identity: dict[tuple[str, str], Caller] = field(default_factory=dict)
    """Where each API's caller is named, for the APIs with keys."""

    @classmethod
    def of(cls, apis: list[Api], settings: GatewaySettings, entitlements: Entitlements) -> LimitPlan:
        plan = cls(settings)
        keys_inside = settings.keys_filter is not None
        for api in apis:
            found = survey(api, keys_inside, entitlements.limits(api.project, api.name))
            if found.caller is not None:
                plan.identity[api.key] = found.caller
            if found.local:
                plan.local[api.key] = found.local
            if found.shared:
                plan.shared[api.key] = found.shared
        return plan

    @property
    def enforces_global(self) -> bool:
        """Global limits need the rate limiter; without one they are left out (fail open, as Envoy would)."""
        return bool(self.shared) and self.settings.ratelimiter_address is not None

    def filters(self) -> list[hcm_pb2.HttpFilter]:
        """From the settings alone; until its config arrives the local filter holds no bucket."""
        filters = [discovered_filter(LOCAL_RATELIMIT, _local_filter([]))]
        if self.settings.ratelimiter_address is not None and self.settings.global_limits_by_quota:
            filters += quota_filters(RATELIMITER_CLUSTER, self.settings.ratelimiter_fail_closed)
        elif self.settings.ratelimiter_address is not None:
            filters.append(hcm_pb2.HttpFilter(name=GLOBAL_RATELIMIT, typed_config=packed(self._global_filter())))
        return filters

    def extension_configs(self) -> list[extension_pb2.TypedExtensionConfig]:
        return [extension_config(LOCAL_RATELIMIT, _local_filter(self._local_descriptors()))]

    def clusters(self) -> list[cluster_pb2.Cluster]:
        if self.settings.ratelimiter_address is None:
            return []
        return [service_cluster(RATELIMITER_CLUSTER, self.settings.ratelimiter_address)]

    def _local_descriptors(self) -> list[common_pb2.LocalRateLimitDescriptor]:
        descriptors = []
        for (project, name), limits in sorted(self.local.items()):
            api = _entry(DESCRIPTOR_API, f"{project}/{name}")
            if limits.api is not None:
                descriptors.append(_local_descriptor([api], limits.api))
            for (method, path), limit in limits.operations.items():
                descriptors.append(_local_descriptor([api, _entry(DESCRIPTOR_OPERATION, f"{method} {path}")], limit))
            for plan, limit in limits.plans.items():
                any_caller = _entry(DESCRIPTOR_APPLICATION, "")  # a wildcard: a bucket per application
                descriptors.append(_local_descriptor([api, _entry(DESCRIPTOR_PLAN, plan), any_caller], limit))
        return descriptors

    def _global_filter(self) -> rate_limit_pb2.RateLimit:
        return rate_limit_pb2.RateLimit(
            domain=RATELIMIT_DOMAIN,
            stage=GLOBAL_STAGE,
            timeout=duration("0.1s"),
            failure_mode_deny=self.settings.ratelimiter_fail_closed,
            enable_x_ratelimit_headers=rate_limit_pb2.RateLimit.DRAFT_VERSION_03,
            rate_limit_service=rls_config_pb2.RateLimitServiceConfig(
                grpc_service=grpc_service_pb2.GrpcService(
                    envoy_grpc=grpc_service_pb2.GrpcService.EnvoyGrpc(cluster_name=RATELIMITER_CLUSTER)
                ),
                transport_api_version=config_source_pb2.ApiVersion.V3,
            ),
        )

    def decorate(self, api: Api, op: Operation | None, route: route_components_pb2.Route) -> None:
        """The descriptors a route's requests produce, for each scope that limits its API (with quotas, the
        buckets its requests name instead, for the global API-wide and operation limits)."""
        action = route.route
        scopes = [(LOCAL_STAGE, self.local.get(api.key))]
        if self.enforces_global:
            scopes.append((GLOBAL_STAGE, self.shared.get(api.key)))
        for stage, limits in scopes:
            if not limits:
                continue
            by_quota = stage == GLOBAL_STAGE and self.settings.global_limits_by_quota
            buckets: dict[str, str] = {}
            said: list[RateLimit] = []
            name = _generic(DESCRIPTOR_API, f"{api.project}/{api.name}")
            if limits.api is not None and by_quota:
                buckets[QUOTA_API_HEADER] = f"{api.project}/{api.name}"
                said.append(limits.api)
            elif limits.api is not None:
                action.rate_limits.append(
                    route_components_pb2.RateLimit(stage=wrappers_pb2.UInt32Value(value=stage), actions=[name])
                )
            if op is not None and (op.method.value, op.path) in limits.operations:
                operation = f"{op.method.value} {op.path}"
                if by_quota:
                    buckets[QUOTA_OPERATION_HEADER] = f"{api.project}/{api.name} {operation}"
                    said.append(limits.operations[(op.method.value, op.path)])
                else:
                    what = _generic(DESCRIPTOR_OPERATION, operation)
                    action.rate_limits.append(
                        route_components_pb2.RateLimit(
                            stage=wrappers_pb2.UInt32Value(value=stage), actions=[name, what]
                        )
                    )
            caller = self.identity.get(api.key)
            per_caller = limits.plans if stage == LOCAL_STAGE else limits.applications
            callers = {}
            if caller is not None and per_caller and by_quota:
                callers = {QUOTA_CALLER_API_HEADER: f"{api.project}/{api.name}", QUOTA_CALLER_HEADER: caller.formatted}
            elif caller is not None and per_caller:
                plan = [caller.plan] if stage == LOCAL_STAGE else []
                action.rate_limits.append(
                    route_components_pb2.RateLimit(
                        stage=wrappers_pb2.UInt32Value(value=stage), actions=[name, *plan, caller.application]
                    )
                )
            name_buckets(route, buckets, callers, said)

    def ratelimit_config(self) -> rls_conf_pb2.RateLimitConfig:
        """Every global limit of this cluster, for the rate limiter (one domain, one tree)."""
        descriptors = []
        for (project, name), limits in sorted(self.shared.items()):
            node = rls_conf_pb2.RateLimitDescriptor(key=DESCRIPTOR_API, value=f"{project}/{name}")
            if limits.api is not None:
                node.rate_limit.CopyFrom(_policy(limits.api))
            for (method, path), limit in limits.operations.items():
                node.descriptors.append(
                    rls_conf_pb2.RateLimitDescriptor(
                        key=DESCRIPTOR_OPERATION, value=f"{method} {path}", rate_limit=_policy(limit)
                    )
                )
            for app, limit in limits.applications.items():
                node.descriptors.append(
                    rls_conf_pb2.RateLimitDescriptor(key=DESCRIPTOR_APPLICATION, value=app, rate_limit=_policy(limit))
                )
            descriptors.append(node)
        return rls_conf_pb2.RateLimitConfig(name=RATELIMIT_DOMAIN, domain=RATELIMIT_DOMAIN, descriptors=descriptors)


def _local_filter(descriptors: list[common_pb2.LocalRateLimitDescriptor]) -> local_rate_limit_pb2.LocalRateLimit:
    return local_rate_limit_pb2.LocalRateLimit(
        stat_prefix="local_rate_limit",
        filter_enabled=_always("local_rate_limit_enabled"),
        filter_enforced=_always("local_rate_limit_enforced"),
        descriptors=descriptors,
        max_dynamic_descriptors=wrappers_pb2.UInt32Value(value=LOCAL_CALLERS),
        stage=LOCAL_STAGE,
        enable_x_ratelimit_headers=common_pb2.DRAFT_VERSION_03,
    )


@dataclass(frozen=True)
class ApiSurvey:
    """What one API's limits come to: where its caller is named (None: nowhere) and its limits by scope."""

    caller: Caller | None
    local: ApiLimits
    shared: ApiLimits


@by_identity
def survey(api: Api, keys_inside: bool, found: Limits) -> ApiSurvey:
    """The API's limits (its own and `found`, those the entitlements give it), strictest first; `keys_inside`:
    the keys filter checks opaque keys. Kept per held API while its limits stay the same."""
    api_limits = [*found.api, *([api.spec.rate_limit] if api.spec.rate_limit else [])]
    operations = {key: list(value) for key, value in found.operations.items()}
    for op in api.spec.operations:
        if op.rate_limit is not None:
            operations.setdefault((op.method.value, op.path), []).append(op.rate_limit)
    auth = api.spec.authentication
    caller = None
    qualified = True  # the caller's descriptor: `project/application` (keys) or the bare name (tokens)
    if auth is not None and auth.mtls is not None:
        caller, qualified = _by_shadow_policy(), False  # the shadow policy naming the caller
    elif auth is not None and auth.api_key is not None and auth.api_key.mode is KeyMode.OPAQUE:
        if keys_inside:
            caller, qualified = Caller.in_headers(), False  # the keys filter names the bare application
        else:
            caller = Caller.in_metadata((EXT_AUTHZ, [DESCRIPTOR_APPLICATION]), (EXT_AUTHZ, [DESCRIPTOR_PLAN]))
    elif auth is not None and auth.api_key is not None:
        caller = Caller.in_metadata((JWT, [KEY_PAYLOAD, "sub"]), (RBAC, ["enforced_effective_policy_id"]))
    elif auth is not None and auth.jwt is not None and auth.jwt.require_subscription:
        caller, qualified = _by_shadow_policy(), False

    def of_scope(scope: LimitScope) -> ApiLimits:
        return ApiLimits(
            api=strictest([limit for limit in api_limits if limit.scope is scope]),
            operations={
                key: chosen
                for key, candidates in sorted(operations.items())
                if (chosen := strictest([limit for limit in candidates if limit.scope is scope])) is not None
            },
            plans={
                plan: chosen
                for plan, candidates in found.plans.items()
                if caller is not None
                and scope is LimitScope.LOCAL
                and (chosen := strictest([limit for limit in candidates if limit.scope is scope])) is not None
            },
            applications={
                (f"{api.project}/{app}" if qualified else app): chosen
                for app, candidates in sorted(found.applications.items())
                if caller is not None
                and scope is LimitScope.GLOBAL
                and (chosen := strictest([limit for limit in candidates if limit.scope is scope])) is not None
            },
        )

    return ApiSurvey(caller, of_scope(LimitScope.LOCAL), of_scope(LimitScope.GLOBAL))


def _by_shadow_policy() -> Caller:
    """The caller as the shadow RBAC policy that matched it names it."""
    return Caller.in_metadata((RBAC, [CLIENT_POLICY_KEY]), (RBAC, ["enforced_effective_policy_id"]))


def _entry(key: str, value: str) -> common_pb2.RateLimitDescriptor.Entry:
    return common_pb2.RateLimitDescriptor.Entry(key=key, value=value)


def _from_metadata(descriptor_key: str, namespace: str, path: list[str]) -> route_components_pb2.RateLimit.Action:
    """A descriptor entry from a filter's dynamic metadata; absent, the request produces no descriptor."""
    return route_components_pb2.RateLimit.Action(
        metadata=route_components_pb2.RateLimit.Action.MetaData(
            descriptor_key=descriptor_key,
            metadata_key=metadata_pb2.MetadataKey(
                key=namespace, path=[metadata_pb2.MetadataKey.PathSegment(key=key) for key in path]
            ),
            source=route_components_pb2.RateLimit.Action.MetaData.DYNAMIC,
        )
    )


def _from_header(descriptor_key: str, header: str) -> route_components_pb2.RateLimit.Action:
    """A descriptor entry from a request header; absent, the request produces no descriptor."""
    return route_components_pb2.RateLimit.Action(
        request_headers=route_components_pb2.RateLimit.Action.RequestHeaders(
            header_name=header, descriptor_key=descriptor_key
        )
    )


def _generic(key: str, value: str) -> route_components_pb2.RateLimit.Action:
    return route_components_pb2.RateLimit.Action(
        generic_key=route_components_pb2.RateLimit.Action.GenericKey(descriptor_key=key, descriptor_value=value)
    )


def _bucket(tokens: int, seconds: int) -> token_bucket_pb2.TokenBucket:
    return token_bucket_pb2.TokenBucket(
        max_tokens=tokens,
        tokens_per_fill=wrappers_pb2.UInt32Value(value=tokens),
        fill_interval=duration_pb2.Duration(seconds=seconds),
    )


def _local_descriptor(
    entries: list[common_pb2.RateLimitDescriptor.Entry], limit: RateLimit
) -> common_pb2.LocalRateLimitDescriptor:
    return common_pb2.LocalRateLimitDescriptor(
        entries=entries, token_bucket=_bucket(limit.requests_per_unit, limit.unit.seconds)
    )


def _always(runtime_key: str) -> base_pb2.RuntimeFractionalPercent:
    return base_pb2.RuntimeFractionalPercent(
        default_value=percent_pb2.FractionalPercent(numerator=100, denominator=percent_pb2.FractionalPercent.HUNDRED),
        runtime_key=runtime_key,
    )


def _policy(limit: RateLimit) -> rls_conf_pb2.RateLimitPolicy:
    return rls_conf_pb2.RateLimitPolicy(unit=_UNITS[limit.unit], requests_per_unit=limit.requests_per_unit)
