"""Everything one cluster gets from the intents of all projects, merged and in a stable order."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from meshplane.model.resource import Resource
from meshplane.server.render.egress import render_egress_intent
from meshplane.server.render.fleet import Fleet
from meshplane.server.render.ingress import render_ingress_intent
from meshplane.server.render.service import merge_sidecars, render_service_intent

Renderer = Callable[[Resource, Fleet, str], list[dict]]


def render_cluster(fleet: Fleet, cluster: str) -> list[dict[str, Any]]:
    """The Kubernetes objects `cluster` needs, sorted by (kind, namespace, name).

    Several intents may ask for the same object: a Sidecar of one client workload (each intent adds
    the hosts it may call) is merged; a shared object such as the east-west Gateway is rendered the
    same by each, and kept once.
    """
    rendered: list[dict] = []
    for intents, render in _renderers(fleet):
        for intent in sorted(intents, key=lambda i: (i.metadata.project or "", i.metadata.name)):
            rendered.extend(render(intent, fleet, cluster))
    unique = {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in merge_sidecars(rendered)
    }
    return [unique[key] for key in sorted(unique)]


def _renderers(fleet: Fleet) -> Iterable[tuple[Iterable[Resource], Renderer]]:
    return (
        (fleet.service_intents, render_service_intent),
        (fleet.egress_intents, render_egress_intent),
        (fleet.ingress_intents, render_ingress_intent),
    )
