"""A small async client for the Kubernetes API server, from a kubeconfig: discovery, server-side apply,
label-selected lists, deletes. Errors are split by what a caller can do about them."""

from __future__ import annotations

import base64
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

FIELD_MANAGER = "meshplane-agent"


class KubeRefused(Exception):
    """The API server refused a request for good (403, 404, 422…): retrying the same request cannot help."""

    def __init__(self, status_code: int, message: str, details_kind: str = ""):
        self.status_code = status_code
        self.details_kind = details_kind
        super().__init__(message)


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
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            context.load_cert_chain(cert, key)
    elif user.get("client-certificate"):
        context.load_cert_chain(
            _resolve(config_dir, user["client-certificate"]), _resolve(config_dir, user["client-key"])
        )
    return context


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

    async def close(self) -> None:
        await self.http.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise KubeUnavailable(f"{method} {path}: {exc!r}") from None
        if response.status_code < 400:
            return response
        try:
            status = response.json()
        except ValueError:
            status = {}
        message = status.get("message") or response.text or response.reason_phrase
        if response.status_code in (409, 429) or response.status_code >= 500:
            raise KubeUnavailable(f"{method} {path}: {response.status_code} {message}", response.status_code)
        raise KubeRefused(response.status_code, message, (status.get("details") or {}).get("kind", ""))

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
        fields are refused rather than dropped."""
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
        items: list[dict[str, Any]] = []
        params = {"labelSelector": label_selector, "limit": "500"}
        while True:
            page = (await self._request("GET", resource.path(), params=params)).json()
            for item in page.get("items", []):
                item.setdefault("apiVersion", resource.api_version)
                item.setdefault("kind", resource.kind)
                items.append(item)
            if not (token := page.get("metadata", {}).get("continue")):
                return items
            params["continue"] = token

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
