"""What the system does with a kind is read from its registry entry: placement, roles and feeds."""

from __future__ import annotations

import pytest

from meshplane.model.registry import REGISTRY, Feed, Follows, OnDelete, Reference, Scope
from meshplane.model.roles import Role
from meshplane.server.auth.principal import Principal, require_write, writers
from meshplane.server.feeder import _WATCHED_KINDS
from meshplane.server.manifests import RENDERED_FROM
from meshplane.server.placement import follows
from meshplane.server.problems import Problem
from meshplane.server.references import missing_reference, referenced
from meshplane.store.errors import NotFound
from meshplane_testing import documents


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
        "TLSCertificate": Follows.GATEWAY_REFS,
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
        info.kind
        for info in REGISTRY
        if info.delivered
        or info.feeds & {Feed.FLEET, Feed.MANIFESTS, Feed.REVOCATIONS, Feed.ROLLOUTS, Feed.ROLLOUT_POLICIES}
    }
    assert set(_WATCHED_KINDS) == fed
    assert {"Cluster", "CertificateRevocation", "RolloutPolicy", *RENDERED_FROM} <= fed
    assert "Project" not in fed
    assert "ServiceEndpoint" in fed  # the ingress gateway's load balancer: a cluster's reported ingress addresses


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


def test_the_fields_naming_another_object_are_the_entrys_references() -> None:
    assert {info.kind: info.references for info in REGISTRY if info.references} == {
        "Subscription": (Reference("application", "Application"), Reference("api", "API")),
        "ApplicationKey": (Reference("application", "Application", OnDelete.CASCADE),),
    }


def test_a_reference_is_a_spec_field_naming_a_kind_of_the_same_project_its_entry_names() -> None:
    for info in REGISTRY:
        wire_fields = {field.alias or name for name, field in info.spec.model_fields.items()}
        for reference in info.references:
            assert reference.field in wire_fields, (info.kind, reference)
            assert reference.kind in info.names, (info.kind, reference)
            assert info.namespaced and REGISTRY.get(reference.kind).namespaced, (info.kind, reference)


def test_what_a_delete_refuses_or_takes_along_is_read_from_the_registry() -> None:
    assert [(info.kind, ref.field, ref.on_delete) for info, ref in REGISTRY.referencing("Application")] == [
        ("Subscription", "application", OnDelete.REFUSE),
        ("ApplicationKey", "application", OnDelete.CASCADE),
    ]
    assert [info.kind for info, _ in REGISTRY.referencing("API")] == ["Subscription"]
    assert REGISTRY.referencing("Project") == REGISTRY.referencing("LogicalCloud") == []


def test_a_write_must_find_live_what_its_references_name() -> None:
    subscription = REGISTRY.parse(
        documents.document(
            "Subscription", "mobile-orders", spec={"application": "mobile", "api": "orders"}, project="shop"
        )
    )
    api = REGISTRY.parse(
        documents.document(
            "API",
            "orders",
            spec={"basePath": "/orders", "backends": [{"host": "127.0.0.1", "port": 9001}]},
            project="shop",
        )
    )

    assert referenced(subscription) == (("Application", "shop", "mobile"), ("API", "shop", "orders"))
    assert referenced(api) == ()
    refused = missing_reference(subscription, NotFound("API", "shop", "orders"))
    assert refused is not None and [error.path for error in refused.errors] == ["spec.api"]
    assert missing_reference(subscription, NotFound("Application", "shop", "other")) is None
