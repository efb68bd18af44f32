"""A small async client for the Kubernetes API server, from a kubeconfig or a pod's service account:
discovery, server-side apply, label-selected lists, watches, deletes, status patches. Errors are split by what a
caller can do about them."""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from meshplane import secret_files
from meshplane.agent.kube.serviceaccount import SERVICE_ACCOUNT_DIR, ServiceAccountToken, api_server_url

FIELD_MANAGER = "meshplane-agent"
WATCH_TIMEOUT = 300
"""Seconds the API server keeps one watch open; it then ends cleanly and is resumed."""


class KubeRefused(Exception):
    """The API server refused a request for good (403, 404, 422…): retrying the same request cannot help."""

    def __init__(self, status_code: int, message: str, details_kind: str = ""):
        self.status_code = status_code
        self.details_kind = details_kind
        super().__init__(message)


class WatchExpired(Exception):
    """The resourceVersion a watch starts from is too old (410 Gone): list again."""


class KubeUnavailable(Exception):
    """The API server could not be reached or answered with a transient error (409, 429, 5xx)."""

    def __init__(self, message: str, status_code: int = 0):
        self.status_code = status_code
        super().__init__(message)


@dataclass(frozen=True)
class ResourceType:
    """A served resource: where its objects live in the API."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    def path(self, namespace: str = "", name: str = "") -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base = f"{base}/namespaces/{namespace}"
        path = f"{base}/{self.plural}"
        return f"{path}/{name}" if name else path


def _resolve(base: Path, value: str) -> str:
    path = Path(value)
    return str(path if path.is_absolute() else base / path)


def _ssl_context(config_dir: Path, cluster: Mapping[str, Any], user: Mapping[str, Any]) -> ssl.SSLContext | bool:
    if cluster.get("insecure-skip-tls-verify"):
        return False
    if data := cluster.get("certificate-authority-data"):
        context = ssl.create_default_context(cadata=base64.b64decode(data).decode())
    elif path := cluster.get("certificate-authority"):
        context = ssl.create_default_context(cafile=_resolve(config_dir, path))
    else:
        context = ssl.create_default_context()
    if user.get("client-certificate-data"):
        # The ssl module loads client certificates from files only; they live just long enough to be read.
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = Path(tmp) / "client.crt", Path(tmp) / "client.key"
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            secret_files.create(key, base64.b64decode(user["client-key-data"]))
            context.load_cert_chain(cert, key)
    elif user.get("client-certificate"):
        context.load_cert_chain(
            _resolve(config_dir, user["client-certificate"]), _resolve(config_dir, user["client-key"])
        )
    return context


def _failure(method: str, path: str, response: httpx.Response) -> KubeRefused | KubeUnavailable:
    """The error an API server's answer (status 400 or above) stands for."""
    try:
        status = response.json()
    except ValueError:
        status = {}
    message = status.get("message") or response.text or response.reason_phrase
    if response.status_code in (409, 429) or response.status_code >= 500:
        return KubeUnavailable(f"{method} {path}: {response.status_code} {message}", response.status_code)
    return KubeRefused(response.status_code, message, (status.get("details") or {}).get("kind", ""))


