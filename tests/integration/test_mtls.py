"""Mutual TLS on the agent ↔ server link, against a real server process.

An agent's certificate names its cluster; the server serves and hears that cluster only, and talks to
nobody without a certificate from its CA. `--insecure` turns all of this off and says so.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import grpc
import httpx
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc
from meshplane.security.ca import Pki
from meshplane_testing import documents
from meshplane_testing.eventually import eventually
from meshplane_testing.meshplane import MESHPLANE, ServerProcess, run_agent, run_server
from meshplane_testing.process import free_port, running
from meshplane_testing.sync_probe import API_TYPE, SyncProbe

pytestmark = pytest.mark.timeout(90)


def cluster_connected(server: ServerProcess, cluster: str) -> bool:
    response = httpx.get(f"{server.url}/v1/clusters/{cluster}", headers=server.headers, timeout=5)
    return response.status_code == 200 and response.json().get("status", {}).get("connected") is True


async def first_delta_answer(channel: grpc.aio.Channel, node_id: str) -> discovery_pb2.DeltaDiscoveryResponse:
    """Open the ADS stream as `node_id` and read the server's first answer."""
    call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).DeltaAggregatedResources(timeout=10)
    await call.write(discovery_pb2.DeltaDiscoveryRequest(node=base_pb2.Node(id=node_id), type_url=API_TYPE))
    try:
        return await call.read()
    finally:
        call.cancel()


async def register(channel: grpc.aio.Channel, cluster: str) -> None:
    stub = control_plane_pb2_grpc.ControlPlaneStub(channel)
    await stub.RegisterCluster(control_plane_pb2.RegisterClusterRequest(cluster=cluster), timeout=10)


def client_credentials(issuer: Pki, cluster: str, trust: Path) -> grpc.ChannelCredentials:
    """A certificate for `cluster` from `issuer`, trusting the server certificates that `trust` signed."""
    files = issuer.ensure_agent(cluster)
    return grpc.ssl_channel_credentials(trust.read_bytes(), files.key.read_bytes(), files.certificate.read_bytes())


def test_the_server_creates_its_ca_and_certificate_on_first_start(server: ServerProcess) -> None:
    pki = server.pki
    for path in (pki.ca_certificate, pki.ca_key, pki.server_files().certificate, pki.server_files().key):
        assert path.exists(), path
    assert "INSECURE" not in server.process.log()


def test_an_agent_with_a_certificate_for_its_cluster_syncs(server: ServerProcess, tmp_path: Path) -> None:
    server.put(documents.api("orders", placement={"clusters": ["edge-1"]}))
    with run_agent(tmp_path, "edge-1", server) as agent:
        eventually(lambda: cluster_connected(server, "edge-1"), timeout=20, what="edge-1 to be connected")
        eventually(lambda: '"upserts": 1' in agent.process.log(), timeout=20, what="the agent to apply the API")
    assert "PERMISSION_DENIED" not in agent.process.log()


async def test_a_certificate_for_one_cluster_receives_that_cluster_only(server: ServerProcess) -> None:
    server.put(documents.api("billing", placement={"clusters": ["edge-1"]}))
    probe = SyncProbe(server.grpc_address, "edge-1", credentials=server.agent_credentials("edge-1"))
    await probe.register()
    await probe.sync_until(lambda p: "default/billing" in p.names())


async def test_a_certificate_for_edge_1_cannot_subscribe_as_edge_2(server: ServerProcess) -> None:
    async with grpc.aio.secure_channel(server.grpc_address, server.agent_credentials("edge-1")) as channel:
        assert isinstance(await first_delta_answer(channel, "edge-1"), discovery_pb2.DeltaDiscoveryResponse)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await first_delta_answer(channel, "edge-2")

    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert refused.value.details() == "certificate is for cluster 'edge-1', not 'edge-2'"


