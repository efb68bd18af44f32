"""Traffic intents through the server: write-time checks, per-cluster rendering, and agents receiving
exactly what their cluster needs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from meshplane.client import load_documents
from meshplane_testing.eventually import eventually
from meshplane_testing.meshplane import ServerProcess, run_agent, run_server
from meshplane_testing.races import object_path, race_puts, rival_apis

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "intents"
MANIFEST = "type.googleapis.com/meshplane.v1.Manifest"


def apply(http: httpx.Client, *files: str) -> None:
    for file in files:
        for doc in load_documents((EXAMPLES / file).read_text()):
            response = http.put(object_path(doc), json=doc)
            assert response.status_code in (200, 201), response.text


def manifests(http: httpx.Client, cluster: str) -> dict[str, dict]:
    items = http.get(f"/v1/clusters/{cluster}/resources").json()["items"]
    return {item["name"]: item for item in items if item["typeUrl"] == MANIFEST}


@pytest.fixture
def server(tmp_path: Path):  # type: ignore[no-untyped-def]
    with run_server(tmp_path) as process:
        yield process


def test_unknown_logical_cloud_and_unserved_route_are_refused_with_field_paths(server: ServerProcess) -> None:
    with server.http() as http:
        apply(http, "clusters.yaml")
        [intent] = load_documents((EXAMPLES / "external.yaml").read_text())
        intent["spec"]["placement"] = {"logicalCloud": "nowhere"}
        refused = http.put(object_path(intent), json=intent)
        assert refused.status_code == 422
        assert refused.json()["errors"][0]["path"] == "spec.placement.logicalCloud"

        [ingress] = load_documents((EXAMPLES / "user-facing.yaml").read_text())
        unserved = http.put(object_path(ingress), json=ingress)
        assert unserved.status_code == 422
        assert unserved.json()["errors"][0]["path"] == "spec.routes[0]"


def test_tls_passthrough_to_a_service_port_declared_http_is_refused(server: ServerProcess) -> None:
    """The gateway would hand the client's TLS bytes to a sidecar that expects HTTP on that port."""
    with server.http() as http:
        apply(http, "clusters.yaml", "service-to-service.yaml")
        [ingress] = load_documents((EXAMPLES / "user-facing.yaml").read_text())
        ingress["spec"]["entities"] = [{"name": "public", "tls": {"mode": "PASSTHROUGH"}}]
        refused = http.put(object_path(ingress), json=ingress)
        assert refused.status_code == 422, refused.text
        [error] = refused.json()["errors"]
        assert error["path"] == "spec.routes[0]" and "HTTP" in error["message"]
        assert http.get(object_path(ingress)).status_code == 404


def test_a_port_an_ingress_passes_tls_to_cannot_become_http(server: ServerProcess) -> None:
    with server.http() as http:
        apply(http, "clusters.yaml")
        vault = {
            "apiVersion": "meshplane.io/v1alpha1",
            "kind": "ServiceIntent",
            "metadata": {"name": "vault", "project": "shop"},
            "spec": {
                "service": {"name": "vault", "port": 8443, "protocol": "TLS"},
                "placement": {"logicalCloud": "retail"},
            },
        }
        assert http.put(object_path(vault), json=vault).status_code == 201
        [ingress] = load_documents((EXAMPLES / "user-facing.yaml").read_text())
        ingress["spec"]["entities"] = [{"name": "public", "tls": {"mode": "PASSTHROUGH"}}]
        ingress["spec"]["routes"] = [{"match": {"prefix": "/"}, "to": {"service": "vault", "port": 8443}}]
        assert http.put(object_path(ingress), json=ingress).status_code == 201

        vault["spec"]["service"]["protocol"] = "HTTP"
        refused = http.put(object_path(vault), json=vault)
        assert refused.status_code == 422, refused.text
        [error] = refused.json()["errors"]
        assert error["path"] == "spec.service.protocol" and "IngressIntent storefront" in error["message"]
        assert http.get(object_path(vault)).json()["spec"]["service"]["protocol"] == "TLS"


def test_a_zone_apex_that_could_only_be_a_cname_is_refused_with_its_host(server: ServerProcess) -> None:
    with server.http() as http:
        apply(http, "clusters.yaml", "service-to-service.yaml")
        for name in ("edge-1", "edge-2"):
            cluster = http.get(f"/v1/clusters/{name}").json()
            cluster["spec"]["ingressGateway"] = {"addresses": [f"lb-{name}.cloud.test"]}
            assert http.put(f"/v1/clusters/{name}", json=cluster).status_code == 200
        [ingress] = load_documents((EXAMPLES / "user-facing.yaml").read_text())
        ingress["spec"]["hosts"] = ["example.com"]
        refused = http.put(object_path(ingress), json=ingress)
        assert refused.status_code == 422, refused.text
        errors = refused.json()["errors"]  # one per DNS server publishing the zone
        assert [e["path"] for e in errors] == ["spec.hosts[0]"] * 2
        assert all("apex of zone example.com" in e["message"] and "CNAME" in e["message"] for e in errors)
        assert http.get(object_path(ingress)).status_code == 404


