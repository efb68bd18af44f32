"""A test Kubernetes cluster of real parts: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
and the node stand-in (meshplane_testing/kube_nodes.py) in place of kubelets.

What the Gateway API conformance suite needs of a cluster: Deployments become ReplicaSets and Pods (the
controller-manager), Pods are bound to Nodes (the scheduler) and run (the stand-in), Services get
EndpointSlices of the ready Pods' IPs, and deleted namespaces are emptied. The controller-manager runs
only the controllers that serve that; the node lifecycle controller is not among them, so Nodes that
post no heartbeats keep their Pods. There is no kube-proxy: cluster IPs are allocated but not served.
"""

from __future__ import annotations

import contextlib
import ipaddress
import random
import subprocess
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from meshplane_testing.kube import SERVICE_CIDR, KubeAPIServer, cache_dir, kube_binary, start_kube_apiserver
from meshplane_testing.kube_nodes import NodeStandIn, RunnableImage, run_nodes
from meshplane_testing.process import free_port, require_binary, running

GATEWAY_API_VERSION = (Path(__file__).resolve().parents[1] / "scripts" / "gateway-api-version").read_text().strip()
CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "endpointslice-controller",
    "endpointslice-mirroring-controller",
    "endpoints-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
)
"""The controllers the suite's base manifests and clean-up need (kube-controller-manager --controllers)."""
NODES = ("node-1", "node-2")
ECHO_IMAGE = "registry.k8s.io/gateway-api/echo-basic"
COREDNS_IMAGE = "registry.k8s.io/coredns/coredns"


@dataclass(frozen=True)
class KubeCluster:
    """A running test cluster: its API server (and kubeconfig) and the nodes running its Pods."""

    api: KubeAPIServer
    nodes: NodeStandIn
    pod_cidr: str

    @property
    def kubeconfig(self) -> Path:
        return self.api.kubeconfig


def gateway_api_dir() -> Path:
    """Where `scripts/build-gateway-api` leaves the CRDs, echo-basic and CoreDNS."""
    return cache_dir() / f"gateway-api-{GATEWAY_API_VERSION}"


def suite_images() -> list[RunnableImage]:
    """The images of the conformance suite's base manifests, as the binaries built by build-gateway-api."""
    directory = gateway_api_dir()
    images = [RunnableImage(ECHO_IMAGE, Path(require_binary("echo-basic", str(directory / "echo-basic"))), 3000)]
    coredns = directory / "coredns"
    if coredns.exists():
        images.append(RunnableImage(COREDNS_IMAGE, coredns, 53))
    return images


@contextlib.contextmanager
def start_kube_cluster(
    log_dir: Path,
    crds: Iterable[Mapping[str, Any]] = (),
    images: Sequence[RunnableImage] | None = None,
    node_names: Sequence[str] = NODES,
) -> Iterator[KubeCluster]:
    """The whole cluster, `crds` installed; skips (fails under CI) without the binaries. Pod IPs are in a
    /16 of 10.128.0.0/9 that no route of this machine covers, one /24 per node."""
    controller_manager = require_binary("kube-controller-manager", str(kube_binary("kube-controller-manager")))
    scheduler = require_binary("kube-scheduler", str(kube_binary("kube-scheduler")))
    runnable = suite_images() if images is None else list(images)
    pod_cidr = _free_pod_cidr()
    with (
        start_kube_apiserver(log_dir, crds) as api,
        _running_controller_manager(controller_manager, api, log_dir),
        _running_scheduler(scheduler, api, log_dir),
        run_nodes(api, pod_cidr, node_names, runnable, log_dir) as nodes,
    ):
        yield KubeCluster(api, nodes, pod_cidr)


@contextlib.contextmanager
def _running_controller_manager(binary: str, api: KubeAPIServer, log_dir: Path) -> Iterator[None]:
    port = free_port()
    home = api.directory
    argv = [
        binary,
        *_component_flags(api, port, home / "kube-controller-manager"),
        f"--controllers={','.join(CONTROLLERS)}",
        f"--service-account-private-key-file={home / 'service-accounts.key'}",
        f"--root-ca-file={api.ca_file}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--use-service-account-credentials=false",
        # The suite's Deployments come and go all the time; the defaults batch their syncs for a big cluster.
        "--concurrent-deployment-syncs=10",
        "--concurrent-replicaset-syncs=10",
        "--concurrent-service-endpoint-syncs=10",
        "--endpointslice-updates-batch-period=0s",
    ]
    with running(argv, log_dir / "kube-controller-manager.log") as process:
        process.wait_ready(lambda: _healthy(port), timeout=60, what=f"kube-controller-manager on port {port}")
        yield


@contextlib.contextmanager
def _running_scheduler(binary: str, api: KubeAPIServer, log_dir: Path) -> Iterator[None]:
    port = free_port()
    argv = [binary, *_component_flags(api, port, api.directory / "kube-scheduler")]
    with running(argv, log_dir / "kube-scheduler.log") as process:
        process.wait_ready(lambda: _healthy(port), timeout=60, what=f"kube-scheduler on port {port}")
        yield


def _component_flags(api: KubeAPIServer, port: int, cert_dir: Path) -> list[str]:
    """What the controller-manager and the scheduler share: the admin's kubeconfig, one instance, loopback."""
    return [
        f"--kubeconfig={api.kubeconfig}",
        f"--authentication-kubeconfig={api.kubeconfig}",
        f"--authorization-kubeconfig={api.kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        "--profiling=false",
    ]


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _free_pod_cidr() -> str:
    """A /16 of 10.128.0.0/9 that overlaps no route of this machine (another cluster of a test, a real net)."""
    routes = subprocess.run(
        [require_binary("ip", "/usr/sbin/ip"), "-4", "route", "show", "table", "all"],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout
    taken = []
    for line in routes.splitlines():
        words = [word for word in line.split() if word not in ("unreachable", "local", "broadcast", "blackhole")]
        with contextlib.suppress(ValueError, IndexError):
            if words[0] != "default":
                taken.append(ipaddress.ip_network(words[0], strict=False))
    candidates = list(ipaddress.ip_network("10.128.0.0/9").subnets(new_prefix=16))
    random.shuffle(candidates)
    for candidate in candidates:
        if not any(candidate.overlaps(network) for network in taken):
            return str(candidate)
    raise RuntimeError("no free /16 for pod IPs in 10.128.0.0/9")
