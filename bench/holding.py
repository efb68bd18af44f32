"""Clients that hold what the server sends them, as an agent does, for the benchmarks that take a server away.

Each keeps every resource it was sent per type URL and tells every new stream what it has
(initial_resource_versions). Once it holds all its APIs it is ready; on each later stream it tells when the
stream has given it back exactly the APIs it held when the stream began (`synced`), and what that stream
sent it (`traffic`): an upsert of a name at the version it already held is an object resent. With a
watched API, each new version of it that arrives is timed (Tally.got), for a fan-out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import discovery_pb2

from bench.common import distribution
from bench.fleet import Report, Tally, WorkerPlan
from meshplane.model.registry import REGISTRY
from meshplane.xds.client import DeltaClient, DeltaUpdate

API_TYPE = REGISTRY.get("API").type_url
TYPE_URLS = [info.type_url for info in REGISTRY.delivered()]


class Holder:
    """One client's copy of what the server sent it, per type URL, and what reached it on its later streams."""

    def __init__(self, cluster: str, plan: WorkerPlan, tally: Tally, watched: str | None) -> None:
        self._cluster = cluster
        self._expected = plan.expected
        self._tally = tally
        self._watched = watched
        self._held: dict[str, dict[str, discovery_pb2.Resource]] = {url: {} for url in TYPE_URLS}
        self._streams = 0
        # The stream on which all APIs had arrived (later ones are after the server went), and the API versions
        # held when the current later stream began: what that stream must leave the client holding.
        self._ready_on = 0
        self._before: dict[str, str] | None = None
        self._attempts: list[float] = []
        self._synced = False

    def versions(self, type_url: str) -> dict[str, str]:
        """What the client holds of a type, as it tells a new stream (initial_resource_versions)."""
        if type_url == TYPE_URLS[0] and self._before is not None:
            self._attempts.append(time.time())  # DeltaClient asks for the first type first on each attempt
        return {name: resource.version for name, resource in self._held[type_url].items()}

    async def connected(self) -> None:
        self._streams += 1
        if self._before is not None:
            self._before = self._api_versions()

    def _api_versions(self) -> dict[str, str]:
        return {name: resource.version for name, resource in self._held[API_TYPE].items()}

    async def update(self, update: DeltaUpdate) -> None:
        at = time.time()
        held = self._held[update.type_url]
        later = self._before is not None and self._streams > self._ready_on
        if later:
            resent = sum(1 for r in update.upserts if r.name in held and held[r.name].version == r.version)
            response = discovery_pb2.DeltaDiscoveryResponse(
                type_url=update.type_url,
                resources=update.upserts,
                removed_resources=update.removed,
                nonce=update.nonce,
            )
            self._tally.send("traffic", response.ByteSize(), resent, len(update.upserts) - resent, len(update.removed))
        for resource in update.upserts:
            previous = held.get(resource.name)
            held[resource.name] = resource
            if resource.name == self._watched and (previous is None or previous.version != resource.version):
                self._tally.got(resource.version, at, resource.ByteSize())
        for name in update.removed:
            held.pop(name, None)
        if update.type_url != API_TYPE:
            return
        if self._before is None:
            if len(held) >= self._expected:
                self._before, self._ready_on = self._api_versions(), self._streams
                self._tally.ready(self._cluster)
        elif later and not self._synced and self._api_versions() == self._before:
            self._synced = True
            self._tally.send("synced", self._cluster, at, tuple(self._attempts))


async def holding_client(
    cluster: str, shared: grpc.aio.Channel, plan: WorkerPlan, tally: Tally, *, watched: str | None = None
) -> None:
    """Hold one delta ADS stream as `cluster` like an agent, resuming from what it holds on every new stream."""
    # The server goes on purpose: a refused stream is expected, not worth a warning per attempt.
    logging.getLogger("meshplane.xds.client").setLevel(logging.ERROR)
    holder = Holder(cluster, plan, tally, watched)
    client = DeltaClient(
        lambda: shared,
        base_pb2.Node(id=cluster, cluster=cluster),
        TYPE_URLS,
        initial_versions=holder.versions,
        on_update=holder.update,
        on_connected=holder.connected,
    )
    await client.run()


class Aftermath:
    """The clients' reports once the server went: when each was in sync again (and its attempts), and what
    they were sent."""

    def __init__(self, launched: float) -> None:
        self._launched = launched
        self.synced: dict[str, tuple[float, Sequence[float]]] = {}
        self.responses = self.size = self.resent = self.changed = self.removed = 0

    def take(self, report: Report) -> None:
        if report[0] == "synced":
            _, _, cluster, at, attempts = report
            if at < self._launched:
                raise RuntimeError(f"{cluster} lost its stream and resynced before the server was killed")
            self.synced[cluster] = (at, attempts)
        elif report[0] == "traffic":
            _, _, size, resent, changed, removed = report
            self.responses += 1
            self.size += size
            self.resent += resent
            self.changed += changed
            self.removed += removed
        elif report[0] != "got":
            raise RuntimeError(f"unexpected report once the server went: {report!r}")

    def figures(self, ready_at: float) -> dict[str, Any]:
        """Times from the launch (or the kill): each client in sync, and its last stream attempt (the one that
        synced)."""
        in_sync = [at - self._launched for at, _ in self.synced.values()]
        attempts = [attempts for _, attempts in self.synced.values()]
        return {
            "all_in_sync_s": round(max(in_sync), 2),
            "in_sync_s": distribution(in_sync),
            "last_attempt_s": distribution([a[-1] - self._launched for a in attempts if a]),
            "attempts_per_agent": distribution([len(a) for a in attempts], 0),
            # Streams refused (or not yet connectable) while a server already answered /readyz.
            "agents_retrying_after_ready": sum(1 for a in attempts if sum(t >= ready_at for t in a) > 1),
        }

    def traffic(self) -> dict[str, int]:
        return {
            "responses": self.responses,
            "bytes_sent": self.size,
            "objects_resent": self.resent,
            "objects_changed": self.changed,
            "objects_removed": self.removed,
        }