def test_two_intents_cannot_claim_one_host(server: ServerProcess) -> None:
    with server.http() as http:
        apply(http, "clusters.yaml", "service-to-service.yaml", "user-facing.yaml")
        [ingress] = load_documents((EXAMPLES / "user-facing.yaml").read_text())
        ingress["metadata"]["name"] = "storefront-copy"
        taken = http.put(object_path(ingress), json=ingress)
        assert taken.status_code == 409
        assert "shop.example.com" in taken.json()["detail"]


def test_of_concurrent_claims_on_one_host_or_route_one_is_accepted(server: ServerProcess) -> None:
    """Through the server's own write path (its in-memory catalog of APIs): racing writes take turns."""
    with server.http() as http:
        apply(http, "clusters.yaml", "service-to-service.yaml")
    [ingress] = load_documents((EXAMPLES / "user-facing.yaml").read_text())
    ingresses = [{**ingress, "metadata": {**ingress["metadata"], "name": f"storefront-{n}"}} for n in range(6)]

    for rivals in (ingresses, rival_apis("shop", 6)):
        codes = race_puts([server], rivals)
        assert sorted(codes) == [201] + [409] * (len(rivals) - 1), codes


def test_an_intent_change_reaches_exactly_the_clusters_that_need_it(server: ServerProcess, tmp_path: Path) -> None:
    with server.http() as http:
        apply(http, "clusters.yaml", "service-to-service.yaml", "external.yaml", "user-facing.yaml")
        eventually(
            lambda: "sa/cart" in json.dumps(manifests(http, "edge-1").get("shop/AuthorizationPolicy/orders-allow"))
        )
        eventually(lambda: any("storefront" in name for name in manifests(http, "edge-2")))
        before = {c: manifests(http, c) for c in ("edge-1", "edge-2", "core-1")}

        # cart loses its access to orders: the rules for it go everywhere, and core-1 (ops) is untouched.
        intent = http.get("/v1/projects/shop/serviceintents/orders").json()
        intent["spec"]["clients"] = [c for c in intent["spec"]["clients"] if "service" not in c]
        assert http.put("/v1/projects/shop/serviceintents/orders", json=intent).status_code == 200
        eventually(
            lambda: "sa/cart" not in json.dumps(manifests(http, "edge-1").get("shop/AuthorizationPolicy/orders-allow"))
        )
        after = {c: manifests(http, c) for c in ("edge-1", "edge-2", "core-1")}

        assert after["core-1"] == before["core-1"]
        for cluster in ("edge-1", "edge-2"):
            orders_objects = {n: i for n, i in after[cluster].items() if "orders" in n and "orders-ops" not in n}
            assert "sa/cart" not in json.dumps(orders_objects), cluster

        # Deleting an intent removes what it rendered, everywhere.
        assert http.delete("/v1/projects/shop/egressintents/payments-provider").status_code == 200
        for cluster in ("edge-1", "edge-2"):
            eventually(lambda c=cluster: not any("payments-provider" in name for name in manifests(http, c)))

        with run_agent(tmp_path, "edge-2", server) as agent:

            def held() -> set[str]:
                dump = httpx.get(f"http://{agent.admin_address}/config_dump", timeout=5).json()
                return {o["name"] for o in dump.get("objects", []) if o.get("typeUrl") == MANIFEST}

            eventually(lambda: held() == set(manifests(http, "edge-2")))


def test_a_clusters_resources_print_as_yaml_the_same_as_the_offline_render(server: ServerProcess) -> None:
    files = ["clusters.yaml", "service-to-service.yaml", "external.yaml", "user-facing.yaml"]
    with server.http() as http:
        apply(http, *files)
        eventually(lambda: any("storefront" in name for name in manifests(http, "edge-1")))
        served = list(yaml.safe_load_all(http.get("/v1/clusters/edge-1/resources", params={"output": "yaml"}).text))

    offline = subprocess.run(
        [
            sys.executable,
            "-m",
            "meshplane",
            "render",
            *(a for f in files for a in ("-f", str(EXAMPLES / f))),
            "--cluster",
            "edge-1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    rendered = list(yaml.safe_load_all(offline.stdout))
    assert [o for o in served if o["apiVersion"] != "meshplane.io/v1alpha1"] == rendered
    assert {o["kind"] for o in rendered} >= {"ServiceEntry", "Sidecar", "Gateway", "VirtualService", "DNSEndpoint"}

    unknown = subprocess.run(
        [sys.executable, "-m", "meshplane", "render", "-f", str(EXAMPLES / "clusters.yaml"), "--cluster", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert unknown.returncode == 1
    assert "nope" in unknown.stderr
