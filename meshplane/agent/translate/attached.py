"""APIs attached to Gateway API routes (`targetRefs`): the HTTPRoute carries the traffic, the API its
management. Every Envoy route the Gateway API core made of a targeted HTTPRoute's rules gets the API's
checks and limits exactly as a meshplane API's route does (the same `decorate`), and the `gwapi/` listeners'
connection manager takes the gateway's filter chain (the same one, from the settings alone) in place of its
own while any attached API is served, so a route needing a filter always finds it in the chain.

Why after the core rather than inside it: the Gateway API core follows the cluster's objects, the access and
limit plans follow the catalog (keys, subscriptions, limits); decorating the core's output when the agent
publishes keeps both pure, and lets either change without running the other again. The core names each Envoy
route `namespace/name/rule/match` after its route, which is all this needs. A GRPCRoute of the same namespace
and name as a targeted HTTPRoute is checked too: it can only be refused more, never let through.

A route is attached while some Gateway of the cluster serves it (its Envoy routes are in a `gwapi/` table). An
API none of whose routes is served here is refused in this cluster, saying which routes it waits for; its
keys, subscriptions and limits keep following it all the same. When two APIs name one route, the first by
project and name has it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet

from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from google.protobuf.message import Message

from meshplane.agent.translate.apis import Api
from meshplane.agent.translate.common import packed
from meshplane.agent.translate.listener import HCM_FILTER, router_filter

LISTENER_TYPE = f"type.googleapis.com/{listener_pb2.Listener.DESCRIPTOR.full_name}"
ROUTE_TYPE = f"type.googleapis.com/{route_pb2.RouteConfiguration.DESCRIPTOR.full_name}"
RouteKey = tuple[str, str]
"""(namespace, name) of an HTTPRoute."""
Decorate = Callable[[Api, route_components_pb2.Route], None]
Resources = Mapping[str, Mapping[str, Message]]


def _route_of(entry_name: str) -> RouteKey | None:
    namespace, _, rest = entry_name.partition("/")
    name = rest.partition("/")[0]
    return (namespace, name) if namespace and name else None


def served_routes(resources: Resources) -> frozenset[RouteKey]:
    """The routes with Envoy routes in the Gateway API core's route tables: those some Gateway serves."""
    tables = resources.get(ROUTE_TYPE, {}).values()
    found = {
        _route_of(entry.name)
        for table in tables
        if isinstance(table, route_pb2.RouteConfiguration)
        for host in table.virtual_hosts
        for entry in host.routes
    }
    return frozenset(key for key in found if key is not None)


def targets(api: Api) -> list[RouteKey]:
    return [ref.route(api.project) for ref in api.spec.target_refs]


def attachment_refusal(api: Api, served: AbstractSet[RouteKey]) -> str | None:
    """Why an attached API is not served here (none of its routes is), or None."""
    wanted = targets(api)
    if not wanted or any(key in served for key in wanted):
        return None
    return f"targets HTTPRoute {_names(wanted)}, which no Gateway of this cluster serves"


def attachment_problems(apis: Sequence[Api], served: AbstractSet[RouteKey]) -> dict[str, str]:
    """The attached APIs served here (`project/name`) that have some of their routes only, each saying
    which it has and why not the others: no Gateway serves them here, or another API has them."""
    owners = attached_by_route(apis)
    problems = {}
    for api in sorted(apis, key=lambda api: api.key):
        wanted = targets(api)
        missing = [key for key in wanted if key not in served]
        taken = [key for key in wanted if key in served and owners[key].key != api.key]
        held = [key for key in wanted if key in served and key not in taken]
        parts = [f"attached to HTTPRoute {_names(held)}"] if held else []
        if missing:
            lead = "not to" if held else "HTTPRoute"
            parts.append(f"{lead} {_names(missing)}, which no Gateway of this cluster serves")
        parts += [
            f"HTTPRoute {_names([key])} is attached to API {owners[key].project}/{owners[key].name}" for key in taken
        ]
        if missing or taken:
            problems[f"{api.project}/{api.name}"] = "; ".join(parts)
    return problems


def _names(keys: Iterable[RouteKey]) -> str:
    return ", ".join(f"{namespace}/{name}" for namespace, name in keys)


def attached_by_route(apis: Iterable[Api]) -> dict[RouteKey, Api]:
    """Each targeted route with the API that has it (the first by project and name)."""
    owners: dict[RouteKey, Api] = {}
    for api in sorted(apis, key=lambda api: api.key):
        for key in targets(api):
            owners.setdefault(key, api)
    return owners


def with_attached_apis(
    resources: Resources,
    apis: Sequence[Api],
    decorate: Decorate,
    chain: Sequence[hcm_pb2.HttpFilter],
    local_reply: hcm_pb2.LocalReplyConfig,
) -> dict[str, dict[str, Message]]:
    """The core's resources with the attached `apis`' checks and limits on their routes' Envoy routes, and
    (when there are any) the gateway's chain on every `gwapi/` listener. The input is left as it was."""
    out = {type_url: dict(named) for type_url, named in resources.items()}
    owners = attached_by_route(apis)
    if not owners:
        return out
    for name, table in out.get(ROUTE_TYPE, {}).items():
        if not isinstance(table, route_pb2.RouteConfiguration):
            continue
        decorated = route_pb2.RouteConfiguration()
        decorated.CopyFrom(table)
        for host in decorated.virtual_hosts:
            for entry in host.routes:
                key = _route_of(entry.name)
                if key in owners:
                    decorate(owners[key], entry)
        out[ROUTE_TYPE][name] = decorated
    for name, listener in out.get(LISTENER_TYPE, {}).items():
        if isinstance(listener, listener_pb2.Listener):
            out[LISTENER_TYPE][name] = _with_chain(listener, chain, local_reply)
    return out


def _with_chain(
    listener: listener_pb2.Listener, chain: Sequence[hcm_pb2.HttpFilter], local_reply: hcm_pb2.LocalReplyConfig
) -> listener_pb2.Listener:
    """The listener with the gateway's chain before the router (it holds the CORS filter the core's has)."""
    changed = listener_pb2.Listener()
    changed.CopyFrom(listener)
    for filter_chain in changed.filter_chains:
        for network_filter in filter_chain.filters:
            if network_filter.name != HCM_FILTER:
                continue
            manager = hcm_pb2.HttpConnectionManager()
            network_filter.typed_config.Unpack(manager)
            del manager.http_filters[:]
            manager.http_filters.extend([*chain, router_filter()])
            manager.local_reply_config.CopyFrom(local_reply)
            network_filter.typed_config.CopyFrom(packed(manager))
    return changed
