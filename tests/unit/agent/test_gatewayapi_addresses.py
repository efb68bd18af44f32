"""Each Gateway of ours gets an address of its own from the pool, keeps it across changes and restarts, gets
the one it asks for inside the pool, and is refused one outside it with the spec's reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from meshplane.agent.gatewayapi_addresses import AddressPool, Refusal, parse_pool


def gateway(*addresses: str) -> dict[str, Any]:
    return {"spec": {"addresses": [{"type": "IPAddress", "value": a} for a in addresses]}}


def pool(tmp_path: Path, text: str | None = "127.0.0.10-127.0.0.12") -> AddressPool:
    return AddressPool(parse_pool(text) if text else None, "127.0.0.1", tmp_path)


def test_a_pool_is_a_range_a_cidr_or_addresses() -> None:
    assert [str(a) for a in parse_pool("127.0.0.10-127.0.0.12")] == ["127.0.0.10", "127.0.0.11", "127.0.0.12"]
    assert [str(a) for a in parse_pool("127.0.1.0/30")] == ["127.0.1.1", "127.0.1.2"]
    assert [str(a) for a in parse_pool("127.0.0.5, 127.0.0.7")] == ["127.0.0.5", "127.0.0.7"]


@pytest.mark.parametrize("text", ["127.0.0.12-127.0.0.10", "not-an-address", "", "127.0.0.1-::1"])
def test_a_malformed_pool_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_pool(text)


def test_gateways_get_the_lowest_free_addresses_in_name_order_and_keep_them(tmp_path: Path) -> None:
    addresses = pool(tmp_path)
    first = addresses.assign({("shop", "b"): gateway(), ("shop", "a"): gateway()})
    assert first.addresses == {("shop", "a"): "127.0.0.10", ("shop", "b"): "127.0.0.11"}

    # "a" goes, "0" comes: "b" keeps its address, the new one takes the lowest free.
    second = addresses.assign({("shop", "b"): gateway(), ("shop", "0"): gateway()})
    assert second.addresses == {("shop", "0"): "127.0.0.10", ("shop", "b"): "127.0.0.11"}


def test_addresses_are_kept_across_restarts(tmp_path: Path) -> None:
    pool(tmp_path).assign({("shop", "b"): gateway()})
    again = pool(tmp_path).assign({("shop", "a"): gateway(), ("shop", "b"): gateway()})
    assert again.addresses == {("shop", "a"): "127.0.0.11", ("shop", "b"): "127.0.0.10"}


def test_an_address_asked_for_inside_the_pool_is_given(tmp_path: Path) -> None:
    assigned = pool(tmp_path).assign({("shop", "a"): gateway(), ("shop", "b"): gateway("127.0.0.10")})
    assert assigned.addresses == {("shop", "a"): "127.0.0.11", ("shop", "b"): "127.0.0.10"}


def test_an_address_outside_the_pool_leaves_the_gateway_not_accepted(tmp_path: Path) -> None:
    assigned = pool(tmp_path).assign({("shop", "a"): gateway("10.1.2.3")})
    assert assigned.addresses == {}
    assert assigned.refused == {
        ("shop", "a"): Refusal("Accepted", "UnsupportedAddress", "this agent serves no Gateway on 10.1.2.3")
    }


def test_a_pool_used_up_leaves_the_last_gateway_unprogrammed(tmp_path: Path) -> None:
    assigned = pool(tmp_path, "127.0.0.10").assign({("shop", "a"): gateway(), ("shop", "b"): gateway()})
    assert assigned.addresses == {("shop", "a"): "127.0.0.10"}
    assert assigned.refused[("shop", "b")].reason == "AddressNotAssigned"


def test_without_a_pool_every_gateway_is_on_the_gateway_host(tmp_path: Path) -> None:
    assigned = pool(tmp_path, None).assign({("shop", "a"): gateway(), ("shop", "b"): gateway("127.0.0.9")})
    assert assigned.addresses == {("shop", "a"): "127.0.0.1"}
    assert assigned.refused[("shop", "b")].reason == "UnsupportedAddress"
