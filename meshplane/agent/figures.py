"""Sends the cluster's per-API request figures up, summed over its gateways, whenever they changed.

The counts are cumulative and stay monotonic across a gateway's restart: a gateway that restarted (its
uptime went down) or whose counts of an API went down has the counts it had before carried, and added to
what it counts from then on. A gateway whose stats cannot be read is left out of that round's reading and
keeps its last counts in the sum: it is never zeroed. What the agent carries lives in its memory only: an
agent restarted after one of its gateways was, reports lower counts, and the server counts a reset (see
`ApiFigureRecord.resets`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import grpc
import httpx

from meshplane.agent.api_figures import ApiFigures, GatewayStats, read_gateway_stats
from meshplane.observability.logging import get_logger
from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc

log = get_logger("meshplane.agent.figures")


@dataclass(frozen=True)
class Counts:
    """An API's cumulative counts: requests sent upstream and answers by status class."""

    requests: int = 0
    by_class: Mapping[str, int] = field(default_factory=dict)

    @property
    def errors(self) -> int:
        return self.by_class.get("5xx", 0)

    def __add__(self, other: Counts) -> Counts:
        classes = {c: self.by_class.get(c, 0) + other.by_class.get(c, 0) for c in {*self.by_class, *other.by_class}}
        return Counts(self.requests + other.requests, dict(sorted(classes.items())))

    def below(self, earlier: Counts) -> bool:
        """Whether any count is lower than it was in `earlier`: the gateway started counting again."""
        return self.requests < earlier.requests or any(self.by_class.get(c, 0) < n for c, n in earlier.by_class.items())

    @classmethod
    def of(cls, figures: ApiFigures) -> Counts:
        return cls(figures.requests, dict(sorted(figures.by_class.items())))


@dataclass
class _Gateway:
    last: dict[str, Counts] = field(default_factory=dict)
    """What the gateway counted at its last reading, per API (`project/name`)."""
    carried: dict[str, Counts] = field(default_factory=dict)
    """What it had counted before it last started counting again, per API."""
    uptime: int | None = None


class Tally:
    """The cluster's figures per API: each gateway's, summed, and kept monotonic across restarts."""

    def __init__(self) -> None:
        self._gateways: dict[str, _Gateway] = {}

    def read(self, gateway: str, stats: GatewayStats) -> None:
        """Take a reading of `gateway`'s stats."""
        known = self._gateways.setdefault(gateway, _Gateway())
        now = {api: Counts.of(figures) for api, figures in stats.figures.items()}
        restarted = known.uptime is not None and stats.uptime is not None and stats.uptime < known.uptime
        for api, before in known.last.items():
            if restarted or now.get(api, Counts()).below(before):
                known.carried[api] = known.carried.get(api, Counts()) + before
        known.last = now
        known.uptime = stats.uptime

    def totals(self) -> dict[str, Counts]:
        """Per API, what every gateway counted: carried counts and its last reading."""
        totals: dict[str, Counts] = {}
        for gateway in self._gateways.values():
            for counts in (gateway.carried, gateway.last):
                for api, count in counts.items():
                    totals[api] = totals.get(api, Counts()) + count
        return dict(sorted(totals.items()))


StatsReader = Callable[[str], Awaitable[GatewayStats]]


def figures_request(cluster: str, totals: Mapping[str, Counts], at: datetime) -> control_plane_pb2.ReportFiguresRequest:
    request = control_plane_pb2.ReportFiguresRequest(
        cluster=cluster, idempotency_key=f"{cluster}/figures/{at.isoformat()}"
    )
    request.sampled_at.FromDatetime(at)
    for api, counts in totals.items():
        project, _, name = api.partition("/")
        request.figures.add(
            project=project, name=name, requests=counts.requests, errors=counts.errors, by_class=counts.by_class
        )
    return request


class FiguresReporter:
    """Every `interval` seconds, reads the gateways whose Envoy admins are `admins` and reports the figures
    to the server when they differ from the last ones it accepted."""

    def __init__(
        self,
        cluster: str,
        admins: Sequence[str],
        channel: Callable[[], grpc.aio.Channel],
        interval: float,
        read: StatsReader = read_gateway_stats,
        served: Callable[[], Iterable[str]] = tuple,
    ):
        """`served`: the APIs (`project/name`) the gateways serve now; one no request reached has no stats
        to read (see `api_figures.STATS_QUERY`) and is reported with zero figures."""
        self.cluster = cluster
        self.admins = list(dict.fromkeys(admins))
        self.channel = channel
        self.interval = interval
        self.read = read
        self.served = served
        self.tally = Tally()
        self.accepted: dict[str, Counts] = {}
        """The figures of the last report the server took."""
        self._unreadable: set[str] = set()
        self._failing = False

    async def run(self) -> None:
        while True:
            await self.report_once()
            await asyncio.sleep(self.interval)

    async def report_once(self) -> bool:
        """Read every gateway and report what changed; True when a report was sent and taken."""
        at = datetime.now(UTC)
        await self._read_gateways()
        counted = self.tally.totals()
        totals = dict(sorted({**{api: Counts() for api in self.served()}, **counted}.items()))
        if totals == self.accepted:
            return False
        stub = control_plane_pb2_grpc.ControlPlaneStub(self.channel())
        try:
            await stub.ReportFigures(figures_request(self.cluster, totals, at), timeout=10)
        except grpc.aio.AioRpcError as exc:
            if not self._failing:
                log.warning("figures report not taken; retrying", code=exc.code().name, detail=exc.details())
            self._failing = True
            return False
        if self._failing:
            log.info("figures reports taken again")
        self._failing = False
        self.accepted = totals
        return True

    async def _read_gateways(self) -> None:
        for admin in self.admins:
            try:
                stats = await self.read(admin)
            except (httpx.HTTPError, ValueError) as exc:  # unreachable, or an answer that is not stats
                if admin not in self._unreadable:
                    log.warning(
                        "gateway stats cannot be read; its figures stay as last read", admin=admin, error=str(exc)
                    )
                self._unreadable.add(admin)
                continue
            if admin in self._unreadable:
                log.info("gateway stats readable again", admin=admin)
                self._unreadable.discard(admin)
            self.tally.read(admin, stats)
