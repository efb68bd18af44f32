"""What a cluster may publish, against a real server with real agent certificates.

An agent reports the objects made in its cluster (`ControlPlane/ReportObjects`) and its service catalog
(`ReportServices`). A cluster may originate only the kinds a data-plane cluster makes (APIs), only into the
projects its Cluster object names in `spec.publish.projects`, with every check a REST write gets; what it
publishes is placed on no other cluster until an admin adopts it. Nothing it reports can touch credentials,
subscriptions, policies, projects, clusters or another cluster's services.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import struct_pb2

from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc
from meshplane_testing import documents
from meshplane_testing.cli import meshplane
from meshplane_testing.eventually import eventually
from meshplane_testing.meshplane import ServerProcess, run_server
from meshplane_testing.north import put

pytestmark = pytest.mark.timeout(90)

OK = grpc.StatusCode.OK


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with run_server(tmp_path_factory.mktemp("server")) as running:
        yield running


@pytest.fixture
def rest(server: ServerProcess) -> Iterator[httpx.Client]:
    with server.http() as client:
        yield client


def struct(value: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(value)
    return out


def local(kind: str, project: str, name: str, spec: dict[str, Any], deleted: bool = False) -> Any:
    return control_plane_pb2.LocalObject(kind=kind, project=project, name=name, spec=struct(spec), deleted=deleted)


def call(server: ServerProcess, cluster: str, method: str, request: Any) -> tuple[grpc.StatusCode, str]:
    """One ControlPlane call with `cluster`'s certificate: its status code and details."""
    with grpc.secure_channel(server.grpc_address, server.agent_credentials(cluster)) as channel:
        stub = control_plane_pb2_grpc.ControlPlaneStub(channel)
        stub.RegisterCluster(control_plane_pb2.RegisterClusterRequest(cluster=cluster), timeout=10)
        try:
            getattr(stub, method)(request, timeout=10)
        except grpc.RpcError as exc:
            return exc.code(), exc.details() or ""
    return OK, ""


def report(server: ServerProcess, cluster: str, *objects: Any) -> tuple[grpc.StatusCode, str]:
    request = control_plane_pb2.ReportObjectsRequest(cluster=cluster, objects=objects, idempotency_key=unique("k"))
    return call(server, cluster, "ReportObjects", request)


def add_project(rest: httpx.Client, name: str) -> None:
    put(rest, documents.project(name))


def api_spec(base_path: str, **extra: Any) -> dict[str, Any]:
    return {"basePath": base_path, "backends": [{"host": "orders.shop.svc", "port": 8080}], **extra}


def put_api(rest: httpx.Client, project: str, name: str, spec: dict[str, Any]) -> None:
    put(rest, documents.api(name, project=project, **spec))


def received(rest: httpx.Client, cluster: str) -> set[tuple[str, str]]:
    """(kind, resource name) of everything the cluster's projection holds."""
    response = rest.get(f"/v1/clusters/{cluster}/resources")
    response.raise_for_status()
    return {(item["object"]["kind"], item["name"]) for item in response.json()["items"]}


def settled(rest: httpx.Client, project: str, cluster: str) -> set[tuple[str, str]]:
    """What `cluster` receives once the projection holds every write made so far: a marker API placed there
    is written and waited for (the projection takes writes in revision order)."""
    marker = unique("marker")
    put_api(rest, project, marker, api_spec(f"/{marker}", placement={"clusters": [cluster]}))
    return eventually(
        lambda: (held := received(rest, cluster)) and ("API", f"{project}/{marker}") in held and held,
        what=f"the marker at {cluster}",
    )


def refused_count(rest: httpx.Client, cluster: str, reason: str) -> float:
    wanted = f'meshplane_reports_refused_total{{cluster="{cluster}",reason="{reason}"}}'
    for line in rest.get("/metrics").text.splitlines():
        if line.startswith(wanted):
            return float(line.split()[-1])
    return 0.0


@pytest.fixture
def clusters(server: ServerProcess, rest: httpx.Client) -> tuple[str, str, str]:
    """(a, b, project): clusters a and b known to the server, a allowed to publish into a fresh project."""
    a, b, project = unique("a"), unique("b"), unique("shop")
    add_project(rest, project)
    server.allow_publishing(a, project)
    server.allow_publishing(b)
    return a, b, project


