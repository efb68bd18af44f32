"""The Helm chart (charts/meshplane), rendered by a real `helm`: it lints, each documented values set renders
objects a real kube-apiserver takes (server-side apply, dry run, strict fields), every setting it writes
is one the server and agent read, the agent's RBAC grants exactly what the agent does, a bad value is
refused with the schema's message, and deploy/ is the chart rendered (one source of truth)."""

from __future__ import annotations

import filecmp
import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command

from meshplane.cli import app
from meshplane.config import AgentSettings, ServerSettings
from meshplane.model.crds import crd_files
from meshplane_testing.helm import CHART, DEPLOY_VALUES, VALUES_SETS, HelmFailed, helm, helm_binary, render
from meshplane_testing.kube import FIELD_MANAGER, REPO, KubeAPIServer
from meshplane_testing.manifests import (
    AGENT_GATEWAY_API_PERMISSIONS,
    AGENT_PERMISSIONS,
    RESOURCES,
    granted,
    object_path,
)

ALL_VALUES = [*VALUES_SETS, *DEPLOY_VALUES.values()]
DRY_RUN_APPLY = {"dryRun": "All", "fieldManager": FIELD_MANAGER, "force": "true", "fieldValidation": "Strict"}
APPLY = {"Content-Type": "application/apply-patch+yaml"}


def values_id(path: Path) -> str:
    return path.name.removesuffix(".yaml")


def find(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def test_helm_is_the_version_the_build_script_names() -> None:
    assert (REPO / "scripts" / "helm-version").read_text().strip() in helm("version", "--short")


@pytest.mark.parametrize("values", ALL_VALUES, ids=values_id)
def test_the_chart_passes_helm_lint(values: Path) -> None:
    output = helm("lint", "--strict", str(CHART), "--namespace", "meshplane-system", "--values", str(values))
    assert "0 chart(s) failed" in output


@pytest.mark.parametrize("values", ALL_VALUES, ids=values_id)
def test_each_values_set_renders_objects_the_api_server_takes(values: Path, kube_apiserver: KubeAPIServer) -> None:
    namespace = f"helm-{values_id(values)}"
    objects = render(values, namespace=namespace)
    assert {obj["kind"] for obj in objects} <= set(RESOURCES), "add new kinds to RESOURCES"
    # The CRDs for real, so that their kinds exist; the namespaces for real, as a namespaced dry run needs one.
    kube_apiserver.install_crds(find(objects, "CustomResourceDefinition"))
    for name in {namespace} | {obj["metadata"]["namespace"] for obj in objects if "namespace" in obj["metadata"]}:
        kube_apiserver.create_namespace(name)
    refused = []
    with kube_apiserver.client() as client:
        for obj in objects:
            if obj["kind"] == "CustomResourceDefinition":
                continue
            response = client.patch(object_path(obj), params=DRY_RUN_APPLY, headers=APPLY, json=obj)
            if response.status_code not in (200, 201):
                refused.append(f"{obj['kind']} {obj['metadata']['name']}: {response.text}")
    assert not refused, "\n".join(refused)


@pytest.mark.parametrize("values", ALL_VALUES, ids=values_id)
def test_every_setting_flag_and_variable_the_chart_sets_is_one_the_processes_take(
    values: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = render(values)
    for variable in [v for v in os.environ if v.startswith("MESHPLANE_")]:
        monkeypatch.delenv(variable)
    configmaps = {obj["metadata"]["name"]: obj["data"] for obj in find(objects, "ConfigMap")}
    commands = get_command(app).commands  # type: ignore[attr-defined]
    for deployment in find(objects, "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        command, *args = container["args"]
        options = {option for param in commands[command].params for option in [*param.opts, *param.secondary_opts]}
        assert {arg for arg in args if arg.startswith("--")} <= options, f"{command}: a flag it does not take"
        settings = ServerSettings if command == "server" else AgentSettings
        for variable in container.get("env", []):
            field = variable["name"].removeprefix("MESHPLANE_").lower()
            assert field in settings.model_fields, f"{command}: {variable['name']} is no setting"

        # The settings file it is given: every key a setting (extra="forbid"), every value valid, and every
        # certificate or key it names inside a Secret the pod mounts.
        config = Path(args[args.index("--config") + 1])
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        text = configmaps[volumes["config"]["configMap"]["name"]][config.name]
        assert set(tomllib.loads(text)) <= set(settings.model_fields)
        (tmp_path / config.name).write_text(text)
        loaded = settings.load(tmp_path / config.name)
        secret_mounts = [
            mount["mountPath"] + "/" for mount in container["volumeMounts"] if "secret" in volumes[mount["name"]]
        ]
        for name in ("tls_cert", "tls_key", "tls_ca", "http_tls_cert", "http_tls_key", "sealing_key_file"):
            if (path := getattr(loaded, name, None)) is not None:
                assert str(path).startswith(tuple(secret_mounts)), f"{command}: {name} {path} is in no Secret"


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ("agent-gateway-api-values.yaml", AGENT_GATEWAY_API_PERMISSIONS),
        ("agent-without-gateway-api-values.yaml", AGENT_PERMISSIONS),
    ],
)
def test_the_agent_cluster_role_grants_exactly_what_the_agent_uses(
    values: str, expected: dict[tuple[str, str], set[str]]
) -> None:
    objects = render(CHART / "ci" / values)
    (role,) = find(objects, "ClusterRole")
    assert granted(role) == expected
    (binding,) = find(objects, "ClusterRoleBinding")
    (account,) = find(objects, "ServiceAccount")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "meshplane-system"}
    ]
    for role in find(objects, "Role"):  # only Secrets by name, only read
        assert [set(rule) for rule in role["rules"]] == [{"apiGroups", "resources", "resourceNames", "verbs"}]
        assert [(rule["resources"], rule["verbs"]) for rule in role["rules"]] == [(["secrets"], ["get"])]


