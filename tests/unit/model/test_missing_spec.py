"""A document may leave out `spec` where every field of its kind's spec has a default, as Kubernetes takes a
Namespace without one; a kind with required fields still says which."""

from __future__ import annotations

import pytest

from meshplane.model.registry import REGISTRY
from meshplane.model.resource import InvalidObject


@pytest.mark.parametrize("kind", ["Project", "Cluster", "Application"])
def test_a_kind_whose_spec_fields_all_have_defaults_needs_no_spec(kind: str) -> None:
    metadata = {"name": "shop"} if REGISTRY.get(kind).scope.value == "Cluster" else {"name": "m", "project": "shop"}
    resource = REGISTRY.parse({"kind": kind, "metadata": metadata})
    assert resource.spec == REGISTRY.get(kind).spec()


def test_a_kind_with_required_spec_fields_still_asks_for_its_spec() -> None:
    with pytest.raises(InvalidObject) as refused:
        REGISTRY.parse({"kind": "Subscription", "metadata": {"name": "mobile-orders", "project": "shop"}})
    assert [error.path for error in refused.value.errors] == ["spec"]
