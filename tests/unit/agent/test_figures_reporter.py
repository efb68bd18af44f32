"""The agent's figures reports: summed over its gateways, sent only when changed, monotonic across restarts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc
import httpx
import pytest

from meshplane.agent.api_figures import ApiFigures, GatewayStats
from meshplane.agent.figures import Counts, FiguresReporter, Tally
from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc
from meshplane_testing.process import free_port


def stats(uptime: int | None = 100, **apis: tuple[int, int]) -> GatewayStats:
    """A gateway reading: per API (`project__name`) its (requests, 5xx)."""
    figures = {
        api.replace("__", "/"): ApiFigures(requests, {"2xx": requests - errors, "5xx": errors})
        for api, (requests, errors) in apis.items()
    }
    return GatewayStats(figures, uptime)


def counts(requests: int, errors: int) -> Counts:
    return Counts(requests, {"2xx": requests - errors, "5xx": errors})


def test_the_tally_sums_an_api_over_the_clusters_gateways() -> None:
    tally = Tally()
    tally.read("gw-a", stats(shop__orders=(10, 2), shop__users=(1, 0)))
    tally.read("gw-b", stats(shop__orders=(5, 1)))

    assert tally.totals() == {"shop/orders": counts(15, 3), "shop/users": counts(1, 0)}


def test_a_gateway_restart_keeps_the_counts_monotonic() -> None:
    tally = Tally()
    tally.read("gw-a", stats(100, shop__orders=(10, 2)))
    tally.read("gw-b", stats(100, shop__orders=(5, 1)))
    tally.read("gw-a", stats(3, shop__orders=(1, 1)))  # gw-a restarted and counted one more

    assert tally.totals() == {"shop/orders": counts(16, 4)}
    tally.read("gw-a", stats(8, shop__orders=(4, 1)))
    assert tally.totals() == {"shop/orders": counts(19, 4)}


def test_a_restart_seen_by_its_uptime_alone_still_carries_the_counts() -> None:
    tally = Tally()
    tally.read("gw-a", stats(100, shop__orders=(10, 2)))
    tally.read("gw-a", stats(2, shop__orders=(12, 2)))  # restarted and already counted more than before

    assert tally.totals() == {"shop/orders": counts(22, 4)}


def test_an_api_gone_from_a_gateway_keeps_what_it_counted() -> None:
    tally = Tally()
    tally.read("gw-a", stats(100, shop__orders=(10, 2), shop__users=(3, 0)))
    tally.read("gw-a", stats(105, shop__orders=(11, 2)))

    assert tally.totals() == {"shop/orders": counts(11, 2), "shop/users": counts(3, 0)}


@dataclass
class RecordingControlPlane(control_plane_pb2_grpc.ControlPlaneServicer):
    reports: list[control_plane_pb2.ReportFiguresRequest] = field(default_factory=list)
    refuse: bool = False

    async def ReportFigures(
        self, request: control_plane_pb2.ReportFiguresRequest, context: grpc.aio.ServicerContext
    ) -> control_plane_pb2.ReportResponse:
        if self.refuse:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "not now")
        self.reports.append(request)
        return control_plane_pb2.ReportResponse()


@dataclass
class Gateways:
    """What each fake gateway's stats read as now; an address missing from `now` cannot be read."""

    now: dict[str, GatewayStats] = field(default_factory=dict)

    async def read(self, admin: str) -> GatewayStats:
        if admin not in self.now:
            raise httpx.ConnectError(f"connection refused: {admin}")
        return self.now[admin]


@pytest.fixture
async def control_plane() -> AsyncIterator[tuple[RecordingControlPlane, grpc.aio.Channel]]:
    servicer = RecordingControlPlane()
    server = grpc.aio.server()
    control_plane_pb2_grpc.add_ControlPlaneServicer_to_server(servicer, server)
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield servicer, channel
    await channel.close()
    await server.stop(grace=0)