KEY_DIGEST = "ab" * 32
FORBIDDEN = {
    "KeySet": ("", {"issuer": "meshplane", "keys": [{"kty": "EC", "kid": "attacker", "crv": "P-256"}]}),
    "ApplicationKey": ("p", {"application": "mobile", "created": "2026-01-01T00:00:00Z", "sha256": KEY_DIGEST}),
    "Subscription": ("p", {"application": "mobile", "api": "orders", "plan": "gold"}),
    "Application": ("p", {"description": "made in a cluster"}),
    "RateLimitPolicy": ("p", {"target": {"kind": "API", "name": "orders"}, "requestsPerUnit": 1, "unit": "MINUTE"}),
    "Project": ("", {"description": "made in a cluster"}),
    "Cluster": ("", {"publish": {"projects": ["p"]}}),
    "ServiceIntent": ("p", {"service": {"app": "x", "port": 80}}),
    "ServiceEndpoint": ("p", {"cluster": "b", "namespace": "p", "service": "x"}),
}


@pytest.mark.parametrize("kind", sorted(FORBIDDEN))
def test_a_cluster_cannot_publish_a_kind_only_the_control_plane_makes(
    server: ServerProcess, rest: httpx.Client, clusters: tuple[str, str, str], kind: str
) -> None:
    a, b, project = clusters
    scope, spec = FORBIDDEN[kind]
    name = unique("forged")
    before = refused_count(rest, a, "kind")

    code, details = report(server, a, local(kind, project if scope else "", name, spec))

    assert code == grpc.StatusCode.PERMISSION_DENIED, details
    assert kind in details and "may not publish" in details
    plural = {"KeySet": "keysets", "Project": "projects", "Cluster": "clusters"}.get(kind)
    path = f"/v1/{plural}/{name}" if plural else f"/v1/projects/{project}/{kind.lower()}s/{name}"
    assert rest.get(path).status_code in (404, 405)
    assert not any(item_name.endswith(name) for _, item_name in settled(rest, project, b))
    assert refused_count(rest, a, "kind") == before + 1


def test_a_cluster_cannot_publish_an_unknown_kind(
    server: ServerProcess, rest: httpx.Client, clusters: tuple[str, str, str]
) -> None:
    a, _, project = clusters
    code, details = report(server, a, local("Widget", project, unique("w"), {}))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "Widget" in details


def test_a_new_cluster_publishes_nothing(server: ServerProcess, rest: httpx.Client) -> None:
    cluster, name = unique("fresh"), unique("orders")

    code, details = report(server, cluster, local("API", "default", name, api_spec(f"/{name}")))

    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "spec.publish.projects" in details
    assert rest.get(f"/v1/projects/default/apis/{name}").status_code == 404
    shown = rest.get(f"/v1/clusters/{cluster}").json()
    assert shown["spec"].get("publish", {}).get("projects", []) == []


def test_a_cluster_cannot_publish_an_api_into_a_project_it_was_not_given(
    server: ServerProcess, rest: httpx.Client, clusters: tuple[str, str, str]
) -> None:
    a, _, _ = clusters
    other, name = unique("other"), unique("orders")
    add_project(rest, other)
    before = refused_count(rest, a, "project")

    code, details = report(server, a, local("API", other, name, api_spec(f"/{name}")))

    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert other in details
    assert rest.get(f"/v1/projects/{other}/apis/{name}").status_code == 404
    assert refused_count(rest, a, "project") == before + 1


def test_an_invalid_cluster_api_is_refused_with_its_field(
    server: ServerProcess, rest: httpx.Client, clusters: tuple[str, str, str]
) -> None:
    a, _, project = clusters
    name = unique("orders")
    spec = {"basePath": f"/{name}", "backends": [{"host": "orders", "port": 8080, "weight": 0}]}

    code, details = report(server, a, local("API", project, name, spec))

    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "weight" in details
    assert rest.get(f"/v1/projects/{project}/apis/{name}").status_code == 404


def test_a_cluster_api_whose_route_clashes_with_another_on_its_cluster_is_refused(
    server: ServerProcess, rest: httpx.Client, clusters: tuple[str, str, str]
) -> None:
    a, _, project = clusters
    taken, name = unique("taken"), unique("shadow")
    put_api(rest, project, taken, api_spec(f"/{taken}", placement={"clusters": [a]}))
    before = refused_count(rest, a, "clash")

    code, details = report(server, a, local("API", project, name, api_spec(f"/{taken}")))

    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "routes would shadow" in details
    assert rest.get(f"/v1/projects/{project}/apis/{name}").status_code == 404
    assert refused_count(rest, a, "clash") == before + 1


