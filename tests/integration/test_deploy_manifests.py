"""deploy/ on a real kube-apiserver: every manifest passes a server-side dry run with strict field
validation, the settings files in the ConfigMaps load, and the agent's ClusterRole is exactly what the
agent needs. (Whether that RBAC is enough for the agent is tested where the agent runs under it.)"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import pytest

from meshplane.config import AgentSettings, ServerSettings
from meshplane_testing.kube import FIELD_MANAGER, KubeAPIServer
from meshplane_testing.manifests import AGENT_GATEWAY_API_PERMISSIONS, RESOURCES, documents, granted

DIRECTORIES = ("crds", "server", "agent")
DRY_RUN = {"dryRun": "All", "fieldValidation": "Strict"}

API_VERSIONS = {
    "Namespace": "v1",
    "ServiceAccount": "v1",
    "ConfigMap": "v1",
    "Service": "v1",
    "Deployment": "apps/v1",
    "PodDisruptionBudget": "policy/v1",
    "NetworkPolicy": "networking.k8s.io/v1",
    "ClusterRole": "rbac.authorization.k8s.io/v1",
    "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
    "CustomResourceDefinition": "apiextensions.k8s.io/v1",
}


def all_documents() -> list[tuple[str, dict[str, Any]]]:
    return [item for directory in DIRECTORIES for item in documents(directory)]


def find(directory: str, kind: str, name: str) -> dict[str, Any]:
    matches = [doc for _, doc in documents(directory) if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(matches) == 1, f"{directory}: expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def collection_path(obj: dict[str, Any]) -> str:
    prefix, plural, namespaced = RESOURCES[obj["kind"]]
    if namespaced:
        return f"{prefix}/namespaces/{obj['metadata']['namespace']}/{plural}"
    assert "namespace" not in obj["metadata"], f"cluster-scoped {obj['kind']} with a namespace"
    return f"{prefix}/{plural}"


def test_every_document_is_a_known_kind_and_namespaced_as_it_should_be() -> None:
    docs = all_documents()
    assert {doc["kind"] for _, doc in docs} <= set(RESOURCES), "add new kinds to RESOURCES"
    for source, doc in docs:
        assert doc["apiVersion"] == API_VERSIONS[doc["kind"]], source
        if RESOURCES[doc["kind"]][2]:
            assert doc["metadata"].get("namespace"), f"{source}: {doc['kind']} without a namespace"
    kinds = {directory: {doc["kind"] for _, doc in documents(directory)} for directory in DIRECTORIES}
    assert kinds["crds"] == {"CustomResourceDefinition"}
    assert {"Namespace", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget"} <= kinds["server"]
    assert {"Namespace", "ServiceAccount", "ConfigMap", "Deployment", "ClusterRole", "ClusterRoleBinding"} <= kinds[
        "agent"
    ]


def test_every_manifest_passes_a_server_side_dry_run(kube_apiserver: KubeAPIServer) -> None:
    docs = all_documents()
    refused = []
    with kube_apiserver.client() as client:

        def dry_run(source: str, obj: dict[str, Any]) -> None:
            response = client.post(collection_path(obj), params=DRY_RUN, json=obj)
            if response.status_code == 409 and response.json().get("reason") == "AlreadyExists":
                # Already there (our CRDs are installed by the fixture; a namespace another test made):
                # validate it as an update instead, with a dry-run server-side apply.
                response = client.patch(
                    f"{collection_path(obj)}/{obj['metadata']['name']}",
                    params={**DRY_RUN, "fieldManager": FIELD_MANAGER, "force": "true"},
                    headers={"Content-Type": "application/apply-patch+yaml"},
                    json=obj,
                )
            if response.status_code not in (200, 201):
                refused.append(f"{source} {obj['kind']} {obj['metadata']['name']}: {response.text}")

        # Namespaces first, as dry runs, then for real: a namespaced dry run needs its namespace.
        for source, obj in docs:
            if obj["kind"] == "Namespace":
                dry_run(source, obj)
        for _, obj in docs:
            if obj["kind"] == "Namespace":
                kube_apiserver.create_namespace(obj["metadata"]["name"])
        for source, obj in docs:
            if obj["kind"] != "Namespace":
                dry_run(source, obj)
    assert not refused, "\n".join(refused)


def test_no_secret_values_are_checked_in() -> None:
    for source, doc in all_documents():
        assert doc["kind"] != "Secret", f"{source}: create Secrets out of band (deploy/README.md)"


def test_the_server_runs_replicated_on_postgresql_with_tls_from_secrets() -> None:
    deployment = find("server", "Deployment", "meshplane-server")
    assert deployment["spec"]["replicas"] >= 2
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"][:1] == ["server"]
    assert "--config" in container["args"]
    env = {item["name"]: item for item in container["env"]}
    assert env["MESHPLANE_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "meshplane-database", "key": "url"}
    assert {port["containerPort"] for port in container["ports"]} == {8080, 18000}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        assert container[probe]["httpGet"]["path"] == path
        assert container[probe]["httpGet"]["scheme"] == "HTTPS", f"{probe}: the north API serves HTTPS only"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "meshplane-server-tls"
    assert volumes["north-tls"]["secret"]["secretName"] == "meshplane-north-tls"
    service = find("server", "Service", "meshplane-server")
    assert {port["name"]: port.get("appProtocol") for port in service["spec"]["ports"]}["https"] == "https"
    assert volumes["config"]["configMap"]["name"] == "meshplane-server"
    pdb = find("server", "PodDisruptionBudget", "meshplane-server")
    assert (
        pdb["spec"]["selector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )


@pytest.mark.parametrize(
    ("directory", "name", "key", "settings"),
    [
        ("server", "meshplane-server", "server.toml", ServerSettings),
        ("agent", "meshplane-agent", "agent.toml", AgentSettings),
    ],
)
def test_the_settings_files_in_the_configmaps_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, directory: str, name: str, key: str, settings: type
) -> None:
    for variable in [v for v in os.environ if v.startswith("MESHPLANE_")]:
        monkeypatch.delenv(variable)
    text = find(directory, "ConfigMap", name)["data"][key]
    tomllib.loads(text)
    path = tmp_path / key
    path.write_text(text)
    loaded = settings.load(path)
    deployment = find(directory, "Deployment", name)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    mounts = {mount["mountPath"]: mount for mount in container["volumeMounts"]}
    # The TLS files it names are where the Secret is mounted, and the process listens on every interface.
    tls_mount = next(path for path, mount in mounts.items() if mount["name"] == "tls")
    for tls_file in (loaded.tls_cert, loaded.tls_key, loaded.tls_ca):
        assert str(tls_file).startswith(tls_mount + "/")
    if directory == "server":
        north_mount = next(path for path, mount in mounts.items() if mount["name"] == "north-tls")
        for tls_file in (loaded.http_tls_cert, loaded.http_tls_key):
            assert str(tls_file).startswith(north_mount + "/"), "the north API serves HTTPS from its Secret"
    assert mounts[f"/etc/meshplane/{key}"]["subPath"] == key
    listen = [loaded.http_address, loaded.grpc_address] if directory == "server" else [loaded.xds_address]
    assert all(address.startswith("0.0.0.0:") for address in listen)


def test_the_agent_takes_cluster_and_server_from_its_configmap() -> None:
    deployment = find("agent", "Deployment", "meshplane-agent")
    assert deployment["spec"]["replicas"] == 1
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "meshplane-agent"
    (container,) = pod["containers"]
    args = container["args"]
    assert args[0] == "agent"
    assert args[args.index("--cluster") + 1] == "$(MESHPLANE_CLUSTER)"
    assert args[args.index("--server") + 1] == "$(MESHPLANE_SERVER)"
    env = {item["name"]: item["valueFrom"]["configMapKeyRef"] for item in container["env"]}
    configmap = find("agent", "ConfigMap", "meshplane-agent")
    for variable, key in (("MESHPLANE_CLUSTER", "cluster"), ("MESHPLANE_SERVER", "server")):
        assert env[variable] == {"name": "meshplane-agent", "key": key}
        assert configmap["data"][key]
    assert 18001 in {port["containerPort"] for port in container["ports"]}
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "meshplane-agent-tls"


def test_the_agents_admin_listens_on_loopback_and_only_xds_clients_reach_its_xds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in [v for v in os.environ if v.startswith("MESHPLANE_")]:
        monkeypatch.delenv(variable)
    path = tmp_path / "agent.toml"
    path.write_text(find("agent", "ConfigMap", "meshplane-agent")["data"]["agent.toml"])
    settings = AgentSettings.load(path)
    assert settings.admin_address.startswith("127.0.0.1:")
    deployment = find("agent", "Deployment", "meshplane-agent")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert [port["containerPort"] for port in container["ports"]] == [18001]
    assert "127.0.0.1:18003/healthz" in " ".join(container["livenessProbe"]["exec"]["command"])

    policy = find("agent", "NetworkPolicy", "meshplane-agent")["spec"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"port": 18001, "protocol": "TCP"}]
    assert rule["from"] == [
        {"namespaceSelector": {}, "podSelector": {"matchLabels": {"meshplane.io/xds-client": "true"}}}
    ]


def test_the_agent_cluster_role_grants_exactly_what_the_agent_uses() -> None:
    role = find("agent", "ClusterRole", "meshplane-agent")
    assert granted(role) == AGENT_GATEWAY_API_PERMISSIONS  # deploy/agent-values.yaml: Gateway API on

    binding = find("agent", "ClusterRoleBinding", "meshplane-agent")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "meshplane-agent",
    }
    account = find("agent", "ServiceAccount", "meshplane-agent")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "meshplane-agent", "namespace": account["metadata"]["namespace"]}
    ]
    # Only the ClusterRole grants anything: no other RBAC object hides in deploy/.
    rbac = [doc["kind"] for _, doc in all_documents() if doc["apiVersion"].startswith("rbac.authorization.k8s.io/")]
    assert sorted(rbac) == ["ClusterRole", "ClusterRoleBinding"]
