"""What the enforcer holds from its agent, and the snapshot it checks requests against."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from meshplane.dataplane import ENFORCER_API_TYPE, ENFORCER_APPLICATION_TYPE, ENFORCER_SUBSCRIPTION_TYPE
from meshplane.enforcer.resources import EnforcerMessage, InvalidResource, decode
from meshplane.enforcer.snapshot import Indexed, Snapshot, index_apis, index_keys, index_subscriptions
from meshplane.observability.logging import get_logger
from meshplane.observability.metrics import ENFORCER_SKIPPED, ENFORCER_UPDATES, short_type
from meshplane.xds.client import DeltaUpdate, UpdateRejected

log = get_logger("meshplane.enforcer")

# Each type feeds one table of the snapshot, so an update rebuilds only that table.
_TABLES: dict[str, tuple[str, Callable[[Iterable[Any]], Indexed]]] = {
    ENFORCER_API_TYPE: ("apis", index_apis),
    ENFORCER_APPLICATION_TYPE: ("keys", index_keys),
    ENFORCER_SUBSCRIPTION_TYPE: ("subscriptions", index_subscriptions),
}


class Held(NamedTuple):
    version: str
    message: EnforcerMessage


class EnforcerState:
    """Resources by type and name as the agent sent them, and the snapshot built from them.

    An update is taken around what in it the enforcer cannot use: a malformed resource keeps the version
    held before it (or none), keys sharing a digest are left out, and everything else is served. What was
    left out is logged, counted and sent back as the NACK's detail; the agent's xDS server then offers the
    next version of those resources, never the refused one again, and the rest stays taken.
    """

    def __init__(self) -> None:
        self._held: dict[str, dict[str, Held]] = {type_url: {} for type_url in _TABLES}
        self.snapshot = Snapshot()

    def versions(self, type_url: str) -> dict[str, str]:
        """Name -> version held of a type: what a reconnecting stream reports, so only changes come."""
        return {name: held.version for name, held in self._held.get(type_url, {}).items()}

    async def apply(self, update: DeltaUpdate) -> None:
        """Take one delta update; raise UpdateRejected, having taken the rest, when some of it was left out."""
        if update.type_url not in _TABLES:
            raise UpdateRejected(f"{update.type_url} is not an enforcer type")
        kind = short_type(update.type_url)
        table, index = _TABLES[update.type_url]
        held = self._held[update.type_url]
        skipped = []
        for resource in update.upserts:
            try:
                held[resource.name] = Held(resource.version, decode(update.type_url, resource.name, resource.resource))
            except InvalidResource as exc:
                skipped.append(str(exc))
        for name in update.removed:
            held.pop(name, None)
        entries, left_out = index(h.message for h in held.values())
        skipped += left_out
        self.snapshot = dataclasses.replace(self.snapshot, **{table: entries})
        ENFORCER_UPDATES.labels(kind, "partial" if skipped else "applied").inc()
        log.info(
            "configuration updated",
            type=kind,
            upserts=len(update.upserts),
            removed=len(update.removed),
            skipped=len(skipped),
            apis=len(self.snapshot.apis),
            keys=len(self.snapshot.keys),
            subscriptions=len(self.snapshot.subscriptions),
        )
        if skipped:
            ENFORCER_SKIPPED.labels(kind).inc(len(skipped))
            for reason in skipped:
                log.warning("left out of the configuration", type=kind, reason=reason)
            raise UpdateRejected("; ".join(skipped))