def test_a_cluster_api_is_weighed_only_against_the_apis_of_its_own_cluster(
    server: ServerProcess, rest: httpx.Client, clusters: tuple[str, str, str]
) -> None:
    a, b, project = clusters
    elsewhere, name = unique("elsewhere"), unique("local")
    put_api(rest, project, elsewhere, api_spec(f"/{elsewhere}", placement={"clusters": [b]}))

    code, details = report(server, a, local("API", project, name, api_spec(f"/{elsewhere}")))

    assert code == OK, details
    assert rest.get(f"/v1/projects/{project}/apis/{name}").status_code == 200


def test_a_cluster_api_is_kept_with_its_origin_and_placed_on_no_other_cluster(
    server: ServerProcess, rest: httpx.Client, clusters: tuple[str, str, str]
) -> None:
    a, b, project = clusters
    name = unique("orders")

    code, details = report(server, a, local("API", project, name, api_spec(f"/{name}")))

    assert code == OK, details
    shown = rest.get(f"/v1/projects/{project}/apis/{name}").json()
    assert shown["metadata"]["origin"] == f"cluster/{a}"
    assert ("API", f"{project}/{name}") not in settled(rest, project, b)
    assert ("API", f"{project}/{name}") in settled(rest, project, a)  # its own agent keeps knowing it

    code, _ = report(server, a, local("API", project, name, {}, deleted=True))
    assert code == OK
    assert rest.get(f"/v1/projects/{project}/apis/{name}").status_code == 404


def test_a_cluster_withdraws_its_api_even_after_losing_the_right_to_publish(
    server: ServerProcess, rest: httpx.Client, clusters: tuple[str, str, str]
) -> None:
    a, _, project = clusters
    name = unique("orders")
    assert report(server, a, local("API", project, name, api_spec(f"/{name}")))[0] == OK
    server.allow_publishing(a)

    changed, _ = report(server, a, local("API", project, name, api_spec(f"/{name}-v2")))
    withdrawn, details = report(server, a, local("API", project, name, {}, deleted=True))

    assert changed == grpc.StatusCode.PERMISSION_DENIED
    assert withdrawn == OK, details
    assert rest.get(f"/v1/projects/{project}/apis/{name}").status_code == 404


def test_a_cluster_cannot_overwrite_or_delete_a_control_plane_api(
    server: ServerProcess, rest: httpx.Client, clusters: tuple[str, str, str]
) -> None:
    a, _, project = clusters
    name = unique("orders")
    put_api(rest, project, name, api_spec(f"/{name}"))

    code, details = report(server, a, local("API", project, name, api_spec(f"/{name}-hijacked")))
    assert code == grpc.StatusCode.ALREADY_EXISTS, details
    code, _ = report(server, a, local("API", project, name, {}, deleted=True))
    assert code == OK

    shown = rest.get(f"/v1/projects/{project}/apis/{name}").json()
    assert shown["spec"]["basePath"] == f"/{name}"
    assert "origin" not in shown["metadata"]


def test_a_rest_write_does_not_take_over_a_cluster_api(
    server: ServerProcess, rest: httpx.Client, clusters: tuple[str, str, str]
) -> None:
    a, _, project = clusters
    name = unique("orders")
    assert (report(server, a, local("API", project, name, api_spec(f"/{name}"))))[0] == OK

    response = rest.put(
        f"/v1/projects/{project}/apis/{name}",
        json={"kind": "API", "metadata": {"name": name, "project": project}, "spec": api_spec(f"/{name}")},
    )

    assert response.status_code == 409
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "adopt" in response.json()["detail"]
    assert rest.get(f"/v1/projects/{project}/apis/{name}").json()["metadata"]["origin"] == f"cluster/{a}"


def test_adopting_a_cluster_api_places_it_and_ends_the_clusters_say(
    server: ServerProcess, rest: httpx.Client, clusters: tuple[str, str, str]
) -> None:
    a, b, project = clusters
    name = unique("orders")
    assert (report(server, a, local("API", project, name, api_spec(f"/{name}"))))[0] == OK

    response = rest.post(f"/v1/projects/{project}/apis/{name}/adopt", json={"placement": {"clusters": [a, b]}})

    assert response.status_code == 200, response.text
    adopted = response.json()
    assert "origin" not in adopted["metadata"]
    assert adopted["spec"]["placement"] == {"clusters": [a, b]}
    assert ("API", f"{project}/{name}") in settled(rest, project, b)

    code, _ = report(server, a, local("API", project, name, api_spec(f"/{name}-v2")))
    assert code == grpc.StatusCode.ALREADY_EXISTS
    code, _ = report(server, a, local("API", project, name, {}, deleted=True))
    assert code == OK
    assert rest.get(f"/v1/projects/{project}/apis/{name}").json()["spec"]["basePath"] == f"/{name}"


