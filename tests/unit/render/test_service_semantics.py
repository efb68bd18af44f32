"""ServiceIntent renders read against Istio's semantics: what istiod accepts and what its proxies match."""

from __future__ import annotations

import re

import pytest
import yaml

from meshplane.model.registry import REGISTRY
from meshplane.model.resource import InvalidObject, Resource
from meshplane.server.render.cluster import render_cluster as full_render
from meshplane.server.render.fleet import Fleet
from tests.unit.render.istio_schema import validate_istio
from tests.unit.render.test_service_intent import SCENARIO, fleet_from_docs, objects_of, render_cluster

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@pytest.fixture(scope="module")
def scenario() -> Fleet:
    return fleet_from_docs([d for d in yaml.safe_load_all(SCENARIO) if d])


def service_intent(name: str, spec: dict, project: str = "shop") -> Resource:
    return REGISTRY.parse({"kind": "ServiceIntent", "metadata": {"name": name, "project": project}, "spec": spec})


def refusal(spec: dict) -> dict[str, str]:
    """The field errors of a ServiceIntent that must not be stored."""
    with pytest.raises(InvalidObject) as caught:
        service_intent("bad", spec)
    return {e.path: e.message for e in caught.value.errors}


def valid(objects: list[dict]) -> list[dict]:
    for obj in objects:
        assert validate_istio(obj) == [], obj["metadata"]
    return objects


# --- #13: istiod refuses a Gateway whose name is not a DNS label ----------------------------------


@pytest.mark.parametrize("cluster", ["core-1", "edge-1", "edge-2"])
def test_every_gateway_name_is_a_dns_label_as_istiod_requires(scenario: Fleet, cluster: str) -> None:
    gateways = objects_of(render_cluster(scenario, cluster), "Gateway")
    assert gateways
    assert all(DNS_LABEL.match(name) for name in gateways), sorted(gateways)


def test_the_east_west_gateway_name_meets_no_gateway_an_intent_renders(scenario: Fleet) -> None:
    ingress = REGISTRY.parse(
        {
            "kind": "IngressIntent",
            "metadata": {"name": "meshplane", "project": "shop"},
            "spec": {
                "hosts": ["shop.example.com"],
                "entities": [{"name": "eastwest"}, {"name": "west"}],
                "routes": [{"match": {"prefix": "/"}, "to": {"service": "orders", "port": 8080}}],
                "placement": {"logicalCloud": "retail"},
            },
        }
    )
    fleet = Fleet(scenario.clusters, scenario.logical_clouds, scenario.service_intents, ingress_intents=[ingress])
    objects = full_render(fleet, "edge-1")
    names = [o["metadata"]["name"] for o in objects if o["kind"] == "Gateway" and o["metadata"]["namespace"] == "shop"]
    assert "meshplane-eastwest" in names
    assert len(names) == len(set(names)) == 3, names
