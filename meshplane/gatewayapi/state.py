"""What `program` takes and gives: the cluster's Gateway API objects as the agent watched them, and the Envoy
resources and statuses they come to."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import Message

CONTROLLER_NAME = "meshplane.io/gateway-controller"
"""The `spec.controllerName` of the GatewayClasses this agent serves."""
GROUP = "gateway.networking.k8s.io"
TRANSITION_PLACEHOLDER = "1970-01-01T00:00:00Z"
"""The `lastTransitionTime` of every condition `program` computes: `program` has no clock, so the status
writer puts the time in, keeping the time already written when the condition's status is unchanged."""

ObjectKey = tuple[str, str]
"""(namespace, name); a GatewayClass, cluster-scoped, has the namespace ''."""
StatusKey = tuple[str, str, str]
"""(kind, namespace, name) of an object whose status is written."""
KubeObject = Mapping[str, Any]
"""A Kubernetes object as the API server serves it (JSON)."""


@dataclass(frozen=True)
class ServicePort:
    name: str
    port: int
    protocol: str = "TCP"
    app_protocol: str | None = None


@dataclass(frozen=True)
class Endpoint:
    """One ready address of a Service's EndpointSlices, with its ports by the Service port's name ('' for an
    unnamed port)."""

    address: str
    ports: Mapping[str, int]


@dataclass(frozen=True)
class BackendService:
    """A Service a route may name in `backendRefs`, with its EndpointSlices' ready endpoints."""

    ports: tuple[ServicePort, ...] = ()
    endpoints: tuple[Endpoint, ...] = ()


@dataclass(frozen=True)
class CertificatePair:
    """The PEM chain and key of a `kubernetes.io/tls` Secret a listener names."""

    certificate: str
    private_key: str


@dataclass(frozen=True)
class GatewayApiState:
    """Everything `program` reads, each kind by (namespace, name)."""

    gateway_classes: Mapping[ObjectKey, KubeObject] = field(default_factory=dict)
    gateways: Mapping[ObjectKey, KubeObject] = field(default_factory=dict)
    http_routes: Mapping[ObjectKey, KubeObject] = field(default_factory=dict)
    grpc_routes: Mapping[ObjectKey, KubeObject] = field(default_factory=dict)
    reference_grants: Mapping[ObjectKey, KubeObject] = field(default_factory=dict)
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Each namespace's labels, for listeners' `allowedRoutes.namespaces.selector`."""
    services: Mapping[ObjectKey, BackendService] = field(default_factory=dict)
    secrets: Mapping[ObjectKey, CertificatePair] = field(default_factory=dict)
    """The TLS Secrets read so far; a named Secret missing here is an invalid certificate reference."""
    addresses: Mapping[ObjectKey, str] = field(default_factory=dict)
    """The address each Gateway of ours is served on (allocated by the agent); one without is not programmed."""
    controller: str = CONTROLLER_NAME
    unavailable_ports: Mapping[ObjectKey, frozenset[int]] = field(default_factory=dict)
    """Ports of a Gateway's address the agent cannot serve (taken by something else): its listeners there are
    not accepted (PortUnavailable)."""


@dataclass(frozen=True)
class Programmed:
    """What the state comes to: the Envoy resources to serve beside the agent's own (names start `gwapi/`, so
    they never meet the translator's), the status of every object of ours, and the Secrets wanted."""

    resources: Mapping[str, Mapping[str, Message]] = field(default_factory=dict)
    """type URL -> resource name -> message (listeners, routes, clusters, endpoints, secrets), every type
    present even when empty. Each Gateway's listeners bind its address from `addresses`; a route's share
    that cannot be resolved names the cluster `gwapi/unresolved-backend`, never defined, so Envoy answers it
    500."""
    statuses: Mapping[StatusKey, Mapping[str, Any]] = field(default_factory=dict)
    """The whole `status` each object should have. For a route, `status.parents` holds only the entries of
    our controller; the writer keeps other controllers' entries as they are."""
    secrets_wanted: frozenset[ObjectKey] = frozenset()
