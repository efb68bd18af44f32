"""Our CRDs on a real kube-apiserver: the API server enforces the schema the control plane validates with."""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest

from meshplane.model.crds import crd_name, custom_resource_definitions
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import API_VERSION, InvalidObject
from meshplane_testing.kube import KubeAPIServer

STRICT = {"fieldValidation": "Strict"}
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def api_path(namespace: str, name: str = "") -> str:
    path = f"/apis/{API_VERSION}/namespaces/{namespace}/apis"
    return f"{path}/{name}" if name else path


def api_resource(name: str, namespace: str) -> dict[str, Any]:
    """An API custom resource as an operator would write it: only what differs from the defaults."""
    return {
        "apiVersion": API_VERSION,
        "kind": "API",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "basePath": "/orders",
            "operations": [{"method": "GET", "path": "/items"}, {"method": "POST", "path": "/items"}],
            "backends": [{"host": "orders.shop.svc", "port": 8080, "timeout": "15s", "retries": {"attempts": 2}}],
            "placement": {"clusterSelector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}},
        },
    }


def parse_with_model(resource: dict[str, Any]) -> Any:
    """What the control plane makes of the same object (the namespace is the project)."""
    metadata = {"name": resource["metadata"]["name"], "project": resource["metadata"]["namespace"]}
    return REGISTRY.parse({**resource, "metadata": metadata})


def assert_contained(stored: Any, expected: Any, path: str = "spec") -> None:
    """Every value the API server stored equals the model's (the model may fill more, e.g. empty lists)."""
    if isinstance(stored, dict):
        for key, value in stored.items():
            assert key in expected, f"{path}.{key} stored by the API server but unknown to the model"
            assert_contained(value, expected[key], f"{path}.{key}")
    elif isinstance(stored, list):
        assert len(stored) == len(expected), path
        for index, (item, model_item) in enumerate(zip(stored, expected, strict=True)):
            assert_contained(item, model_item, f"{path}[{index}]")
    else:
        assert stored == expected, path


@pytest.fixture(scope="module")
def namespace(kube_apiserver: KubeAPIServer) -> str:
    name = f"crds-{uuid.uuid4().hex[:8]}"
    kube_apiserver.create_namespace(name)
    return name


def test_every_delivered_kind_has_an_established_crd_with_the_generated_schema(kube_apiserver: KubeAPIServer):
    crds = custom_resource_definitions()
    assert {crd["spec"]["names"]["kind"] for crd in crds} == {
        info.kind for info in REGISTRY.delivered() if info.writable
    }

    kube_apiserver.install_crds(crds)  # installing again (server-side apply) changes nothing

    with kube_apiserver.client() as client:
        for crd in crds:
            name = crd["metadata"]["name"]
            stored = client.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}").json()
            conditions = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
            assert conditions["NamesAccepted"] == "True"
            assert conditions["Established"] == "True"
            # Nothing pruned or rewritten: what we generate is exactly what the API server enforces.
            assert stored["spec"]["versions"] == crd["spec"]["versions"]


def test_a_valid_api_is_accepted_and_defaulted_as_the_model_defaults_it(kube_apiserver: KubeAPIServer, namespace: str):
    resource = api_resource("orders", namespace)
    resource["spec"]["timeout"] = None  # optional: null and absent mean the same
    model_spec = parse_with_model(resource).spec.to_wire()

    with kube_apiserver.client() as client:
        response = client.post(api_path(namespace), params=STRICT, json=resource)

    assert response.status_code == 201, response.text
    stored = response.json()["spec"]
    assert stored["version"] == "v1"
    assert stored["backends"][0]["protocol"] == "http"
    assert stored["backends"][0]["weight"] == 100
    assert "timeout" not in stored
    assert_contained(stored, model_spec)


