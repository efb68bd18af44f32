"""The test cluster the Gateway API conformance suite runs on: Deployments become Pods that run, at their
IPs, with EndpointSlices naming them, and go away when scaled down; a Pod it cannot run says why."""

from __future__ import annotations

import base64
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from meshplane.gatewayapi.state import CONTROLLER_NAME
from meshplane.security.ca import create_ca, issue_server_certificate
from meshplane_testing import conformance
from meshplane_testing.eventually import eventually
from meshplane_testing.kube import KubeAPIServer, KubeError
from meshplane_testing.kube_cluster import COREDNS_IMAGE, ECHO_IMAGE, KubeCluster, start_kube_cluster
from meshplane_testing.kube_nodes import wait_for_pods_ready

GATEWAY_API = "/apis/gateway.networking.k8s.io/v1"
ECHO_PORT = 3000
POD_TIMEOUT = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    with start_kube_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running


class AcceptingController:
    """Marks every GatewayClass of meshplane's controller Accepted and every Gateway Accepted and Programmed
    at its generation, serving nothing: enough for the suite's Setup to get to its tests."""

    def __init__(self, api: KubeAPIServer):
        self.api = api
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="accepting-controller", daemon=True)

    def __enter__(self) -> AcceptingController:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        with self.api.client() as client:
            while not self._stop.wait(0.2):
                classes = client.get(f"{GATEWAY_API}/gatewayclasses").json()["items"]
                for gateway_class in classes:
                    if gateway_class["spec"]["controllerName"] == CONTROLLER_NAME:
                        self._accept(
                            client,
                            f"{GATEWAY_API}/gatewayclasses/{gateway_class['metadata']['name']}",
                            gateway_class,
                            ("Accepted",),
                        )
                for index, gateway in enumerate(client.get(f"{GATEWAY_API}/gateways").json()["items"]):
                    metadata = gateway["metadata"]
                    path = f"{GATEWAY_API}/namespaces/{metadata['namespace']}/gateways/{metadata['name']}"
                    addresses = [{"type": "IPAddress", "value": f"127.77.1.{10 + index}"}]
                    self._accept(client, path, gateway, ("Accepted", "Programmed"), addresses=addresses)

    @staticmethod
    def _accept(
        client: httpx.Client, path: str, resource: dict[str, Any], kinds: tuple[str, ...], **status: Any
    ) -> None:
        generation = resource["metadata"]["generation"]
        conditions = (resource.get("status") or {}).get("conditions") or []
        if conditions and all(c["status"] == "True" and c.get("observedGeneration") == generation for c in conditions):
            return
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status["conditions"] = [
            {
                "type": kind,
                "status": "True",
                "reason": kind,
                "message": "",
                "lastTransitionTime": now,
                "observedGeneration": generation,
            }
            for kind in kinds
        ]
        client.patch(
            f"{path}/status", json={"status": status}, headers={"Content-Type": "application/merge-patch+json"}
        )


@pytest.fixture
def namespace(cluster: KubeCluster) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.api.create_namespace(name)
    return name


def deployment(namespace: str, name: str, replicas: int, image: str) -> dict[str, Any]:
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": name, "image": image, "env": env}]},
            },
        },
    }


def service(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"app": name}, "ports": [{"protocol": "TCP", "port": 8080, "targetPort": ECHO_PORT}]},
    }


def pods_of(api: KubeAPIServer, namespace: str, selector: str) -> list[dict[str, Any]]:
    with api.client() as client:
        response = client.get(f"/api/v1/namespaces/{namespace}/pods", params={"labelSelector": selector})
    if response.status_code != 200:
        raise KubeError(response)
    return response.json()["items"]


