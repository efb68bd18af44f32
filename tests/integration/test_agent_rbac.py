"""The agent under the identity deploy/agent gives it, on a real kube-apiserver: its ServiceAccount,
ClusterRole and binding applied from the manifests, a token minted for the account by the TokenRequest
API. Everything the agent does works (apply into a new namespace, drift correction, garbage
collection, the operator's watch and status conditions, the Services watch) without one 403, and the
account cannot do what the agent never does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from meshplane.agent.kube import KubeClient, KubeRefused
from meshplane.agent.kube.client import ResourceType
from meshplane.model.resource import API_VERSION
from meshplane_testing.documents import api, backend, unique
from meshplane_testing.eventually import eventually
from meshplane_testing.kube import KubeAPIServer, accepted, api_cr, apis_path, create, delete
from meshplane_testing.manifests import RESOURCES, documents
from meshplane_testing.meshplane import run_agent, run_server

ACCOUNT_NAMESPACE, ACCOUNT = "meshplane-system", "meshplane-agent"


def agent_token(kube: KubeAPIServer) -> str:
    """Apply deploy/agent's identity (namespace, ServiceAccount, ClusterRole, binding) and mint a token."""
    for _, doc in documents("agent"):
        if doc["kind"] in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
            prefix, plural, namespaced = RESOURCES[doc["kind"]]
            where = f"/namespaces/{doc['metadata']['namespace']}" if namespaced else ""
            kube.apply(f"{prefix}{where}/{plural}/{doc['metadata']['name']}", doc)
    return kube.service_account_token(ACCOUNT_NAMESPACE, ACCOUNT, expiration_seconds=600)