def test_only_an_admin_adopts_and_only_what_a_cluster_made(
    server: ServerProcess, rest: httpx.Client, clusters: tuple[str, str, str]
) -> None:
    a, _, project = clusters
    made, owned = unique("made"), unique("owned")
    assert (report(server, a, local("API", project, made, api_spec(f"/{made}"))))[0] == OK
    put_api(rest, project, owned, api_spec(f"/{owned}"))
    token = rest.post("/v1/tokens", json={"name": unique("pub"), "role": "publisher", "project": project}).json()

    as_publisher = rest.post(
        f"/v1/projects/{project}/apis/{made}/adopt", headers={"Authorization": f"Bearer {token['token']}"}
    )
    not_made = rest.post(f"/v1/projects/{project}/apis/{owned}/adopt")
    missing = rest.post(f"/v1/projects/{project}/apis/{unique('none')}/adopt")

    assert as_publisher.status_code == 403
    assert not_made.status_code == 409
    assert missing.status_code == 404
    for response in (as_publisher, not_made, missing):
        assert response.headers["content-type"].startswith("application/problem+json")
    assert rest.get(f"/v1/projects/{project}/apis/{made}").json()["metadata"]["origin"] == f"cluster/{a}"


def endpoints_of(rest: httpx.Client, project: str, cluster: str) -> dict[str, dict[str, Any]]:
    items = rest.get(f"/v1/projects/{project}/serviceendpoints").raise_for_status().json()["items"]
    return {item["metadata"]["name"]: item for item in items if item["metadata"]["origin"] == f"cluster/{cluster}"}


def test_a_clusters_service_report_never_touches_another_clusters_endpoints(
    server: ServerProcess, rest: httpx.Client, clusters: tuple[str, str, str]
) -> None:
    a, b, project = clusters
    service = {"namespace": project, "service": "orders", "ports": [{"port": 80}]}
    reported = control_plane_pb2.ReportedService(spec=struct(service))
    code, _ = call(server, b, "ReportServices", control_plane_pb2.ReportServicesRequest(cluster=b, services=[reported]))
    assert code == OK
    before = endpoints_of(rest, project, b)
    assert len(before) == 1

    spoofed = control_plane_pb2.ReportedService(spec=struct({**service, "cluster": b}), labels={"cluster": b})
    gone = control_plane_pb2.ServiceKey(namespace=project, name="orders")
    for request in (
        control_plane_pb2.ReportServicesRequest(cluster=a, services=[spoofed]),
        control_plane_pb2.ReportServicesRequest(cluster=a, removed=[gone]),
        control_plane_pb2.ReportServicesRequest(cluster=a, complete=True),
    ):
        code, details = call(server, a, "ReportServices", request)
        assert code in (OK, grpc.StatusCode.INVALID_ARGUMENT), details

    assert endpoints_of(rest, project, b) == before


def test_the_cluster_spec_documents_what_it_may_publish(rest: httpx.Client) -> None:
    schema = rest.get("/openapi.json").json()["components"]["schemas"]
    publish = schema["ClusterSpec"]["properties"]["publish"]
    assert "projects" in schema[publish["$ref"].rsplit("/", 1)[-1]]["properties"]


def test_meshplane_adopt_makes_a_cluster_api_the_control_planes(
    server: ServerProcess, rest: httpx.Client, clusters: tuple[str, str, str]
) -> None:
    a, b, project = clusters
    name = unique("orders")
    assert report(server, a, local("API", project, name, api_spec(f"/{name}")))[0] == OK

    adopted = meshplane("adopt", "api", name, "-p", project, "--cluster", b, server=server)
    again = meshplane("adopt", "api", name, "-p", project, server=server)

    assert adopted.returncode == 0, adopted.stderr
    assert adopted.stdout.strip() == f"apis/{name} -p {project} adopted"
    shown = rest.get(f"/v1/projects/{project}/apis/{name}").json()
    assert "origin" not in shown["metadata"] and shown["spec"]["placement"] == {"clusters": [b]}
    assert again.returncode == 1
    assert "409" in again.stderr and "nothing to adopt" in again.stderr
