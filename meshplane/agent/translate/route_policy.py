"""What a route asks of the upstream call: timeouts, retries and the `Host` the backend is sent.

An operation's own setting wins, then the first serving backend's (Envoy applies timeouts and retries per
route, before the weighted pick), then the API's. `none` turns a timeout off (Envoy's 0s).
"""

from __future__ import annotations

from collections.abc import Sequence

from envoy.config.route.v3 import route_components_pb2
from google.protobuf import duration_pb2

from meshplane.agent.translate.apis import Api
from meshplane.agent.translate.clusters import is_ip_literal
from meshplane.agent.translate.common import duration
from meshplane.model.kinds import Backend, Operation
from meshplane.model.upstream import NO_TIMEOUT, RetryPolicy, retry_conditions

RETRIABLE_STATUS_CODES = "retriable-status-codes"


def apply_route_policy(api: Api, op: Operation | None, action: route_components_pb2.RouteAction) -> None:
    """Timeouts and retries of one route (an operation's, or the API's catch-all)."""
    first = api.serving[0][1]
    timeout = _first_set(op.timeout if op else None, first.timeout, api.spec.timeout)
    if timeout is not None:
        action.timeout.CopyFrom(route_timeout(timeout))
    idle = _first_set(op.idle_timeout if op else None, api.spec.idle_timeout)
    if idle is not None:
        action.idle_timeout.CopyFrom(route_timeout(idle))
    stream = _first_set(op.stream_timeout if op else None, api.spec.stream_timeout)
    if stream is not None:
        action.max_stream_duration.max_stream_duration.CopyFrom(route_timeout(stream))
    retries = (op.retries if op else None) or first.retries or api.spec.retries
    if retries is not None:
        action.retry_policy.CopyFrom(retry_policy(retries))


def retry_policy(policy: RetryPolicy) -> route_components_pb2.RetryPolicy:
    """Envoy's retry policy; listed status codes bring their condition with them."""
    conditions = retry_conditions(policy.on)
    if policy.status_codes and RETRIABLE_STATUS_CODES not in conditions:
        conditions.append(RETRIABLE_STATUS_CODES)
    retry = route_components_pb2.RetryPolicy(retry_on=",".join(conditions), retriable_status_codes=policy.status_codes)
    retry.num_retries.value = policy.attempts
    if policy.per_try_timeout is not None:
        retry.per_try_timeout.CopyFrom(duration(policy.per_try_timeout))
    if policy.backoff is not None:
        retry.retry_back_off.base_interval.CopyFrom(duration(policy.backoff.base_interval))
        if policy.backoff.max_interval is not None:
            retry.retry_back_off.max_interval.CopyFrom(duration(policy.backoff.max_interval))
    return retry


def apply_host_rewrite(backends: Sequence[tuple[int, Backend]], action: route_components_pb2.RouteAction) -> None:
    """A backend's `hostRewrite`, else its own DNS name (Envoy's auto rewrite: the name of the endpoint it
    resolved), else the caller's Host as it came. Service backends keep the caller's Host."""
    if len(backends) == 1:
        literal = backends[0][1].host_rewrite
        if literal is not None:
            action.host_rewrite_literal = literal
        elif _named_host(backends[0][1]):
            action.auto_host_rewrite.value = True
        return
    for (_, backend), weighted in zip(backends, action.weighted_clusters.clusters, strict=True):
        if backend.host_rewrite is not None:
            weighted.host_rewrite_literal = backend.host_rewrite
    if any(_named_host(backend) for _, backend in backends):
        action.auto_host_rewrite.value = True


def _named_host(backend: Backend) -> bool:
    return backend.service is None and backend.host is not None and not is_ip_literal(backend.host)


def _first_set(*values: str | None) -> str | None:
    return next((value for value in values if value is not None), None)


def route_timeout(text: str) -> duration_pb2.Duration:
    """A user timeout as Envoy's Duration, where 0 means none."""
    return duration_pb2.Duration() if text == NO_TIMEOUT else duration(text)