def allowed(kube: KubeAPIServer, token: str, **attributes: str) -> bool:
    """Whether the token's user may do `attributes` (verb, group, resource, namespace…), as RBAC decides."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }
    with kube.client(token=token) as client:
        response = client.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json=review)
    response.raise_for_status()
    return response.json()["status"]["allowed"]


def delivered(name: str, project: str, base_path: str) -> dict[str, Any]:
    return api(name, project=project, basePath=base_path, backends=[backend(8080, host="orders.shop.svc")])


def has_base_path(kube: KubeAPIServer, project: str, name: str, base_path: str) -> bool:
    with kube.client() as client:
        response = client.get(apis_path(project, name))
    return response.status_code == 200 and response.json()["spec"]["basePath"] == base_path


def test_the_agent_does_its_work_as_its_service_account_without_a_403(
    tmp_path: Path, kube_apiserver: KubeAPIServer
) -> None:
    kubeconfig = kube_apiserver.write_kubeconfig(tmp_path / "agent.kubeconfig", agent_token(kube_apiserver), ACCOUNT)
    # A project whose namespace does not exist yet: the agent creates it.
    project, name, local = unique("rbac"), unique("orders"), unique("local")
    with (
        run_server(tmp_path) as server,
        server.http() as rest,
        run_agent(tmp_path, "edge-1", server, kubeconfig=kubeconfig) as agent,
    ):
        rest.post(
            "/v1/projects", json={"kind": "Project", "metadata": {"name": project}, "spec": {}}
        ).raise_for_status()
        server.allow_publishing("edge-1", project)
        rest.put(f"/v1/projects/{project}/apis/{name}", json=delivered(name, project, "/orders")).raise_for_status()
        eventually(
            lambda: has_base_path(kube_apiserver, project, name, "/orders"),
            timeout=20.0,
            what="the CR in its new namespace",
        )

        with kube_apiserver.client() as client:  # drift, put back through the watch
            client.patch(
                apis_path(project, name),
                headers={"Content-Type": "application/merge-patch+json"},
                json={"spec": {"basePath": "/hijacked"}},
            ).raise_for_status()
        eventually(
            lambda: has_base_path(kube_apiserver, project, name, "/orders"), timeout=10, what="the drift reverted"
        )

        create(kube_apiserver, api_cr(project, local, 8080))  # the operator: served, condition, reported
        shown = eventually(
            lambda: accepted(kube_apiserver, project, local), timeout=20.0, what="the local API's condition"
        )
        assert shown["status"] == "True"
        eventually(
            lambda: rest.get(f"/v1/projects/{project}/apis/{local}").status_code == 200, timeout=20.0, what="the report"
        )

        service = {"metadata": {"name": "orders"}, "spec": {"ports": [{"name": "http", "port": 8080}]}}
        with kube_apiserver.client() as client:  # an event for the Services watch
            client.post(f"/api/v1/namespaces/{project}/services", json=service).raise_for_status()

        rest.delete(f"/v1/projects/{project}/apis/{name}").raise_for_status()  # garbage collection
        eventually(
            lambda: not has_base_path(kube_apiserver, project, name, "/orders"),
            timeout=20.0,
            what="the CR to be collected",
        )
        delete(kube_apiserver, project, local)
        eventually(
            lambda: rest.get(f"/v1/projects/{project}/apis/{local}").status_code == 404,
            timeout=20.0,
            what="the deletion",
        )

        log = agent.process.log()
    assert " 403 " not in log and "forbidden" not in log.lower(), "the agent was refused something"


@pytest.mark.parametrize(
    "attributes",
    [
        {"verb": "get", "resource": "secrets", "namespace": "default"},
        {"verb": "list", "resource": "secrets"},
        {"verb": "delete", "resource": "namespaces"},
        {"verb": "update", "resource": "namespaces"},
        {"verb": "create", "resource": "pods", "namespace": "default"},
        {"verb": "update", "group": "meshplane.io", "resource": "apis", "namespace": "default"},
        {"verb": "update", "group": "meshplane.io", "resource": "apis", "subresource": "status"},
        {"verb": "create", "group": "rbac.authorization.k8s.io", "resource": "clusterrolebindings"},
        {"verb": "update", "group": "apiextensions.k8s.io", "resource": "customresourcedefinitions"},
        {"verb": "create", "resource": "services", "namespace": "default"},
        {"verb": "patch", "group": "gateway.networking.k8s.io", "resource": "httproutes", "namespace": "default"},
        {"verb": "update", "group": "gateway.networking.k8s.io", "resource": "gateways", "subresource": "status"},
        {"verb": "delete", "group": "gateway.networking.k8s.io", "resource": "gateways", "namespace": "default"},
        {"verb": "create", "group": "gateway.networking.k8s.io", "resource": "gatewayclasses"},
        {"verb": "patch", "group": "gateway.networking.k8s.io", "resource": "referencegrants", "subresource": "status"},
        {"verb": "patch", "group": "discovery.k8s.io", "resource": "endpointslices", "namespace": "default"},
    ],
)
def test_the_agent_s_service_account_cannot_do_what_the_agent_never_does(
    kube_apiserver: KubeAPIServer, attributes: dict[str, str]
) -> None:
    assert not allowed(kube_apiserver, agent_token(kube_apiserver), **attributes)


@pytest.mark.parametrize(
    "attributes",
    [
        *(
            {"verb": verb, "group": "gateway.networking.k8s.io", "resource": plural}
            for plural in ("gatewayclasses", "gateways", "httproutes", "grpcroutes", "referencegrants")
            for verb in ("get", "list", "watch")
        ),
        *(
            {"verb": "patch", "group": "gateway.networking.k8s.io", "resource": plural, "subresource": "status"}
            for plural in ("gatewayclasses", "gateways", "httproutes", "grpcroutes")
        ),
        {"verb": "watch", "resource": "namespaces"},
        {"verb": "watch", "group": "discovery.k8s.io", "resource": "endpointslices"},
    ],
)
def test_the_agent_s_service_account_may_serve_the_gateway_api(
    kube_apiserver: KubeAPIServer, attributes: dict[str, str]
) -> None:
    assert allowed(kube_apiserver, agent_token(kube_apiserver), **attributes)


async def test_in_a_pod_the_agent_s_client_is_its_service_account(
    tmp_path: Path, kube_apiserver: KubeAPIServer
) -> None:
    """KubeClient.in_cluster as the kubelet sets a pod up: token and CA in a directory, the address in the
    environment; it reaches the API server and is as limited as the account."""
    (tmp_path / "token").write_text(agent_token(kube_apiserver))
    (tmp_path / "ca.crt").write_bytes(kube_apiserver.ca_file.read_bytes())
    host, _, port = kube_apiserver.url.removeprefix("https://").rpartition(":")
    client = KubeClient.in_cluster(tmp_path, {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port})
    try:
        apis = await client.resource_type(API_VERSION, "API")
        await client.list(apis, "meshplane.io/managed-by=control-plane")
        with pytest.raises(KubeRefused) as refused:
            await client.list(ResourceType("v1", "Secret", "secrets", namespaced=True), "")
        assert refused.value.status_code == 403
    finally:
        await client.close()
