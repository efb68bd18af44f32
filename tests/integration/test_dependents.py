"""`GET …/{name}/dependents` names what a delete of the object would meet: the subscriptions naming an API or an
application (which refuse the delete), and the keys of an application (which go with it)."""

from __future__ import annotations

import httpx
import pytest

from meshplane_testing import documents
from meshplane_testing.documents import unique
from meshplane_testing.meshplane import ServerProcess

pytestmark = pytest.mark.timeout(60)


def dependents(rest: httpx.Client, path: str) -> list[dict[str, str]]:
    return rest.get(f"{path}/dependents").raise_for_status().json()["items"]


def test_an_api_and_an_application_name_the_objects_a_delete_would_meet(server: ServerProcess) -> None:
    project = unique("deps")
    with server.http() as rest:
        rest.post("/v1/projects", json=documents.project(project)).raise_for_status()
        for doc in (
            documents.api("orders", project=project, basePath=f"/{project}/orders"),
            documents.api("lonely", project=project, basePath=f"/{project}/lonely"),
            documents.application("shopper", project=project),
            documents.subscription("shopper-orders", project=project, application="shopper", api="orders"),
        ):
            rest.post(f"/v1/projects/{project}/{doc['kind'].lower()}s", json=doc).raise_for_status()
        key = rest.post(f"/v1/projects/{project}/applications/shopper/keys", json={}).raise_for_status().json()
        base = f"/v1/projects/{project}"

        assert dependents(rest, f"{base}/apis/orders") == [
            {"kind": "Subscription", "name": "shopper-orders", "field": "spec.api", "onDelete": "refuse"}
        ]
        assert dependents(rest, f"{base}/apis/lonely") == []
        assert sorted(
            (d["kind"], d["name"], d["onDelete"]) for d in dependents(rest, f"{base}/applications/shopper")
        ) == [
            ("ApplicationKey", key["id"], "cascade"),
            ("Subscription", "shopper-orders", "refuse"),
        ]
        refused = rest.delete(f"{base}/apis/orders")
        assert refused.status_code == 409
        assert "shopper-orders" in refused.json()["detail"]


def test_dependents_of_what_is_not_there_or_not_the_callers_are_not_found(server: ServerProcess) -> None:
    project, other = unique("deps"), unique("elsewhere")
    with server.http() as rest:
        for name in (project, other):
            rest.post("/v1/projects", json=documents.project(name)).raise_for_status()
        orders = documents.api("orders", project=project, basePath=f"/{project}")
        rest.post(f"/v1/projects/{project}/apis", json=orders).raise_for_status()
        outsider = server.bearer("viewer", other)

        assert rest.get(f"/v1/projects/{project}/apis/never/dependents").status_code == 404
        assert rest.get(f"/v1/projects/{project}/apis/orders/dependents", headers=outsider).status_code == 404
        viewer = server.bearer("viewer", project)
        assert rest.get(f"/v1/projects/{project}/apis/orders/dependents", headers=viewer).status_code == 200
