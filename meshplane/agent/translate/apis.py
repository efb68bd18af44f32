"""The translator's view of one API resource: its identity, its spec and the names derived from them."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass

from meshplane.agent.translate.memo import by_identity
from meshplane.model.kinds import APISpec, Backend
from meshplane.model.resource import Resource

ROUTE_FIELDS = frozenset({"weight", "base_path", "timeout", "retries", "host_rewrite"})
"""The fields of a backend that its routes carry, not its Envoy cluster."""


@dataclass(frozen=True)
class Api:
    project: str
    name: str
    spec: APISpec
    unavailable: str | None = None
    """Why no backend can take this API's requests in this cluster (see `service_backends`): its routes say so."""

    @staticmethod
    def of(resource: Resource) -> Api:
        """The view of an API resource; the same one for the same held object, so what is derived from a
        view (its key, its serving backends) is derived once however many rebuilds read it."""
        return _view(resource)

    @functools.cached_property
    def key(self) -> tuple[str, str]:
        return (self.project, self.name)

    def cluster_name(self, index: int) -> str:
        """`api.<project>.<name>.<index>.<upstream>`: project and name are DNS labels (no dots), so this never
        collides across projects. The last part is a digest of what the cluster connects to, so a backend that
        changes becomes a new cluster beside the old one and its routes move to it in one step (see
        agent.gateway); changing the old cluster in place would send requests to the new upstream under the
        old route's path until the routes followed."""
        return f"api.{self.project}.{self.name}.{index}.{upstream_digest(self.spec.backends[index])}"

    @property
    def grpc_target(self) -> str:
        """What proxyless gRPC clients dial, as `xds:///<api>.<project>`; also the name of their listener."""
        return f"{self.name}.{self.project}"

    @property
    def grpc_route_config_name(self) -> str:
        return f"grpc.{self.project}.{self.name}"

    @functools.cached_property
    def serving(self) -> tuple[tuple[int, Backend], ...]:
        """The backends that receive traffic (weight above 0), with their index in the spec."""
        return tuple((index, backend) for index, backend in enumerate(self.spec.backends) if backend.weight > 0)


@by_identity
def _view(resource: Resource) -> Api:
    if not isinstance(resource.spec, APISpec):
        raise TypeError(f"expected an API resource, got {resource.kind} {resource.metadata.name!r}")
    return Api(resource.metadata.project or "", resource.metadata.name, resource.spec)


@by_identity
def upstream_digest(backend: Backend) -> str:
    """8 hex digits naming where a backend's requests go and how (not its share of them, its path, its
    timeouts, retries or Host: the routes hold those). Kept per backend: every route and cluster of a
    held API names it on every rebuild."""
    upstream = backend.model_dump(mode="json", exclude=ROUTE_FIELDS)
    return hashlib.sha256(json.dumps(upstream, sort_keys=True).encode()).hexdigest()[:8]
