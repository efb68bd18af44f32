"""API keys of applications: issued once, kept as digests, revoked and rotated.

An issued key is a compact token signed by the server (ES256, `kid` in its header) naming its
application and that application's uid, so every gateway can check it natively against the public key
set. The server keeps an ApplicationKey record per key (its SHA-256 digest, dates, revocation, the
application's uid), never the key. The digest also serves the enforcer, which checks opaque keys
imported from elsewhere the same way; no two records share one.

A key is bound to the application's uid, not its name: an application deleted and created again under
the same name is another application, and gateways refuse every key of the first (a key naming a uid the
cluster does not hold is refused like a revoked one). So the records go with their application: none is
needed to keep refusing its keys, revoked or not, for as long as they would have lasted.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Body, Path
from pydantic import Field

from meshplane.dataplane import KEY_APPLICATION_UID_CLAIM
from meshplane.model.base import WireModel
from meshplane.model.durations import Lifetime, duration_seconds
from meshplane.model.registry import REGISTRY
from meshplane.model.stored import StoredObject
from meshplane.server.auth.guard import Caller
from meshplane.server.auth.principal import require_fleet_wide, require_project, require_write
from meshplane.server.objects import ObjectService, fenced
from meshplane.server.problems import Problem, problem_responses
from meshplane.server.signing import ISSUER, SigningKeys, publish_key_set
from meshplane.store.batch import Fence
from meshplane.store.errors import Conflict, NotFound
from meshplane.store.store import Store

KEY_KIND = "ApplicationKey"
Project = Annotated[str, Path(description="The project (tenant)")]
Application = Annotated[str, Path(description="The application")]
DEFAULT_OVERLAP = "24h"


class NewKey(WireModel):
    expires_in: Lifetime | None = None
    """How long the key works; absent: until revoked."""
    key: str | None = Field(default=None, min_length=24, max_length=4096)
    """Import an opaque key issued elsewhere (checked by the enforcer); absent: the server issues one."""


class Rotation(WireModel):
    overlap: Lifetime = DEFAULT_OVERLAP
    """How long the replaced key keeps working beside the new one."""
    expires_in: Lifetime | None = None


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def key_view(record: StoredObject) -> dict[str, Any]:
    """What anyone may see of a key: never its digest."""
    spec = record.spec
    view = {"id": record.name, "application": spec["application"], "created": spec["created"]}
    view["expires"] = spec.get("expires")
    view["revoked"] = spec.get("revoked", False)
    view["kind"] = "signed" if spec.get("signingKeyId") else "opaque"
    return view


class Credentials:
    def __init__(self, store: Store, objects: ObjectService, signing: SigningKeys):
        self.store = store
        self.objects = objects
        self.signing = signing

    async def issue(self, project: str, application: str, request: NewKey) -> dict[str, Any]:
        """A key bound to the application as it is now (its uid): deleted and created again under the same
        name, it is another application, which no key of the first one ever speaks for."""
        owner = await self.objects.get(REGISTRY.get("Application"), project, application)
        uid = owner.metadata.uid or ""
        now = datetime.now(UTC).replace(microsecond=0)
        expires = now + timedelta(seconds=duration_seconds(request.expires_in)) if request.expires_in else None
        key_id = f"k-{secrets.token_hex(8)}"
        signer = None
        if request.key is not None:
            key = request.key
        else:
            signer = self.signing.current()
            claims: dict[str, Any] = {
                "iss": ISSUER,
                "sub": f"{project}/{application}",
                "app": application,
                KEY_APPLICATION_UID_CLAIM: uid,
                "project": project,
                "jti": key_id,
                "iat": int(now.timestamp()),
            }
            if expires is not None:
                claims["exp"] = int(expires.timestamp())
            key = signer.sign(claims)
        spec: dict[str, Any] = {
            "application": application,
            "applicationUid": uid,
            "created": _iso(now),
            "revoked": False,
            "sha256": digest(key),
        }
        if expires is not None:
            spec["expires"] = _iso(expires)
        if signer is not None:
            spec["signingKeyId"] = signer.kid
            if expires is not None:
                spec["tokenExpires"] = _iso(expires)

        async def store(fence: Fence | None) -> StoredObject:
            """The record, only while its application is there: one deleted meanwhile leaves no record behind."""
            owner_key = ("Application", project, application)
            try:
                return await self.store.create(KEY_KIND, project, key_id, spec=spec, fence=fence, within=owner_key)
            except NotFound as exc:
                if (exc.kind, exc.project, exc.name) != owner_key:
                    raise
                raise Problem(404, f"Application {application!r} not found in project {project!r}") from None

        if signer is None:
            record = await fenced(lambda _seen_from: self._unused(spec["sha256"]), store, f"a key of {application}")
        else:
            record = await store(None)
        return {**key_view(record), "key": key}

    async def _unused(self, sha256: str) -> Fence:
        """An imported key must be no stored key, in any project: the enforcer finds keys by digest alone, and
        could not tell whose it is. The refusal names nothing of where it is stored; the fence refuses the
        write if another import of it lands meanwhile."""
        taken, revision = await self.store.list(KEY_KIND, None, where=lambda o: o.spec.get("sha256") == sha256, limit=1)
        if taken:
            raise Problem(409, "this key is already in use; import another one")
        return Fence(revision, frozenset({KEY_KIND}), lambda other: other.spec.get("sha256") == sha256)

    async def list(self, project: str, application: str) -> list[dict[str, Any]]:
        await self.objects.get(REGISTRY.get("Application"), project, application)
        records, _ = await self.store.list(KEY_KIND, project, where=lambda o: o.spec["application"] == application)
        return [key_view(record) for record in records]

    async def _record(self, project: str, application: str, key_id: str) -> StoredObject:
        try:
            record = await self.store.get(KEY_KIND, project, key_id)
        except NotFound:
            record = None
        if record is None or record.spec["application"] != application:
            raise Problem(404, f"application {application!r} has no key {key_id!r} in project {project!r}")
        return record

    async def _change(
        self, project: str, application: str, key_id: str, change: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> StoredObject:
        """Apply `change` to a key record's spec at its current revision; the status the system writes beside
        it may move that revision at any time, so a lost race is simply tried again."""
        for _ in range(10):
            record = await self._record(project, application, key_id)
            spec = change(dict(record.spec))
            if spec == record.spec:
                return record
            try:
                updated, _ = await self.store.put(
                    KEY_KIND, project, key_id, spec=spec, expected_revision=record.revision
                )
                return updated
            except Conflict:
                continue
        raise Problem(409, f"key {key_id} keeps changing; try again")

    async def revoke(self, project: str, application: str, key_id: str) -> dict[str, Any]:
        return key_view(await self._change(project, application, key_id, lambda spec: {**spec, "revoked": True}))

    async def rotate(self, project: str, application: str, key_id: str, rotation: Rotation) -> dict[str, Any]:
        """A new key like the old one; the old one keeps working for `overlap`, then stops."""
        record = await self._record(project, application, key_id)
        if record.spec.get("revoked"):
            raise Problem(409, f"key {key_id} is revoked; issue a new key instead")
        if not record.spec.get("signingKeyId"):
            raise Problem(409, f"key {key_id} was imported; import its replacement instead")
        fresh = await self.issue(project, application, NewKey(expires_in=rotation.expires_in))
        ends = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=duration_seconds(rotation.overlap))

        def shorten(spec: dict[str, Any]) -> dict[str, Any]:
            current = _parse(spec["expires"]) if spec.get("expires") else None
            return {**spec, "expires": _iso(min(ends, current) if current else ends)}

        old = await self._change(project, application, key_id, shorten)
        return {**fresh, "replaces": key_view(old)}

    async def rotate_signing_key(self) -> dict[str, Any]:
        key = self.signing.rotate()
        await publish_key_set(self.store, self.signing)
        return {"kid": key.kid}

    async def retire_signing_key(self, kid: str) -> dict[str, Any]:
        try:
            self.signing.retire(kid)
        except KeyError:
            raise Problem(404, f"this server holds no signing key {kid!r}") from None
        except ValueError as exc:
            raise Problem(409, str(exc)) from None
        await publish_key_set(self.store, self.signing)
        return {"kid": kid, "retired": True}


def credentials_router(credentials: Credentials) -> APIRouter:
    router = APIRouter(tags=["Credentials"])
    base = "/v1/projects/{project}/applications/{application}/keys"

    @router.post(
        base,
        status_code=201,
        summary="Issue (or import) an API key; the key is shown only here",
        responses=problem_responses(403, 404, 409, body=True),
    )
    async def issue(
        project: Project, application: Application, principal: Caller, body: Annotated[NewKey | None, Body()] = None
    ) -> Any:
        require_write(principal, KEY_KIND, project)
        return await credentials.issue(project, application, body or NewKey())

    @router.get(
        base, summary="List an application's keys (never the keys themselves)", responses=problem_responses(404)
    )
    async def list_keys(project: Project, application: Application, principal: Caller) -> Any:
        require_project(principal, project)
        return {"items": await credentials.list(project, application)}

    @router.delete(
        f"{base}/{{key_id}}",
        summary="Revoke a key: every gateway refuses it after the next push",
        responses=problem_responses(403, 404, 409),
    )
    async def revoke(project: Project, application: Application, key_id: str, principal: Caller) -> Any:
        require_write(principal, KEY_KIND, project)
        return await credentials.revoke(project, application, key_id)

    @router.post(
        f"{base}/{{key_id}}/rotate",
        status_code=201,
        summary="Replace a key, with an overlap window",
        responses=problem_responses(403, 404, 409, body=True),
    )
    async def rotate(
        project: Project,
        application: Application,
        key_id: str,
        principal: Caller,
        body: Annotated[Rotation | None, Body()] = None,
    ) -> Any:
        require_write(principal, KEY_KIND, project)
        return await credentials.rotate(project, application, key_id, body or Rotation())

    @router.post(
        "/v1/signing-keys/rotate",
        status_code=201,
        summary="Sign new API keys with a new key",
        responses=problem_responses(403, body=True),
    )
    async def rotate_signing(principal: Caller) -> Any:
        require_fleet_wide(principal, "the signing keys")
        require_write(principal, "KeySet", None)
        return await credentials.rotate_signing_key()

    @router.delete(
        "/v1/signing-keys/{kid}",
        summary="Retire a signing key: keys it signed stop working",
        responses=problem_responses(403, 404, 409),
    )
    async def retire_signing(kid: str, principal: Caller) -> Any:
        require_fleet_wide(principal, "the signing keys")
        require_write(principal, "KeySet", None)
        return await credentials.retire_signing_key(kid)

    return router
