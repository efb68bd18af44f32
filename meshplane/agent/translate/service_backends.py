"""API backends that name a Kubernetes Service (`service: orders.shop`), given an address in this cluster.

With the agent's watch of the cluster's services, a service with a cluster IP is reached at that IP (an
EDS cluster: no DNS between the gateway and the service, and a recreated service moves by an endpoint
update); a headless or ExternalName service by its cluster DNS name. A service the cluster does not have,
or a port it does not expose, takes no traffic: the API's other backends share it, and with none left
its routes answer 503 saying why. Without a watch (no Kubernetes, or not listed yet) the cluster DNS
name is all there is, and Envoy resolves it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from meshplane.agent.translate.apis import Api
from meshplane.model.kinds import Backend
from meshplane.model.services import ServiceEndpointSpec

LocalServices = Mapping[tuple[str, str], ServiceEndpointSpec]
"""This cluster's services by (namespace, name)."""


def resolve_services(api: Api, services: LocalServices | None, cluster_domain: str) -> Api:
    """`api` with each serving service backend given its host (and port) here, or taken out of service."""
    if not any(backend.service for _, backend in api.serving):
        return api
    backends, missing = [], []
    for backend in api.spec.backends:
        if backend.service is None or backend.weight == 0:
            backends.append(backend)
            continue
        address = _address(backend, backend.service, services, cluster_domain)
        if isinstance(address, str):
            missing.append(address)
            backends.append(backend.model_copy(update={"weight": 0}))
        else:
            host, port = address
            backends.append(backend.model_copy(update={"host": host, "port": port}))
    spec = api.spec.model_copy(update={"backends": backends})
    unavailable = None if any(backend.weight for backend in backends) else "; ".join(missing)
    return dataclasses.replace(api, spec=spec, unavailable=unavailable)


def service_key(reference: str) -> tuple[str, str]:
    """(namespace, name) of the service a backend names as `<name>.<namespace>`."""
    name, _, namespace = reference.partition(".")
    return namespace, name


def _address(
    backend: Backend, reference: str, services: LocalServices | None, cluster_domain: str
) -> tuple[str, int] | str:
    """(host, port) to send to, or why there is none."""
    namespace, name = service_key(reference)
    dns_name = f"{name}.{namespace}.svc.{cluster_domain}"
    if services is None:
        return dns_name, backend.port
    service = services.get((namespace, name))
    if service is None:
        return f"service {reference} is not in this cluster"
    port = service.port(backend.port)
    if service.ports and port is None:
        return f"service {reference} has no port {backend.port}"
    if service.cluster_ips:
        return service.cluster_ips[0], backend.port
    # Headless: the name resolves to the pods themselves, which listen on the target port.
    target = port.target_port if port is not None and isinstance(port.target_port, int) else backend.port
    return dns_name, target
