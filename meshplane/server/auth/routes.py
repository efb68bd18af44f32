"""/v1/tokens for fleet-wide admins, and /v1/whoami for anyone who is signed in."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Body
from pydantic import Field

from meshplane.model.base import WireModel
from meshplane.model.durations import Lifetime, duration_seconds
from meshplane.model.meta import Name
from meshplane.model.roles import Role
from meshplane.server.auth.guard import Caller
from meshplane.server.auth.principal import Principal, require_fleet_wide, require_write
from meshplane.server.auth.tokens import TokenService
from meshplane.server.problems import Problem, problem_responses
from meshplane.store.records import TokenRecord


class NewToken(WireModel):
    name: str = Field(min_length=1, max_length=100)
    role: Role
    project: Name | None = None
    """The one project it covers; absent: every project."""
    expires_in: Lifetime | None = None


def token_view(record: TokenRecord) -> dict[str, Any]:
    """A token as anyone may see it: never its digest."""
    return {
        "id": record.id,
        "name": record.name,
        "role": record.role,
        "project": record.project,
        "created": record.created_at.isoformat(),
        "expires": record.expires_at.isoformat() if record.expires_at else None,
        "revoked": record.revoked,
    }


def tokens_router(tokens: TokenService) -> APIRouter:
    router = APIRouter(tags=["Tokens"])

    def admin_only(principal: Principal) -> None:
        require_fleet_wide(principal, "managing tokens")
        require_write(principal, "Token", None)

    @router.post(
        "/v1/tokens",
        status_code=201,
        summary="Create a bearer token; the token is shown only here",
        responses=problem_responses(403, body=True),
    )
    async def create(principal: Caller, body: Annotated[NewToken, Body()]) -> Any:
        admin_only(principal)
        if body.role is Role.ADMIN and body.project is not None:
            raise Problem(422, "an admin token covers every project: leave project out")
        expires = timedelta(seconds=duration_seconds(body.expires_in)) if body.expires_in else None
        record, token = await tokens.issue(body.name, body.role, body.project, expires)
        return {**token_view(record), "token": token}

    @router.get("/v1/tokens", summary="List tokens (never the tokens themselves)", responses=problem_responses(403))
    async def list_tokens(principal: Caller) -> Any:
        admin_only(principal)
        return {"items": [token_view(record) for record in await tokens.store.tokens()]}

    @router.delete("/v1/tokens/{token_id}", summary="Revoke a token", responses=problem_responses(403, 404))
    async def revoke(principal: Caller, token_id: str) -> Any:
        admin_only(principal)
        if not await tokens.revoke(token_id):
            raise Problem(404, f"no token {token_id!r}")
        record = await tokens.store.token(token_id)
        assert record is not None
        return token_view(record)

    @router.get("/v1/whoami", summary="Who this request's token speaks for", responses=problem_responses())
    async def whoami(principal: Caller) -> Any:
        return {"name": principal.name, "role": principal.role.value, "project": principal.project}

    return router