def slice_addresses(api: KubeAPIServer, namespace: str, service_name: str) -> set[str]:
    """The ready endpoint addresses of the Service's EndpointSlices."""
    with api.client() as client:
        response = client.get(
            f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
            params={"labelSelector": f"kubernetes.io/service-name={service_name}"},
        )
    if response.status_code != 200:
        raise KubeError(response)
    return {
        address
        for endpoint_slice in response.json()["items"]
        for endpoint in endpoint_slice.get("endpoints") or []
        if (endpoint.get("conditions") or {}).get("ready")
        for address in endpoint["addresses"]
    }


def test_a_deployment_runs_as_ready_pods_that_answer_at_their_ips_and_are_published_in_endpoint_slices(
    cluster: KubeCluster, namespace: str
) -> None:
    api = cluster.api
    api.apply(f"/apis/apps/v1/namespaces/{namespace}/deployments/echo", deployment(namespace, "echo", 2, ECHO_IMAGE))
    api.apply(f"/api/v1/namespaces/{namespace}/services/echo", service(namespace, "echo"))

    pods = wait_for_pods_ready(api, namespace, "app=echo", count=2, timeout=POD_TIMEOUT)

    ips = {pod["status"]["podIP"]: pod["metadata"]["name"] for pod in pods}
    assert len(ips) == 2, f"two pods, two addresses: {ips}"
    assert {pod["spec"]["nodeName"] for pod in pods} <= {"node-1", "node-2"}
    eventually(
        lambda: slice_addresses(api, namespace, "echo") == set(ips),
        timeout=POD_TIMEOUT,
        what=f"an EndpointSlice of echo listing {sorted(ips)}",
    )
    for ip, name in ips.items():
        echoed = httpx.get(f"http://{ip}:{ECHO_PORT}/anything", timeout=5).json()
        assert (echoed["pod"], echoed["namespace"], echoed["path"]) == (name, namespace, "/anything")


def test_a_pods_log_is_read_through_the_api_server(cluster: KubeCluster, namespace: str) -> None:
    """As the conformance suite's mirror tests read the echo servers': `pods/log`, served by the node stand-in."""
    api = cluster.api
    api.apply(f"/apis/apps/v1/namespaces/{namespace}/deployments/talk", deployment(namespace, "talk", 1, ECHO_IMAGE))
    [pod] = wait_for_pods_ready(api, namespace, "app=talk", count=1, timeout=POD_TIMEOUT)
    name, ip = pod["metadata"]["name"], pod["status"]["podIP"]
    httpx.get(f"http://{ip}:{ECHO_PORT}/logged-request", timeout=5)

    def logged() -> str | None:
        with api.client() as client:
            response = client.get(f"/api/v1/namespaces/{namespace}/pods/{name}/log", params={"container": "talk"})
        assert response.status_code == 200, response.text
        return response.text if "/logged-request" in response.text else None

    assert "Starting server" in eventually(logged, timeout=10, what="the echo server's log naming the request")
    with api.client() as client:
        missing = client.get(f"/api/v1/namespaces/{namespace}/pods/{name}/log", params={"container": "other"})
    assert missing.status_code == 400, "a container the pod does not have"


def test_scaling_a_deployment_to_zero_stops_its_processes(cluster: KubeCluster, namespace: str) -> None:
    api = cluster.api
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/scaled"
    api.apply(path, deployment(namespace, "scaled", 2, ECHO_IMAGE))
    pods = wait_for_pods_ready(api, namespace, "app=scaled", count=2, timeout=POD_TIMEOUT)
    processes = [
        process
        for key, found in cluster.nodes.pod_processes().items()
        if key.startswith(f"{namespace}/")
        for process in found
    ]
    assert len(processes) == 2 and all(process.alive() for process in processes)

    api.apply(path, deployment(namespace, "scaled", 0, ECHO_IMAGE))

    eventually(
        lambda: not any(key.startswith(f"{namespace}/") for key in cluster.nodes.pod_processes()),
        timeout=POD_TIMEOUT,
        what=f"no process left of {namespace}",
    )
    assert not any(process.alive() for process in processes)
    eventually(lambda: not pods_of(api, namespace, "app=scaled"), timeout=POD_TIMEOUT, what="the pods deleted")
    for pod in pods:
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://{pod['status']['podIP']}:{ECHO_PORT}/", timeout=2)


