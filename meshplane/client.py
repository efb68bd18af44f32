"""A typed client of the north REST API, used by the CLI, tests and benchmarks."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from httpx_sse import aconnect_sse

from meshplane.model.registry import REGISTRY, KindInfo


class ApiError(Exception):
    """A problem+json answer from the server, with its field errors."""

    def __init__(self, status: int, detail: str, errors: list[dict[str, str]] | None = None):
        self.status = status
        self.detail = detail
        self.errors = errors or []
        lines = [f"{status}: {detail}", *(f"  {e.get('path') or '(object)'}: {e.get('message')}" for e in self.errors)]
        super().__init__("\n".join(lines))


class ServerUnreachable(Exception):
    """The server did not answer at all (refused, timed out, bad address): no HTTP status to report."""

    def __init__(self, server: str, cause: httpx.TransportError):
        untrusted = _certificate_refusal(cause)
        if untrusted is not None:
            super().__init__(
                f"the TLS certificate of the meshplane server at {server} is not trusted ({untrusted.verify_message}); "
                "pass --cacert with the CA certificate that issued it (or set MESHPLANE_CACERT)"
            )
            return
        super().__init__(f"cannot reach the meshplane server at {server}: {str(cause) or type(cause).__name__}")


def _certificate_refusal(error: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate check that failed somewhere in `error`'s causes, if that is why."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return cause
        cause = cause.__cause__ or cause.__context__
    return None


def trust_of(cacert: Path | None) -> ssl.SSLContext | bool:
    """What verifies the server's certificate: the CA in `cacert`, else the system's CAs."""
    if cacert is None:
        return True
    try:
        return ssl.create_default_context(cafile=str(cacert))
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot use {cacert} as a CA certificate: {getattr(exc, 'strerror', None) or exc}") from None


def object_path(info: KindInfo, project: str | None, name: str | None = None) -> str:
    base = f"/v1/projects/{project}/{info.plural}" if info.namespaced else f"/v1/{info.plural}"
    return f"{base}/{name}" if name else base


def object_label(kind: str, name: str, project: str | None) -> str:
    """`apis/orders -p shop`: how the CLI names an object, as `apply` prints it."""
    return f"{REGISTRY.get(kind).plural}/{name}" + (f" -p {project}" if project else "")


@dataclass(frozen=True)
class Target:
    """The object a document describes: where a PUT or a DELETE of it goes."""

    info: KindInfo
    project: str | None
    name: str

    @classmethod
    def of(cls, doc: dict[str, Any], project: str | None) -> Target:
        """The document's kind and name, and its project: its own, else `project`, else `default`."""
        if not isinstance(doc.get("kind"), str):
            raise ApiError(422, "the object is not valid", [{"path": "kind", "message": "is required"}])
        info = REGISTRY.resolve(doc["kind"])
        meta = doc.get("metadata") or {}
        if not isinstance(meta, dict):
            raise ApiError(422, "the object is not valid", [{"path": "metadata", "message": "must be a mapping"}])
        name = meta.get("name")
        if not name:
            raise ApiError(422, "the object is not valid", [{"path": "metadata.name", "message": "is required"}])
        return cls(info, (meta.get("project") or project or "default") if info.namespaced else None, str(name))

    @property
    def label(self) -> str:
        return object_label(self.info.kind, self.name, self.project)


def keys_path(project: str, application: str, key_id: str | None = None) -> str:
    base = f"{object_path(REGISTRY.get('Application'), project, application)}/keys"
    return f"{base}/{key_id}" if key_id else base


def given(**fields: str | None) -> dict[str, str]:
    """The fields set: one left out takes the server's default."""
    return {name: value for name, value in fields.items() if value is not None}


def load_documents(text: str) -> list[dict[str, Any]]:
    """Every non-empty document of a multi-document YAML (or JSON) text."""
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    for index, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise ValueError(f"document {index + 1} is not a mapping")
    return docs


@dataclass
class Applied:
    kind: str
    name: str
    project: str | None
    created: bool
    object: dict[str, Any] = field(repr=False)

    @property
    def label(self) -> str:
        return object_label(self.kind, self.name, self.project)


