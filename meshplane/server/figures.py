"""`GET /v1/projects/{project}/apis/{name}/figures`: what each cluster's gateways counted of an API.

The counts are cumulative, as the clusters' agents report them (see `agent.figures`): a ratio over a span
of time is the difference of two readings of one cluster with the same `resets`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path

from meshplane.model.base import WireModel
from meshplane.model.registry import REGISTRY
from meshplane.server.auth.guard import Caller
from meshplane.server.auth.principal import require_project
from meshplane.server.objects import ObjectService
from meshplane.server.problems import problem_responses
from meshplane.store.records import ApiFigureRecord


class ClusterFigures(WireModel):
    requests: int
    """Requests the cluster's gateways sent upstream for the API."""
    errors: int
    """Those answered 5xx (by a backend, or by the gateway failing to reach one)."""
    error_ratio: float
    by_class: dict[str, int]
    """Answers by status class: 1xx … 5xx."""
    sampled_at: datetime
    """When the cluster's agent read these counts from its gateways."""
    resets: int
    """Reports that came in lower than the one before: readings compare only with equal resets."""

    @classmethod
    def of(cls, record: ApiFigureRecord) -> ClusterFigures:
        return cls(
            requests=record.requests,
            errors=record.errors,
            error_ratio=record.errors / record.requests if record.requests else 0.0,
            by_class=record.by_class,
            sampled_at=record.sampled_at,
            resets=record.resets,
        )


class ApiFigures(WireModel):
    project: str
    name: str
    clusters: dict[str, ClusterFigures]
    """By cluster name: every cluster that reported figures of the API."""


def figures_router(service: ObjectService) -> APIRouter:
    router = APIRouter(tags=["API"])
    api_kind = REGISTRY.get("API")

    @router.get(
        "/v1/projects/{project}/apis/{name}/figures",
        summary="Per cluster, the requests and 5xx answers its gateways counted for an API",
        response_model=ApiFigures,
        responses=problem_responses(404),
    )
    async def figures(
        project: Annotated[str, Path(description="The project (tenant)")], name: str, principal: Caller
    ) -> ApiFigures:
        require_project(principal, project)
        await service.get(api_kind, project, name)  # 404 for an API that does not exist
        found = await service.store.figures_of(project, name)
        return ApiFigures(
            project=project, name=name, clusters={cluster: ClusterFigures.of(r) for cluster, r in found.items()}
        )

    return router
