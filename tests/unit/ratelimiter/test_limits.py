"""Compiling RateLimitConfigs: which config node a request descriptor reaches, and what is refused."""

import pytest
from envoy.service.ratelimit.v3 import rls_pb2
from hypothesis import given
from hypothesis import strategies as st

from meshplane.proto.v1 import rls_conf_pb2
from meshplane.ratelimiter.limits import UNIT_SECONDS, InvalidLimits, compile_domains
from meshplane_testing.ratelimit_factories import config, descriptor, node, policy

# No "*": a value ending in it is a prefix pattern, tested on its own.
names = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="*"), min_size=1, max_size=8
)
paths = st.lists(st.tuples(names, names), min_size=1, max_size=4, unique_by=lambda pair: pair[0])


def domain_of(*descriptors: rls_conf_pb2.RateLimitDescriptor):
    return compile_domains({"limits": config("shop", *descriptors)})["shop"]


def reached(domain, pairs) -> int | None:
    """requests_per_unit of the limit `pairs` reach, None when they reach none."""
    found = domain.find(descriptor(pairs).entries)
    return None if found is None else found.requests_per_unit


def chain(pairs, requests_per_unit: int, value_of=lambda value: value) -> rls_conf_pb2.RateLimitDescriptor:
    """A config path along `pairs` with the limit on its last node."""
    *head, (key, value) = pairs
    built = node(key, value_of(value), policy(requests_per_unit))
    for key, value in reversed(head):
        built = node(key, value_of(value), None, built)
    return built


def test_an_exact_value_wins_over_a_node_without_value() -> None:
    domain = domain_of(node("plan", "gold", policy(100)), node("plan", "", policy(10)))

    assert reached(domain, [("plan", "gold")]) == 100
    assert reached(domain, [("plan", "silver")]) == 10


def test_a_value_ending_in_a_star_matches_by_prefix_before_a_node_without_value() -> None:
    domain = domain_of(node("path", "/orders*", policy(5)), node("path", "", policy(50)))

    assert reached(domain, [("path", "/orders/1")]) == 5
    assert reached(domain, [("path", "/items")]) == 50


def test_only_the_node_where_the_entries_end_gives_the_limit() -> None:
    domain = domain_of(node("api", "orders", policy(7), node("app", "", policy(3))))

    assert reached(domain, [("api", "orders")]) == 7
    assert reached(domain, [("api", "orders"), ("app", "mobile")]) == 3
    assert reached(domain, [("api", "orders"), ("app", "mobile"), ("extra", "x")]) is None
    assert reached(domain, [("api", "items")]) is None
    assert reached(domain, [("app", "mobile")]) is None
    assert reached(domain, []) is None


def test_a_node_without_limit_limits_nothing() -> None:
    domain = domain_of(node("api", "orders", None, node("app", "", policy(3))))

    assert reached(domain, [("api", "orders")]) is None


@given(paths, st.integers(1, 10**6))
def test_a_config_path_of_exact_values_is_reached_by_exactly_those_entries(pairs, limit) -> None:
    domain = domain_of(chain(pairs, limit))

    assert reached(domain, pairs) == limit
    assert reached(domain, pairs[:-1]) is None
    *head, (key, value) = pairs
    assert reached(domain, [*head, (key, value + "-other")]) is None


@given(paths, st.lists(names, min_size=1, max_size=4), st.integers(1, 10**6))
def test_a_config_path_without_values_is_reached_by_any_values(pairs, values, limit) -> None:
    domain = domain_of(chain(pairs, limit, value_of=lambda _: ""))
    other = [(key, values[index % len(values)]) for index, (key, _) in enumerate(pairs)]

    assert reached(domain, other) == limit


def test_every_unit_compiles_to_its_window_and_reports_itself() -> None:
    for unit, seconds in UNIT_SECONDS.items():
        limit = domain_of(node("k", "", policy(1, unit))).root.any_value["k"].limit

        assert limit is not None and limit.seconds == seconds
        assert rls_pb2.RateLimitResponse.RateLimit.Unit.Name(limit.current.unit) == rls_conf_pb2.RateLimitUnit.Name(
            unit
        )
    assert UNIT_SECONDS[rls_conf_pb2.WEEK] == 7 * 86_400


def test_descriptor_counts_cover_every_config_node() -> None:
    domain = domain_of(node("a", "1", None, node("b", "", policy(1)), node("c", "", policy(2))), node("d"))

    assert domain.descriptors == 4


@pytest.mark.parametrize(
    ("descriptors", "complaint"),
    [
        ([node("k", "", policy(0))], "descriptors[0].rate_limit.requests_per_unit: must be at least 1"),
        ([node("k", "", policy(5, rls_conf_pb2.UNKNOWN))], "descriptors[0].rate_limit.unit: UNKNOWN is not a unit"),
        ([node("k", "", policy(5, 42))], "descriptors[0].rate_limit.unit: 42 is not a unit"),
        ([node("k", "", policy(unit=rls_conf_pb2.SECOND, unlimited=True))], "an unlimited limit takes no unit"),
        ([node("", "v", policy(5))], "descriptors[0].key: required"),
        ([node("k", "v", policy(5)), node("k", "v", policy(6))], "descriptors[1]: another descriptor"),
        ([node("k", "", None, node("j", "", policy(1)), node("j"))], "descriptors[0].descriptors[1]: another"),
        ([node("k", "", policy(5), quota_mode=True)], "descriptors[0].quota_mode: not supported"),
        ([node("k", "", policy(5, replaces=[rls_conf_pb2.RateLimitReplace()]))], "replaces[0].name: required"),
    ],
)
def test_configs_that_cannot_be_enforced_are_refused_with_the_field_at_fault(descriptors, complaint) -> None:
    with pytest.raises(InvalidLimits, match=r"^limits: ") as refused:
        compile_domains({"limits": config("shop", *descriptors)})

    assert complaint in str(refused.value)


def test_two_configs_for_one_domain_are_refused() -> None:
    with pytest.raises(InvalidLimits, match="b: domain 'shop' is already configured by a"):
        compile_domains({"a": config("shop"), "b": config("shop")})


def test_a_config_without_domain_is_refused() -> None:
    with pytest.raises(InvalidLimits, match="a: domain is required"):
        compile_domains({"a": config("")})


def test_an_unlimited_limit_needs_no_count() -> None:
    limit = domain_of(node("k", "", policy(unit=rls_conf_pb2.UNKNOWN, unlimited=True))).root.any_value["k"].limit

    assert limit is not None and limit.unlimited and limit.current is None