INVALID_CHANGES = [
    pytest.param(["spec", "backends", 0, "port"], 70000, "spec.backends[0].port", id="port-out-of-range"),
    pytest.param(["spec", "backends", 0, "port"], "http", "spec.backends[0].port", id="port-not-a-number"),
    pytest.param(["spec", "backends", 0, "weight"], -1, "spec.backends[0].weight", id="negative-weight"),
    pytest.param(["spec", "backends", 0, "protocol"], "ftp", "spec.backends[0].protocol", id="unknown-protocol"),
    pytest.param(["spec", "backends", 0, "retries", "attempts"], 0, "spec.backends[0].retries.attempts", id="no-tries"),
    pytest.param(["spec", "backends"], [], "spec.backends", id="no-backends"),
    pytest.param(
        ["spec", "targetRefs"],
        [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "orders"}],
        "spec.basePath",
        id="attached-with-a-base-path",
    ),
    pytest.param(["spec", "operations", 0, "method"], "FETCH", "spec.operations[0].method", id="unknown-method"),
    pytest.param(["spec", "version"], "", "spec.version", id="empty-version"),
    pytest.param(["spec", "cross"], {"allowOrigins": ["*"]}, 'unknown field "spec.cross"', id="unknown-field"),
    pytest.param(["spec", "backends", 0, "hots"], "x", 'unknown field "spec.backends[0].hots"', id="typo-in-backend"),
    pytest.param(
        ["spec", "placement", "clusterSelector", "matchExpressions", 0, "operator"],
        "Maybe",
        "spec.placement.clusterSelector.matchExpressions[0].operator",
        id="unknown-selector-operator",
    ),
]


def test_an_api_attached_to_routes_is_accepted_without_traffic_of_its_own(
    kube_apiserver: KubeAPIServer, namespace: str
):
    target = {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "orders"}
    resource = api_resource("attached", namespace)
    resource["spec"] = {"targetRefs": [target], "authentication": {"apiKey": {}}}
    parse_with_model(resource)

    with kube_apiserver.client() as client:
        response = client.post(api_path(namespace), params=STRICT, json=resource)

    assert response.status_code == 201, response.text
    assert response.json()["spec"]["targetRefs"] == [target]


@pytest.mark.parametrize(("where", "value", "reported"), INVALID_CHANGES)
def test_an_api_the_model_rejects_is_rejected_by_the_api_server(
    kube_apiserver: KubeAPIServer, namespace: str, where: list[str | int], value: Any, reported: str
):
    resource = copy.deepcopy(api_resource(f"bad-{uuid.uuid4().hex[:8]}", namespace))
    parent = resource
    for step in where[:-1]:
        parent = parent[step]
    parent[where[-1]] = value
    with pytest.raises(InvalidObject):
        parse_with_model(resource)

    with kube_apiserver.client() as client:
        response = client.post(api_path(namespace), params=STRICT, json=resource)
        missing = client.get(api_path(namespace, resource["metadata"]["name"]))

    assert response.status_code in (400, 422), response.text
    assert reported in response.json()["message"]
    assert missing.status_code == 404


def test_status_is_written_only_through_its_subresource(kube_apiserver: KubeAPIServer, namespace: str):
    resource = api_resource("payments", namespace)
    status = {"clusters": [{"cluster": "edge-1", "state": "Applied", "version": "7"}]}
    with kube_apiserver.client() as client:
        created = client.post(api_path(namespace), params=STRICT, json={**resource, "status": status})
        assert created.status_code == 201, created.text
        assert "status" not in created.json()

        written = client.put(api_path(namespace, "payments") + "/status", json={**created.json(), "status": status})

    assert written.status_code == 200, written.text
    assert written.json()["status"] == status
    assert written.json()["metadata"]["generation"] == 1  # a status write is not a change of the spec


def test_kubectl_get_shows_the_printer_columns(kube_apiserver: KubeAPIServer, namespace: str):
    with kube_apiserver.client() as client:
        client.post(api_path(namespace), params=STRICT, json=api_resource("catalog", namespace))
        table = client.get(api_path(namespace, "catalog"), headers={"Accept": TABLE}).json()

    columns = [column["name"] for column in table["columnDefinitions"]]
    assert columns == ["Name", "Base Path", "Version", "Age"]
    assert table["rows"][0]["cells"][:3] == ["catalog", "/orders", "v1"]


def test_a_service_account_token_is_a_real_identity_that_rbac_limits(kube_apiserver: KubeAPIServer, namespace: str):
    token = kube_apiserver.service_account_token(namespace, "reader")

    with kube_apiserver.client(token) as client:
        review = client.post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        denied = client.get(api_path(namespace))

    assert review.json()["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:reader"
    assert denied.status_code == 403
    assert crd_name(REGISTRY.get("API")) in denied.json()["message"]