class MeshplaneClient:
    def __init__(
        self,
        server: str = "http://127.0.0.1:8080",
        token: str | None = None,
        timeout: float = 30.0,
        cacert: Path | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        """`cacert`: the CA certificate that vouches for an https:// server (default: the system's CAs);
        `transport`: how requests reach the server, when not over the network (tests serve the app in process)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.AsyncClient(
            base_url=server, headers=headers, timeout=timeout, verify=trust_of(cacert), transport=transport
        )

    async def __aenter__(self) -> MeshplaneClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self.http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ServerUnreachable(str(self.http.base_url).rstrip("/"), exc) from None
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = None
            if not isinstance(body, dict):  # not ours: a proxy's page, say
                raise ApiError(response.status_code, response.text or response.reason_phrase)
            raise ApiError(response.status_code, body.get("detail", response.text), body.get("errors"))
        return response

    async def put(self, doc: dict[str, Any], project: str | None = None) -> Applied:
        """Create or replace an object."""
        return await self.put_at(Target.of(doc, project), doc)

    async def put_at(self, target: Target, doc: dict[str, Any]) -> Applied:
        response = await self._call("PUT", object_path(target.info, target.project, target.name), json=doc)
        return Applied(target.info.kind, target.name, target.project, response.status_code == 201, response.json())

    async def get(self, kind: str, name: str, project: str | None = None) -> dict[str, Any]:
        info = REGISTRY.resolve(kind)
        return (await self._call("GET", object_path(info, project if info.namespaced else None, name))).json()

    async def list(self, kind: str, project: str | None = None, label_selector: str | None = None) -> list[dict]:
        return (await self.list_at(kind, project, label_selector))[0]

    async def list_at(
        self, kind: str, project: str | None = None, label_selector: str | None = None
    ) -> tuple[list[dict], int]:
        """Every object of a kind, and the revision to watch from so that no later change is missed
        (the first page's: a change during paging may then be seen twice, never not at all)."""
        info = REGISTRY.resolve(kind)
        items: list[dict] = []
        revision: int | None = None
        params: dict[str, Any] = {"limit": 500}
        if label_selector:
            params["labelSelector"] = label_selector
        while True:
            page = (
                await self._call("GET", object_path(info, project if info.namespaced else None), params=params)
            ).json()
            items.extend(page["items"])
            if revision is None:
                revision = int(page["metadata"]["resourceVersion"])
            if not page["metadata"].get("continue"):
                return items, revision
            params["continue"] = page["metadata"]["continue"]

    async def delete(self, kind: str, name: str, project: str | None = None) -> dict[str, Any]:
        info = REGISTRY.resolve(kind)
        return await self.delete_at(Target(info, project if info.namespaced else None, name))

    async def delete_at(self, target: Target) -> dict[str, Any]:
        return (await self._call("DELETE", object_path(target.info, target.project, target.name))).json()

    def _history_path(self, kind: str, name: str, project: str | None) -> str:
        info = REGISTRY.resolve(kind)
        return f"{object_path(info, project if info.namespaced else None, name)}/history"

    async def history(self, kind: str, name: str, project: str | None = None) -> list[dict[str, Any]]:
        """The kept versions of an object (revision, op, generation, at, who), newest first."""
        return (await self._call("GET", self._history_path(kind, name, project))).json()["items"]

    async def version(self, kind: str, name: str, revision: int, project: str | None = None) -> dict[str, Any]:
        """The object as the change at `revision` wrote it (write-only values shown as a read shows them)."""
        return (await self._call("GET", f"{self._history_path(kind, name, project)}/{revision}")).json()

    async def rollback(self, kind: str, name: str, revision: int, project: str | None = None) -> Applied:
        """Write the spec, labels and annotations the object had at `revision` as a new change of its current
        version (If-Match: refused if it changes meanwhile), through the ordinary replace; a deleted object is
        created again (refused if another one was created meanwhile)."""
        old = await self.version(kind, name, revision, project)
        try:
            current: dict[str, Any] | None = await self.get(kind, name, project)
        except ApiError as exc:
            if exc.status != 404:
                raise
            current = None
        meta = old["metadata"]
        doc = {
            "kind": old["kind"],
            "metadata": {
                key: meta[key] for key in ("name", "project", "labels", "annotations") if meta.get(key) is not None
            },
            "spec": old["spec"],
        }
        target = Target.of(doc, project)
        if current is None:
            response = await self._call("POST", object_path(target.info, target.project), json=doc)
        else:
            expected = current["metadata"]["resourceVersion"]
            path = object_path(target.info, target.project, target.name)
            response = await self._call("PUT", path, json=doc, headers={"If-Match": f'"{expected}"'})
        return Applied(target.info.kind, target.name, target.project, response.status_code == 201, response.json())

    async def audit(
        self,
        since: str | None = None,
        project: str | None = None,
        kind: str | None = None,
        who: str | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """Up to `limit` audit entries, newest first, matching every filter given."""
        params: dict[str, Any] = {"limit": min(limit, 1000), **given(since=since, project=project, kind=kind, who=who)}
        items: list[dict[str, Any]] = []
        while len(items) < limit:
            page = (await self._call("GET", "/v1/audit", params=params)).json()
            items.extend(page["items"])
            if not page["metadata"].get("continue"):
                break
            params["continue"] = page["metadata"]["continue"]
        return items[:limit]

    async def act_on_rollout(self, name: str, action: str, project: str) -> dict[str, Any]:
        """Pause, resume, promote or abort a rollout; the rollout as the action left it."""
        path = f"{object_path(REGISTRY.get('Rollout'), project, name)}/{action}"
        return (await self._call("POST", path)).json()

    async def adopt(
        self, kind: str, name: str, project: str | None = None, clusters: list[str] | None = None
    ) -> dict[str, Any]:
        """Make an object a cluster made the control plane's: placed on `clusters`, or where its spec asks."""
        info = REGISTRY.resolve(kind)
        body = {"placement": {"clusters": clusters}} if clusters else {}
        path = f"{object_path(info, project if info.namespaced else None, name)}/adopt"
        return (await self._call("POST", path, json=body)).json()

    async def issue_key(
        self, application: str, project: str, expires_in: str | None = None, key: str | None = None
    ) -> dict[str, Any]:
        """A new API key of an application (or `key`, imported); the answer is the only place it appears."""
        body = given(expiresIn=expires_in, key=key)
        return (await self._call("POST", keys_path(project, application), json=body)).json()

    async def api_figures(self, name: str, project: str) -> dict[str, Any]:
        """Per cluster, what its gateways counted of an API (requests, 5xx answers, by status class)."""
        return (await self._call("GET", f"{object_path(REGISTRY.get('API'), project, name)}/figures")).json()

    async def list_keys(self, application: str, project: str) -> list[dict[str, Any]]:
        return (await self._call("GET", keys_path(project, application))).json()["items"]

    async def revoke_key(self, application: str, key_id: str, project: str) -> dict[str, Any]:
        return (await self._call("DELETE", keys_path(project, application, key_id))).json()

    async def rotate_key(
        self,
        application: str,
        key_id: str,
        project: str,
        overlap: str | None = None,
        expires_in: str | None = None,
    ) -> dict[str, Any]:
        """A replacement key; the old one keeps working for `overlap` (the server's default when None)."""
        body = given(overlap=overlap, expiresIn=expires_in)
        return (await self._call("POST", f"{keys_path(project, application, key_id)}/rotate", json=body)).json()

    async def rotate_signing_key(self) -> dict[str, Any]:
        return (await self._call("POST", "/v1/signing-keys/rotate")).json()

    async def retire_signing_key(self, kid: str) -> dict[str, Any]:
        return (await self._call("DELETE", f"/v1/signing-keys/{kid}")).json()

    async def revoke_agent_certificate(self, cluster: str, serial: str, reason: str = "") -> dict[str, Any]:
        """Every server refuses the agent certificate with this serial (lower-case hex) from now on."""
        body = {"cluster": cluster, "serial": serial, "reason": reason}
        return (await self._call("POST", "/v1/certificaterevocations", json=body)).json()

    async def create_token(
        self, name: str, role: str, project: str | None = None, expires_in: str | None = None
    ) -> dict[str, Any]:
        """A new bearer token; the answer is the only place it appears."""
        body = given(name=name, role=role, project=project, expiresIn=expires_in)
        return (await self._call("POST", "/v1/tokens", json=body)).json()

    async def list_tokens(self) -> list[dict[str, Any]]:
        return (await self._call("GET", "/v1/tokens")).json()["items"]

    async def revoke_token(self, token_id: str) -> dict[str, Any]:
        return (await self._call("DELETE", f"/v1/tokens/{token_id}")).json()

    async def watch(
        self, since: int | None = None, kind: str | None = None, project: str | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        params: dict[str, Any] = {}
        if since is not None:
            params["since"] = since
        if kind:
            params["kind"] = REGISTRY.resolve(kind).kind
        if project:
            params["project"] = project
        try:
            async with aconnect_sse(self.http, "GET", "/v1/watch", params=params, timeout=None) as source:
                async for event in source.aiter_sse():
                    if event.data:
                        yield json.loads(event.data)
        except httpx.TransportError as exc:  # refused, or the server went away mid-stream
            raise ServerUnreachable(str(self.http.base_url).rstrip("/"), exc) from None
