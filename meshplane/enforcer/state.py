"""What the enforcer holds from its agent, and the snapshot it checks requests against."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from meshplane.dataplane import ENFORCER_API_TYPE, ENFORCER_APPLICATION_TYPE, ENFORCER_SUBSCRIPTION_TYPE
from meshplane.enforcer.resources import EnforcerMessage, decode
from meshplane.enforcer.snapshot import Snapshot, index_apis, index_keys, index_subscriptions
from meshplane.observability.logging import get_logger
from meshplane.observability.metrics import ENFORCER_UPDATES, short_type
from meshplane.xds.client import DeltaUpdate, UpdateRejected

log = get_logger("meshplane.enforcer")

# Each type feeds one table of the snapshot, so an update rebuilds only that table.
_TABLES: dict[str, tuple[str, Callable[[Iterable[Any]], Mapping[Any, Any]]]] = {
    ENFORCER_API_TYPE: ("apis", index_apis),
    ENFORCER_APPLICATION_TYPE: ("keys", index_keys),
    ENFORCER_SUBSCRIPTION_TYPE: ("subscriptions", index_subscriptions),
}


class Held(NamedTuple):
    version: str
    message: EnforcerMessage


class EnforcerState:
    """Resources by type and name as the agent sent them, and the snapshot built from them.

    An update is checked whole before any of it is kept: a bad resource refuses the update (a NACK)
    and the enforcer goes on with what it had.
    """

    def __init__(self) -> None:
        self._held: dict[str, dict[str, Held]] = {type_url: {} for type_url in _TABLES}
        self.snapshot = Snapshot()

    def versions(self, type_url: str) -> dict[str, str]:
        """Name -> version held of a type: what a reconnecting stream reports, so only changes come."""
        return {name: held.version for name, held in self._held.get(type_url, {}).items()}

    async def apply(self, update: DeltaUpdate) -> None:
        """Take one delta update, or raise UpdateRejected and keep everything as it was."""
        if update.type_url not in _TABLES:
            raise UpdateRejected(f"{update.type_url} is not an enforcer type")
        kind = short_type(update.type_url)
        table, index = _TABLES[update.type_url]
        held = dict(self._held[update.type_url])
        try:
            for resource in update.upserts:
                held[resource.name] = Held(resource.version, decode(update.type_url, resource.name, resource.resource))
            for name in update.removed:
                held.pop(name, None)
            snapshot = dataclasses.replace(self.snapshot, **{table: index(h.message for h in held.values())})
        except ValueError as exc:  # an InvalidResource, or two keys with one digest
            ENFORCER_UPDATES.labels(kind, "rejected").inc()
            raise UpdateRejected(str(exc)) from None
        self._held[update.type_url] = held
        self.snapshot = snapshot
        ENFORCER_UPDATES.labels(kind, "applied").inc()
        log.info(
            "configuration updated",
            type=kind,
            upserts=len(update.upserts),
            removed=len(update.removed),
            apis=len(snapshot.apis),
            keys=len(snapshot.keys),
            subscriptions=len(snapshot.subscriptions),
        )
