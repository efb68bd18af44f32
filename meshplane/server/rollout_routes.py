"""`POST /v1/projects/{p}/rollouts/{name}/{pause|resume|promote|abort}`: the operator's hand on a rollout.

Each action is allowed to whoever may change the rolled-out object in its project, and is written guarded by
the revision it was judged at, so an action and the driver never undo each other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from enum import StrEnum

from fastapi import APIRouter

from meshplane.model.registry import REGISTRY
from meshplane.model.rollouts import RolloutSpec
from meshplane.model.stored import StoredObject, to_resource
from meshplane.observability.metrics import ROLLOUT_TRANSITIONS
from meshplane.server.auth.guard import Caller
from meshplane.server.auth.principal import Principal, require_project, require_write
from meshplane.server.objects import CHECK_ATTEMPTS
from meshplane.server.problems import Problem, problem_responses
from meshplane.server.projection import FleetProjection
from meshplane.server.rollout_plan import RolloutActionRefused, abort, pause, promote, resume
from meshplane.server.rollout_writes import ROLLOUT
from meshplane.server.rollouts import restore, save, target_of
from meshplane.store.errors import Conflict, NotFound
from meshplane.store.store import Store


class Action(StrEnum):
    PAUSE = "pause"
    RESUME = "resume"
    PROMOTE = "promote"
    ABORT = "abort"


def _acted(action: Action, spec: RolloutSpec, placed: Iterable[str], now: datetime) -> RolloutSpec:
    match action:
        case Action.PAUSE:
            return pause(spec, now)
        case Action.RESUME:
            return resume(spec, now)
        case Action.PROMOTE:
            return promote(spec, placed, now)
        case Action.ABORT:
            return abort(spec, now)


def rollout_routes(store: Store, projection: FleetProjection) -> APIRouter:
    router = APIRouter(tags=["Rollout"])
    info = REGISTRY.get(ROLLOUT)

    async def act(project: str, name: str, action: Action, principal: Principal) -> object:
        """The action on the rollout as it stands: the driver writes rollouts too, so one it changed between
        this read and this write is read and judged again."""
        require_project(principal, project)
        for _ in range(CHECK_ATTEMPTS):
            try:
                return await act_once(project, name, action, principal)
            except Conflict:
                continue
        raise Problem(409, f"rollout {name!r} kept changing; look at it again and retry")

    async def act_once(project: str, name: str, action: Action, principal: Principal) -> object:
        try:
            rollout = await store.get(ROLLOUT, project, name)
        except NotFound:
            raise Problem(404, f"rollout {name!r} not found in project {project!r}") from None
        spec = RolloutSpec.model_validate(rollout.spec)
        require_write(principal, spec.target.kind, project)
        target = target_of(rollout, spec)
        try:
            acted = _acted(action, spec, projection.placed.get(target, frozenset()), datetime.now(UTC))
        except RolloutActionRefused as exc:
            raise Problem(409, str(exc)) from None
        stored: StoredObject = await (restore if action is Action.ABORT else save)(store, rollout, acted)
        ROLLOUT_TRANSITIONS.labels(acted.phase.value).inc()
        return to_resource(info, stored)

    def endpoint(action: Action) -> Callable[..., Awaitable[object]]:
        async def act_on(project: str, name: str, principal: Caller) -> object:
            return await act(project, name, action, principal)

        return act_on

    for action in Action:
        # One route per action, rather than a path parameter that would also answer for `…/{name}/history`.
        router.add_api_route(
            f"/v1/projects/{{project}}/rollouts/{{name}}/{action.value}",
            endpoint(action),
            methods=["POST"],
            summary=f"{action.value.capitalize()} a rollout",
            response_model=info.model,
            response_model_exclude_none=True,
            responses=problem_responses(403, 404, 409),
        )

    return router
