"""The trust domain is the fleet's setting: every rendered principal begins with it."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from pydantic import ValidationError

from meshplane.config import ServerSettings
from meshplane.server.render.cluster import render_cluster
from meshplane.server.render.offline import project_documents
from meshplane_testing.render_scenarios import parse, scenario_fleet

from .service_scenario import SCENARIO, fleet_from_docs


def principals_in(objects: list[dict]) -> set[str]:
    return {
        p
        for o in objects
        if o["kind"] == "AuthorizationPolicy"
        for rule in o["spec"].get("rules", [])
        for source in rule.get("from", [])
        for field in ("principals", "notPrincipals")
        for p in source["source"].get(field, [])
        if p != "*"
    }


def test_service_principals_carry_the_fleets_trust_domain() -> None:
    fleet = dataclasses.replace(
        fleet_from_docs([d for d in yaml.safe_load_all(SCENARIO) if d]), trust_domain="acme.example"
    )
    principals = principals_in(render_cluster(fleet, "core-1"))
    assert principals
    assert all(p.startswith("acme.example/ns/") for p in principals), principals


def test_egress_gateway_principals_carry_the_fleets_trust_domain() -> None:
    intent = parse(
        "EgressIntent",
        "payments",
        {
            "hosts": ["api.payments.example"],
            "ports": [{"number": 443, "protocol": "TLS"}],
            "route": {"via": "egressGateway"},
            "clients": [{"service": {"name": "cart"}}],
            "placement": {"logicalCloud": "retail"},
        },
    )
    fleet = dataclasses.replace(scenario_fleet(egress_intents=[intent]), trust_domain="acme.example")
    assert principals_in(render_cluster(fleet, "edge-1")) == {"acme.example/ns/shop/sa/cart"}


def test_the_default_trust_domain_is_istios_own() -> None:
    fleet = fleet_from_docs([d for d in yaml.safe_load_all(SCENARIO) if d])
    assert all(p.startswith("cluster.local/ns/") for p in principals_in(render_cluster(fleet, "core-1")))


def test_offline_render_takes_the_trust_domain() -> None:
    docs = [d for d in yaml.safe_load_all(SCENARIO) if d]
    objects = project_documents(docs, "core-1", trust_domain="acme.example")
    assert all(p.startswith("acme.example/") for p in principals_in(objects))


def test_the_server_setting_is_a_dns_name() -> None:
    assert ServerSettings(trust_domain="acme.example").trust_domain == "acme.example"
    with pytest.raises(ValidationError, match="trust_domain"):
        ServerSettings(trust_domain="Acme/Example")
