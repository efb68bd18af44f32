"""The document builders write the wire form the north API reads."""

from __future__ import annotations

from meshplane.model.registry import REGISTRY
from meshplane_testing import documents


def test_a_project_scoped_document_names_its_project() -> None:
    doc = documents.api("orders", project="shop", basePath="/orders", backends=[documents.backend(9001)])
    assert doc == {
        "apiVersion": "meshplane.io/v1alpha1",
        "kind": "API",
        "metadata": {"name": "orders", "project": "shop"},
        "spec": {"basePath": "/orders", "backends": [{"host": "127.0.0.1", "port": 9001}]},
    }


def test_an_api_is_served_under_its_name_unless_its_spec_says_otherwise() -> None:
    assert documents.api("orders")["spec"] == {"basePath": "/orders", "backends": [{"host": "127.0.0.1", "port": 9001}]}
    assert documents.api("orders", basePath="/v2")["spec"]["basePath"] == "/v2"


def test_a_cluster_scoped_document_has_no_project() -> None:
    assert documents.project("shop", description="The shop")["metadata"] == {"name": "shop"}
    assert "project" not in documents.cluster("edge-1")["metadata"]


def test_every_builder_makes_a_document_its_kind_accepts() -> None:
    built = [
        documents.project("shop"),
        documents.api("orders", basePath="/orders", backends=[documents.backend(9001)]),
        documents.application("web"),
        documents.subscription("web-orders", application="web", api="orders", plan="gold"),
    ]
    for doc in built:
        REGISTRY.get(doc["kind"]).model.model_validate(doc)


def test_unique_names_differ_and_keep_their_prefix() -> None:
    first, second = documents.unique("orders"), documents.unique("orders")
    assert first != second
    assert first.startswith("orders-")
