"""A publisher points an API's backend at what the gateway must never reach for a caller: the host's own
loopback, the cloud's metadata service, the admin and xDS ports of the agent and of Envoy. The agent refuses
such an API on its cluster (the object's status says Failed, and why) and serves every other API."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshplane.agent.translate import GatewaySettings, translate_apis
from meshplane.agent.translate.targets import BackendPolicy, ProtectedPort
from meshplane_testing import documents
from meshplane_testing.documents import unique
from meshplane_testing.envoy import run_envoy, unversioned
from meshplane_testing.eventually import eventually
from meshplane_testing.gateway import Gateway, from_upstream, status
from meshplane_testing.kube import KubeAPIServer, accepted, api_cr, create
from meshplane_testing.meshplane import AgentProcess, ServerProcess, run_agent, run_server
from meshplane_testing.process import free_port
from meshplane_testing.translate_factories import api, backend
from meshplane_testing.upstream import run_upstream

PROTECTED = (ProtectedPort("the agent's xDS", "127.0.0.1", 18001), ProtectedPort("Envoy's admin", "127.0.0.1", 19000))


def refusal(host: str, port: int = 8080, allow_loopback: bool = False) -> str | None:
    return BackendPolicy(allow_loopback=allow_loopback, protected=PROTECTED).refusal(host, port)


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "127.9.8.7",
        "::1",
        "[::1]",
        "::ffff:127.0.0.1",
        "localhost",
        "LocalHost.",
        "api.localhost",
        "ip6-localhost",
    ],
)
def test_loopback_backends_are_refused_unless_the_cluster_allows_them(host: str) -> None:
    reason = refusal(host)
    assert reason is not None and "loopback" in reason and "--allow-loopback-backends" in reason
    assert refusal(host, allow_loopback=True) is None


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("metadata.google.internal", "metadata"),
        ("Metadata.Google.Internal.", "metadata"),
        ("100.100.100.200", "metadata"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("2130706433", "not an IP address"),
        ("127.1", "not an IP address"),
        ("0x7f.0.0.1", "not an IP address"),
    ],
)
def test_metadata_link_local_unspecified_and_odd_numeric_hosts_are_always_refused(host: str, why: str) -> None:
    for allow in (False, True):
        reason = refusal(host, allow_loopback=allow)
        assert reason is not None and why in reason, (host, allow, reason)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "0.0.0.0"])
def test_the_agents_and_envoys_own_ports_are_refused_even_where_loopback_is_allowed(host: str) -> None:
    assert "the agent's xDS" in (refusal(host, 18001, allow_loopback=True) or "")
    assert "Envoy's admin" in (refusal(host, 19000, allow_loopback=True) or "")


def test_a_port_bound_on_every_address_is_refused_on_any_host() -> None:
    policy = BackendPolicy(protected=(ProtectedPort("the agent's admin", "0.0.0.0", 18003),))
    assert "the agent's admin" in (policy.refusal("10.0.0.7", 18003) or "")
    assert "the agent's admin" in (policy.refusal("meshplane-agent.meshplane-system.svc", 18003) or "")
    assert policy.refusal("10.0.0.7", 18004) is None


@pytest.mark.parametrize("host", ["10.0.0.7", "192.168.1.20", "2001:db8::1", "orders.shop.svc.cluster.local"])
def test_ordinary_backends_pass(host: str) -> None:
    assert refusal(host) is None
    assert refusal(host, 18001) is None


def test_translation_leaves_a_refused_api_out_and_serves_the_others() -> None:
    settings = GatewaySettings(backends=BackendPolicy(protected=PROTECTED))
    apis = [
        api("meta", basePath="/meta", backends=[backend("10.0.0.7"), backend("169.254.169.254", 80)]),
        api("fine", basePath="/fine", backends=[backend("10.0.0.7")]),
        api(
            "keys",
            basePath="/keys",
            authentication={"jwt": {"issuer": "i", "jwksUri": "http://127.0.0.1:18001/keys"}},
            backends=[backend("10.0.0.8")],
        ),
    ]
    config = translate_apis(apis, settings)
    assert set(config.refused) == {"shop/meta", "shop/keys"}
    assert "backends[1]" in config.refused["shop/meta"] and "metadata" in config.refused["shop/meta"]
    assert "jwksUri" in config.refused["shop/keys"] and "the agent's xDS" in config.refused["shop/keys"]
    assert [unversioned(cluster.name) for cluster in config.clusters] == ["api.shop.fine.0"]
    routes = [route.name for host in config.routes[0].virtual_hosts for route in host.routes]
    assert routes == ["shop/fine *"]


# --- through a real server, agent and Envoy ---


def probe(name: str, host: str, port: int) -> dict[str, Any]:
    return documents.api(name, backends=[documents.backend(port, host=host)])


def cluster_status(rest: httpx.Client, name: str, timeout: float = 20.0) -> dict[str, Any]:
    """The API's delivery status on its one cluster, once that is no longer Pending."""

    def settled() -> dict[str, Any] | None:
        clusters = rest.get(f"/v1/projects/default/apis/{name}").json().get("status", {}).get("clusters", [])
        return clusters[0] if clusters and clusters[0]["state"] != "Pending" else None

    return eventually(settled, timeout=timeout, interval=0.1, what=f"the status of API {name} to settle")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with run_server(tmp_path) as running:
        yield running


