"""Certificate files are read again when they change, without dropping the link: an agent's renewed
certificate is used for new connections while its stream goes on, and a server's renewed certificate
is presented to new connections while existing streams go on."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import grpc
import pytest

from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc
from meshplane.security.ca import load_certificate
from meshplane_testing import documents
from meshplane_testing.eventually import eventually
from meshplane_testing.meshplane import MESHPLANE, AgentProcess, ServerProcess, run_agent, run_server

pytestmark = pytest.mark.timeout(120)

SYNC_STREAM = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
RENEWED_NAME = "renewed.meshplane.test"


def certs(server: ServerProcess, *args: str) -> str:
    argv = [*MESHPLANE, "certs", *args, "--data-dir", str(server.data_dir)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False, env=server.cli_env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def serial_of(path: Path) -> str:
    return format(load_certificate(path).serial_number, "x")


def place_api(server: ServerProcess, name: str, cluster: str) -> None:
    server.put(
        documents.api(name, backends=[documents.backend(9001, host="10.0.0.1")], placement={"clusters": [cluster]})
    )


def applied(server: ServerProcess, name: str) -> bool:
    with server.http() as http:
        entries = http.get(f"/v1/projects/default/apis/{name}").json().get("status", {}).get("clusters", [])
    return [entry["state"] for entry in entries] == ["Applied"]


def streams_ended(server: ServerProcess) -> float:
    """Sync streams this server has seen end, for whatever reason."""
    return server.scrape().total("meshplane_grpc_requests_total", method=SYNC_STREAM)


def streaming(server: ServerProcess, agent: AgentProcess, name: str) -> None:
    """The agent is connected and its stream carries a new change."""
    place_api(server, name, agent.cluster)
    eventually(lambda: applied(server, name), timeout=20, what=f"{agent.cluster} to apply {name}")


async def renewed_name_answers(server: ServerProcess, cluster: str) -> bool:
    """Whether a new connection finds the server certificate valid for RENEWED_NAME."""
    options = [("grpc.ssl_target_name_override", RENEWED_NAME)]
    channel = grpc.aio.secure_channel(server.grpc_address, server.agent_credentials(cluster), options=options)
    async with channel:
        try:
            stub = control_plane_pb2_grpc.ControlPlaneStub(channel)
            await stub.RegisterCluster(control_plane_pb2.RegisterClusterRequest(cluster=cluster), timeout=3)
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
            return False
    return True


def test_an_agent_keeps_streaming_through_a_renewal_and_reconnects_with_the_new_certificate(tmp_path: Path) -> None:
    with run_server(tmp_path) as server, run_agent(tmp_path, "edge-r", server) as agent:
        streaming(server, agent, "before")
        ended = streams_ended(server)
        tls_dir = tmp_path / "agent-edge-r-tls"
        old = serial_of(tls_dir / "edge-r.crt")

        certs(server, "issue-agent", "--cluster", "edge-r", "--out", str(tls_dir))
        assert serial_of(tls_dir / "edge-r.crt") != old
        streaming(server, agent, "during")
        assert streams_ended(server) == ended, "the stream was dropped by the renewal"

        certs(server, "revoke-agent", "--cluster", "edge-r", "--serial", old)
        eventually(
            lambda: streams_ended(server) > ended, timeout=10, what="the stream of the revoked certificate to end"
        )
        streaming(server, agent, "after")
        assert agent.process.alive()


async def test_a_renewed_server_certificate_reaches_new_connections_and_spares_open_streams(tmp_path: Path) -> None:
    with run_server(tmp_path) as server, run_agent(tmp_path, "edge-s", server) as agent:
        streaming(server, agent, "before")
        ended = streams_ended(server)
        assert not await renewed_name_answers(server, "edge-s")

        certs(server, "init", "--renew-server", "--server-name", RENEWED_NAME)

        for _ in range(50):
            if await renewed_name_answers(server, "edge-s"):
                break
        else:
            pytest.fail("new connections still get the old server certificate")
        streaming(server, agent, "after")
        assert streams_ended(server) == ended, "the agent's stream was dropped by the renewal"


def test_the_north_api_presents_its_renewed_certificate_to_new_connections(tmp_path: Path) -> None:
    with run_server(tmp_path, https=True) as server:
        presented = lambda: serial_of_pem(ssl.get_server_certificate(("127.0.0.1", server.http_port)))  # noqa: E731
        assert presented() == serial_of(server.pki.server_files().certificate)

        certs(server, "init", "--renew-server")
        renewed = serial_of(server.pki.server_files().certificate)

        eventually(lambda: presented() == renewed, timeout=10, what="the north API to present the renewed certificate")
        with server.http() as http:
            assert http.get("/readyz").status_code == 200


def serial_of_pem(pem: str) -> str:
    from cryptography import x509

    return format(x509.load_pem_x509_certificate(pem.encode()).serial_number, "x")
