"""Delta updates to the limit table: applied whole, or refused whole with the previous limits kept."""

import pytest
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import any_pb2

from meshplane.dataplane import RATELIMIT_CONFIG_TYPE
from meshplane.proto.v1 import rls_conf_pb2
from meshplane.ratelimiter.table import LimitTable
from meshplane.xds.client import DeltaUpdate, UpdateRejected
from meshplane_testing.ratelimit_factories import config, node, policy, update

GOOD = config("shop", node("api", "orders", policy(5)))


async def table_holding(*configs: rls_conf_pb2.RateLimitConfig) -> LimitTable:
    table = LimitTable()
    await table.apply(update(*configs))
    return table


async def test_an_update_replaces_and_removes_configs_by_name() -> None:
    table = await table_holding(GOOD, config("other", node("k", "", policy(1))))
    before = table.versions(RATELIMIT_CONFIG_TYPE)

    await table.apply(update(config("shop", node("api", "orders", policy(9))), removed=["other"]))

    assert set(table.domains) == {"shop"}
    assert table.domains["shop"].root.exact["api", "orders"].limit.requests_per_unit == 9  # type: ignore[union-attr]
    after = table.versions(RATELIMIT_CONFIG_TYPE)
    assert set(after) == {"shop"} and after["shop"] != before["shop"]


@pytest.mark.parametrize(
    "bad",
    [
        config("shop", node("api", "orders", policy(0))),
        config("shop", node("api", "orders", policy(5, 99))),
        rls_conf_pb2.RateLimitConfig(name="again", domain="shop"),
    ],
    ids=["zero-requests", "unknown-unit", "second-config-for-a-domain"],
)
async def test_a_bad_config_is_refused_and_the_previous_limits_stay(bad) -> None:
    table = await table_holding(GOOD)
    domains, versions = table.domains, table.versions(RATELIMIT_CONFIG_TYPE)

    with pytest.raises(UpdateRejected):
        await table.apply(update(config("fine", node("k", "", policy(1))), bad))

    assert table.domains is domains
    assert table.versions(RATELIMIT_CONFIG_TYPE) == versions


async def test_resources_that_are_not_rate_limit_configs_are_refused() -> None:
    table = await table_holding(GOOD)
    foreign = discovery_pb2.Resource(name="x", version="1", resource=any_pb2.Any(type_url="type.googleapis.com/x.Y"))
    garbled = discovery_pb2.Resource(
        name="y", version="1", resource=any_pb2.Any(type_url=RATELIMIT_CONFIG_TYPE, value=b"\xff\xff")
    )

    for resource in (foreign, garbled):
        with pytest.raises(UpdateRejected, match=f"^{resource.name}: "):
            await table.apply(DeltaUpdate(RATELIMIT_CONFIG_TYPE, [resource], [], "n"))
    with pytest.raises(UpdateRejected, match="not subscribed"):
        await table.apply(DeltaUpdate("type.googleapis.com/x.Y", [], [], "n"))

    assert set(table.domains) == {"shop"}


async def test_versions_are_reported_only_for_the_rate_limit_type() -> None:
    table = await table_holding(GOOD)

    assert table.versions("type.googleapis.com/x.Y") == {}
    assert list(table.versions(RATELIMIT_CONFIG_TYPE)) == ["shop"]