def reported(request: control_plane_pb2.ReportFiguresRequest) -> dict[str, tuple[int, int, dict[str, int]]]:
    return {f"{f.project}/{f.name}": (f.requests, f.errors, dict(f.by_class)) for f in request.figures}


async def test_figures_are_reported_summed_and_only_when_they_changed(
    control_plane: tuple[RecordingControlPlane, grpc.aio.Channel],
) -> None:
    servicer, channel = control_plane
    gateways = Gateways({"a:1": stats(shop__orders=(10, 2)), "b:1": stats(shop__orders=(5, 0))})
    reporter = FiguresReporter("edge-1", ["a:1", "b:1"], lambda: channel, 0.3, read=gateways.read)

    assert await reporter.report_once() is True
    assert await reporter.report_once() is False  # nothing changed: nothing sent
    gateways.now["b:1"] = stats(shop__orders=(6, 1))
    assert await reporter.report_once() is True

    assert [reported(r) for r in servicer.reports] == [
        {"shop/orders": (15, 2, {"2xx": 13, "5xx": 2})},
        {"shop/orders": (16, 3, {"2xx": 13, "5xx": 3})},
    ]
    first, second = servicer.reports
    assert first.cluster == "edge-1" and first.sampled_at.ToDatetime() < second.sampled_at.ToDatetime()
    assert first.idempotency_key != second.idempotency_key


async def test_an_unreadable_gateway_is_skipped_never_zeroed_and_logged_once(
    control_plane: tuple[RecordingControlPlane, grpc.aio.Channel], capsys: pytest.CaptureFixture[str]
) -> None:
    servicer, channel = control_plane
    gateways = Gateways({"a:1": stats(shop__orders=(10, 2)), "b:1": stats(shop__orders=(5, 0))})
    reporter = FiguresReporter("edge-1", ["a:1", "b:1"], lambda: channel, 0.3, read=gateways.read)
    await reporter.report_once()

    del gateways.now["b:1"]
    gateways.now["a:1"] = stats(shop__orders=(11, 2))
    for _ in range(3):
        await reporter.report_once()

    assert [reported(r)["shop/orders"][:2] for r in servicer.reports] == [(15, 2), (16, 2)]
    assert capsys.readouterr().out.count("gateway stats cannot be read") == 1


async def test_figures_the_server_did_not_take_are_sent_again(
    control_plane: tuple[RecordingControlPlane, grpc.aio.Channel],
) -> None:
    servicer, channel = control_plane
    gateways = Gateways({"a:1": stats(shop__orders=(10, 2))})
    reporter = FiguresReporter("edge-1", ["a:1"], lambda: channel, 0.3, read=gateways.read)
    servicer.refuse = True
    assert await reporter.report_once() is False

    servicer.refuse = False
    assert await reporter.report_once() is True
    assert [reported(r)["shop/orders"][:2] for r in servicer.reports] == [(10, 2)]


async def test_an_api_served_that_no_request_reached_is_reported_with_zero_figures(
    control_plane: tuple[RecordingControlPlane, grpc.aio.Channel],
) -> None:
    servicer, channel = control_plane
    gateways = Gateways({"a:1": stats(shop__orders=(10, 2))})  # Envoy leaves out the stats nothing counted in
    served = ["shop/orders", "shop/quiet"]
    reporter = FiguresReporter("edge-1", ["a:1"], lambda: channel, 0.3, read=gateways.read, served=lambda: served)

    assert await reporter.report_once() is True
    served.append("shop/new")
    assert await reporter.report_once() is True  # a newly served API has figures at once

    assert [reported(r) for r in servicer.reports] == [
        {"shop/orders": (10, 2, {"2xx": 8, "5xx": 2}), "shop/quiet": (0, 0, {})},
        {"shop/new": (0, 0, {}), "shop/orders": (10, 2, {"2xx": 8, "5xx": 2}), "shop/quiet": (0, 0, {})},
    ]