@pytest.fixture(scope="module")
def agent_users(kube_apiserver: KubeAPIServer) -> dict[str, str]:
    """The agent RBAC of the Gateway API and the plain values sets applied for real, each as its own release;
    values set → the user of its ServiceAccount."""
    users = {}
    for values, release in (("agent-gateway-api", "helm-rbac-gw"), ("agent-without-gateway-api", "helm-rbac")):
        objects = render(CHART / "ci" / f"{values}-values.yaml", release=release, namespace=release)
        identity = [
            obj
            for obj in objects
            if obj["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
        ]
        for name in {release} | {obj["metadata"]["namespace"] for obj in identity if "namespace" in obj["metadata"]}:
            kube_apiserver.create_namespace(name)
        for obj in identity:
            kube_apiserver.apply(object_path(obj), obj)
        (account,) = find(objects, "ServiceAccount")
        users[values] = f"system:serviceaccount:{release}:{account['metadata']['name']}"
    return users


def allowed(kube: KubeAPIServer, user: str, attributes: dict[str, str]) -> bool:
    """What RBAC decides for `user` doing `attributes` (verb, group, resource, subresource, name, namespace)."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts", "system:authenticated"],
            "resourceAttributes": attributes,
        },
    }
    with kube.client() as client:
        response = client.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json=review)
    response.raise_for_status()
    return response.json()["status"]["allowed"]


GW = "gateway.networking.k8s.io"
AGENT_DOES = [
    {"verb": "watch", "group": GW, "resource": "httproutes"},
    {"verb": "list", "group": GW, "resource": "grpcroutes", "namespace": "shop"},
    {"verb": "get", "group": GW, "resource": "gatewayclasses", "name": "meshplane"},
    {"verb": "list", "group": GW, "resource": "referencegrants"},
    {"verb": "patch", "group": GW, "resource": "httproutes", "subresource": "status", "namespace": "shop"},
    {"verb": "patch", "group": GW, "resource": "gateways", "subresource": "status", "namespace": "shop"},
    {"verb": "watch", "group": "discovery.k8s.io", "resource": "endpointslices"},
    {"verb": "watch", "resource": "namespaces"},
    {"verb": "get", "resource": "secrets", "namespace": "shop", "name": "shop-tls"},
    {"verb": "list", "resource": "services"},
]
AGENT_NEVER_DOES = [
    {"verb": "create", "group": GW, "resource": "httproutes", "namespace": "shop"},
    {"verb": "update", "group": GW, "resource": "httproutes", "namespace": "shop"},
    {"verb": "update", "group": GW, "resource": "gateways", "subresource": "status", "namespace": "shop"},
    {"verb": "delete", "group": GW, "resource": "gateways", "namespace": "shop"},
    {"verb": "patch", "group": GW, "resource": "referencegrants", "subresource": "status", "namespace": "shop"},
    {"verb": "create", "group": "discovery.k8s.io", "resource": "endpointslices", "namespace": "shop"},
    {"verb": "get", "resource": "secrets", "namespace": "shop", "name": "payments-tls"},
    {"verb": "list", "resource": "secrets", "namespace": "shop"},
    {"verb": "get", "resource": "secrets", "namespace": "kube-system", "name": "shop-tls"},
    {"verb": "delete", "resource": "namespaces"},
    {"verb": "update", "resource": "namespaces"},
    {"verb": "create", "resource": "pods", "namespace": "shop"},
]


def describe(attributes: dict[str, str]) -> str:
    return " ".join(f"{key}={value}" for key, value in attributes.items())


@pytest.mark.parametrize("attributes", AGENT_DOES, ids=describe)
def test_with_gateway_api_the_agent_may_do_what_it_does(
    kube_apiserver: KubeAPIServer, agent_users: dict[str, str], attributes: dict[str, str]
) -> None:
    assert allowed(kube_apiserver, agent_users["agent-gateway-api"], attributes)


@pytest.mark.parametrize("attributes", AGENT_NEVER_DOES, ids=describe)
def test_the_agent_may_not_do_what_it_never_does(
    kube_apiserver: KubeAPIServer, agent_users: dict[str, str], attributes: dict[str, str]
) -> None:
    for user in agent_users.values():
        assert not allowed(kube_apiserver, user, attributes), user


@pytest.mark.parametrize(
    "attributes",
    [a for a in AGENT_DOES if a.get("group") in (GW, "discovery.k8s.io")]
    + [
        {"verb": "watch", "resource": "namespaces"},
        {"verb": "get", "resource": "secrets", "namespace": "shop", "name": "shop-tls"},
    ],
    ids=describe,
)
def test_without_gateway_api_the_agent_may_not_touch_its_objects(
    kube_apiserver: KubeAPIServer, agent_users: dict[str, str], attributes: dict[str, str]
) -> None:
    assert not allowed(kube_apiserver, agent_users["agent-without-gateway-api"], attributes)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (("server.replicas=-1",), "at '/server/replicas': minimum: got -1, want 1"),
        (("server.store.kind=mysql",), "at '/server/store/kind': value must be one of 'sqlite', 'postgresql'"),
        (("server.replica=2",), "additional properties 'replica' not allowed"),
        (("agent.cluster=Edge_1",), "at '/agent/cluster'"),
        (("server.replicas=3",), "server.replicas: the embedded store (store.kind sqlite) serves one process"),
        (("server.enabled=false", "agent.cluster=edge-1"), "agent.serverAddress: set the host:port"),
        (("agent.enabled=false", "server.oidc.issuer=https://login.example.com"), "server.oidc.audience: required"),
        (("server.enabled=false",), "agent.cluster: the name this cluster's certificate was issued for"),
        (("agent.cluster=edge-1", "agent.settings.tls_key=/x"), "agent.settings.tls_key: the chart sets it"),
        (("agent.enabled=false", "server.settings.data_dir=/x"), "server.settings.data_dir: the chart sets it"),
    ],
    ids=lambda value: value if isinstance(value, str) else ",".join(value),
)
def test_a_bad_value_is_refused_with_a_message_naming_it(values: tuple[str, ...], message: str) -> None:
    with pytest.raises(HelmFailed) as refused:
        render(set_values=values)
    assert message in str(refused.value)


def test_deploy_is_the_chart_rendered_with_its_values_files(tmp_path: Path) -> None:
    subprocess.run(
        [REPO / "scripts" / "deploy-manifests", tmp_path],
        env={**os.environ, "HELM": helm_binary()},
        check=True,
        capture_output=True,
        timeout=120,
    )
    deploy = REPO / "deploy"
    for part in ("server", "agent", "crds"):
        rendered = sorted(path.name for path in (tmp_path / part).glob("*.yaml"))
        present = sorted(path.name for path in (deploy / part).glob("*.yaml"))
        assert present == rendered, f"deploy/{part} differs from the chart: run `make deploy-manifests`"
        _, mismatch, errors = filecmp.cmpfiles(tmp_path / part, deploy / part, rendered, shallow=False)
        assert not mismatch + errors, (
            f"deploy/{part}/{mismatch + errors} differ from the chart: run `make deploy-manifests`"
        )


def test_the_chart_holds_the_crds_the_models_generate() -> None:
    present = {path.name: path.read_text() for path in (CHART / "crds").glob("*.yaml")}
    assert present == crd_files(), "run `make deploy-manifests` and commit the result"
