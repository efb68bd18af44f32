"""A real Kubernetes API server for tests, as controller-runtime's envtest runs one: etcd + kube-apiserver.

`kube-apiserver` is built from the k8s.io/kubernetes Go module by `scripts/build-kube` into
`~/.cache/meshplane/kube-apiserver-<version>/` (the version is `scripts/kube-version`); `etcd` comes
from Debian's `etcd-server`. Both listen on free loopback ports, keep their data in a temporary
directory and are stopped at the end. Nothing else of a cluster runs (no controller-manager, no
scheduler, no kubelet): namespaces are never finalized, so tests use fresh names instead of deleting.
A cluster with those (meshplane_testing/kube_cluster.py) builds on this one.

Identities: `token` is an admin (group `system:masters`, which RBAC never denies); `service_account_token`
creates a ServiceAccount and returns a real bound token for it, which RBAC treats like a pod's.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import ssl
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from meshplane.model.resource import API_VERSION
from meshplane.security.ca import create_ca, issue_server_certificate
from meshplane_testing.eventually import eventually
from meshplane_testing.process import free_port, require_binary, running

REPO = Path(__file__).resolve().parents[1]
KUBE_VERSION = (REPO / "scripts" / "kube-version").read_text().strip()
ADMIN_USER = "meshplane-test-admin"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
FIELD_MANAGER = "meshplane-tests"
SERVICE_CIDR = "10.96.0.0/16"
"""Where the API server allocates Services' cluster IPs."""
ORDERS_SERVICE = {"host": "orders.shop.svc", "port": 8080}
"""A backend by its in-cluster Service name, as an API delivered to a cluster names it."""
# tmpfs where there is one: etcd fsyncs every write, and this etcd has no flag to stop it.
_RAM_DIR = "/dev/shm"


def cache_dir() -> Path:
    """Where the build scripts leave what they build: MESHPLANE_CACHE_DIR, else XDG_CACHE_HOME/meshplane."""
    cache = Path(
        os.environ.get("MESHPLANE_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache") / "meshplane"
    )
    return cache.expanduser()


def kube_binary(component: str) -> Path:
    """Where `scripts/build-kube` leaves `component` (kube-apiserver, kube-controller-manager, kube-scheduler)."""
    return cache_dir() / f"{component}-{KUBE_VERSION}" / component


class KubeError(RuntimeError):
    """The API server answered a harness request with an error; the message carries its Status."""

    def __init__(self, response: httpx.Response):
        self.status_code = response.status_code
        super().__init__(
            f"{response.request.method} {response.request.url.path}: {response.status_code} {response.text}"
        )


