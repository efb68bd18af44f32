"""The `meshplane` command as a user runs it: a subprocess talking to a real server process."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from meshplane_testing.cli import meshplane
from meshplane_testing.meshplane import ServerProcess, run_server
from meshplane_testing.process import free_port

pytestmark = pytest.mark.timeout(60)

MANIFEST = """\
apiVersion: meshplane.io/v1alpha1
kind: Project
metadata: {name: shop}
spec: {description: The shop}
---
apiVersion: meshplane.io/v1alpha1
kind: API
metadata:
  name: orders
  project: shop
  labels: {team: checkout}
spec:
  basePath: /orders
  operations: [{method: GET, path: /items}]
  backends: [{host: 127.0.0.1, port: 9001, timeout: 15s}]
"""


@pytest.fixture
def shop(server: ServerProcess) -> ServerProcess:
    """Project `shop` holding API `orders`, as MANIFEST describes them; the server."""
    with server.http() as http:
        for doc in yaml.safe_load_all(MANIFEST):
            project = doc["metadata"].get("project")
            base = f"/v1/projects/{project}/apis" if project else "/v1/projects"
            assert http.put(f"{base}/{doc['metadata']['name']}", json=doc).is_success
    return server


def test_apply_creates_every_document_then_configures_them_on_reapply(tmp_path: Path) -> None:
    manifest = tmp_path / "shop.yaml"
    manifest.write_text(MANIFEST)
    with run_server(tmp_path) as fresh:
        first = meshplane("apply", "-f", str(manifest), server=fresh)
        again = meshplane("apply", "-f", str(manifest), server=fresh)
        stored = httpx.get(f"{fresh.url}/v1/projects/shop/apis/orders", headers=fresh.headers, timeout=10).json()

    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == ["projects/shop created", "apis/orders -p shop created"]
    assert again.stdout.splitlines() == ["projects/shop configured", "apis/orders -p shop configured"]
    assert stored["spec"]["backends"][0]["timeout"] == "15s"


def test_apply_reads_standard_input(server: ServerProcess) -> None:
    manifest = MANIFEST.replace("shop", "piped").replace("basePath: /orders", "basePath: /piped")

    result = meshplane("apply", "-f", "-", server=server, stdin=manifest)

    assert result.returncode == 0, result.stderr
    assert "apis/orders -p piped" in result.stdout
    with server.http() as http:
        assert http.get("/v1/projects/piped/apis/orders").status_code == 200


def test_apply_puts_objects_without_a_project_in_the_one_given(server: ServerProcess) -> None:
    _, api = yaml.safe_load_all(MANIFEST)
    del api["metadata"]["project"]
    api["spec"]["basePath"] = "/unprojected"  # two APIs may not answer the same requests

    result = meshplane("apply", "-f", "-", "-p", "default", server=server, stdin=yaml.safe_dump(api))

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "apis/orders -p default created"


def test_get_lists_apis_of_a_project_as_a_table(shop: ServerProcess) -> None:
    result = meshplane("get", "apis", "-p", "shop", server=shop)

    assert result.returncode == 0, result.stderr
    header, *rows = [line.split() for line in result.stdout.strip().splitlines()]
    assert header[:3] == ["NAME", "PROJECT", "LABELS"]
    assert [row[:3] for row in rows] == [["orders", "shop", "team=checkout"]]


def test_table_keeps_long_names_and_labels_whole_when_piped(server: ServerProcess) -> None:
    name = "a-name-of-sixty-three-characters-which-is-as-long-as-names-get1"
    labels = {"team": "checkout", "tier": "gold", "example.com/region": "eu-west-1"}
    doc = {
        **yaml.safe_load(MANIFEST.split("---")[1]),
        "metadata": {"name": name, "project": "default", "labels": labels},
    }
    doc["spec"]["basePath"] = "/long"
    with server.http() as http:
        assert http.put(f"/v1/projects/default/apis/{name}", json=doc).is_success

    result = meshplane("get", "apis", "-p", "default", server=server)

    [row] = [line.split() for line in result.stdout.splitlines() if line.split()[:1] == [name]]
    assert row[2] == "example.com/region=eu-west-1,team=checkout,tier=gold"


@pytest.mark.parametrize("output", ["yaml", "json"])
def test_get_one_object_prints_it_in_a_parseable_format(shop: ServerProcess, output: str) -> None:
    result = meshplane("get", "api", "orders", "-p", "shop", "-o", output, server=shop)

    assert result.returncode == 0, result.stderr
    obj = yaml.safe_load(result.stdout) if output == "yaml" else json.loads(result.stdout)
    assert (obj["kind"], obj["metadata"]["name"], obj["metadata"]["project"]) == ("API", "orders", "shop")
    assert obj["spec"]["backends"][0]["port"] == 9001


@pytest.mark.parametrize("word", ["API", "apis", "api", "APIs"])
def test_kind_words_are_read_case_insensitively(shop: ServerProcess, word: str) -> None:
    result = meshplane("get", word, "-p", "shop", "-o", "json", server=shop)

    assert result.returncode == 0, result.stderr
    assert [item["metadata"]["name"] for item in json.loads(result.stdout)] == ["orders"]


def test_delete_removes_the_object(shop: ServerProcess) -> None:
    result = meshplane("delete", "api", "orders", "-p", "shop", server=shop)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "apis/orders -p shop deleted"
    assert httpx.get(f"{shop.url}/v1/projects/shop/apis/orders", headers=shop.headers, timeout=10).status_code == 404


def test_get_of_a_missing_object_fails_with_the_servers_reason(shop: ServerProcess) -> None:
    result = meshplane("get", "api", "nothing", "-p", "shop", server=shop)

    assert result.returncode == 1
    assert "404" in result.stderr
    assert "nothing" in result.stderr


def _assert_clean_failure(result: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit code 1 and an error message that names `words`, with no Python traceback."""
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "error" in result.stderr
    for word in words:
        assert word in result.stderr


