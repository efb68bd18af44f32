"""`POST /v1/certificaterevocations`: an admin revokes an agent certificate by its serial.

The revocation is an object in the store, so every replica refuses the certificate once it sees it;
listing them is the kind's ordinary read route. Revocations are never deleted: the certificate may
still be valid for a year, and nothing should bring it back.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Response
from pydantic import Field

from meshplane.model.base import WireModel
from meshplane.model.kinds import SERIAL_PATTERN, CertificateRevocationSpec
from meshplane.model.meta import Name
from meshplane.model.registry import REGISTRY
from meshplane.model.stored import to_resource
from meshplane.security.revocation import REVOCATION_KIND
from meshplane.server.auth.guard import Caller
from meshplane.server.auth.principal import require_fleet_wide, require_write
from meshplane.server.problems import Problem, problem_responses
from meshplane.store.errors import AlreadyExists
from meshplane.store.store import Store


class NewRevocation(WireModel):
    cluster: Name
    """The cluster the certificate was issued for (as its URI SAN names it)."""
    serial: str = Field(pattern=SERIAL_PATTERN)
    """The certificate's serial number, lower-case hex (`meshplane certs issue-agent` prints it)."""
    reason: str = Field(default="", max_length=200)


def revocations_router(store: Store) -> APIRouter:
    router = APIRouter(tags=[REVOCATION_KIND])
    info = REGISTRY.get(REVOCATION_KIND)

    @router.post(
        "/v1/certificaterevocations",
        status_code=201,
        summary="Revoke an agent certificate: every server refuses it, and ends its streams, within seconds",
        responses=problem_responses(403, 409, body=True),
    )
    async def revoke(principal: Caller, body: Annotated[NewRevocation, Body()], response: Response) -> Any:
        require_fleet_wide(principal, "revoking agent certificates")
        require_write(principal, REVOCATION_KIND, None)
        spec = CertificateRevocationSpec(cluster=body.cluster, reason=body.reason).to_wire()
        try:
            stored = await store.create(REVOCATION_KIND, "", body.serial, spec=spec)
        except AlreadyExists:
            stored = await store.get(REVOCATION_KIND, "", body.serial)
            if stored.spec.get("cluster") != body.cluster:
                raise Problem(
                    409, f"certificate {body.serial} is already revoked, as cluster {stored.spec.get('cluster')!r}'s"
                ) from None
            response.status_code = 200
        return to_resource(info, stored).to_wire()

    return router
