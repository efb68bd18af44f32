"""Revoking an agent certificate: every replica on the store refuses it within seconds and ends the
streams it holds, by serial, so the cluster's re-issued certificate keeps working."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc
from meshplane.security.ca import load_certificate
from meshplane_testing import documents
from meshplane_testing.meshplane import MESHPLANE, ServerProcess, run_replica, run_server
from meshplane_testing.sync_probe import API_TYPE

pytestmark = pytest.mark.timeout(120)

REFUSED = {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED}


@pytest.fixture
def replicas(tmp_path: Path, shared_database: str) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two replicas on one store, and an API placed on edge-x and edge-y, so that their streams get an answer."""
    with run_server(tmp_path, shared_database, name="a") as a, run_replica(tmp_path, a, shared_database, "b") as b:
        api = documents.api(
            "orders", backends=[documents.backend(9001, host="10.0.0.1")], placement={"clusters": ["edge-x", "edge-y"]}
        )
        with a.http() as http:
            assert http.put("/v1/projects/default/apis/orders", json=api).status_code == 201
        yield a, b


def certs(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [*MESHPLANE, "certs", *args, "--data-dir", str(server.data_dir)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False, env=server.cli_env)
    assert done.returncode == 0, done.stderr
    return done


@asynccontextmanager
async def sync_stream(
    server: ServerProcess, cluster: str, credentials: grpc.ChannelCredentials
) -> AsyncIterator[grpc.aio.StreamStreamCall]:
    """An agent's sync stream, open: registered, as an agent does, and the server's first answer read."""
    async with grpc.aio.secure_channel(server.grpc_address, credentials) as channel:
        register = control_plane_pb2.RegisterClusterRequest(cluster=cluster)
        await control_plane_pb2_grpc.ControlPlaneStub(channel).RegisterCluster(register, timeout=10)
        call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).DeltaAggregatedResources()
        await call.write(discovery_pb2.DeltaDiscoveryRequest(node=base_pb2.Node(id=cluster), type_url=API_TYPE))
        assert isinstance(await asyncio.wait_for(call.read(), 10), discovery_pb2.DeltaDiscoveryResponse)
        try:
            yield call
        finally:
            call.cancel()


async def ended_with(call: grpc.aio.StreamStreamCall, seconds: float) -> grpc.StatusCode:
    """How the server ended the stream, waiting at most `seconds`."""
    async with asyncio.timeout(seconds):
        while True:
            try:
                if await call.read() is grpc.aio.EOF:
                    return await call.code()
            except grpc.aio.AioRpcError as exc:
                return exc.code()


async def report(server: ServerProcess, cluster: str, credentials: grpc.ChannelCredentials) -> None:
    async with grpc.aio.secure_channel(server.grpc_address, credentials) as channel:
        stub = control_plane_pb2_grpc.ControlPlaneStub(channel)
        await stub.ReportStatus(control_plane_pb2.ReportStatusRequest(cluster=cluster), timeout=10)


async def refusal(server: ServerProcess, cluster: str, credentials: grpc.ChannelCredentials) -> grpc.StatusCode:
    """The code a new connection with `credentials` is refused with, for a stream and for a report."""
    codes = set()
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await report(server, cluster, credentials)
    codes.add(refused.value.code())
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        async with sync_stream(server, cluster, credentials):
            pass
    codes.add(refused.value.code())
    assert len(codes) == 1, codes
    return codes.pop()


async def test_a_revoked_certificate_is_cut_off_on_every_replica_and_its_reissue_works(
    replicas: tuple[ServerProcess, ServerProcess],
) -> None:
    a, b = replicas
    old = a.agent_credentials("edge-x")
    old_serial = format(load_certificate(a.pki.agent_files("edge-x").certificate).serial_number, "x")
    other = a.agent_credentials("edge-y")

    async with (
        sync_stream(a, "edge-x", old) as on_a,
        sync_stream(b, "edge-x", old) as on_b,
        sync_stream(a, "edge-y", other) as bystander,
    ):
        revoked = certs(a, "revoke-agent", "--cluster", "edge-x")
        assert old_serial in revoked.stdout

        assert await ended_with(on_a, 10) in REFUSED
        assert await ended_with(on_b, 10) in REFUSED
        assert not bystander.done()
        await report(a, "edge-y", other)

    for replica in (a, b):
        assert await refusal(replica, "edge-x", old) in REFUSED

    reissued = certs(a, "issue-agent", "--cluster", "edge-x")
    new = a.agent_credentials("edge-x")
    new_serial = format(load_certificate(a.pki.agent_files("edge-x").certificate).serial_number, "x")
    assert new_serial != old_serial
    assert new_serial in reissued.stdout
    for replica in (a, b):
        async with sync_stream(replica, "edge-x", new):
            await report(replica, "edge-x", new)
        assert await refusal(replica, "edge-x", old) in REFUSED


async def test_revoking_needs_an_admin_and_names_a_serial(
    replicas: tuple[ServerProcess, ServerProcess], tmp_path: Path
) -> None:
    a, _ = replicas
    with a.http() as http:
        viewer = http.post("/v1/tokens", json={"name": "looker", "role": "viewer"}).json()["token"]
        as_viewer = http.post(
            "/v1/certificaterevocations",
            json={"cluster": "edge-x", "serial": "abc123"},
            headers={"Authorization": f"Bearer {viewer}"},
        )
        not_hex = http.post("/v1/certificaterevocations", json={"cluster": "edge-x", "serial": "xyz"})
        done = http.post("/v1/certificaterevocations", json={"cluster": "edge-x", "serial": "abc123"})
        again = http.post("/v1/certificaterevocations", json={"cluster": "edge-x", "serial": "abc123"})
        listed = http.get("/v1/certificaterevocations").json()["items"]
        deleted = http.delete("/v1/certificaterevocations/abc123")

    assert as_viewer.status_code == 403, as_viewer.text
    assert not_hex.status_code == 422
    assert not_hex.headers["content-type"].startswith("application/problem+json")
    assert "serial" in not_hex.text
    assert done.status_code == 201, done.text
    assert again.status_code == 200, again.text
    assert [(item["metadata"]["name"], item["spec"]["cluster"]) for item in listed] == [("abc123", "edge-x")]
    assert deleted.status_code == 405


def test_revoke_agent_says_what_is_wrong_without_a_traceback(tmp_path: Path) -> None:
    with run_server(tmp_path) as server:
        with server.http() as http:
            viewer = http.post("/v1/tokens", json={"name": "looker", "role": "viewer"}).json()["token"]
        server.pki.ensure_agent("edge-x")
        argv = [*MESHPLANE, "certs", "revoke-agent", "--data-dir", str(server.data_dir)]

        def run(*args: str, token: str = server.token) -> subprocess.CompletedProcess[str]:
            env = {**server.cli_env, "MESHPLANE_TOKEN": token}
            return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=30, check=False, env=env)

        not_hex = run("--cluster", "edge-x", "--serial", "zz")
        unknown = run("--cluster", "edge-q")
        as_viewer = run("--cluster", "edge-x", token=viewer)

    for refused in (not_hex, unknown, as_viewer):
        assert refused.returncode == 1
        assert "Traceback" not in refused.stderr
    assert "'zz' is not a hexadecimal serial number" in not_hex.stderr
    assert "give its --serial" in unknown.stderr
    assert "403" in as_viewer.stderr