def test_a_container_whose_process_exits_is_started_again(cluster: KubeCluster, namespace: str) -> None:
    api = cluster.api
    api.apply(
        f"/apis/apps/v1/namespaces/{namespace}/deployments/brittle", deployment(namespace, "brittle", 1, ECHO_IMAGE)
    )
    (first,) = wait_for_pods_ready(api, namespace, "app=brittle", count=1, timeout=POD_TIMEOUT)
    ((process,),) = [found for key, found in cluster.nodes.pod_processes().items() if key.startswith(f"{namespace}/")]

    process.kill()

    def restarted() -> dict[str, Any] | None:
        (pod,) = pods_of(api, namespace, "app=brittle")
        (status,) = pod["status"]["containerStatuses"]
        return pod if status["restartCount"] == 1 and status["ready"] else None

    pod = eventually(restarted, timeout=POD_TIMEOUT, what="the container started again and ready")
    assert pod["metadata"]["uid"] == first["metadata"]["uid"]
    echoed = httpx.get(f"http://{pod['status']['podIP']}:{ECHO_PORT}/", timeout=5).json()
    assert echoed["pod"] == pod["metadata"]["name"]


def test_coredns_runs_with_its_corefile_from_a_config_map_volume(cluster: KubeCluster, namespace: str) -> None:
    """As the suite's base manifests run it: `-conf /root/Corefile`, the ConfigMap mounted at /root."""
    api = cluster.api
    corefile = ".:53 {\n    whoami\n}\n"
    api.apply(
        f"/api/v1/namespaces/{namespace}/configmaps/coredns",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns"}, "data": {"Corefile": corefile}},
    )
    dns = deployment(namespace, "coredns", 1, f"{COREDNS_IMAGE}:v1.12.2")
    pod_spec = dns["spec"]["template"]["spec"]
    pod_spec["containers"][0].update(
        args=["-conf", "/root/Corefile"], volumeMounts=[{"name": "conf", "mountPath": "/root"}]
    )
    pod_spec["volumes"] = [{"name": "conf", "configMap": {"name": "coredns"}}]
    api.apply(f"/apis/apps/v1/namespaces/{namespace}/deployments/coredns", dns)

    (pod,) = wait_for_pods_ready(api, namespace, "app=coredns", count=1, timeout=POD_TIMEOUT)

    answer = dns_query(pod["status"]["podIP"], "example.org")
    assert answer[:2] == b"\x4d\x50" and answer[3] & 0x0F == 0, "an answer to our query, NOERROR"
    assert answer[7] or answer[11], "the whoami plugin answers with records"


