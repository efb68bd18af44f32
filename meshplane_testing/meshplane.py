"""Run meshplane's own processes in tests: a server and agents, on free ports, always stopped.

They talk mutual TLS, as in production: the server creates its CA in its data directory, and each
agent gets a certificate for its cluster from that CA. `insecure=True` runs both in plaintext.
"""

from __future__ import annotations

import contextlib
import shutil
import ssl
import sys
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx

from meshplane.client import MeshplaneClient
from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc
from meshplane.security.ca import CertificateFiles, Pki
from meshplane_testing import documents
from meshplane_testing.metrics import Scrape
from meshplane_testing.north import put
from meshplane_testing.process import Process, free_port, port_open, running

MESHPLANE = [sys.executable, "-m", "meshplane"]


def _http_ok(url: str, trust: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=trust) as response:
            return response.status == 200
    except OSError:
        return False


@dataclass
class ServerProcess:
    process: Process
    http_port: int
    grpc_port: int
    data_dir: Path
    insecure: bool = False
    https: bool = False

    @property
    def url(self) -> str:
        return f"{'https' if self.https else 'http'}://127.0.0.1:{self.http_port}"

    def trust(self) -> ssl.SSLContext | None:
        """What verifies the north API's certificate when it serves HTTPS: the server's own CA."""
        return ssl.create_default_context(cafile=self.pki.ca_certificate) if self.https else None

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def pki(self) -> Pki:
        return Pki.of_data_dir(self.data_dir)

    @property
    def token(self) -> str:
        """The admin token the server wrote on its first start."""
        return (self.data_dir / "admin-token").read_text().strip()

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def cli_env(self) -> dict[str, str]:
        """What a `meshplane` CLI run needs to reach this server as its admin."""
        trust = {"MESHPLANE_CACERT": str(self.pki.ca_certificate)} if self.https else {}
        return {"MESHPLANE_SERVER": self.url, "MESHPLANE_TOKEN": self.token, **trust}

    def http(self, timeout: float | httpx.Timeout = 10.0) -> httpx.Client:
        """A client of the north API, signed in as the admin."""
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=timeout, verify=self.trust() or True)

    def client(self, timeout: float = 10.0) -> MeshplaneClient:
        """The typed client of the north API (the CLI's own), signed in as the admin."""
        return MeshplaneClient(self.url, self.token, timeout, self.pki.ca_certificate if self.https else None)

    def put(self, doc: dict[str, Any]) -> dict[str, Any]:
        """As the admin, create or replace `doc`, asserting the server took it; the stored object."""
        with self.http() as http:
            return put(http, doc)

    def scrape(self) -> Scrape:
        """The server's Prometheus metrics, read from the north API."""
        with self.http() as http:
            return Scrape(http.get("/metrics").raise_for_status().text)

    def bearer(self, role: str, project: str | None = None) -> dict[str, str]:
        """Headers of a new token of `role`, bound to `project` (None: every project), issued by the admin."""
        with self.http() as http:
            created = http.post("/v1/tokens", json={"name": f"{role}-{project}", "role": role, "project": project})
        assert created.status_code == 201, created.text
        return {"Authorization": f"Bearer {created.json()['token']}"}

    def allow_publishing(self, cluster: str, *projects: str) -> None:
        """As an admin, let `cluster` publish the objects made in it into `projects` (its Cluster's
        `spec.publish.projects`), creating the Cluster object if its agent has not registered yet."""
        with self.http() as http:
            shown = http.get(f"/v1/clusters/{cluster}")
            current = shown.json() if shown.status_code == 200 else {"metadata": {}, "spec": {}}
            labels = current["metadata"].get("labels", {})
            spec = {**current["spec"], "publish": {"projects": list(projects)}}
            put(http, documents.document("Cluster", cluster, labels=labels, spec=spec))

    def report_objects(self, cluster: str, *objects: control_plane_pb2.LocalObject) -> list[grpc.StatusCode]:
        """Report each object on its own as `cluster`'s agent would (with its certificate): each call's status."""
        credentials = self.agent_credentials(cluster)
        channel = (
            grpc.secure_channel(self.grpc_address, credentials)
            if credentials is not None
            else grpc.insecure_channel(self.grpc_address)
        )
        codes = []
        with channel:
            stub = control_plane_pb2_grpc.ControlPlaneStub(channel)
            for local in objects:
                try:
                    stub.ReportObjects(
                        control_plane_pb2.ReportObjectsRequest(cluster=cluster, objects=[local]), timeout=10
                    )
                    codes.append(grpc.StatusCode.OK)
                except grpc.RpcError as exc:
                    codes.append(exc.code())
        return codes

    def agent_credentials(self, cluster: str) -> grpc.ChannelCredentials | None:
        """Client TLS that speaks for `cluster` (issued by this server's CA); None for an insecure server."""
        if self.insecure:
            return None
        files = self.pki.ensure_agent(cluster)
        return grpc.ssl_channel_credentials(
            files.ca.read_bytes(), files.key.read_bytes(), files.certificate.read_bytes()
        )


