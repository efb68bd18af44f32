"""A refused report, as the cluster sees it: a real kube-apiserver, the server and the agent. An API CR the
control plane refuses is not served by the cluster's gateways and its `Accepted` condition says why; once an
admin lets the cluster publish into its project, its next change is published."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from meshplane_testing.documents import unique
from meshplane_testing.eventually import eventually
from meshplane_testing.kube import KubeAPIServer, accepted, api_cr, apis_path, create
from meshplane_testing.meshplane import AgentProcess, run_agent, run_server

pytestmark = pytest.mark.timeout(90)


def served_locally(agent: AgentProcess) -> set[str]:
    dump = httpx.get(f"http://{agent.admin_address}/config_dump", timeout=5).json()
    return {o["name"] for o in dump["objects"] if o.get("local")}


def condition(kube: KubeAPIServer, project: str, name: str, status: str) -> dict[str, Any] | None:
    shown = accepted(kube, project, name)
    return shown if shown is not None and shown["status"] == status else None


def test_a_refused_cluster_api_is_not_served_and_its_cr_says_why(tmp_path: Path, kube_apiserver: KubeAPIServer) -> None:
    project, name = unique("shop"), unique("orders")
    kube_apiserver.create_namespace(project)
    with run_server(tmp_path) as server, server.http() as rest:
        rest.post(
            "/v1/projects", json={"kind": "Project", "metadata": {"name": project}, "spec": {}}
        ).raise_for_status()
        with run_agent(tmp_path, "edge-1", server, kubeconfig=kube_apiserver.kubeconfig) as agent:
            create(kube_apiserver, api_cr(project, name, 8080))

            refused = eventually(
                lambda: condition(kube_apiserver, project, name, "False"), timeout=20.0, what="the refusal on the CR"
            )
            assert refused["reason"] == "Refused"
            assert "spec.publish.projects" in refused["message"]
            eventually(
                lambda: f"{project}/{name}" not in served_locally(agent), timeout=20.0, what="the refused API unserved"
            )
            assert rest.get(f"/v1/projects/{project}/apis/{name}").status_code == 404

            server.allow_publishing("edge-1", project)
            with kube_apiserver.client() as client:
                client.patch(
                    apis_path(project, name),
                    headers={"Content-Type": "application/merge-patch+json"},
                    json={"metadata": {"labels": {"try": "again"}}},
                ).raise_for_status()
            eventually(lambda: condition(kube_apiserver, project, name, "True"), timeout=20.0, what="the CR accepted")
            eventually(
                lambda: rest.get(f"/v1/projects/{project}/apis/{name}").status_code == 200,
                timeout=20.0,
                what="the API published",
            )
            assert f"{project}/{name}" in served_locally(agent)
            shown = rest.get(f"/v1/projects/{project}/apis/{name}").json()
            assert shown["metadata"]["origin"] == "cluster/edge-1"
