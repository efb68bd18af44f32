"""APIs in, Envoy resources out: a pure, deterministic function the agent runs on every change."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise

from meshplane.agent.translate.apis import Api
from meshplane.agent.translate.clusters import backend_resources
from meshplane.agent.translate.config import EnvoyConfig, GatewaySettings
from meshplane.agent.translate.listener import gateway_listener
from meshplane.agent.translate.proxyless import proxyless_resources
from meshplane.agent.translate.routes import route_configuration
from meshplane.model.resource import Resource


def translate_apis(apis: Iterable[Resource], settings: GatewaySettings) -> EnvoyConfig:
    """The gateway's listener, route table, clusters and EDS endpoints for a set of validated API resources,
    plus an API listener and route table per API that proxyless gRPC clients can reach (see `proxyless`).

    The gateway's listener and route table are always there, so with no APIs the gateway still answers (404).
    Output never depends on input order; an API given twice (same project and name) is a ValueError.
    """
    views = sorted((Api.of(resource) for resource in apis), key=lambda api: api.key)
    for before, after in pairwise(views):
        if before.key == after.key:
            raise ValueError(f"API {after.project}/{after.name} is given twice")
    listeners, routes = [gateway_listener(settings)], [route_configuration(settings.route_config_name, views)]
    clusters, endpoints = [], []
    for api in views:
        proxyless = proxyless_resources(api)
        if proxyless is not None:
            listeners.append(proxyless[0])
            routes.append(proxyless[1])
        for index, backend in api.serving():
            cluster, assignment = backend_resources(api.cluster_name(index), backend)
            clusters.append(cluster)
            if assignment is not None:
                endpoints.append(assignment)
    return EnvoyConfig(
        listeners=sorted(listeners, key=lambda listener: listener.name),
        routes=sorted(routes, key=lambda table: table.name),
        clusters=sorted(clusters, key=lambda cluster: cluster.name),
        endpoints=sorted(endpoints, key=lambda assignment: assignment.cluster_name),
    )