def test_apply_of_invalid_yaml_fails_cleanly(server: ServerProcess, tmp_path: Path) -> None:
    manifest = tmp_path / "broken.yaml"
    manifest.write_text("kind: API\nmetadata: {name: orders\n")

    result = meshplane("apply", "-f", str(manifest), server=server)

    _assert_clean_failure(result, "line")


def test_apply_of_an_invalid_object_names_the_field_path(server: ServerProcess) -> None:
    manifest = MANIFEST.replace("port: 9001", "port: 99999").replace("shop", "invalid")

    result = meshplane("apply", "-f", "-", server=server, stdin=manifest)

    _assert_clean_failure(result, "422", "spec.backends[0].port")


BACKWARDS = """\
kind: Subscription
metadata: {name: gold, project: backwards}
spec: {application: shopper, api: carts}
---
kind: Application
metadata: {name: shopper, project: backwards}
spec: {}
---
kind: API
metadata: {name: carts, project: backwards}
spec: {basePath: /backwards, backends: [{host: 127.0.0.1, port: 9001}]}
---
kind: Project
metadata: {name: backwards}
spec: {}
"""


def test_apply_stores_what_others_name_first_whatever_the_order_of_the_file(server: ServerProcess) -> None:
    result = meshplane("apply", "-f", "-", server=server, stdin=BACKWARDS)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "projects/backwards created",
        "applications/shopper -p backwards created",
        "apis/carts -p backwards created",
        "subscriptions/gold -p backwards created",
    ]
    with server.http() as http:
        assert http.get("/v1/projects/backwards/subscriptions/gold").json()["spec"]["api"] == "carts"


def test_apply_stops_at_a_refusal_keeping_what_was_stored_and_sending_nothing_after(server: ServerProcess) -> None:
    manifest = BACKWARDS.replace("backwards", "halted").replace("port: 9001", "port: 99999")

    result = meshplane("apply", "-f", "-", server=server, stdin=manifest)

    _assert_clean_failure(result, "apis/carts -p halted: 422", "spec.backends[0].port", "1 more document not sent")
    assert result.stdout.splitlines() == ["projects/halted created", "applications/shopper -p halted created"]
    with server.http() as http:
        assert http.get("/v1/projects/halted/applications/shopper").status_code == 200
        assert http.get("/v1/projects/halted/subscriptions/gold").status_code == 404


def test_delete_of_a_file_removes_its_objects_projects_last(server: ServerProcess) -> None:
    manifest = BACKWARDS.replace("backwards", "teardown")
    assert meshplane("apply", "-f", "-", server=server, stdin=manifest).returncode == 0

    result = meshplane("delete", "-f", "-", server=server, stdin=manifest)
    again = meshplane("delete", "-f", "-", server=server, stdin=manifest)
    ignored = meshplane("delete", "-f", "-", "--ignore-not-found", server=server, stdin=manifest)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "subscriptions/gold -p teardown deleted",
        "applications/shopper -p teardown deleted",
        "apis/carts -p teardown deleted",
        "projects/teardown deleted",
    ]
    with server.http() as http:
        assert http.get("/v1/projects/teardown").status_code == 404
    _assert_clean_failure(again, "subscriptions/gold -p teardown: 404", "3 more documents not sent")
    assert ignored.returncode == 0, ignored.stderr
    assert ignored.stdout == ""


@pytest.mark.parametrize("args", [[], ["api"], ["api", "orders", "-f", "-"]])
def test_delete_needs_a_kind_and_name_or_a_file(args: list[str]) -> None:
    result = meshplane("delete", *args, server="http://127.0.0.1:1")

    assert result.returncode == 2
    assert "KIND NAME, or -f FILE" in result.stderr


def test_apply_of_an_unknown_kind_fails_cleanly(server: ServerProcess) -> None:
    result = meshplane("apply", "-f", "-", server=server, stdin="kind: Gadget\nmetadata: {name: g}\nspec: {}\n")

    _assert_clean_failure(result, "Gadget")


def test_get_of_an_unknown_kind_fails_cleanly(server: ServerProcess) -> None:
    result = meshplane("get", "gadgets", server=server)

    _assert_clean_failure(result, "gadgets")


def test_apply_of_a_missing_file_fails_cleanly(tmp_path: Path) -> None:
    result = meshplane("apply", "-f", str(tmp_path / "absent.yaml"), server="http://127.0.0.1:1")

    _assert_clean_failure(result, "absent.yaml")


def test_unreachable_server_fails_with_a_clear_message() -> None:
    url = f"http://127.0.0.1:{free_port()}"

    result = meshplane("get", "apis", server=url)

    _assert_clean_failure(result, "cannot reach", url)


def test_agent_bootstrap_prints_an_envoy_bootstrap_for_the_node() -> None:
    result = meshplane("agent", "bootstrap", "--node-id", "gw-1", server=None)

    assert result.returncode == 0, result.stderr
    bootstrap = yaml.safe_load(result.stdout)
    assert bootstrap["node"]["id"] == "gw-1"
    assert bootstrap["dynamic_resources"]["ads_config"]["api_type"] == "GRPC"