@dataclass
class AgentProcess:
    process: Process
    cluster: str
    xds_port: int
    gateway_port: int
    admin_port: int

    @property
    def admin_address(self) -> str:
        return f"127.0.0.1:{self.admin_port}"


def server_argv(
    data_dir: Path, http_port: int, grpc_port: int, database_url: str | None = None, insecure: bool = False
) -> list[str]:
    argv = [
        *MESHPLANE,
        "server",
        "--data-dir",
        str(data_dir),
        "--http-address",
        f"127.0.0.1:{http_port}",
        "--grpc-address",
        f"127.0.0.1:{grpc_port}",
    ]
    return argv + (["--database-url", database_url] if database_url else []) + (["--insecure"] if insecure else [])


@contextlib.contextmanager
def run_server(
    tmp_path: Path,
    database_url: str | None = None,
    name: str = "server",
    ports: tuple[int, int] | None = None,
    insecure: bool = False,
    env: dict[str, str] | None = None,
    https: bool = False,
) -> Iterator[ServerProcess]:
    """A management server, its data (and CA) in tmp_path/<name>; `ports` (http, grpc) lets a test
    restart it where agents expect it; `env` sets MESHPLANE_* settings that have no flag. With `https`,
    the north API serves HTTPS with the server's own certificate (as `meshplane certs init` leaves it)."""
    http_port, grpc_port = ports or (free_port(), free_port())
    argv = server_argv(tmp_path / name, http_port, grpc_port, database_url, insecure)
    if https:
        files = Pki.of_data_dir(tmp_path / name).ensure_server()
        argv += ["--http-tls-cert", str(files.certificate), "--http-tls-key", str(files.key)]
    with running(argv, tmp_path / f"{name}.log", env) as process:
        server = ServerProcess(process, http_port, grpc_port, tmp_path / name, insecure, https)
        process.wait_ready(lambda: _http_ok(f"{server.url}/readyz", server.trust()), 30.0, "the server to be ready")
        yield server


@contextlib.contextmanager
def run_replica(tmp_path: Path, first: ServerProcess, database_url: str, name: str) -> Iterator[ServerProcess]:
    """Another replica of `first` on the same PostgreSQL store, with `first`'s CA, admin token and data key
    (given as `sealing_key_file`), as replicas share Secrets in a cluster (only the first writes a token); an
    insecure `first` has no CA to share."""
    (tmp_path / name).mkdir(parents=True, exist_ok=True)
    if not first.insecure:
        shutil.copytree(first.data_dir / "pki", tmp_path / name / "pki")
    shutil.copy(first.data_dir / "admin-token", tmp_path / name / "admin-token")
    env = {"MESHPLANE_SEALING_KEY_FILE": str(first.data_dir / "sealing" / "data-key")}
    with run_server(tmp_path, database_url, name=name, insecure=first.insecure, https=first.https, env=env) as replica:
        yield replica


def agent_tls_argv(files: CertificateFiles) -> list[str]:
    return ["--tls-cert", str(files.certificate), "--tls-key", str(files.key), "--tls-ca", str(files.ca)]


