"""Hypothesis strategies for ingress intents: random fleets of IngressIntents over the scenario's clusters."""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from meshplane.server.render.fleet import Fleet
from meshplane_testing.render_scenarios import CLUSTERS, PROJECTS, fleet_clouds, parse, scenario_clusters

INTENT_NAMES = ("web", "web-ops", "a", "a-b")
ZONES = ("example.com", "example.org", "shop.example.com")
SERVERS = ("public", "partner", "internal")


@st.composite
def ingress_specs(draw: st.DrawFn, index: int) -> dict:
    hosts = draw(
        st.lists(
            st.sampled_from([f"h{index}.example.com", f"h{index}.shop.example.com", f"*.w{index}.example.org"]),
            min_size=1,
            max_size=3,
            unique=True,
        )
    )
    dns = [
        {"server": draw(st.sampled_from(SERVERS)), "zone": draw(st.sampled_from(ZONES))}
        for _ in range(draw(st.integers(0, 3)))
    ]
    tls_choices = [
        None,
        {"mode": "SIMPLE", "credentialName": "cert"},
        {"mode": "MUTUAL", "credentialName": "cert"},
        {"mode": "PASSTHROUGH"},
    ]
    entities = []
    for name in draw(st.lists(st.sampled_from(["public", "staff", "legacy"]), min_size=1, max_size=3, unique=True)):
        tls = draw(st.sampled_from(tls_choices))
        entities.append({"name": name, **({"tls": tls} if tls else {})})
    routes = []
    for path in draw(
        st.lists(st.sampled_from(["/", "/api", "/api/v2", "/healthz"]), min_size=1, max_size=3, unique=True)
    ):
        match = {draw(st.sampled_from(["prefix", "exact"])): path}
        if draw(st.booleans()):
            routes.append({"match": match, "to": {"service": "web", "port": 8080}})
        else:
            weight = draw(st.integers(0, 100))
            routes.append(
                {
                    "match": match,
                    "split": [
                        {"service": "web", "port": 8080, "weight": weight},
                        {"service": "web-next", "port": 8080, "weight": 100 - weight},
                    ],
                }
            )
    passthrough = any(e.get("tls", {}).get("mode") == "PASSTHROUGH" for e in entities)
    access = []
    for _ in range(draw(st.integers(0, 3))):
        action = draw(st.sampled_from(["ALLOW", "DENY"]))
        request_fields = not (passthrough and action == "DENY")  # refused: see IngressIntentSpec
        sources: dict = {}
        if draw(st.booleans()):
            sources["ipBlocks"] = [draw(st.sampled_from(["10.0.0.0/8", "192.0.2.0/24", "2001:db8::/32"]))]
        if request_fields and draw(st.booleans()):
            sources["requestPrincipals"] = ["https://idp.example.com/*"]
        claims = {"groups": "ops"} if request_fields and draw(st.booleans()) else {}
        access.append({"action": action, "sources": sources, "jwtClaims": claims})
    placement = draw(
        st.sampled_from(
            [{"logicalCloud": "retail"}, {"logicalCloud": "ops"}, {"logicalCloud": "ops", "clusters": ["edge-1"]}]
        )
    )
    return {
        "hosts": hosts,
        "dns": dns,
        "entities": entities,
        "routes": routes,
        "access": access,
        "placement": placement,
        "authentication": {"jwt": [{"issuer": "https://idp.example.com", "jwksUri": "https://idp.example.com/keys"}]},
    }


@st.composite
def ingress_fleets(draw: st.DrawFn) -> Fleet:
    intents = []
    for project in PROJECTS:
        for name in draw(st.lists(st.sampled_from(INTENT_NAMES), max_size=3, unique=True)):
            intents.append(parse("IngressIntent", name, draw(ingress_specs(len(intents))), project=project))
    clusters = scenario_clusters()
    for name in draw(st.lists(st.sampled_from(CLUSTERS), unique=True)):
        clusters[name] = dataclasses.replace(clusters[name], ingress_addresses=())
    return Fleet(clusters=clusters, logical_clouds=fleet_clouds(), ingress_intents=intents)