async def test_a_certificate_for_edge_1_cannot_report_for_edge_2(server: ServerProcess) -> None:
    calls = {
        "RegisterCluster": control_plane_pb2.RegisterClusterRequest(cluster="edge-2"),
        "ReportStatus": control_plane_pb2.ReportStatusRequest(cluster="edge-2", idempotency_key="k1"),
        "ReportObjects": control_plane_pb2.ReportObjectsRequest(cluster="edge-2", idempotency_key="k2"),
    }
    async with grpc.aio.secure_channel(server.grpc_address, server.agent_credentials("edge-1")) as channel:
        stub = control_plane_pb2_grpc.ControlPlaneStub(channel)
        await register(channel, "edge-1")
        for method, request in calls.items():
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await getattr(stub, method)(request, timeout=10)
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED, method
            assert "certificate is for cluster 'edge-1', not 'edge-2'" in (refused.value.details() or "")

    async with httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=10) as rest:
        assert (await rest.get("/v1/clusters/edge-2")).status_code == 404


@pytest.mark.parametrize("client", ["plaintext", "no certificate", "certificate from another CA"])
async def test_a_client_without_a_certificate_from_the_servers_ca_cannot_connect(
    server: ServerProcess, tmp_path: Path, client: str
) -> None:
    trust = server.pki.ca_certificate
    if client == "plaintext":
        channel = grpc.aio.insecure_channel(server.grpc_address)
    elif client == "no certificate":
        channel = grpc.aio.secure_channel(server.grpc_address, grpc.ssl_channel_credentials(trust.read_bytes()))
    else:
        channel = grpc.aio.secure_channel(
            server.grpc_address, client_credentials(Pki(tmp_path / "rogue"), "edge-1", trust)
        )

    async with channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await register(channel, "edge-1")

    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def test_issue_agent_prints_the_flags_an_agent_starts_with(server: ServerProcess, tmp_path: Path) -> None:
    out = str(tmp_path / "tls")
    issued = subprocess.run(
        [*MESHPLANE, "certs", "issue-agent", "--cluster", "edge-3", "--data-dir", str(server.data_dir), "--out", out],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert issued.returncode == 0, issued.stderr
    command = next(line.strip() for line in issued.stdout.splitlines() if line.strip().startswith("meshplane agent"))
    assert (tmp_path / "tls" / "edge-3.key").exists()

    argv = [sys.executable, "-m", *shlex.split(command)]
    argv += ["--server", server.grpc_address, "--state-dir", str(tmp_path / "state")]
    argv += ["--xds-address", f"127.0.0.1:{free_port()}", "--gateway-address", f"127.0.0.1:{free_port()}"]
    argv += ["--admin-address", f"127.0.0.1:{free_port()}"]
    with running(argv, tmp_path / "agent.log"):
        eventually(lambda: cluster_connected(server, "edge-3"), timeout=20, what="edge-3 to be connected")


def test_an_agent_without_a_certificate_refuses_to_start_and_says_how_to_get_one(tmp_path: Path) -> None:
    started = subprocess.run(
        [*MESHPLANE, "agent", "--cluster", "edge-1", "--state-dir", str(tmp_path / "state")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert started.returncode == 2
    assert "meshplane certs issue-agent --cluster edge-1" in started.stderr


async def test_an_insecure_server_warns_and_trusts_the_node_id(tmp_path: Path) -> None:
    with run_server(tmp_path, insecure=True) as insecure:
        insecure.put(documents.api("anything", placement={"clusters": ["edge-9"]}))
        probe = SyncProbe(insecure.grpc_address, "edge-9")
        await probe.register()
        await probe.sync_until(lambda p: "default/anything" in p.names())
        log = insecure.process.log()

    assert "INSECURE" in log
    assert not (tmp_path / "server" / "pki").exists()


def test_an_insecure_agent_syncs_with_an_insecure_server(tmp_path: Path) -> None:
    with run_server(tmp_path, insecure=True) as insecure, run_agent(tmp_path, "edge-1", insecure) as agent:
        eventually(lambda: cluster_connected(insecure, "edge-1"), timeout=20, what="edge-1 to be connected")
    assert "INSECURE" in agent.process.log()
