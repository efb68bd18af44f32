"""One builder per kind of north-API document, in wire form, so a test says what it declares, not how it is spelled.

Spec fields are keyword arguments in the wire's own spelling (`api("orders", basePath="/orders", backends=[...])`);
a cluster-scoped kind (Project, Cluster, ...) gets no project, as the registry says.
"""

from __future__ import annotations

import uuid
from typing import Any

from meshplane.model.registry import REGISTRY
from meshplane.model.resource import API_VERSION

PROJECT = "default"
LOOPBACK_PORT = 9001
"""The backend port of an API that names none: tests that send no traffic through it need not run one."""


def document(
    kind: str, name: str, *, project: str = PROJECT, labels: dict[str, str] | None = None, spec: dict[str, Any]
) -> dict[str, Any]:
    """The document of any kind; the builders below name the kinds tests declare most."""
    metadata: dict[str, Any] = {"name": name}
    if REGISTRY.get(kind).namespaced:
        metadata["project"] = project
    if labels is not None:
        metadata["labels"] = labels
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, "spec": spec}


def project(name: str, **spec: Any) -> dict[str, Any]:
    return document("Project", name, spec=spec)


def cluster(name: str, **spec: Any) -> dict[str, Any]:
    return document("Cluster", name, spec=spec)


def api(name: str, *, project: str = PROJECT, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """An API served under /<name> by a loopback backend on port 9001, unless `spec` says otherwise."""
    defaults = {"basePath": f"/{name}", "backends": [backend(LOOPBACK_PORT)]}
    return document("API", name, project=project, labels=labels, spec={**defaults, **spec})


def application(name: str, *, project: str = PROJECT, **spec: Any) -> dict[str, Any]:
    return document("Application", name, project=project, spec=spec)


def subscription(name: str, *, project: str = PROJECT, **spec: Any) -> dict[str, Any]:
    return document("Subscription", name, project=project, spec=spec)


def rate_limit_policy(name: str, *, project: str = PROJECT, **spec: Any) -> dict[str, Any]:
    return document("RateLimitPolicy", name, project=project, spec=spec)


def rollout_policy(name: str, *, project: str = PROJECT, **spec: Any) -> dict[str, Any]:
    return document("RolloutPolicy", name, project=project, spec=spec)


def backend(port: int, host: str = "127.0.0.1", **fields: Any) -> dict[str, Any]:
    """One backend of an API, on loopback unless `host` says otherwise."""
    return {"host": host, "port": port, **fields}


def unique(prefix: str) -> str:
    """A name no other test uses, for tests that share a server or a cluster."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
