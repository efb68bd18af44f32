"""An API CR made in the cluster is served by its gateways without the control plane: a real
kube-apiserver, the agent, a real Envoy and an upstream. It is served with the control plane down,
again after restarts from the agent's local state, gone from the gateways when the CR is deleted, never
served twice once the control plane's copy comes back, and an invalid one is not served and says why.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

from meshplane_testing.documents import unique
from meshplane_testing.envoy import EnvoyProcess, run_envoy
from meshplane_testing.eventually import eventually
from meshplane_testing.gateway import Gateway, from_upstream, status
from meshplane_testing.kube import KubeAPIServer, accepted, api_cr, apis_path, create, delete
from meshplane_testing.meshplane import run_agent, run_server
from meshplane_testing.process import free_port
from meshplane_testing.upstream import run_upstream


def served_count(envoy: EnvoyProcess, project: str, name: str) -> tuple[int, int]:
    """(routes, clusters) of an API in Envoy's configuration."""
    dump = json.dumps(envoy.config_dump())
    clusters = re.findall(rf'"name": "api\.{project}\.{name}\.0\.[0-9a-f]+"', dump)
    return dump.count(f'"name": "{project}/{name} *"'), len(clusters)


def test_a_local_api_is_served_with_the_control_plane_down_and_kept_across_restarts(
    tmp_path: Path, kube_apiserver: KubeAPIServer
) -> None:
    project, name, invalid = unique("shop"), unique("orders"), unique("broken")
    kube_apiserver.create_namespace(project)
    unreachable = f"127.0.0.1:{free_port()}"
    ports = (free_port(), free_port())
    kubeconfig = kube_apiserver.kubeconfig
    with run_upstream("orders") as (port, _):
        gateway = Gateway(ports[1])
        try:
            with (
                run_agent(tmp_path, "edge-1", unreachable, ports=ports, kubeconfig=kubeconfig) as agent,
                run_envoy(tmp_path, "gw-1", agent.xds_port),
            ):
                create(kube_apiserver, api_cr(project, name, port))
                gateway.wait_for(f"/{name}/hello", from_upstream("orders"))
                shown = eventually(
                    lambda: accepted(kube_apiserver, project, name), timeout=20.0, what="the Accepted condition"
                )
                assert shown["status"] == "True"

                # Valid for the API server's schema, not for the model: no backend takes any traffic.
                create(kube_apiserver, api_cr(project, invalid, port, weight=0))
                refused = eventually(
                    lambda: accepted(kube_apiserver, project, invalid), timeout=20.0, what="the invalid API's condition"
                )
                assert refused["status"] == "False"
                assert "weight" in refused["message"]
                assert gateway.request("GET", f"/{invalid}/hello").status_code == 404

            # Neither Kubernetes nor the control plane now: a new Envoy gets the API from the agent's state.
            with (
                run_agent(tmp_path, "edge-1", unreachable, ports=ports) as agent,
                run_envoy(tmp_path, "gw-2", agent.xds_port),
            ):
                gateway.wait_for(f"/{name}/hello", from_upstream("orders"))
                dump = httpx.get(f"http://{agent.admin_address}/config_dump", timeout=5).json()
                assert f"{project}/{name}" in [o["name"] for o in dump["objects"] if o.get("local")]

            with (
                run_agent(tmp_path, "edge-1", unreachable, ports=ports, kubeconfig=kubeconfig) as agent,
                run_envoy(tmp_path, "gw-3", agent.xds_port),
            ):
                gateway.wait_for(f"/{name}/hello", from_upstream("orders"))
                delete(kube_apiserver, project, name)
                gateway.wait_for(f"/{name}/hello", status(404))
        finally:
            gateway.close()
            for leftover in (name, invalid):
                with kube_apiserver.client() as client:
                    client.delete(apis_path(project, leftover))


def test_a_local_api_back_from_the_control_plane_is_served_once_and_follows_the_cluster(
    tmp_path: Path, kube_apiserver: KubeAPIServer
) -> None:
    project, name = unique("shop"), unique("orders")
    kube_apiserver.create_namespace(project)
    with (
        run_upstream("orders") as (port, _),
        run_server(tmp_path) as server,
        server.http() as rest,
    ):
        rest.post(
            "/v1/projects", json={"kind": "Project", "metadata": {"name": project}, "spec": {}}
        ).raise_for_status()
        server.allow_publishing("edge-1", project)
        with (
            run_agent(tmp_path, "edge-1", server, kubeconfig=kube_apiserver.kubeconfig) as agent,
            run_envoy(tmp_path, "gw", agent.xds_port) as envoy,
        ):
            gateway = Gateway(agent.gateway_port)
            try:
                create(kube_apiserver, api_cr(project, name, port))
                gateway.wait_for(f"/{name}/hello", from_upstream("orders"))

                def held_back() -> bool:
                    dump = httpx.get(f"http://{agent.admin_address}/config_dump", timeout=5).json()
                    return any(
                        o["name"] == f"{project}/{name}" and o["object"]["metadata"].get("origin") == "cluster/edge-1"
                        for o in dump["objects"]
                    )

                eventually(held_back, timeout=20.0, what="the control plane's copy back at the agent")
                assert served_count(envoy, project, name) == (1, 1)

                # An edit is served as the cluster has it, whatever copy the control plane holds meanwhile.
                with kube_apiserver.client() as client:
                    client.patch(
                        apis_path(project, name),
                        headers={"Content-Type": "application/merge-patch+json"},
                        json={"spec": {"basePath": f"/{name}-v2"}},
                    ).raise_for_status()
                gateway.wait_for(f"/{name}-v2/hello", from_upstream("orders"))
                gateway.wait_for(f"/{name}/hello", status(404))

                delete(kube_apiserver, project, name)
                gateway.wait_for(f"/{name}-v2/hello", status(404))
                eventually(
                    lambda: rest.get(f"/v1/projects/{project}/apis/{name}").status_code == 404,
                    timeout=20.0,
                    what="the API gone at the server",
                )
                eventually(
                    lambda: served_count(envoy, project, name) == (0, 0), timeout=20.0, what="the API gone from Envoy"
                )
            finally:
                gateway.close()