def assert_refused(rest: httpx.Client, gateway: Gateway, name: str, *words: str) -> None:
    entry = cluster_status(rest, name)
    assert entry["state"] == "Failed", entry
    assert all(word in entry["message"] for word in words), entry["message"]
    assert gateway.request("GET", f"/{name}/config_dump").status_code == 404


@pytest.mark.envoy
def test_backends_at_loopback_metadata_and_the_agents_admin_are_refused_and_the_rest_served(
    tmp_path: Path, server: ServerProcess
) -> None:
    with (
        run_upstream("one") as (upstream, seen),
        run_agent(tmp_path, "edge-1", server, allow_loopback_backends=False) as agent,
        run_envoy(tmp_path, "gw-1", agent.xds_port),
        server.http() as rest,
    ):
        gateway = Gateway(agent.gateway_port)
        targets = {
            "agent-admin": ("127.0.0.1", agent.admin_port, "the agent's admin"),
            "metadata": ("169.254.169.254", 80, "metadata"),
            "by-name": ("localhost", upstream, "loopback"),
            "loopback": ("127.0.0.1", upstream, "loopback"),
        }
        for name, (host, port, _) in targets.items():
            assert rest.put(f"/v1/projects/default/apis/{name}", json=probe(name, host, port)).status_code in (200, 201)
        # An API at a name nobody resolves is still served: its route answers (503, no healthy upstream).
        rest.put("/v1/projects/default/apis/other", json=probe("other", "backend.invalid", 80))
        gateway.wait_for("/other/x", status(503))
        for name, (host, _, word) in targets.items():
            assert_refused(rest, gateway, name, host, word)
        assert cluster_status(rest, "other")["state"] == "Applied"
        assert seen == []
        gateway.close()


@pytest.mark.envoy
def test_with_loopback_allowed_a_local_upstream_works_but_admin_and_xds_ports_stay_refused(
    tmp_path: Path, server: ServerProcess
) -> None:
    envoy_admin = free_port()
    with (
        run_upstream("one") as (upstream, _),
        run_agent(tmp_path, "edge-1", server, extra=["--envoy-admin-address", f"127.0.0.1:{envoy_admin}"]) as agent,
        run_envoy(tmp_path, "gw-1", agent.xds_port, admin_port=envoy_admin) as envoy,
        server.http() as rest,
    ):
        gateway = Gateway(agent.gateway_port)
        targets = _own_ports(agent, envoy_admin)
        for name, (port, _) in targets.items():
            rest.put(f"/v1/projects/default/apis/{name}", json=probe(name, "127.0.0.1", port))
        rest.put("/v1/projects/default/apis/local", json=probe("local", "127.0.0.1", upstream))
        gateway.wait_for("/local/x", from_upstream("one"))
        gateway.request("POST", "/envoy-admin/quitquitquit")
        for name, (port, what) in targets.items():
            assert_refused(rest, gateway, name, f"127.0.0.1:{port}", what)
        assert envoy.live(), "Envoy's admin was reached through the gateway"
        gateway.close()


