"""The Gateway API on the test API server: its standard-channel CRDs, built by `scripts/build-gateway-api`
into `~/.cache/meshplane/gateway-api-<version>/` (the version is `scripts/gateway-api-version`), and helpers to
create its objects and read their status, and a pod network for their backends."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from meshplane.gatewayapi.state import CONTROLLER_NAME, GROUP
from meshplane_testing.envoy import EnvoyProcess, run_envoy
from meshplane_testing.kube import REPO, KubeAPIServer, KubeError, cache_dir
from meshplane_testing.netns import Fabric, Forwarder, NetworkNamespace, network_namespace, start_fabric
from meshplane_testing.process import MissingRequirement, free_port

GATEWAY_API_VERSION = (REPO / "scripts" / "gateway-api-version").read_text().strip()
V1 = f"/apis/{GROUP}/v1"
PLURALS = {
    "GatewayClass": "gatewayclasses",
    "Gateway": "gateways",
    "HTTPRoute": "httproutes",
    "GRPCRoute": "grpcroutes",
    "ReferenceGrant": "referencegrants",
}


def standard_install() -> Path:
    return cache_dir() / f"gateway-api-{GATEWAY_API_VERSION}" / "standard-install.yaml"


def gateway_api_crds() -> list[dict[str, Any]]:
    """The standard channel's CRDs; MissingRequirement until `scripts/build-gateway-api` has run."""
    path = standard_install()
    if not path.is_file():
        raise MissingRequirement(f"{path} is not built (run scripts/build-gateway-api)")
    return [
        doc for doc in yaml.safe_load_all(path.read_text()) if doc and doc.get("kind") == "CustomResourceDefinition"
    ]


def object_path(kind: str, namespace: str, name: str) -> str:
    where = "" if kind == "GatewayClass" else f"/namespaces/{namespace}"
    return f"{V1}{where}/{PLURALS[kind]}/{name}"


def apply(kube: KubeAPIServer, body: Mapping[str, Any]) -> dict[str, Any]:
    """Server-side apply of a Gateway API object (its spec), as a user would."""
    meta = body["metadata"]
    return kube.apply(
        object_path(body["kind"], meta.get("namespace", ""), meta["name"]), {"apiVersion": f"{GROUP}/v1", **body}
    )


def read(kube: KubeAPIServer, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    with kube.client() as client:
        response = client.get(object_path(kind, namespace, name))
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise KubeError(response)
    return response.json()


def write_status(kube: KubeAPIServer, kind: str, namespace: str, name: str, status: Mapping[str, Any]) -> None:
    """Merge a status in, as another controller would."""
    with kube.client() as client:
        response = client.patch(
            f"{object_path(kind, namespace, name)}/status",
            headers={"Content-Type": "application/merge-patch+json"},
            json={"status": dict(status)},
        )
    if response.status_code != 200:
        raise KubeError(response)


def condition(obj: Mapping[str, Any] | None, kind: str) -> dict[str, Any] | None:
    """A condition of an object's status by type."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), None)


def parent_status(route: Mapping[str, Any] | None, controller: str = CONTROLLER_NAME) -> dict[str, Any] | None:
    """A route's `status.parents` entry of `controller`."""
    parents = ((route or {}).get("status") or {}).get("parents") or []
    return next((p for p in parents if p.get("controllerName") == controller), None)


def gateway_class(name: str, controller: str = CONTROLLER_NAME) -> dict[str, Any]:
    return {"kind": "GatewayClass", "metadata": {"name": name}, "spec": {"controllerName": controller}}


def gateway(namespace: str, name: str, class_name: str, port: int, **spec: Any) -> dict[str, Any]:
    listener = {"name": "http", "protocol": "HTTP", "port": port, "allowedRoutes": {"namespaces": {"from": "Same"}}}
    return {
        "kind": "Gateway",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"gatewayClassName": class_name, "listeners": [listener], **spec},
    }


def http_route(namespace: str, name: str, gateway_name: str, service: str, port: int) -> dict[str, Any]:
    return {
        "kind": "HTTPRoute",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {
            "parentRefs": [{"name": gateway_name}],
            "rules": [{"backendRefs": [{"name": service, "port": port}]}],
        },
    }


def backend_service(kube: KubeAPIServer, namespace: str, name: str, port: int, address: str, target: int) -> None:
    """A Service and the EndpointSlice that points it at `address:target` (no controller makes one here)."""
    kube.apply(
        f"/api/v1/namespaces/{namespace}/services/{name}",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"namespace": namespace, "name": name},
            "spec": {"ports": [{"name": "http", "port": port, "targetPort": target}]},
        },
    )
    kube.apply(
        f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices/{name}",
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"namespace": namespace, "name": name, "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": target, "protocol": "TCP"}],
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        },
    )


@dataclass
class PodNetwork:
    """Envoy in a namespace of its own on a fabric, where EndpointSlices' pod addresses (never loopback: the API
    server refuses those) reach the test's processes; the Gateways' addresses reach Envoy from the test."""

    fabric: Fabric
    envoy_namespace: NetworkNamespace
    _forwarders: list[Forwarder] = field(default_factory=list)
    _reached: set[tuple[str, int]] = field(default_factory=set)

    def gateway(self, address: str, port: int) -> None:
        """Let the test reach what Envoy serves at address:port (inside its namespace) at the same address:port."""
        if (address, port) not in self._reached:
            self._forwarders.append(Forwarder(None, (address, port), self.envoy_namespace, (address, port)))
            self._reached.add((address, port))

    def close(self) -> None:
        for forwarder in self._forwarders:
            forwarder.close()


ENVOY_POD_ADDRESS = "10.244.0.2"


@contextlib.contextmanager
def envoy_on_pod_network(tmp_path: Path, xds_port: int) -> Iterator[tuple[PodNetwork, EnvoyProcess]]:
    """A fabric, Envoy on it (its xDS and admin reached across from the test's 127.0.0.1), and the network."""
    admin_port = free_port()
    with start_fabric() as fabric, network_namespace("mp-envoy") as inside:
        fabric.join(inside, ENVOY_POD_ADDRESS)
        network = PodNetwork(fabric, inside)
        network._forwarders += [
            Forwarder(inside, ("127.0.0.1", xds_port), None, ("127.0.0.1", xds_port)),
            Forwarder(None, ("127.0.0.1", admin_port), inside, ("127.0.0.1", admin_port)),
        ]
        try:
            with run_envoy(tmp_path, "gw", xds_port, admin_port=admin_port, namespace=inside) as envoy:
                yield network, envoy
        finally:
            network.close()
