"""APIs in, Envoy resources out: a pure, deterministic function the agent runs on every change."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from itertools import pairwise

from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.transport_sockets.tls.v3 import secret_pb2

from meshplane.agent.translate.access import AccessPlan, preflight_route
from meshplane.agent.translate.apis import Api
from meshplane.agent.translate.attached import (
    Resources,
    attachment_problems,
    attachment_refusal,
    served_routes,
    with_attached_apis,
)
from meshplane.agent.translate.clusters import backend_resources
from meshplane.agent.translate.config import EnvoyConfig, GatewaySettings
from meshplane.agent.translate.credentials import credential_secret
from meshplane.agent.translate.entitlements import Entitlements
from meshplane.agent.translate.extensions import extension_config
from meshplane.agent.translate.gateways import certificate_secret, gateway_refusal, gateway_resources, held_gateways
from meshplane.agent.translate.keys_filter import KEYS_FILTER, keys_filter_config
from meshplane.agent.translate.keys_table import keys_table
from meshplane.agent.translate.limits import LimitPlan
from meshplane.agent.translate.listener import gateway_listener
from meshplane.agent.translate.mtls import (
    mtls_refusal,
    refuse_unverified,
    unverified_problems,
    verifying_route_tables,
)
from meshplane.agent.translate.proxyless import proxyless_resources
from meshplane.agent.translate.routes import route_configuration
from meshplane.agent.translate.service_backends import LocalServices, resolve_services
from meshplane.agent.translate.shaping import ShapingPlan
from meshplane.agent.translate.targets import api_refusal
from meshplane.agent.translate.telemetry import access_log_clusters, access_logs, name_route
from meshplane.model.gateways import TLSCertificateSpec
from meshplane.model.kinds import Backend, Operation
from meshplane.model.resource import Resource


def api_views(apis: Iterable[Resource]) -> list[Api]:
    """The APIs sorted by project and name; an API given twice (same project and name) is a ValueError."""
    views = sorted((Api.of(resource) for resource in apis), key=lambda api: api.key)
    for before, after in pairwise(views):
        if before.key == after.key:
            raise ValueError(f"API {after.project}/{after.name} is given twice")
    return views


def refused_apis(
    apis: Iterable[Resource],
    settings: GatewaySettings,
    services: LocalServices | None = None,
    gateways: Iterable[Resource] = (),
    gateway_api: Resources | None = None,
) -> dict[str, str]:
    """The APIs (`project/name`) this cluster will not serve, each with the reason (see `targets`; an API
    naming only Gateways not among `gateways`, those held here, is not served either, nor one attached to
    routes none of which the Gateway API core's resources `gateway_api` serve: see `attached`)."""
    views = [resolve_services(api, services, settings.cluster_domain) for api in api_views(apis)]
    return _refusals(views, settings, held_gateways(gateways), served_routes(gateway_api or {}))


def _refusals(
    views: Iterable[Api],
    settings: GatewaySettings,
    gateways: AbstractSet[tuple[str, str]] = frozenset(),
    routes: AbstractSet[tuple[str, str]] = frozenset(),
) -> dict[str, str]:
    refused = {}
    for api in views:
        reason = (
            api_refusal(api, settings.backends)
            or gateway_refusal(api, gateways)
            or mtls_refusal(api)
            or attachment_refusal(api, routes)
        )
        if reason is not None:
            refused[f"{api.project}/{api.name}"] = reason
    return refused


def translate_apis(
    apis: Iterable[Resource],
    settings: GatewaySettings,
    entitlements: Entitlements | None = None,
    now: float | None = None,
    services: LocalServices | None = None,
    gateways: Iterable[Resource] = (),
    certificates: Mapping[str, TLSCertificateSpec | str] | None = None,
    gateway_api: Resources | None = None,
) -> EnvoyConfig:
    """The gateway's listener, route table, discovered filter configs, clusters and EDS endpoints for a set of
    validated API resources,
    plus an API listener and route table per API that proxyless gRPC clients can reach (see `proxyless`).
    `entitlements` says who may call what (applications, subscriptions, keys, limits); `now` (seconds since the
    epoch, required with entitlements: the translator reads no clock) decides which key records have run out;
    `services` are the cluster's Kubernetes services, when known, for the backends that name one (see
    `service_backends`). An API that would make the gateway reach what this cluster
    forbids (see `targets`) is left out, and named in `refused`: the others are served all the same.
    An API that names `gateways` is served on their listeners (see `gateways`, with `certificates` by
    `project/name`: each spec, or why it is not available here) instead of the default one. An API with
    `targetRefs` has no routes of its own: its checks and limits go on the routes of the Gateway API core's
    resources `gateway_api` it targets (see `attached`), returned with them.

    The gateway's listener and route table are always there, so with no APIs the gateway still answers (404).
    The gateway's listener depends on `settings` alone: what changes with the catalog is in the route table and
    the discovered filter configs, which reach open connections without draining them.
    Output never depends on input order.
    """
    gateways = list(gateways)
    resolved = [resolve_services(api, services, settings.cluster_domain) for api in api_views(apis)]
    gateway_api = gateway_api or {}
    served = served_routes(gateway_api)
    refused = _refusals(resolved, settings, held_gateways(gateways), served)
    views = [api for api in resolved if f"{api.project}/{api.name}" not in refused]
    attached = [api for api in views if api.spec.target_refs]
    if entitlements is None:
        entitlements, now = Entitlements(), 0.0  # no keys: no time to weigh them against
    elif now is None:
        raise TypeError("translate_apis needs `now` with entitlements: which keys have run out depends on it")
    access = AccessPlan.of(views, settings, entitlements, now)
    limits = LimitPlan.of(views, settings, entitlements)
    shaping = ShapingPlan()

    def checks(api: Api, op: Operation | None, route: route_components_pb2.Route) -> None:
        access.decorate(api, op, route)
        if route.HasField("route"):
            limits.decorate(api, op, route)

    def decorate(api: Api, op: Operation | None, route: route_components_pb2.Route) -> None:
        shaping.decorate(api, op, route)
        checks(api, op, route)

    def attach(api: Api, route: route_components_pb2.Route) -> None:
        """Logged and counted as the API's; the Gateway API route's own filters stand for its shaping."""
        name_route(api, None, route)
        checks(api, None, route)

    # The same for every gateway listener: from the settings alone (see `listener.connection_manager`).
    chain, local_reply = [*access.filters(), *limits.filters()], access.local_reply()

    def listener_for(listener_settings: GatewaySettings) -> listener_pb2.Listener:
        return gateway_listener(listener_settings, chain, local_reply, access_logs(listener_settings))

    verifying = verifying_route_tables(gateways)

    def routes_for(name: str, served: Sequence[Api]) -> route_pb2.RouteConfiguration:
        if name in verifying:
            return route_configuration(name, served, decorate, preflight_route)

        def unverified(api: Api, op: Operation | None, route: route_components_pb2.Route) -> None:
            decorate(api, op, route)
            refuse_unverified(api, route)

        return route_configuration(name, served, unverified, preflight_route)

    listeners = [listener_for(settings)]
    own = [api for api in views if not api.spec.target_refs]
    routes = [routes_for(settings.route_config_name, [api for api in own if not api.spec.gateways])]
    named = gateway_resources(gateways, certificates or {}, own, settings, listener_for, routes_for)
    listeners.extend(named.listeners)
    routes.extend(named.routes)
    clusters = [*access.clusters, *limits.clusters(), *shaping.clusters.values(), *access_log_clusters(settings)]
    endpoints = list(shaping.endpoints.values())
    secrets = []
    for api in own:
        proxyless = proxyless_resources(api)
        if proxyless is not None:
            listeners.append(proxyless[0])
            routes.append(proxyless[1])
        for index, backend in api.serving:
            cluster, assignment = backend_resources(backend, api.cluster_name(index), api.project)
            clusters.append(cluster)
            if assignment is not None:
                endpoints.append(assignment)
            if backend.credential is not None:
                secrets.append(credential_secret(cluster.name, backend.credential))
            client = _client_certificate(api.project, backend, certificates or {})
            if client is not None:
                secrets.append(client)
    # Before the filter configs: attaching APIs decorates the Gateway API core's routes, which the keys
    # filter's table names.
    attached_routes = with_attached_apis(gateway_api, attached, attach, chain, local_reply)
    keys = []
    if settings.keys_filter is not None:
        table = keys_table(views, entitlements, access.keys_routes)
        keys.append(extension_config(KEYS_FILTER, keys_filter_config(settings.keys_filter, table)))
    return EnvoyConfig(
        listeners=sorted(listeners, key=lambda listener: listener.name),
        routes=sorted(routes, key=lambda table: table.name),
        clusters=sorted(clusters, key=lambda cluster: cluster.name),
        endpoints=sorted(endpoints, key=lambda assignment: assignment.cluster_name),
        refused=refused,
        extension_configs=[*access.extension_configs(), *limits.extension_configs(), *keys],
        secrets=sorted({s.name: s for s in [*named.secrets, *secrets]}.values(), key=lambda secret: secret.name),
        gateway_problems=_joined(unverified_problems(gateways, own), named.problems),
        api_problems=attachment_problems(attached, served),
        gateway_api=attached_routes,
    )


def _client_certificate(
    project: str, backend: Backend, certificates: Mapping[str, TLSCertificateSpec | str]
) -> secret_pb2.Secret | None:
    """The secret of the certificate a backend presents, when this agent holds it (else Envoy has none to
    present, and the backend's handshakes fail rather than go out without it)."""
    ref = backend.tls.client_certificate_ref if backend.tls is not None else None
    held = certificates.get(f"{project}/{ref}") if ref is not None else None
    return certificate_secret(project, ref, held) if ref is not None and isinstance(held, TLSCertificateSpec) else None


def _joined(*problems: Mapping[str, str]) -> dict[str, str]:
    """Problems by Gateway from several checks, one text per Gateway."""
    out: dict[str, str] = {}
    for found in problems:
        for gateway, text in found.items():
            out[gateway] = f"{out[gateway]}; {text}" if gateway in out else text
    return dict(sorted(out.items()))