@dataclass(frozen=True)
class KubeAPIServer:
    """A running API server: its URL, the CA that signed its certificate, an admin token and kubeconfig."""

    url: str
    token: str
    ca_file: Path
    kubeconfig: Path
    directory: Path

    def client(self, token: str | None = None, timeout: float = 10.0) -> httpx.Client:
        """An HTTP client for the API, as the admin or as whoever `token` belongs to."""
        return httpx.Client(
            base_url=self.url,
            verify=ssl.create_default_context(cafile=self.ca_file),
            headers={"Authorization": f"Bearer {token or self.token}"},
            timeout=timeout,
        )

    def write_kubeconfig(self, path: Path, token: str | None = None, user: str = "admin") -> Path:
        """A kubeconfig for this server with `token` (the admin's by default), as kubectl and clients read it."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": user, "user": {"token": token or self.token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
            "current-context": "test",
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path

    def kubectl(self, *args: str, input: str | None = None, kubeconfig: Path | None = None) -> str:
        """Run kubectl against this server; its standard output, or CalledProcessError with stderr."""
        kubectl = require_binary("kubectl", "/usr/bin/kubectl")
        argv = [kubectl, f"--kubeconfig={kubeconfig or self.kubeconfig}", *args]
        result = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=60, check=False)
        if result.returncode != 0:
            raise subprocess.CalledProcessError(result.returncode, argv, result.stdout, result.stderr)
        return result.stdout

    def create_namespace(self, name: str) -> None:
        """Create a namespace (a project), or do nothing if it exists."""
        with self.client() as client:
            response = client.post("/api/v1/namespaces", json={"metadata": {"name": name}})
            if response.status_code not in (201, 409):
                raise KubeError(response)

    def service_account_token(
        self, namespace: str, name: str, expiration_seconds: int = 3600, audiences: Sequence[str] = ()
    ) -> str:
        """A bound token of ServiceAccount `namespace/name`, both created when missing.

        Its user is `system:serviceaccount:<namespace>:<name>`; it can do what RBAC grants it, nothing more.
        `audiences` default to the API server's own; a token for istiod's CA names `istio-ca`.
        """
        self.create_namespace(namespace)
        with self.client() as client:
            accounts = f"/api/v1/namespaces/{namespace}/serviceaccounts"
            response = client.post(accounts, json={"metadata": {"name": name}})
            if response.status_code not in (201, 409):
                raise KubeError(response)
            spec: dict[str, Any] = {"expirationSeconds": expiration_seconds}
            if audiences:
                spec["audiences"] = list(audiences)
            request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
            response = client.post(f"{accounts}/{name}/token", json=request)
            if response.status_code != 201:
                raise KubeError(response)
            return response.json()["status"]["token"]

    def apply(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply of one object at its resource path (e.g. `/api/v1/namespaces/x`)."""
        with self.client() as client:
            response = client.patch(
                path,
                params={"fieldManager": FIELD_MANAGER, "force": "true", "fieldValidation": "Strict"},
                headers={"Content-Type": "application/apply-patch+yaml"},
                json=dict(body),
            )
            if response.status_code not in (200, 201):
                raise KubeError(response)
            return response.json()

    def install_crds(self, crds: Iterable[Mapping[str, Any]], timeout: float = 30.0) -> None:
        """Apply CRDs and wait until each is Established and its resource is served."""
        crds = list(crds)
        for crd in crds:
            self.apply(f"{CRD_PATH}/{crd['metadata']['name']}", crd)
        for crd in crds:
            name, spec = crd["metadata"]["name"], crd["spec"]
            plural = spec["names"]["plural"]
            eventually(
                lambda name=name: self.crd_condition(name, "Established"),
                timeout=timeout,
                what=f"CRD {name} Established",
            )
            for version in (v for v in spec["versions"] if v.get("served", True)):
                group_version = f"/apis/{spec['group']}/{version['name']}"
                eventually(
                    lambda gv=group_version, plural=plural: self._serves(gv, plural),
                    timeout=timeout,
                    what=f"{plural} served at {group_version}",
                )

    def crd_condition(self, name: str, condition: str) -> bool:
        """Whether CRD `name` has `condition` (Established, NamesAccepted…) with status True."""
        with self.client() as client:
            response = client.get(f"{CRD_PATH}/{name}")
        if response.status_code == 404:
            return False
        if response.status_code != 200:
            raise KubeError(response)
        conditions = (response.json().get("status") or {}).get("conditions") or []  # null right after creation
        return any(c["type"] == condition and c["status"] == "True" for c in conditions)

    def _serves(self, group_version: str, plural: str) -> bool:
        with self.client() as client:
            response = client.get(group_version)
        return response.status_code == 200 and any(r["name"] == plural for r in response.json()["resources"])


@contextlib.contextmanager
def start_kube_apiserver(log_dir: Path, crds: Iterable[Mapping[str, Any]] = ()) -> Iterator[KubeAPIServer]:
    """etcd and kube-apiserver on free ports, `crds` installed; skips (fails under CI) without the binaries."""
    override = [path for path in [os.environ.get("MESHPLANE_KUBE_APISERVER")] if path]
    apiserver = require_binary("kube-apiserver", *override, str(kube_binary("kube-apiserver")))
    etcd = require_binary("etcd", "/usr/bin/etcd")
    home = Path(tempfile.mkdtemp(prefix="meshplane-kube-", dir=_RAM_DIR if os.access(_RAM_DIR, os.W_OK) else None))
    try:
        with _running_etcd(etcd, home, log_dir) as etcd_url:
            token = _write_credentials(home)
            port = free_port()
            url = f"https://127.0.0.1:{port}"
            argv = [
                apiserver,
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={home / 'certs'}",
                f"--tls-cert-file={home / 'serving.crt'}",
                f"--tls-private-key-file={home / 'serving.key'}",
                f"--token-auth-file={home / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={home / 'service-accounts.pub'}",
                f"--service-account-signing-key-file={home / 'service-accounts.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # No token controller runs to mount tokens into pods, so the plugin would reject them (envtest too).
                "--disable-admission-plugins=ServiceAccount",
                "--allow-privileged=true",
                # No other API server shares this etcd, and a loopback endpoint is not a valid Endpoints address.
                "--endpoint-reconciler-type=none",
                "--kubelet-preferred-address-types=InternalIP",  # the node stand-in's, for pods/log
                "--profiling=false",
            ]
            kubeconfig = home / "kubeconfig"
            running_server = KubeAPIServer(url, token, home / "ca.crt", kubeconfig, home)
            running_server.write_kubeconfig(kubeconfig)
            with running(argv, log_dir / "kube-apiserver.log") as process:
                process.wait_ready(lambda: _ready(running_server), timeout=90, what=f"kube-apiserver on port {port}")
                running_server.install_crds(crds)
                yield running_server
    finally:
        shutil.rmtree(home, ignore_errors=True)


