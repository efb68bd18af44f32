"""Route clashes between APIs: the write-time check must catch every pair a gateway could confuse."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshplane.model.resource import Resource
from meshplane.server.api_conflicts import clash, hosts_overlap
from meshplane_testing.route_table import declared, probes
from meshplane_testing.translate_factories import METHODS, api, api_specs, backend


def named(name: str, spec: dict) -> Resource:
    return api(name, **spec)


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ("*", "a.com", True),
        ("a.com", "a.com", True),
        ("*.a.com", "b.a.com", True),
        ("*.a.com", "*.b.a.com", True),
        ("*.a.com", "a.com", False),
        ("a.com", "c.org", False),
        ("*.a.com", "*.c.org", False),
    ],
)
def test_hosts_overlap_when_some_host_matches_both(a: str, b: str, overlap: bool) -> None:
    assert hosts_overlap(a, b) is overlap
    assert hosts_overlap(b, a) is overlap


def test_same_base_path_and_method_clash_and_the_message_names_them() -> None:
    one = api("one", basePath="/orders", operations=[{"method": "GET", "path": "/items/{id}"}], backends=[backend()])
    two = api("two", basePath="/orders", operations=[{"method": "GET", "path": "/items/42"}], backends=[backend()])

    assert clash(one.spec, two.spec) == "GET on /orders/items/{param} and /orders/items/42"


def test_a_catch_all_clashes_with_anything_below_it() -> None:
    root = api("root", basePath="/", backends=[backend()])
    orders = api("orders", basePath="/orders", backends=[backend()])

    assert clash(root.spec, orders.spec) is not None


@pytest.mark.parametrize(
    ("one", "two"),
    [
        ({"basePath": "/orders"}, {"basePath": "/billing"}),
        ({"basePath": "/orders", "hostnames": ["a.com"]}, {"basePath": "/orders", "hostnames": ["c.org"]}),
        (
            {"basePath": "/orders", "operations": [{"method": "GET", "path": "/items"}]},
            {"basePath": "/orders", "operations": [{"method": "POST", "path": "/items"}]},
        ),
        (
            {"basePath": "/orders", "operations": [{"method": "GET", "path": "/items"}]},
            {"basePath": "/orders", "operations": [{"method": "GET", "path": "/items/{id}"}]},
        ),
    ],
)
def test_apis_that_never_meet_do_not_clash(one: dict, two: dict) -> None:
    a = api("a", backends=[backend()], **one)
    b = api("b", backends=[backend()], **two)

    assert clash(a.spec, b.spec) is None


@settings(max_examples=300)
@given(st.data())
def test_no_request_is_declared_by_two_apis_unless_they_clash(data: st.DataObject) -> None:
    """Soundness of the write-time check: any request two APIs would both take is a reported clash, so the
    APIs a store accepts never compete for a request and every declared operation keeps its own route."""
    one = named("one", data.draw(api_specs()))
    two = named("two", data.draw(api_specs()))
    for host, method, path in data.draw(probes([one, two])):
        owners = {ident for ident, _ in declared([one, two], host, method, path)}
        if len(owners) == 2:
            assert clash(one.spec, two.spec) is not None, (host, method, path)


@given(st.sampled_from(METHODS))
def test_a_clash_is_symmetric(method: str) -> None:
    a = api("a", basePath="/x", operations=[{"method": method, "path": "/*"}], backends=[backend()])
    b = api("b", basePath="/x/y", backends=[backend()])

    assert (clash(a.spec, b.spec) is None) == (clash(b.spec, a.spec) is None)
