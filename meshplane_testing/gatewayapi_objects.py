"""Gateway API objects for tests, as the API server serves them, and a state around them."""

from __future__ import annotations

from typing import Any

from meshplane.gatewayapi.state import (
    CONTROLLER_NAME,
    GROUP,
    BackendService,
    Endpoint,
    GatewayApiState,
    KubeObject,
    ServicePort,
)

API_VERSION = f"{GROUP}/v1"
CLASS = "meshplane"


def _meta(name: str, namespace: str | None, created: str, generation: int) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "generation": generation, "creationTimestamp": created}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def gateway_class(name: str = CLASS, controller: str = CONTROLLER_NAME) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "GatewayClass",
        "metadata": _meta(name, None, "2026-01-01T00:00:00Z", 1),
        "spec": {"controllerName": controller},
    }


def listener(name: str, port: int, protocol: str = "HTTP", hostname: str | None = None, **extra: Any) -> dict:
    entry: dict[str, Any] = {"name": name, "port": port, "protocol": protocol, **extra}
    if hostname is not None:
        entry["hostname"] = hostname
    return entry


def gateway(
    name: str, *listeners: dict[str, Any], namespace: str = "default", class_name: str = CLASS, generation: int = 1
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Gateway",
        "metadata": _meta(name, namespace, "2026-01-01T00:00:00Z", generation),
        "spec": {"gatewayClassName": class_name, "listeners": list(listeners)},
    }


def backend(name: str, port: int = 8080, weight: int | None = None, **extra: Any) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": name, "port": port, **extra}
    if weight is not None:
        ref["weight"] = weight
    return ref


def rule(*backends: dict[str, Any], matches: list[dict] | None = None, **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"backendRefs": list(backends), **extra}
    if matches is not None:
        entry["matches"] = matches
    return entry


def route(
    name: str,
    *rules: dict[str, Any],
    kind: str = "HTTPRoute",
    namespace: str = "default",
    parents: list[dict[str, Any]] | None = None,
    hostnames: list[str] | None = None,
    created: str = "2026-01-01T00:00:00Z",
    generation: int = 1,
) -> dict[str, Any]:
    body: dict[str, Any] = {"parentRefs": parents or [{"name": "gw"}], "rules": list(rules)}
    if hostnames is not None:
        body["hostnames"] = hostnames
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": _meta(name, namespace, created, generation),
        "spec": body,
    }


def service(*addresses: tuple[str, int], port: int = 8080, **port_extra: Any) -> BackendService:
    """A Service with one unnamed port whose ready endpoints are `addresses` (address, target port)."""
    return BackendService(
        ports=(ServicePort(name="", port=port, **port_extra),),
        endpoints=tuple(Endpoint(address=address, ports={"": target}) for address, target in addresses),
    )


def reference_grant(namespace: str, from_kind: str, from_namespace: str, to_kind: str, **to: Any) -> dict:
    return {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": _meta(f"allow-{from_namespace}", namespace, "2026-01-01T00:00:00Z", 1),
        "spec": {
            "from": [{"group": GROUP, "kind": from_kind, "namespace": from_namespace}],
            "to": [{"group": "", "kind": to_kind, **to}],
        },
    }


def keyed(*objects: KubeObject) -> dict[tuple[str, str], KubeObject]:
    return {(obj["metadata"].get("namespace", ""), obj["metadata"]["name"]): obj for obj in objects}


def state(
    *objects: KubeObject,
    services: dict[tuple[str, str], BackendService] | None = None,
    addresses: dict[tuple[str, str], str] | None = None,
    **extra: Any,
) -> GatewayApiState:
    """A state holding the objects by kind, with the class `meshplane` of our controller unless one is given."""
    by_kind: dict[str, list[KubeObject]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    classes = by_kind.get("GatewayClass") or [gateway_class()]
    return GatewayApiState(
        gateway_classes=keyed(*classes),
        gateways=keyed(*by_kind.get("Gateway", [])),
        http_routes=keyed(*by_kind.get("HTTPRoute", [])),
        grpc_routes=keyed(*by_kind.get("GRPCRoute", [])),
        reference_grants=keyed(*by_kind.get("ReferenceGrant", [])),
        services=services or {},
        addresses=addresses if addresses is not None else {("default", "gw"): "127.0.0.1"},
        **extra,
    )
