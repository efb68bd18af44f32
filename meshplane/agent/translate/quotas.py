"""Global limits enforced by quota (Envoy's rate_limit_quota filter, RLQS): no call per request.

The rate limiter assigns each gateway, per limited API or operation, a token bucket holding its share of the
limit's window, and each gateway reports what it let through and refused every 5 s (Envoy's fixed period).
The filter has no per-route config in this Envoy, so a route names its bucket in a request header
(`QUOTA_HEADERS`) that header_mutation sets per route: the first header_mutation drops what a client sent
under those names, the quota filters read it, and the route drops it before the upstream. A request whose
route sets no such header matches no bucket and is neither limited nor reported.

Until the limiter's first assignment for a bucket, and once an assignment runs out unrenewed (the limiter
away past its window), the gateway follows the limiter failure mode: let through (open) or refuse (closed).

A limited route's answers say its API and operation limits in `x-ratelimit-limit` (the draft's form, the
strictest first), and a refusal says `x-ratelimit-remaining: 0`; what remains of a grant is the gateway's
own business, so an answer let through says nothing of it.
"""

from __future__ import annotations

from envoy.config.common.mutation_rules.v3 import mutation_rules_pb2
from envoy.config.core.v3 import base_pb2, extension_pb2, grpc_service_pb2
from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.filters.http.header_mutation.v3 import header_mutation_pb2
from envoy.extensions.filters.http.rate_limit_quota.v3 import rate_limit_quota_pb2 as rlq_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.type.matcher.v3 import http_inputs_pb2
from envoy.type.v3 import http_status_pb2, ratelimit_strategy_pb2
from google.protobuf import duration_pb2
from xds.core.v3 import extension_pb2 as xds_extension_pb2
from xds.type.matcher.v3 import matcher_pb2, regex_pb2, string_pb2

from meshplane.agent.translate.common import packed
from meshplane.dataplane import (
    DESCRIPTOR_API,
    DESCRIPTOR_APPLICATION,
    DESCRIPTOR_OPERATION,
    QUOTA_API_HEADER,
    QUOTA_CALLER_API_HEADER,
    QUOTA_CALLER_HEADER,
    QUOTA_DOMAIN_API,
    QUOTA_DOMAIN_APPLICATION,
    QUOTA_DOMAIN_OPERATION,
    QUOTA_OPERATION_HEADER,
)
from meshplane.model.access import RateLimit

QUOTA_FILTER = "envoy.filters.http.rate_limit_quota"
HEADER_MUTATION = "envoy.filters.http.header_mutation"
CALLERS = "meshplane.callers"
"""A header_mutation after the credential checks: per route, it names the verified caller for the
per-application quota filter (from the metadata or header that check left; see `limits.Caller`)."""
QUOTA_FILTERS = {
    f"{QUOTA_FILTER}.api": (QUOTA_DOMAIN_API, {DESCRIPTOR_API: QUOTA_API_HEADER}),
    f"{QUOTA_FILTER}.operation": (QUOTA_DOMAIN_OPERATION, {DESCRIPTOR_OPERATION: QUOTA_OPERATION_HEADER}),
    f"{QUOTA_FILTER}.application": (
        QUOTA_DOMAIN_APPLICATION,
        {DESCRIPTOR_API: QUOTA_CALLER_API_HEADER, DESCRIPTOR_APPLICATION: QUOTA_CALLER_HEADER},
    ),
}
"""Filter name -> (its RLQS domain, the bucket id: key -> the header holding its value; the last header
must be there and not empty for a request to fall in a bucket)."""
REPORTING_INTERVAL = duration_pb2.Duration(seconds=5)
"""What this Envoy reports at whatever is asked; said, so the config reads true."""
NO_EXPIRY = 10 * 365 * 86_400
"""Seconds the failure mode holds once a grant ran out unrenewed: until the limiter grants again."""
_STRATEGY = ratelimit_strategy_pb2.RateLimitStrategy
LIMIT_HEADER = "x-ratelimit-limit"
REMAINING_HEADER = "x-ratelimit-remaining"


def quota_filters(cluster: str, fail_closed: bool) -> list[hcm_pb2.HttpFilter]:
    """The quota filters, one per domain, asking the rate limiter at `cluster`, and before the per-application
    one the header_mutation naming callers."""
    filters = [
        hcm_pb2.HttpFilter(name=name, typed_config=packed(_filter_config(cluster, domain, headers, fail_closed)))
        for name, (domain, headers) in QUOTA_FILTERS.items()
    ]
    callers = hcm_pb2.HttpFilter(name=CALLERS, typed_config=packed(header_mutation_pb2.HeaderMutation()))
    return [*filters[:-1], callers, filters[-1]]


def _header_input(header: str) -> extension_pb2.TypedExtensionConfig:
    return extension_pb2.TypedExtensionConfig(
        name=header, typed_config=packed(http_inputs_pb2.HttpRequestHeaderMatchInput(header_name=header))
    )