@contextlib.contextmanager
def run_agent(
    tmp_path: Path,
    cluster: str,
    server_grpc: str | ServerProcess | Sequence[ServerProcess],
    labels: dict[str, str] | None = None,
    insecure: bool | None = None,
    ports: tuple[int, int] | None = None,
    kubeconfig: Path | None = None,
    extra: Sequence[str] = (),
    allow_loopback_backends: bool = True,
) -> Iterator[AgentProcess]:
    """An agent for `cluster`, its state under tmp_path/agent-<cluster> (kept across restarts);
    `ports` (xds, gateway) lets a restarted agent come back where its Envoys expect it; with
    `kubeconfig`, it applies what it holds to that Kubernetes API server; `extra` adds flags.
    Tests run their upstreams on loopback, so the agent allows loopback backends unless told not to.

    Its certificate comes from the CA of `server_grpc` when that is a ServerProcess (or several replicas
    sharing a CA, all given to the agent); given only an address, from the CA in tmp_path/server
    (run_server's default), created there if the server has not started yet. `insecure` defaults to the
    server's.
    """
    if not isinstance(server_grpc, str | ServerProcess):
        pki, address = server_grpc[0].pki, ",".join(replica.grpc_address for replica in server_grpc)
        insecure = server_grpc[0].insecure if insecure is None else insecure
    elif isinstance(server_grpc, ServerProcess):
        pki, address = server_grpc.pki, server_grpc.grpc_address
        insecure = server_grpc.insecure if insecure is None else insecure
    else:
        pki, address = Pki.of_data_dir(tmp_path / "server"), server_grpc
    tls_dir = tmp_path / f"agent-{cluster}-tls"
    tls = ["--insecure"] if insecure else agent_tls_argv(pki.export_agent(cluster, tls_dir))
    xds_port, gateway_port = ports or (free_port(), free_port())
    admin_port = free_port()
    argv = [
        *MESHPLANE,
        "agent",
        "--cluster",
        cluster,
        "--server",
        address,
        "--state-dir",
        str(tmp_path / f"agent-{cluster}"),
        "--xds-address",
        f"127.0.0.1:{xds_port}",
        "--gateway-address",
        f"127.0.0.1:{gateway_port}",
        "--admin-address",
        f"127.0.0.1:{admin_port}",
        *tls,
    ]
    for key, value in (labels or {}).items():
        argv += ["--label", f"{key}={value}"]
    # Never the Kubernetes of a pod the tests may run in: only the one a test gives.
    argv += ["--kubeconfig", str(kubeconfig)] if kubeconfig is not None else ["--no-in-cluster"]
    argv += ["--allow-loopback-backends"] if allow_loopback_backends else []
    argv += extra
    with running(argv, tmp_path / f"agent-{cluster}.log") as process:
        process.wait_ready(lambda: all(map(port_open, (xds_port, admin_port))), 30.0, "the agent's xDS and admin ports")
        yield AgentProcess(process, cluster, xds_port, gateway_port, admin_port)


@dataclass
class ServiceProcess:
    """An enforcer or a rate limiter: its process, the gRPC port gateways call, and its Prometheus port."""

    process: Process
    port: int
    metrics_port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@contextlib.contextmanager
def _run_service(tmp_path: Path, name: str, argv: list[str], port: int) -> Iterator[ServiceProcess]:
    metrics_port = free_port()
    argv = [*argv, "--metrics-address", f"127.0.0.1:{metrics_port}"]
    with running(argv, tmp_path / f"{name}.log") as process:
        process.wait_ready(lambda: port_open(port) and port_open(metrics_port), 30.0, f"the {name}'s ports")
        yield ServiceProcess(process, port, metrics_port)


@contextlib.contextmanager
def run_enforcer(
    tmp_path: Path, xds_port: int, name: str = "enforcer", port: int | None = None
) -> Iterator[ServiceProcess]:
    """`meshplane enforcer` fed by the agent whose xDS port is `xds_port`."""
    port = port or free_port()
    argv = [*MESHPLANE, "enforcer", "--grpc-address", f"127.0.0.1:{port}", "--xds-address", f"127.0.0.1:{xds_port}"]
    with _run_service(tmp_path, name, argv, port) as service:
        yield service


@contextlib.contextmanager
def run_ratelimiter(
    tmp_path: Path, xds_port: int, redis_url: str | None = None, name: str = "ratelimiter", port: int | None = None
) -> Iterator[ServiceProcess]:
    """`meshplane ratelimiter` fed by the agent at `xds_port`, counting in Redis when `redis_url` is given."""
    port = port or free_port()
    argv = [*MESHPLANE, "ratelimiter", "--grpc-address", f"127.0.0.1:{port}", "--xds-address", f"127.0.0.1:{xds_port}"]
    argv += ["--redis-url", redis_url] if redis_url else []
    with _run_service(tmp_path, name, argv, port) as service:
        yield service
