"""History and the audit trail against a real server process: over REST, through the CLI, and for what an
agent's reports write; a project-bound token sees only its own project; no secret ever shows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import struct_pb2

from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc
from meshplane.security.ca import create_ca, issue_server_certificate
from meshplane_testing import documents
from meshplane_testing.cli import meshplane
from meshplane_testing.documents import unique
from meshplane_testing.eventually import eventually
from meshplane_testing.meshplane import ServerProcess, run_agent, run_server

pytestmark = pytest.mark.timeout(120)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.fixture
def shop(server: ServerProcess) -> Iterator[tuple[httpx.Client, str]]:
    """A fresh project, and an admin client of the server."""
    name = unique("shop")
    with server.http() as rest:
        rest.post("/v1/projects", json=documents.project(name)).raise_for_status()
        yield rest, name


def token_for(rest: httpx.Client, name: str, role: str, project: str | None = None) -> dict[str, str]:
    body = {"name": name, "role": role, **({"project": project} if project else {})}
    answer = rest.post("/v1/tokens", json=body).raise_for_status().json()
    return {"Authorization": f"Bearer {answer['token']}"}


def api_at(project: str, name: str, base_path: str) -> dict[str, Any]:
    return documents.api(name, project=project, basePath=base_path)


def audit(rest: httpx.Client, **params: str) -> list[dict[str, Any]]:
    return rest.get("/v1/audit", params=params).raise_for_status().json()["items"]


def test_every_version_is_kept_and_readable_after_the_object_is_deleted(shop: tuple[httpx.Client, str]) -> None:
    rest, project = shop
    base = f"/v1/projects/{project}/apis/orders"
    revisions = []
    for path in ("/v1", "/v2", "/v3"):
        revisions.append(rest.put(base, json=api_at(project, "orders", path)).raise_for_status().json())
    rest.delete(base).raise_for_status()

    listed = rest.get(f"{base}/history").raise_for_status().json()["items"]
    first = rest.get(f"{base}/history/{revisions[0]['metadata']['resourceVersion']}")

    assert [item["op"] for item in listed] == ["delete", "update", "update", "create"]
    assert [item["generation"] for item in listed] == [3, 3, 2, 1]
    assert {item["who"] for item in listed} == {"token/bootstrap-admin"}
    assert first.status_code == 200
    assert first.json()["spec"]["basePath"] == "/v1"
    assert first.json()["metadata"]["uid"] == revisions[0]["metadata"]["uid"]
    missing = rest.get(f"{base}/history/1")
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")
    assert rest.get(f"/v1/projects/{project}/apis/never/history").status_code == 404
    assert rest.get(f"{base}/history/{2**64}").status_code == 422


def test_audit_records_rest_writes_with_token_address_and_request_id(shop: tuple[httpx.Client, str]) -> None:
    rest, project = shop
    publisher = token_for(rest, unique("ci"), "publisher", project)
    written = rest.put(
        f"/v1/projects/{project}/apis/orders",
        json=api_at(project, "orders", f"/{project}"),
        headers={**publisher, "X-Request-Id": "deploy-42", "traceparent": f"00-{TRACE}-{'b' * 16}-01"},
    )
    unnamed = rest.get(f"/v1/projects/{project}/apis/orders")

    assert written.status_code == 201, written.text
    assert written.headers["X-Request-Id"] == "deploy-42"
    assert len(unnamed.headers["X-Request-Id"]) == 32
    (entry,) = audit(rest, project=project, kind="apis")
    assert entry["who"].startswith("token/ci-")
    assert (entry["operation"], entry["name"], entry["generation"]) == ("create", "orders", 1)
    assert entry["address"] == "127.0.0.1"
    assert entry["requestId"] == "deploy-42"
    assert entry["traceId"] == TRACE
    assert entry["revision"] == int(written.json()["metadata"]["resourceVersion"])
    assert rest.get("/v1/audit", params={"since": "yesterday"}).status_code == 422
    assert rest.get("/v1/audit", params={"since": "9999-12-31T23:59:59-23:59"}).status_code == 422


def test_a_project_bound_token_sees_only_its_own_projects_audit_and_history(
    shop: tuple[httpx.Client, str], server: ServerProcess
) -> None:
    rest, mine = shop
    theirs = unique("other")
    rest.post("/v1/projects", json=documents.project(theirs)).raise_for_status()
    for project in (mine, theirs):
        rest.put(
            f"/v1/projects/{project}/apis/orders", json=api_at(project, "orders", f"/{project}")
        ).raise_for_status()
    viewer = token_for(rest, unique("viewer"), "viewer", mine)

    with httpx.Client(base_url=server.url, headers=viewer, timeout=10) as bound:
        seen = bound.get("/v1/audit", params={"limit": "1000"}).raise_for_status().json()["items"]
        other_audit = bound.get("/v1/audit", params={"project": theirs})
        own_history = bound.get(f"/v1/projects/{mine}/apis/orders/history")
        other_history = bound.get(f"/v1/projects/{theirs}/apis/orders/history")
        fleet_history = bound.get(f"/v1/projects/{theirs}/history")

    assert seen and {entry.get("project") for entry in seen} == {mine}
    assert other_audit.status_code == 404
    assert own_history.status_code == 200
    assert other_history.status_code == 404
    assert fleet_history.status_code == 404


def test_audit_pages_newest_first(shop: tuple[httpx.Client, str]) -> None:
    rest, project = shop
    for name in ("a", "b", "c"):
        rest.put(f"/v1/projects/{project}/apis/{name}", json=api_at(project, name, f"/{project}-{name}"))
    first = rest.get("/v1/audit", params={"project": project, "limit": "2"}).raise_for_status().json()
    second = rest.get(
        "/v1/audit", params={"project": project, "limit": "2", "continue": first["metadata"]["continue"]}
    ).raise_for_status()

    assert [e["name"] for e in first["items"]] == ["c", "b"]
    assert [e["name"] for e in second.json()["items"]] == ["a"]
    other = rest.get("/v1/audit", params={"limit": "2", "continue": first["metadata"]["continue"]})
    assert other.status_code == 400


def test_audit_narrows_to_one_object_by_name(shop: tuple[httpx.Client, str]) -> None:
    rest, project = shop
    for name, path in (("orders", "/o1"), ("billing", "/b1"), ("orders", "/o2")):
        rest.put(f"/v1/projects/{project}/apis/{name}", json=api_at(project, name, f"/{project}{path}"))

    entries = audit(rest, project=project, kind="API", name="orders")

    assert [(e["name"], e["operation"], e["generation"]) for e in entries] == [
        ("orders", "update", 2),
        ("orders", "create", 1),
    ]


def test_cli_history_diff_rollback_and_audit(server: ServerProcess, shop: tuple[httpx.Client, str]) -> None:
    rest, project = shop
    base = f"/v1/projects/{project}/apis/orders"
    one = rest.put(base, json=api_at(project, "orders", "/one")).raise_for_status().json()
    rest.put(base, json=api_at(project, "orders", "/two")).raise_for_status()
    first = one["metadata"]["resourceVersion"]

    history = meshplane("history", "api", "orders", "-p", project, server=server)
    changed = meshplane("diff", "api", "orders", "-p", project, "--from", first, server=server)
    rolled = meshplane("rollback", "api", "orders", "-p", project, "--to-revision", first, server=server)
    same = meshplane("diff", "api", "orders", "-p", project, "--from", first, server=server)
    listed = meshplane("audit", "-p", project, "--since", "1h", "-o", "json", server=server)

    assert history.returncode == 0, history.stderr
    assert [line.split()[1] for line in history.stdout.splitlines()[1:]] == ["update", "create"]
    assert changed.returncode == 1, changed.stderr
    assert "-  basePath: /one" in changed.stdout and "+  basePath: /two" in changed.stdout
    assert rolled.returncode == 0, rolled.stderr
    current = rest.get(base).raise_for_status().json()
    assert current["spec"] == one["spec"]
    assert int(current["metadata"]["resourceVersion"]) > int(first)
    assert current["metadata"]["generation"] == 3
    assert (same.returncode, same.stdout) == (0, "")
    entries = json.loads(listed.stdout)
    assert [e["operation"] for e in entries] == ["update", "update", "create"]
    assert {e["who"] for e in entries} == {"token/bootstrap-admin"}


def test_a_rollback_of_a_deleted_object_creates_it_again(server: ServerProcess, shop: tuple[httpx.Client, str]) -> None:
    rest, project = shop
    base = f"/v1/projects/{project}/apis/gone"
    old = rest.put(base, json=api_at(project, "gone", f"/{project}-gone")).raise_for_status().json()
    rest.delete(base).raise_for_status()

    rolled = meshplane(
        "rollback", "api", "gone", "-p", project, "--to-revision", old["metadata"]["resourceVersion"], server=server
    )

    assert rolled.returncode == 0, rolled.stderr
    again = rest.get(base).raise_for_status().json()
    assert again["spec"] == old["spec"]
    assert again["metadata"]["uid"] != old["metadata"]["uid"]


def test_a_rollback_to_a_revision_never_kept_says_so(server: ServerProcess, shop: tuple[httpx.Client, str]) -> None:
    _, project = shop
    missing = meshplane("rollback", "api", "nothing", "-p", project, "--to-revision", "1", server=server)

    assert missing.returncode == 1
    assert "no history" in missing.stderr


def test_no_secret_appears_in_history_or_audit(
    server: ServerProcess, shop: tuple[httpx.Client, str], tmp_path: Path
) -> None:
    rest, project = shop
    rest.put(
        f"/v1/projects/{project}/applications/mobile", json=documents.application("mobile", project=project)
    ).raise_for_status()
    opaque = tmp_path / "key"
    opaque.write_text("imported-key-0123456789abcdef0123456789")
    issued = rest.post(f"/v1/projects/{project}/applications/mobile/keys", json={}).raise_for_status().json()
    imported = meshplane("keys", "create", "mobile", "-p", project, "--import-key-file", str(opaque), server=server)
    pair = issue_server_certificate(create_ca(), ["shop.example.com"])
    (tmp_path / "tls.crt").write_bytes(pair.certificate_pem())
    (tmp_path / "tls.key").write_bytes(pair.key_pem())
    tls = ["--cert", str(tmp_path / "tls.crt"), "--key", str(tmp_path / "tls.key"), "-p", project]
    created = meshplane("tls", "create", "shop-tls", *tls, server=server)

    assert imported.returncode == 0, imported.stderr
    assert created.returncode == 0, created.stderr
    entries = audit(rest, project=project)
    shown = [json.dumps(entries)]
    for entry in entries:
        if entry["kind"] == "TLSCertificate":
            history = f"/v1/projects/{project}/tlscertificates/{entry['name']}/history"
            shown.append(rest.get(history).raise_for_status().text)
            shown.append(rest.get(f"{history}/{entry['revision']}").raise_for_status().text)
    everything = "".join(shown)
    assert sorted(e["kind"] for e in entries) == ["Application", "ApplicationKey", "ApplicationKey", "TLSCertificate"]
    assert '"set":true' in shown[-1]
    stored = b"".join(path.read_bytes() for path in server.data_dir.glob("meshplane.db*"))
    key_body = pair.key_pem().decode().splitlines()[1]
    for secret in (issued["key"], opaque.read_text(), key_body):
        assert secret not in everything
        assert secret.encode() not in stored


def test_what_an_agent_writes_is_audited_as_its_cluster_and_retention_prunes(
    tmp_path: Path, server_database: str | None
) -> None:
    env = {"MESHPLANE_HISTORY_KEEP": "2", "MESHPLANE_COMPACTION_INTERVAL": "0.5"}
    with run_server(tmp_path, server_database, env=env) as server, server.http() as rest:
        with run_agent(tmp_path, "edge-1", server):
            registered = eventually(
                lambda: audit(rest, kind="Cluster", who="cluster/edge-1"), timeout=30.0, what="the registration"
            )
        (entry,) = registered
        assert (entry["operation"], entry["name"]) == ("create", "edge-1")
        assert entry["address"]
        for path in ("/a", "/b", "/c", "/d"):
            rest.put("/v1/projects/default/apis/kept", json=api_at("default", "kept", path)).raise_for_status()

        def pruned() -> list[dict[str, Any]] | None:
            items = rest.get("/v1/projects/default/apis/kept/history").raise_for_status().json()["items"]
            return items if len(items) == 2 else None

        kept = eventually(pruned, timeout=20.0, what="history pruned to two versions")
        assert [
            rest.get(f"/v1/projects/default/apis/kept/history/{i['revision']}").json()["spec"]["basePath"] for i in kept
        ] == [
            "/d",
            "/c",
        ]


def struct(value: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(value)
    return out


def test_what_a_clusters_reports_write_is_audited_as_that_cluster(
    server: ServerProcess, shop: tuple[httpx.Client, str]
) -> None:
    rest, project = shop
    cluster = unique("edge")
    server.allow_publishing(cluster, project)
    api = control_plane_pb2.LocalObject(
        kind="API",
        project=project,
        name="local",
        spec=struct({"basePath": f"/{project}-local", "backends": [{"host": "orders.shop.svc", "port": 8080}]}),
    )
    service = control_plane_pb2.ReportedService(spec=struct({"namespace": project, "service": "orders"}))
    with grpc.secure_channel(server.grpc_address, server.agent_credentials(cluster)) as channel:
        stub = control_plane_pb2_grpc.ControlPlaneStub(channel)
        stub.ReportObjects(control_plane_pb2.ReportObjectsRequest(cluster=cluster, objects=[api]), timeout=10)
        stub.ReportServices(control_plane_pb2.ReportServicesRequest(cluster=cluster, services=[service]), timeout=10)
        withdrawn = control_plane_pb2.LocalObject(kind="API", project=project, name="local", deleted=True)
        stub.ReportObjects(control_plane_pb2.ReportObjectsRequest(cluster=cluster, objects=[withdrawn]), timeout=10)

    entries = audit(rest, project=project, who=f"cluster/{cluster}")
    assert [(e["kind"], e["operation"]) for e in entries] == [
        ("API", "delete"),
        ("ServiceEndpoint", "create"),
        ("API", "create"),
    ]
    assert all(e["address"] for e in entries)
    history = rest.get(f"/v1/projects/{project}/apis/local/history").raise_for_status().json()["items"]
    assert {item["who"] for item in history} == {f"cluster/{cluster}"}