def _filter_config(
    cluster: str, domain: str, headers: dict[str, str], fail_closed: bool
) -> rlq_pb2.RateLimitQuotaFilterConfig:
    builder = rlq_pb2.RateLimitQuotaBucketSettings.BucketIdBuilder
    unassigned = _STRATEGY(blanket_rule=_STRATEGY.DENY_ALL if fail_closed else _STRATEGY.ALLOW_ALL)
    named = _header_input(list(headers.values())[-1])
    settings = rlq_pb2.RateLimitQuotaBucketSettings(
        bucket_id_builder=builder(
            bucket_id_builder={
                key: builder.ValueBuilder(custom_value=_header_input(header)) for key, header in headers.items()
            }
        ),
        reporting_interval=REPORTING_INTERVAL,
        deny_response_settings=rlq_pb2.RateLimitQuotaBucketSettings.DenyResponseSettings(
            http_status=http_status_pb2.HttpStatus(code=429),  # type: ignore[arg-type]
            response_headers_to_add=[_header(REMAINING_HEADER, "0")],
        ),
        no_assignment_behavior=rlq_pb2.RateLimitQuotaBucketSettings.NoAssignmentBehavior(
            fallback_rate_limit=unassigned
        ),
        # Unset, Envoy ends the fallback at once and the bucket goes back to its expired grant's last state.
        expired_assignment_behavior=rlq_pb2.RateLimitQuotaBucketSettings.ExpiredAssignmentBehavior(
            expired_assignment_behavior_timeout=duration_pb2.Duration(seconds=NO_EXPIRY),
            fallback_rate_limit=unassigned,
        ),
    )
    present = matcher_pb2.Matcher.MatcherList.Predicate.SinglePredicate(
        input=xds_extension_pb2.TypedExtensionConfig(name=named.name, typed_config=named.typed_config),
        value_match=string_pb2.StringMatcher(
            safe_regex=regex_pb2.RegexMatcher(google_re2=regex_pb2.RegexMatcher.GoogleRE2(), regex=".+")
        ),
    )
    bucket = matcher_pb2.Matcher.OnMatch(
        action=xds_extension_pb2.TypedExtensionConfig(name="bucket", typed_config=packed(settings))
    )
    matcher = matcher_pb2.Matcher(
        matcher_list=matcher_pb2.Matcher.MatcherList(
            matchers=[
                matcher_pb2.Matcher.MatcherList.FieldMatcher(
                    predicate=matcher_pb2.Matcher.MatcherList.Predicate(single_predicate=present), on_match=bucket
                )
            ]
        )
    )
    return rlq_pb2.RateLimitQuotaFilterConfig(
        rlqs_server=grpc_service_pb2.GrpcService(
            envoy_grpc=grpc_service_pb2.GrpcService.EnvoyGrpc(cluster_name=cluster)
        ),
        domain=domain,
        bucket_matchers=matcher,
    )


def name_buckets(
    route: route_components_pb2.Route,
    buckets: dict[str, str],
    callers: dict[str, str],
    limits: list[RateLimit] | None = None,
) -> None:
    """Make the route's requests name `buckets` (quota header -> bucket id value) for the quota filters, and
    `callers` (the same, values as Envoy's format strings) once the caller is known; drop all of those headers
    before the upstream. The route's answers say `limits`, those of its API and operation."""
    said = {LIMIT_HEADER: limit_policies(limits)} if limits else {}
    for filter_name, headers, answers in ((HEADER_MUTATION, buckets, said), (CALLERS, callers, {})):
        if headers or answers:
            route.typed_per_filter_config[filter_name].CopyFrom(packed(_setting(headers, answers)))
    route.request_headers_to_remove.extend(sorted({*buckets, *callers}))


def limit_policies(limits: list[RateLimit]) -> str:
    """`x-ratelimit-limit` as the rate-limit headers draft (03) writes it: the strictest limit's count, then
    each limit as count;w=window seconds, the strictest first."""
    ordered = sorted(limits, key=lambda limit: limit.requests_per_unit / limit.unit.seconds)
    policies = [f"{limit.requests_per_unit};w={limit.unit.seconds}" for limit in ordered]
    return ", ".join([str(ordered[0].requests_per_unit), *policies])


def _header(name: str, value: str) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=name, value=value),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )


def _setting(requests: dict[str, str], responses: dict[str, str]) -> header_mutation_pb2.HeaderMutationPerRoute:
    def mutations(headers: dict[str, str]) -> list[mutation_rules_pb2.HeaderMutation]:
        return [mutation_rules_pb2.HeaderMutation(append=_header(k, v)) for k, v in sorted(headers.items())]

    return header_mutation_pb2.HeaderMutationPerRoute(
        mutations=header_mutation_pb2.Mutations(
            request_mutations=mutations(requests), response_mutations=mutations(responses)
        )
    )