@contextlib.contextmanager
def _running_etcd(etcd: str, home: Path, log_dir: Path) -> Iterator[str]:
    client_url = f"http://127.0.0.1:{free_port()}"
    peer_url = f"http://127.0.0.1:{free_port()}"
    argv = [
        etcd,
        "--name=test",
        f"--data-dir={home / 'etcd'}",
        f"--listen-client-urls={client_url}",
        f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=test={peer_url}",
        "--initial-cluster-state=new",
        "--logger=zap",
    ]
    with running(argv, log_dir / "etcd.log") as process:
        process.wait_ready(lambda: _healthy(f"{client_url}/health"), timeout=30, what=f"etcd at {client_url}")
        yield client_url


def _write_credentials(home: Path) -> str:
    """Serving certificate, service-account signing key and the token file under `home`; the admin's token."""
    ca = create_ca()
    serving = issue_server_certificate(ca, ["kubernetes", "kubernetes.default", "kubernetes.default.svc"])
    (home / "ca.crt").write_bytes(ca.certificate_pem())
    (home / "serving.crt").write_bytes(serving.certificate_pem())
    (home / "serving.key").write_bytes(serving.key_pem())
    signing_key = ec.generate_private_key(ec.SECP256R1())
    (home / "service-accounts.key").write_bytes(
        signing_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    (home / "service-accounts.pub").write_bytes(
        signing_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    token = secrets.token_urlsafe(32)
    (home / "tokens.csv").write_text(f'{token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
    for name in ("serving.key", "service-accounts.key", "tokens.csv"):
        (home / name).chmod(0o600)
    return token


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _ready(server: KubeAPIServer) -> bool:
    """/readyz is green: etcd reached, bootstrap RBAC roles and priority levels created."""
    try:
        with server.client(timeout=2) as client:
            return client.get("/readyz").status_code == 200
    except httpx.HTTPError:
        return False


def custom_resource(kube: KubeAPIServer, name: str) -> dict[str, Any] | None:
    with kube.client() as client:
        response = client.get(f"/apis/{API_VERSION}/namespaces/default/apis/{name}")
    if response.status_code == 404:
        return None
    response.raise_for_status()
    return response.json()


def cr_with_base_path(kube: KubeAPIServer, name: str, base_path: str) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        cr = custom_resource(kube, name)
        return cr if cr is not None and cr["spec"]["basePath"] == base_path else None

    return check


def api_cr(project: str, name: str, port: int, weight: int = 100) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "API",
        "metadata": {"name": name, "namespace": project},
        "spec": {"basePath": f"/{name}", "backends": [{"host": "127.0.0.1", "port": port, "weight": weight}]},
    }


def apis_path(project: str, name: str = "") -> str:
    path = f"/apis/{API_VERSION}/namespaces/{project}/apis"
    return f"{path}/{name}" if name else path


def create(kube: KubeAPIServer, body: dict[str, Any]) -> None:
    """As `kubectl create` does it: a POST to the collection."""
    with kube.client() as client:
        response = client.post(apis_path(body["metadata"]["namespace"]), json=body)
    if response.status_code != 201:
        raise KubeError(response)


def delete(kube: KubeAPIServer, project: str, name: str) -> None:
    with kube.client() as client:
        response = client.delete(apis_path(project, name))
    if response.status_code not in (200, 202):
        raise KubeError(response)


def accepted(kube: KubeAPIServer, project: str, name: str) -> dict[str, Any] | None:
    """The CR's Accepted condition, once the agent has set it."""
    with kube.client() as client:
        cr = client.get(apis_path(project, name)).json()
    conditions = (cr.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Accepted"), None)
