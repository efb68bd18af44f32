"""A rejection by the gateways is reported on every object of the batch the gateways refused; Envoy's
reason names the resources in it, so it must reach only readers of every project in that batch."""

from __future__ import annotations

from meshplane.agent.deliveries import delivery_reports
from meshplane.agent.gateway import PublishOutcome
from meshplane.model.manifests import MANIFEST_TYPE
from meshplane.model.registry import REGISTRY
from meshplane.model.status import DeliveryState
from meshplane.proto.v1 import control_plane_pb2

API = REGISTRY.get("API").type_url
KEY_SET = REGISTRY.get("KeySet").type_url
ENVOY_SAYS = "Error adding/updating listener(s) gateway: route api.bank.vault.0: invalid regex"


def _messages(reported: dict[tuple[str, str], str], refused: dict[str, str] | None = None) -> dict[str, str]:
    outcome = PublishOutcome(DeliveryState.FAILED, ENVOY_SAYS)
    return {entry.name: entry.message for entry in delivery_reports(reported, outcome, refused or {})}


def test_a_rejection_shared_with_another_projects_change_does_not_name_it() -> None:
    messages = _messages({(API, "shop/orders"): "v2", (API, "bank/vault"): "v7"})
    assert "bank" not in messages["shop/orders"]
    assert "rejected" in messages["shop/orders"]
    assert "bank" not in messages["bank/vault"] or messages["bank/vault"] == messages["shop/orders"]


def test_a_rejection_of_one_projects_changes_keeps_the_gateways_reason() -> None:
    messages = _messages({(API, "bank/vault"): "v7", (API, "bank/ledger"): "v3"})
    assert messages == {"bank/vault": ENVOY_SAYS, "bank/ledger": ENVOY_SAYS}


def test_a_cluster_scoped_change_in_the_batch_hides_the_reason_from_project_readers() -> None:
    messages = _messages({(API, "shop/orders"): "v2", (KEY_SET, "api-keys"): "k1"})
    assert ENVOY_SAYS not in messages.values()


def test_rendered_manifests_are_neither_reported_nor_counted_as_another_project() -> None:
    reported = {(API, "bank/vault"): "v7", (MANIFEST_TYPE, "bank/ServiceEntry/vault"): "m1"}
    assert _messages(reported) == {"bank/vault": ENVOY_SAYS}


def test_an_api_refused_here_says_why_whatever_the_gateways_said() -> None:
    outcome = PublishOutcome(DeliveryState.APPLIED, "")
    reported = {(API, "shop/orders"): "v2", (API, "shop/admin"): "v1"}
    entries = delivery_reports(reported, outcome, {"shop/admin": "backends[0]: 169.254.169.254 is a metadata address"})
    states = {entry.name: (entry.state, entry.message) for entry in entries}
    assert states["shop/orders"] == (control_plane_pb2.APPLIED, "")
    assert states["shop/admin"][0] == control_plane_pb2.FAILED
    assert "metadata address" in states["shop/admin"][1]
