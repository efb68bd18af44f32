"""The agent in a pod: the API server's address from the environment, the service account's CA and
token from its directory (a temporary one here), and a token that rotates read again."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from meshplane.agent import kubernetes
from meshplane.agent.kube import KubeClient
from meshplane.agent.kube.serviceaccount import NotInCluster, ServiceAccountToken, in_pod
from meshplane.config import AgentSettings
from meshplane.security.ca import create_ca

POD_ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "8443"}


@pytest.fixture
def account(tmp_path: Path) -> Path:
    """What the kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount."""
    (tmp_path / "ca.crt").write_bytes(create_ca().certificate_pem())
    (tmp_path / "token").write_text("first\n")
    (tmp_path / "namespace").write_text("meshplane-system")
    return tmp_path


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_the_client_talks_to_the_service_address_as_the_service_account(account: Path) -> None:
    client = KubeClient.in_cluster(account, POD_ENV)
    try:
        assert str(client.http.base_url) == "https://10.96.0.1:8443"
        assert isinstance(client.http.auth, ServiceAccountToken)
        assert client.http.auth.path == account / "token"
    finally:
        await client.close()
    ipv6 = KubeClient.in_cluster(account, {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"})
    try:
        assert str(ipv6.http.base_url) == "https://[fd00::1]:6443"
    finally:
        await ipv6.close()


def test_outside_a_pod_there_is_no_in_cluster_client(account: Path) -> None:
    with pytest.raises(NotInCluster, match="KUBERNETES_SERVICE_HOST"):
        KubeClient.in_cluster(account, {})
    (account / "token").unlink()
    with pytest.raises(NotInCluster, match="token"):
        KubeClient.in_cluster(account, POD_ENV)
    assert not in_pod(POD_ENV, account)
    (account / "token").write_text("again")
    assert in_pod(POD_ENV, account)
    assert not in_pod({}, account)


async def test_a_rotated_token_is_read_again_after_the_refresh_period(account: Path) -> None:
    clock = Clock()
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"])
        return httpx.Response(200, json={})

    auth = ServiceAccountToken(account / "token", refresh=60, clock=clock)
    async with httpx.AsyncClient(auth=auth, transport=httpx.MockTransport(handler), base_url="https://k") as http:
        await http.get("/api")
        (account / "token").write_text("second")
        clock.now += 30
        await http.get("/api")
        clock.now += 31
        await http.get("/api")
    assert seen == ["Bearer first", "Bearer first", "Bearer second"]


async def test_a_401_reads_the_token_again_and_retries_once(account: Path) -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"])
        return httpx.Response(200 if request.headers["Authorization"] == "Bearer second" else 401, json={})

    auth = ServiceAccountToken(account / "token", refresh=3600, clock=Clock())
    async with httpx.AsyncClient(auth=auth, transport=httpx.MockTransport(handler), base_url="https://k") as http:
        await http.get("/api")  # reads "first": refused, and the file has not changed
        (account / "token").write_text("second")
        response = await http.post("/api", json={"a": 1})
    assert response.status_code == 200
    assert seen == ["Bearer first", "Bearer first", "Bearer second"]


def test_the_agent_uses_its_pod_s_service_account_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(KubeClient, "in_cluster", classmethod(lambda cls: "in-cluster"))
    monkeypatch.setattr(KubeClient, "from_kubeconfig", classmethod(lambda cls, path: "file"))
    for in_a_pod, flag, kubeconfig, expected in [
        (True, None, None, "in-cluster"),
        (False, None, None, None),
        (True, False, None, None),
        (False, True, None, "in-cluster"),
        (True, None, tmp_path / "kubeconfig", "file"),
        (True, True, tmp_path / "kubeconfig", "file"),
    ]:
        monkeypatch.setattr(kubernetes, "in_pod", lambda environ, found=in_a_pod: found)
        settings = AgentSettings(in_cluster=flag, kubeconfig=kubeconfig)
        assert kubernetes.kube_client(settings) == expected, (in_a_pod, flag, kubeconfig)
