"""Properties over generated API sets: determinism, consistent names, and route semantics."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from meshplane.agent.translate import EnvoyConfig, GatewaySettings, translate_apis
from meshplane.model.resource import Resource
from tests.unit.translate.factories import LITERALS, METHODS, api_sets
from tests.unit.translate.route_table import forwarded_path, select

SETTINGS = GatewaySettings()


def serialized(config: EnvoyConfig) -> list[list[bytes]]:
    groups = (config.listeners, config.routes, config.clusters, config.endpoints)
    return [[message.SerializeToString(deterministic=True) for message in group] for group in groups]


@given(st.data())
def test_output_does_not_depend_on_input_order(data: st.DataObject) -> None:
    apis = data.draw(api_sets())
    shuffled = data.draw(st.permutations(apis))
    assert serialized(translate_apis(shuffled, SETTINGS)) == serialized(translate_apis(apis, SETTINGS))


@given(api_sets())
def test_names_are_unique_and_every_reference_resolves(apis: list[Resource]) -> None:
    config = translate_apis(apis, SETTINGS)
    clusters = {cluster.name: cluster for cluster in config.clusters}
    assert len(clusters) == len(config.clusters)
    assert len({e.cluster_name for e in config.endpoints}) == len(config.endpoints)
    eds = {name for name, cluster in clusters.items() if cluster.HasField("eds_cluster_config")}
    assert {e.cluster_name for e in config.endpoints} == eds
    vhosts = config.routes[0].virtual_hosts
    assert len({v.name for v in vhosts}) == len(vhosts)
    domains = [domain for v in vhosts for domain in v.domains]
    assert len(set(domains)) == len(domains)
    assert set(domains) == {host for a in apis for host in a.spec.hostnames}
    referenced = set()
    for vhost in vhosts:
        for route in vhost.routes:
            action = route.route
            referenced |= {action.cluster} if action.cluster else {c.name for c in action.weighted_clusters.clusters}
    assert referenced == set(clusters)


# The model's semantics, written independently of the translator: segments are compared one by one.


def segments(path: str) -> list[str]:
    return [] if path == "/" else path[1:].split("/")


def pattern_matches(pattern: list[str], path: list[str]) -> bool:
    rest = bool(pattern) and pattern[-1] == "*"
    fixed = pattern[:-1] if rest else pattern
    if len(path) < len(fixed) or (not rest and len(path) != len(fixed)):
        return False
    return all(p == s if not p.startswith("{") else s != "" for p, s in zip(fixed, path, strict=False))


def host_matches(pattern: str, host: str) -> bool:
    return pattern in ("*", host) or (pattern.startswith("*.") and host.endswith(pattern[1:]))


def declared(apis: list[Resource], host: str, method: str, path: str) -> set[tuple[str, str]]:
    """Route names ("project/name METHOD path" or "project/name *") of every operation that covers the request."""
    names = set()
    for a in apis:
        if not any(host_matches(h, host) for h in a.spec.hostnames):
            continue
        ident = f"{a.metadata.project}/{a.metadata.name}"
        base = segments(a.spec.base_path)
        if not a.spec.operations and pattern_matches([*base, "*"], segments(path)):
            names.add((ident, f"{ident} *"))
        for op in a.spec.operations:
            if op.method.value == method and pattern_matches(base + segments(op.path), segments(path)):
                names.add((ident, f"{ident} {op.method.value} {op.path}"))
    return names


def expected_forward(a: Resource, path: str) -> str:
    backend = next(b for b in a.spec.backends if b.weight > 0)
    tail = segments(path)[len(segments(a.spec.base_path)) :]
    return backend.base_path.rstrip("/") + "".join("/" + s for s in tail) or "/"


@st.composite
def probes(draw: st.DrawFn, apis: list[Resource]) -> list[tuple[str, str, str]]:
    """Requests near the declared operations: concrete instances of them, and mutations and random paths."""
    values = st.sampled_from([*LITERALS, "zz"])
    paths = []
    for a in apis:
        base = segments(a.spec.base_path)
        for op in a.spec.operations or []:
            concrete = []
            for segment in base + segments(op.path):
                if segment == "*":
                    concrete += draw(st.lists(st.one_of(values, st.just("")), max_size=2))
                else:
                    concrete.append(draw(values) if segment.startswith("{") else segment)
            paths += [concrete, [*concrete, draw(values)]]
        paths += [base + draw(st.lists(values, max_size=3))]
    paths += [[*p[:-1], p[-1] + "x"] for p in list(paths) if p]
    paths += draw(st.lists(st.lists(values, max_size=4), max_size=5))
    hosts = st.sampled_from(["a.com", "b.a.com", "x.a.com", "c.org", "other.net"])
    return [(draw(hosts), draw(st.sampled_from(METHODS)), "/" + "/".join(p)) for p in paths]


@settings(max_examples=300)
@given(st.data())
def test_routes_match_exactly_the_declared_operations(data: st.DataObject) -> None:
    """The first matching route is one covering the request, from the API with the longest basePath among
    those that declare it, and forwards the request with the basePath replaced; undeclared requests get none."""
    apis = data.draw(api_sets())
    table = translate_apis(apis, SETTINGS).routes[0]
    by_ident = {f"{a.metadata.project}/{a.metadata.name}": a for a in apis}
    for host, method, path in data.draw(probes(apis)):
        route = select(table, host, method, path)
        expected = declared(apis, host, method, path)
        if not expected:
            assert route is None, (host, method, path)
            continue
        assert route is not None, (host, method, path, expected)
        longest = max(len(segments(by_ident[ident].spec.base_path)) for ident, _ in expected)
        winners = {name for ident, name in expected if len(segments(by_ident[ident].spec.base_path)) == longest}
        assert route.name in winners, (host, method, path)
        owner = by_ident[route.name.split(" ", 1)[0]]
        assert forwarded_path(route, path + "?q=/x") == expected_forward(owner, path) + "?q=/x"
