"""ServiceEndpoint: a Kubernetes Service of a data-plane cluster, as that cluster's agent reports it.

Only the server writes these (from its agents' reports), so the shape follows Kubernetes' own Service
fields rather than anything a user would type.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import Field

from meshplane.model.base import WireModel
from meshplane.model.kinds import EastWestGateway, IngressAddress, Port
from meshplane.model.meta import Name

CLUSTER_LABEL = "meshplane.io/cluster"
"""Added to every ServiceEndpoint's labels, so that `?labelSelector=meshplane.io/cluster=edge-1` lists one cluster's."""


class ServicePort(WireModel):
    name: str | None = None
    port: Port
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    target_port: int | str | None = None
    """The pods' port: a number, or the name of a container port."""
    app_protocol: str | None = Field(default=None, max_length=253)
    """What the port speaks (`kubernetes.io/h2c`, `kubernetes.io/ws`, ...): how a gateway connects to it."""


class ServiceEndpointSpec(WireModel):
    """A Service as its cluster has it; the Service's own labels are the object's labels."""

    cluster: Name
    namespace: Name
    service: Name
    ports: list[ServicePort] = Field(default_factory=list)
    cluster_ips: list[str] = Field(default_factory=list, alias="clusterIPs")
    """Empty for a headless or ExternalName service."""
    east_west_gateway: EastWestGateway | None = None
    """Where other clusters reach this cluster's services, when its agent is told."""
    load_balancer: list[IngressAddress] | None = None
    """The Service's `status.loadBalancer.ingress` (IPs or hostnames); absent while it has none. The ingress
    gateway's are the cluster's ingress addresses where its Cluster object declares none."""

    def port(self, number: int) -> ServicePort | None:
        return next((port for port in self.ports if port.port == number), None)


def endpoint_name(cluster: str, namespace: str, service: str) -> str:
    """`<cluster>-<namespace>-<service>-<digest>`: a DNS label (cut to fit) that names one service of one
    cluster. The digest is always there, since dashes inside the parts would otherwise make two services
    (`a-b` in `c`, `a` in `b-c`) share a name."""
    digest = hashlib.sha256(f"{cluster}/{namespace}/{service}".encode()).hexdigest()[:8]
    readable = f"{cluster}-{namespace}-{service}"[: 63 - len(digest) - 1].rstrip("-")
    return f"{readable}-{digest}"
