"""The cluster's own APIs: API CRs made in its Kubernetes (kubectl, a local operator), not delivered.

The gateways serve them as the cluster has them, with no round trip to the control plane, so the data
plane stays useful on its own; they are kept in the local state like delivered objects, so they are
served again after a restart before Kubernetes or the control plane answers.
"""

from __future__ import annotations

import hashlib

from meshplane.agent.state import HeldResource, LocalState
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import InvalidObject, Resource
from meshplane.model.wire import from_message, to_message
from meshplane.observability.logging import get_logger

log = get_logger("meshplane.agent.local")

_API = REGISTRY.get("API")
STATE_KEY = f"cluster-local/{_API.type_url}"
"""Where the state keeps them: apart from delivered objects, whose versions go back to the control plane."""


class LocalAPIs:
    """The cluster's own APIs by name (project/name), each at a version derived from its content."""

    def __init__(self, state: LocalState, objects: dict[str, Resource]):
        self.state = state
        self.objects = objects

    @classmethod
    def load(cls, state: LocalState) -> LocalAPIs:
        objects = {}
        for name, held in state.resources(STATE_KEY).items():
            try:
                objects[name] = from_message(_API, _API.message.FromString(held.body))  # type: ignore[misc]
            except (InvalidObject, ValueError) as exc:
                log.error("kept local API no longer validates; skipped", name=name, error=str(exc))
        return cls(state, objects)

    def versions(self) -> dict[str, str]:
        return self.state.versions(STATE_KEY)

    async def keep(self, name: str, api: Resource | None) -> bool:
        """Hold `api` as the cluster's API `name`, or drop it (None); whether that changed anything."""
        if api is None:
            if name not in self.objects:
                return False
            await self.state.apply(STATE_KEY, [], [name])
            del self.objects[name]
            return True
        body = to_message(_API, api).SerializeToString(deterministic=True)
        version = f"local-{hashlib.sha256(body).hexdigest()[:16]}"
        if self.versions().get(name) == version:
            return False
        await self.state.apply(STATE_KEY, [HeldResource(name, version, body)], [])
        self.objects[name] = api
        return True
