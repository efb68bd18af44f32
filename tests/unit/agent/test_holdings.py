"""What an agent holds, serves and rejected: a version the gateways rejected is never offered again (the
last one served stays in force), an API the cluster refuses is not offered, the cluster's own APIs take
the place of the control plane's copy, and the admin dump shows the same value."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from meshplane.agent.admin import config_dump
from meshplane.agent.holdings import API_TYPE, Held, Holdings
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import Resource
from meshplane.xds.cache import ResourceCache

APP_TYPE = REGISTRY.get("Application").type_url


def api(name: str, base_path: str, origin: str | None = None) -> Resource:
    metadata: dict[str, Any] = {"name": name, "project": "shop"}
    if origin is not None:
        metadata["origin"] = origin
    spec = {"basePath": base_path, "backends": [{"host": "orders", "port": 80}]}
    return REGISTRY.parse({"kind": "API", "metadata": metadata, "spec": spec})


def holdings(
    apis: Mapping[str, tuple[str, Resource]] | None = None,
    rejected: Mapping[tuple[str, str], str] | None = None,
    serving: Mapping[str, Mapping[str, Held]] | None = None,
    local: Mapping[str, tuple[str, Resource]] | None = None,
    refused: Mapping[str, str] | None = None,
) -> Holdings:
    """An agent of cluster `edge` holding `apis` (name -> (version, API)) and the cluster's own `local`."""
    apis, local = apis or {}, local or {}
    return Holdings(
        cluster="edge",
        delivered={API_TYPE: {name: held for name, (_, held) in apis.items()}, APP_TYPE: {}},
        versions={API_TYPE: {name: version for name, (version, _) in apis.items()}},
        local={name: held for name, (_, held) in local.items()},
        local_versions={name: version for name, (version, _) in local.items()},
        rejected=rejected or {},
        refused=refused or {},
        serving=serving or {},
    )


def refuse_none(apis: Sequence[Resource]) -> dict[str, str]:
    return {}


def refuse_path(path: str) -> Any:
    """A cluster that refuses every API under `path`."""

    def refusals(apis: Sequence[Resource]) -> dict[str, str]:
        return {
            f"{a.metadata.project}/{a.metadata.name}": "not here"
            for a in apis
            if a.spec.base_path == path  # type: ignore[union-attr]
        }

    return refusals


def test_a_rejected_version_is_not_offered_and_the_last_one_served_stays() -> None:
    old, new = api("orders", "/v1"), api("orders", "/v2")
    held = holdings({"shop/orders": ("2", new)}, {(API_TYPE, "shop/orders"): "2"}, {API_TYPE: {"shop/orders": old}})

    assert held.is_rejected(API_TYPE, "shop/orders", "2")
    assert held.offer(refuse_none).objects[API_TYPE] == {"shop/orders": old}


def test_a_rejected_version_never_served_is_offered_as_nothing() -> None:
    held = holdings({"shop/orders": ("1", api("orders", "/v1"))}, {(API_TYPE, "shop/orders"): "1"})

    assert held.offer(refuse_none).objects[API_TYPE] == {}


def test_a_version_after_the_rejected_one_is_offered_again() -> None:
    newer = api("orders", "/v3")
    held = holdings({"shop/orders": ("3", newer)}, {(API_TYPE, "shop/orders"): "2"})

    assert not held.is_rejected(API_TYPE, "shop/orders", "3")
    assert held.offer(refuse_none).objects[API_TYPE] == {"shop/orders": newer}


def test_a_refused_api_is_not_offered_and_a_rejection_of_the_offer_is_not_about_it() -> None:
    good, refused = api("orders", "/v1"), api("orders", "/admin")
    held = holdings(
        {"shop/orders": ("2", refused), "shop/carts": ("1", api("carts", "/admin"))},
        serving={API_TYPE: {"shop/orders": good}},
    )

    offer = held.offer(refuse_path("/admin"))

    assert offer.objects[API_TYPE] == {"shop/orders": good}  # the version served before, which is not refused
    assert offer.refused == {"shop/orders": "not here", "shop/carts": "not here"}
    changed = {(API_TYPE, "shop/orders"): "2", (APP_TYPE, "shop/app"): "5"}
    assert offer.rejected_by(changed) == {(APP_TYPE, "shop/app"): "5"}


def test_the_cluster_s_own_api_takes_the_place_of_the_control_plane_s_copy() -> None:
    copy = api("orders", "/copy", origin="cluster/edge")
    own = api("orders", "/own")
    held = holdings({"shop/orders": ("7", copy)}, local={"shop/orders": ("local-1", own)})

    assert held.offer(refuse_none).objects[API_TYPE] == {"shop/orders": own}
    assert held.to_apply()[API_TYPE] == {}  # Kubernetes keeps the cluster's own, not the copy
    assert held.own_apis() == [("shop", "orders")]


def test_a_refusal_that_began_or_ended_without_a_new_version_is_reported() -> None:
    held = holdings(
        {"shop/orders": ("1", api("orders", "/a")), "shop/carts": ("4", api("carts", "/b"))},
        refused={"shop/carts": "not here"},
    )

    assert held.refusals_changed({"shop/orders": "not here"}) == {
        (API_TYPE, "shop/carts"): "4",
        (API_TYPE, "shop/orders"): "1",
    }
    assert held.refusals_changed({"shop/carts": "not here"}) == {}


def test_the_dump_shows_the_rejected_version_as_the_holdings_decide() -> None:
    held = holdings(
        {"shop/orders": ("2", api("orders", "/v2"))},
        {(API_TYPE, "shop/orders"): "2", (API_TYPE, "shop/gone"): "1"},
        local={"shop/carts": ("local-1", api("carts", "/carts"))},
    )

    dump = config_dump(held, ResourceCache())

    assert dump["cluster"] == "edge"
    shown = {(o["name"], o["version"], o["rejected"], o.get("local", False)) for o in dump["objects"]}
    assert shown == {("shop/orders", "2", True, False), ("shop/carts", "local-1", False, True)}
    assert dump["rejected"] == [
        {"kind": "API", "name": "shop/gone", "version": "1"},
        {"kind": "API", "name": "shop/orders", "version": "2"},
    ]