def _own_ports(agent: AgentProcess, envoy_admin: int) -> dict[str, tuple[int, str]]:
    return {
        "envoy-admin": (envoy_admin, "Envoy's admin"),
        "agent-admin": (agent.admin_port, "the agent's admin"),
        "agent-xds": (agent.xds_port, "the agent's xDS"),
    }


@pytest.mark.envoy
def test_a_refusal_ends_when_the_cluster_restarts_allowing_loopback(tmp_path: Path, server: ServerProcess) -> None:
    ports = (free_port(), free_port())
    with run_upstream("one") as (upstream, _), server.http() as rest:
        with run_agent(tmp_path, "edge-1", server, ports=ports, allow_loopback_backends=False) as agent:
            rest.put("/v1/projects/default/apis/local", json=probe("local", "127.0.0.1", upstream))
            assert cluster_status(rest, "local")["state"] == "Failed"
        with (
            run_agent(tmp_path, "edge-1", server, ports=ports) as agent,
            run_envoy(tmp_path, "gw-1", agent.xds_port),
        ):
            gateway = Gateway(agent.gateway_port)
            gateway.wait_for("/local/x", from_upstream("one"))
            deadline = time.monotonic() + 15
            while cluster_status(rest, "local")["state"] != "Applied" and time.monotonic() < deadline:
                time.sleep(0.1)
            assert cluster_status(rest, "local")["state"] == "Applied"
            gateway.close()


@pytest.mark.envoy
def test_an_api_made_in_the_cluster_at_a_metadata_address_is_not_accepted(
    tmp_path: Path, kube_apiserver: KubeAPIServer
) -> None:
    project, name = unique("shop"), unique("meta")
    kube_apiserver.create_namespace(project)
    cr = api_cr(project, name, 80)
    cr["spec"]["backends"][0]["host"] = "169.254.169.254"
    with (
        run_agent(tmp_path, "edge-1", f"127.0.0.1:{free_port()}", kubeconfig=kube_apiserver.kubeconfig) as agent,
        run_envoy(tmp_path, "gw-1", agent.xds_port),
    ):
        create(kube_apiserver, cr)
        shown = eventually(lambda: accepted(kube_apiserver, project, name), timeout=20.0, what="the Accepted condition")
        assert shown["status"] == "False" and "metadata" in shown["message"], shown
        gateway = Gateway(agent.gateway_port)
        assert gateway.request("GET", f"/{name}/x").status_code == 404
        gateway.close()


HOSTS = st.one_of(
    st.ip_addresses().map(str),
    st.sampled_from(
        ["localhost", "metadata.google.internal", "backend.internal", "2130706433", "[::1]", "a.localhost"]
    ),
)


@given(st.lists(st.tuples(HOSTS, st.sampled_from([80, 8080, 18001, 19000])), min_size=1, max_size=6))
@settings(max_examples=200, deadline=None)
def test_no_translated_endpoint_is_one_the_cluster_refuses(targets: list[tuple[str, int]]) -> None:
    policy = BackendPolicy(protected=PROTECTED)
    apis = [
        api(f"a{index}", basePath=f"/a{index}", backends=[backend(host, port)])
        for index, (host, port) in enumerate(targets)
    ]
    config = translate_apis(apis, GatewaySettings(backends=policy))
    assignments = [*config.endpoints, *(cluster.load_assignment for cluster in config.clusters)]
    for assignment in assignments:
        for locality in assignment.endpoints:
            for endpoint in locality.lb_endpoints:
                address = endpoint.endpoint.address.socket_address
                assert policy.refusal(address.address, address.port_value) is None, address
    served = {cluster.name.split(".")[2] for cluster in config.clusters}
    assert served | {key.split("/")[1] for key in config.refused} == {f"a{index}" for index in range(len(targets))}
    assert not served & {key.split("/")[1] for key in config.refused}