def dns_query(server: str, name: str) -> bytes:
    """One A query over UDP (id 0x4d50, recursion desired), the raw answer."""
    question = b"".join(bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\x00\x00\x01\x00\x01"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5)
        sock.sendto(b"\x4d\x50\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + question, (server, 53))
        return sock.recv(512)


def test_a_pod_mounting_a_secret_created_after_it_waits_for_it_then_serves_tls_with_it(
    cluster: KubeCluster, namespace: str
) -> None:
    """As the suite's tls-backend: its Secret comes after the Deployment; env names files under the mount."""
    api = cluster.api
    backend = deployment(namespace, "tls", 1, f"{ECHO_IMAGE}:v1.5.1")
    pod_spec = backend["spec"]["template"]["spec"]
    pod_spec["containers"][0]["env"] += [
        {"name": "TLS_SERVER_CERT", "value": "/etc/secret-volume/crt"},
        {"name": "TLS_SERVER_PRIVKEY", "value": "/etc/secret-volume/key"},
    ]
    pod_spec["containers"][0]["volumeMounts"] = [{"name": "secret-volume", "mountPath": "/etc/secret-volume"}]
    items = [{"key": "tls.crt", "path": "crt"}, {"key": "tls.key", "path": "key"}]
    pod_spec["volumes"] = [{"name": "secret-volume", "secret": {"secretName": "tls-certificate", "items": items}}]
    api.apply(f"/apis/apps/v1/namespaces/{namespace}/deployments/tls", backend)

    def waiting_reason() -> str | None:
        statuses = [
            s for pod in pods_of(api, namespace, "app=tls") for s in pod["status"].get("containerStatuses") or []
        ]
        return next((s["state"]["waiting"]["reason"] for s in statuses if "waiting" in s["state"]), None)

    assert eventually(waiting_reason, timeout=POD_TIMEOUT, what="the pod waiting") == "ContainerCreating"
    serving = issue_server_certificate(create_ca(), ["abc.example.com"])
    data = {"tls.crt": serving.certificate_pem(), "tls.key": serving.key_pem()}
    api.apply(
        f"/api/v1/namespaces/{namespace}/secrets/tls-certificate",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "tls-certificate"},
            "type": "kubernetes.io/tls",
            "data": {key: base64.b64encode(value).decode() for key, value in data.items()},
        },
    )

    (pod,) = wait_for_pods_ready(api, namespace, "app=tls", count=1, timeout=POD_TIMEOUT)
    echoed = httpx.get(f"https://{pod['status']['podIP']}:8443/secure", verify=False, timeout=5).json()
    assert (echoed["pod"], echoed["path"]) == (pod["metadata"]["name"], "/secure")


def test_a_pod_whose_image_cannot_run_stays_pending_and_says_why(cluster: KubeCluster, namespace: str) -> None:
    api = cluster.api
    image = "registry.example/unknown/server:v1"
    api.apply(f"/apis/apps/v1/namespaces/{namespace}/deployments/odd", deployment(namespace, "odd", 1, image))

    def waiting() -> dict[str, Any] | None:
        pods = pods_of(api, namespace, "app=odd")
        statuses = [status for pod in pods for status in (pod.get("status") or {}).get("containerStatuses") or []]
        return next((status["state"]["waiting"] for status in statuses if "waiting" in status["state"]), None)

    state = eventually(waiting, timeout=POD_TIMEOUT, what="the pod's container waiting")
    assert state["reason"] == "ImageNotRunnable"
    assert image in state["message"]
    with api.client() as client:
        events = client.get(f"/api/v1/namespaces/{namespace}/events").json()["items"]
    assert [pod["status"]["phase"] for pod in pods_of(api, namespace, "app=odd")] == ["Pending"]
    assert any(event["reason"] == "ImageNotRunnable" and image in event["message"] for event in events)


def test_the_conformance_suite_sets_up_on_the_cluster_and_reports(cluster: KubeCluster, tmp_path: Path) -> None:
    """Its Setup waits for every base Pod (echo servers, TLS backends, CoreDNS) to be Ready; then one test
    that needs only GatewayClass status passes, and the report says so."""
    binary = conformance.suite_binary()
    api = cluster.api
    api.install_crds(conformance.gateway_api_crds())
    conformance.install_gateway_class(api)
    report = tmp_path / "report.yaml"
    suite_args = ["-run-test=GatewayClassObservedGenerationBump", f"-supported-features={conformance.CLAIMED_FEATURES}"]

    with AcceptingController(api):
        code = conformance.run_suite(binary, cluster, report, suite_args, tmp_path / "suite.log")

    log = (tmp_path / "suite.log").read_text()
    assert "Gateways and Pods in gateway-conformance-infra" in log, log[-3000:]
    assert code == 0, log[-3000:]
    profiles = {profile["name"]: profile for profile in yaml.safe_load(report.read_text())["profiles"]}
    assert profiles["GATEWAY-HTTP"]["core"]["statistics"]["Passed"] == 1
    assert "GatewayClassObservedGenerationBump" not in (profiles["GATEWAY-HTTP"]["core"].get("failedTests") or [])
