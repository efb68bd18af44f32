"""Per-API figures from Envoy's `/stats?format=json`: summed over virtual hosts, other stats ignored."""

from __future__ import annotations

from typing import Any

import httpx

from meshplane.agent.admin import admin_app
from meshplane.agent.api_figures import ApiFigures, GatewayStats, api_figures, uptime
from meshplane.agent.figures import Tally
from meshplane.xds.cache import ResourceCache
from meshplane_testing.process import free_port

STATS = {
    "stats": [
        {"name": "vhost.*.route.api.shop.orders.upstream_rq_total", "value": 8},
        {"name": "vhost.*.route.api.shop.orders.upstream_rq_2xx", "value": 6},
        {"name": "vhost.*.route.api.shop.orders.upstream_rq_5xx", "value": 2},
        {"name": "vhost.*.route.api.shop.orders.upstream_rq_503", "value": 2},
        {"name": "vhost.shop.example.com.route.api.shop.orders.upstream_rq_total", "value": 2},
        {"name": "vhost.shop.example.com.route.api.shop.orders.upstream_rq_5xx", "value": 2},
        {"name": "vhost.*.route.api.shop.billing.upstream_rq_total", "value": 0},
        {"name": "cluster.api.shop.orders.0.abcd1234.upstream_rq_total", "value": 99},
        {
            "histograms": {
                "supported_quantiles": [0, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 100],
                "computed_quantiles": [
                    {
                        "name": "vhost.*.route.api.shop.orders.upstream_rq_time",
                        "values": [{"interval": None, "cumulative": v} for v in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)],
                    },
                    {
                        "name": "vhost.shop.example.com.route.api.shop.orders.upstream_rq_time",
                        "values": [{"interval": None, "cumulative": v * 2} for v in range(10)],
                    },
                    {"name": "vhost.*.route.api.shop.billing.upstream_rq_time", "values": [{"interval": None}] * 10},
                ],
            }
        },
    ]
}


def test_an_apis_figures_are_summed_over_its_virtual_hosts() -> None:
    orders = api_figures(STATS)["shop/orders"]

    assert orders.requests == 10
    assert orders.by_class == {"2xx": 6, "5xx": 4}
    assert (orders.errors, orders.error_ratio) == (4, 0.4)


def test_latency_is_the_worst_quantile_over_virtual_hosts() -> None:
    assert api_figures(STATS)["shop/orders"].latency_ms == {"p50": 4.0, "p99": 12.0}


def test_an_api_without_traffic_has_zero_figures_and_no_latency() -> None:
    billing = api_figures(STATS)["shop/billing"]

    assert billing.as_dict() == {"requests": 0, "errors": 0, "errorRatio": 0.0, "byClass": {}, "latencyMs": {}}


def test_stats_of_other_things_give_no_figures() -> None:
    assert api_figures({"stats": [{"name": "http.gateway.downstream_rq_total", "value": 5}]}) == {}


async def admin_answer(envoy_admin: str | None) -> httpx.Response:
    nothing_held: Any = None  # /api_figures reads Envoy's stats only
    transport = httpx.ASGITransport(admin_app(nothing_held, ResourceCache(), envoy_admin=envoy_admin))
    async with httpx.AsyncClient(transport=transport, base_url="http://agent") as client:
        return await client.get("/api_figures")


async def test_the_admin_says_when_it_knows_no_gateway_admin() -> None:
    response = await admin_answer(None)

    assert response.status_code == 404
    assert "no gateway admin" in response.text


async def test_the_admin_says_when_the_gateways_stats_cannot_be_read() -> None:
    response = await admin_answer(f"127.0.0.1:{free_port()}")  # nothing listens there

    assert response.status_code == 502
    assert "cannot be read" in response.text


def test_a_gateway_that_has_not_flushed_its_stats_since_it_started_is_up_for_zero_seconds() -> None:
    """Only used stats are read, and Envoy sets its uptime when it flushes: a gateway just started has none."""
    assert uptime({"stats": [{"name": "server.uptime", "value": 42}]}) == 42
    assert uptime({"stats": []}) == 0


def test_a_gateway_restarted_before_it_first_flushed_its_stats_is_seen_restarted() -> None:
    tally = Tally()
    tally.read(
        "a:1",
        GatewayStats({"shop/orders": ApiFigures(5)}, uptime({"stats": [{"name": "server.uptime", "value": 100}]})),
    )
    tally.read("a:1", GatewayStats({"shop/orders": ApiFigures(6)}, uptime({"stats": []})))  # counted more already
    assert tally.totals()["shop/orders"].requests == 11
