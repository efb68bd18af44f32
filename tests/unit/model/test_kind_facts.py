"""What the system does with a kind is read from its registry entry: placement, roles and feeds."""

from __future__ import annotations

import pytest

from meshplane.model.registry import REGISTRY, Feed, Follows, Scope
from meshplane.model.roles import Role
from meshplane.server.auth.principal import Principal, require_write, writers
from meshplane.server.feeder import _WATCHED_KINDS
from meshplane.server.manifests import RENDERED_FROM
from meshplane.server.placement import follows
from meshplane.server.problems import Problem


def test_a_follower_is_a_delivered_kind_of_a_project() -> None:
    for info in REGISTRY:
        if info.follows is not None:
            assert info.delivered and info.scope is Scope.PROJECT, info.kind


def test_each_follower_follows_the_apis_as_its_kind_does() -> None:
    assert {info.kind: info.follows for info in REGISTRY if follows(info.kind)} == {
        "Application": Follows.PROJECT_APIS,
        "Subscription": Follows.NAMED_API,
        "RateLimitPolicy": Follows.POLICY_TARGET,
        "ApplicationKey": Follows.APPLICATION,
    }


@pytest.mark.parametrize(
    ("kind", "roles"),
    [
        ("API", {Role.PUBLISHER}),
        ("IngressIntent", {Role.PUBLISHER}),
        ("Subscription", {Role.SUBSCRIBER}),
        ("ApplicationKey", {Role.SUBSCRIBER}),
        ("Project", set()),
        ("KeySet", set()),
        ("Token", set()),
    ],
)
def test_the_roles_that_may_write_a_kind_are_its_entrys(kind: str, roles: set[Role]) -> None:
    assert writers(kind) == roles


def test_a_role_the_kind_does_not_name_may_not_write_it() -> None:
    with pytest.raises(Problem) as refused:
        require_write(Principal("p", Role.PUBLISHER, "shop"), "Subscription", "shop")
    assert refused.value.status == 403
    require_write(Principal("s", Role.SUBSCRIBER, "shop"), "Subscription", "shop")


def test_the_feeder_watches_every_kind_that_feeds_the_sync_layer() -> None:
    fed = {
        info.kind for info in REGISTRY if info.delivered or info.feeds & {Feed.FLEET, Feed.MANIFESTS, Feed.REVOCATIONS}
    }
    assert set(_WATCHED_KINDS) == fed
    assert {"Cluster", "CertificateRevocation", *RENDERED_FROM} <= fed
    assert "Project" not in fed and "ServiceEndpoint" not in fed


def test_manifests_are_rendered_from_the_intents_and_logical_clouds() -> None:
    assert set(RENDERED_FROM) == {"LogicalCloud", "ServiceIntent", "EgressIntent", "IngressIntent"}
    assert REGISTRY.kinds_feeding(Feed.FLEET) == ("Cluster",)


def test_the_access_feed_is_what_the_enforcer_and_limiter_are_built_from() -> None:
    assert set(REGISTRY.kinds_feeding(Feed.ACCESS)) == {
        "Application",
        "Subscription",
        "RateLimitPolicy",
        "ApplicationKey",
        "KeySet",
    }