def _typed(resource: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """Lists and watches leave out each item's apiVersion and kind; put them back."""
    obj.setdefault("apiVersion", resource.api_version)
    obj.setdefault("kind", resource.kind)
    return obj


def _named(items: list[dict[str, Any]], name: str, what: str) -> dict[str, Any]:
    for item in items or []:
        if item.get("name") == name:
            return item.get(what) or {}
    raise ValueError(f"kubeconfig has no {what} named {name!r}")


class KubeClient:
    def __init__(self, http: httpx.AsyncClient):
        self.http = http
        self._discovered: dict[str, dict[str, ResourceType]] = {}

    @classmethod
    def from_kubeconfig(cls, path: Path, timeout: float = 15.0) -> KubeClient:
        """A client for the current context of the kubeconfig at `path` (token or client certificate)."""
        config = yaml.safe_load(path.read_text())
        context = _named(config.get("contexts", []), config["current-context"], "context")
        cluster = _named(config.get("clusters", []), context["cluster"], "cluster")
        user = _named(config.get("users", []), context["user"], "user")
        headers = {"Authorization": f"Bearer {user['token']}"} if user.get("token") else {}
        verify = _ssl_context(path.parent, cluster, user)
        return cls(httpx.AsyncClient(base_url=cluster["server"], headers=headers, verify=verify, timeout=timeout))

    @classmethod
    def in_cluster(
        cls,
        directory: Path = SERVICE_ACCOUNT_DIR,
        environ: Mapping[str, str] = os.environ,
        timeout: float = 15.0,
    ) -> KubeClient:
        """A client of the API server of the cluster this pod runs in, as the pod's service account
        (its token and CA under `directory`); NotInCluster outside a pod."""
        url = api_server_url(environ)
        verify = ssl.create_default_context(cafile=directory / "ca.crt")
        auth = ServiceAccountToken(directory / "token")
        auth.token()  # a missing token fails the start, not the first request
        return cls(httpx.AsyncClient(base_url=url, auth=auth, verify=verify, timeout=timeout))

    async def close(self) -> None:
        await self.http.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise KubeUnavailable(f"{method} {path}: {exc!r}") from None
        if response.status_code < 400:
            return response
        raise _failure(method, path, response)

    async def resource_type(self, api_version: str, kind: str) -> ResourceType:
        """The resource serving `kind` in `api_version`, from discovery (KubeRefused 404 when not served)."""
        served = self._discovered.get(api_version)
        if served is None or kind not in served:
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            try:
                resources = (await self._request("GET", path)).json()["resources"]
            except KubeRefused as exc:
                if exc.status_code != 404:
                    raise
                resources = []
            served = self._discovered[api_version] = {
                r["kind"]: ResourceType(api_version, r["kind"], r["name"], r["namespaced"])
                for r in resources
                if "/" not in r["name"]
            }
        if kind not in served:
            raise KubeRefused(404, f"the API server does not serve {kind} in {api_version}")
        return served[kind]

    async def apply(self, resource: ResourceType, body: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply as the agent's field manager, taking over fields others changed; unknown
        fields are refused rather than dropped. No resourceVersion is sent, so an update racing this one
        cannot make it fail with 409 Conflict: the API server retries its own read-modify-write."""
        meta = body["metadata"]
        response = await self._request(
            "PATCH",
            resource.path(meta.get("namespace", ""), meta["name"]),
            params={"fieldManager": FIELD_MANAGER, "force": "true", "fieldValidation": "Strict"},
            headers={"Content-Type": "application/apply-patch+yaml"},
            json=dict(body),
        )
        return response.json()

    async def list(self, resource: ResourceType, label_selector: str) -> list[dict[str, Any]]:
        """Every object of `resource` in every namespace that matches `label_selector`."""
        items, _ = await self.list_at(resource, label_selector)
        return items

    async def list_at(self, resource: ResourceType, label_selector: str = "") -> tuple[list[dict[str, Any]], str]:
        """Every object of `resource` in every namespace that matches `label_selector`, and the
        resourceVersion the list is consistent at: where a watch of the same objects starts."""
        items: list[dict[str, Any]] = []
        params = {"labelSelector": label_selector, "limit": "500"}
        while True:
            page = (await self._request("GET", resource.path(), params=params)).json()
            for item in page.get("items", []):
                items.append(_typed(resource, item))
            if not (token := page.get("metadata", {}).get("continue")):
                return items, page.get("metadata", {}).get("resourceVersion", "")
            params["continue"] = token

    async def watch(self, resource: ResourceType, version: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """(event type, object) for each change to `resource` in every namespace after `version`, bookmarks
        included, until the API server ends the watch (after WATCH_TIMEOUT). WatchExpired when `version` is
        too old to watch from: list again."""
        path = resource.path()
        params = {
            "watch": "1",
            "allowWatchBookmarks": "true",
            "resourceVersion": version,
            "timeoutSeconds": str(WATCH_TIMEOUT),
        }
        timeout = httpx.Timeout(10.0, read=WATCH_TIMEOUT + 30)
        try:
            async with self.http.stream("GET", path, params=params, timeout=timeout) as response:
                if response.status_code == 410:
                    raise WatchExpired()
                if response.status_code >= 400:
                    await response.aread()
                    raise _failure("watch", path, response)
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            raise WatchExpired()
                        raise KubeUnavailable(f"watch {path}: {obj.get('message')}", obj.get("code") or 0)
                    yield kind, _typed(resource, obj)
        except httpx.HTTPError as exc:
            raise KubeUnavailable(f"watch {path}: {exc!r}") from None

    async def patch_status(
        self,
        resource: ResourceType,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """Merge `status` into an object's status subresource (its spec and metadata stay as they are); with
        `resource_version`, only if the object is still at it (else KubeUnavailable 409)."""
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        response = await self._request(
            "PATCH",
            f"{resource.path(namespace, name)}/status",
            headers={"Content-Type": "application/merge-patch+json"},
            json=body,
        )
        return response.json()

    async def get(self, resource: ResourceType, namespace: str, name: str) -> dict[str, Any] | None:
        """One object, or None when there is none by that name."""
        try:
            return (await self._request("GET", resource.path(namespace, name))).json()
        except KubeRefused as exc:
            if exc.status_code != 404:
                raise
            return None

    async def delete(self, resource: ResourceType, namespace: str, name: str) -> None:
        """Delete one object; one already gone is fine."""
        try:
            await self._request("DELETE", resource.path(namespace, name))
        except KubeRefused as exc:
            if exc.status_code != 404:
                raise

    async def create_namespace(self, name: str) -> None:
        """Create a namespace; one that exists already is fine."""
        try:
            await self._request("POST", "/api/v1/namespaces", json={"metadata": {"name": name}})
        except KubeUnavailable as exc:
            if exc.status_code != 409:
                raise
