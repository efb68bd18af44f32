"""A node stand-in: what a kubelet does for a test cluster, with processes instead of containers.

It registers Nodes (Ready, with capacity and a pod CIDR each), watches the Pods the real kube-scheduler
binds to them, and runs each container as a process of a binary built on this machine (an image maps to
a binary by its repository: `RunnableImage`), inside a network namespace of its own at the Pod's IP,
joined to the test's namespace by a veth (netns.host_link) so that the test's processes (Envoy) reach
Pod IPs as a node reaches its pods. It then writes the Pod's status (Running, its IP, Ready) so that
kube-controller-manager's EndpointSlice controller publishes it. A deleted Pod's processes stop and its
namespace goes; a Pod it cannot run stays Pending, with the reason in its status, an Event and the log;
a container whose process exits is started again (restartPolicy Always).

Env honours `value` and `valueFrom.fieldRef`; secret, configMap and emptyDir volumes are written to a
directory of the Pod, and an env value or arg under a volume's mountPath is rewritten to that directory
(the processes share the test's filesystem: there is no mount namespace).
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import ipaddress
import json
import logging
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from meshplane_testing.eventually import eventually
from meshplane_testing.kube import KUBE_VERSION, KubeAPIServer, KubeError
from meshplane_testing.kubelet_logs import serve_container_logs
from meshplane_testing.netns import HOST_GATEWAY, host_link, network_namespace, unreachable_route
from meshplane_testing.process import Process, port_open

log = logging.getLogger(__name__)

COMPONENT = "meshplane-node-stand-in"
READY_TIMEOUT = 15.0
"""How long a container's process has to accept connections on its image's port before the Pod fails."""
_WATCH_SECONDS = 3
"""Each watch request's server-side timeout: how soon a stop is noticed."""


@dataclass(frozen=True)
class RunnableImage:
    """Images of `repository` (any tag) run as `binary`; the Pod is Ready once `ready_port` accepts."""

    repository: str
    binary: Path
    ready_port: int


class PodNotRunnable(Exception):
    """What in a Pod the stand-in cannot run: its message goes into the Pod's status and an Event."""


class PodWaiting(PodNotRunnable):
    """What a Pod needs that is not there yet (a volume's Secret or ConfigMap): it is tried again, as a
    kubelet retries a mount, since the suite creates some Secrets after the Deployments that mount them."""


@dataclass
class _Container:
    """A container as a process, and how to start it again when it exits."""

    name: str
    image: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    log_path: Path
    ready_port: int
    process: Process | None = None
    restarts: int = 0

    def start(self) -> Process:
        self.process = Process(self.argv, self.log_path, env=self.env, cwd=self.cwd)
        return self.process

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def exited(self) -> bool:
        return self.process is not None and not self.process.alive()


@dataclass
class _RunningPod:
    uid: str
    namespace: str
    name: str
    ip: str
    node: str
    resources: contextlib.ExitStack
    containers: list[_Container] = field(default_factory=list)

    @property
    def reference(self) -> dict[str, Any]:
        """Enough of the Pod object to write its status."""
        return {"metadata": {"namespace": self.namespace, "name": self.name, "uid": self.uid}}

    def wait_ready(self, container: _Container) -> None:
        assert container.process is not None
        container.process.wait_ready(
            lambda: port_open(container.ready_port, self.ip),
            timeout=READY_TIMEOUT,
            what=f"container {container.name} of pod {self.namespace}/{self.name} on {self.ip}:{container.ready_port}",
        )


class NodeStandIn:
    """The Nodes `nodes` (name → pod CIDR) of `kube`, running Pods of `images` until `stop()`."""

    def __init__(self, kube: KubeAPIServer, nodes: Mapping[str, str], images: Sequence[RunnableImage], log_dir: Path):
        self.kube = kube
        self.nodes = dict(nodes)
        self.images = {image.repository: image for image in images}
        self.log_dir = log_dir
        self._running: dict[str, _RunningPod] = {}
        self._refused: set[str] = set()
        self._waiting: dict[str, tuple[str, str]] = {}
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._client = kube.client(timeout=_WATCH_SECONDS + 10)
        self._thread = threading.Thread(target=self._watch, name="node-stand-in", daemon=True)
        self._logs = contextlib.ExitStack()

    def start(self) -> None:
        logs_port = self._logs.enter_context(serve_container_logs(self._container_log))
        for name, cidr in self.nodes.items():
            self._register(name, cidr, logs_port)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching, then every Pod's processes and namespaces (the Pod objects stay as they are)."""
        self._stopping.set()
        self._thread.join(timeout=_WATCH_SECONDS + 15)
        with self._lock:
            for uid in list(self._running):
                self._stop_pod(uid)
        self._logs.close()
        self._client.close()

    def pod_processes(self) -> dict[str, list[Process]]:
        """The processes running now, by Pod (`namespace/name`)."""
        with self._lock:
            return {
                f"{pod.namespace}/{pod.name}": [c.process for c in pod.containers if c.process is not None]
                for pod in self._running.values()
            }

    def _container_log(self, namespace: str, name: str, container: str) -> Path | None:
        """Where a running Pod's container writes its output (what `pods/log` shows)."""
        with self._lock:
            pod = next((p for p in self._running.values() if (p.namespace, p.name) == (namespace, name)), None)
            found = next((c for c in pod.containers if c.name == container), None) if pod else None
            return found.log_path if found else None

    # Nodes

    def _register(self, name: str, cidr: str, logs_port: int) -> None:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
            },
            "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
        }
        response = self._client.post("/api/v1/nodes", json=node)
        if response.status_code != 201:
            raise KubeError(response)
        now = _now()
        conditions = [
            _condition("Ready", "True", "KubeletReady", "the node stand-in runs this node's pods", now),
            *(
                _condition(kind, "False", f"KubeletHas{reason}", "", now)
                for kind, reason in [
                    ("MemoryPressure", "SufficientMemory"),
                    ("DiskPressure", "NoDiskPressure"),
                    ("PIDPressure", "SufficientPID"),
                ]
            ),
        ]
        capacity = {"cpu": "8", "memory": "16Gi", "pods": "110", "ephemeral-storage": "20Gi"}
        status = {
            "conditions": [{**c, "lastHeartbeatTime": now} for c in conditions],
            "capacity": capacity,
            "allocatable": capacity,
            # The control plane reaches the node's kubelet endpoint (logs) on loopback; Pods see HOST_GATEWAY.
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": logs_port}},
            "nodeInfo": {
                "kubeletVersion": KUBE_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
                "containerRuntimeVersion": f"{COMPONENT}://1",
            },
        }
        self._merge_patch(f"/api/v1/nodes/{name}/status", {"status": status})
        # The API server taints a new Node not-ready; the node lifecycle controller (not run) would lift it.
        self._merge_patch(f"/api/v1/nodes/{name}", {"spec": {"taints": None}})

    # Watching Pods

    def _watch(self) -> None:
        while not self._stopping.is_set():
            try:
                version = self._relist()
                while version is not None and not self._stopping.is_set():
                    version = self._stream(version)
                    self._retry_waiting()
                    self._restart_exited()
            except (httpx.HTTPError, KubeError, json.JSONDecodeError) as exc:
                if not self._stopping.is_set():
                    log.warning("node stand-in: watching pods failed, listing again: %s", exc)
                    self._stopping.wait(0.5)
            except Exception:  # a stand-in that stops would leave every later Pod Pending without a word
                log.exception("node stand-in: reconciling pods failed, listing again")
                self._stopping.wait(0.5)

    def _relist(self) -> str:
        response = self._client.get("/api/v1/pods")
        if response.status_code != 200:
            raise KubeError(response)
        pods = response.json()
        seen = set()
        for pod in pods["items"]:
            seen.add(pod["metadata"]["uid"])
            self._reconcile(pod)
        with self._lock:
            for uid in set(self._running) - seen:
                self._stop_pod(uid)
        return pods["metadata"]["resourceVersion"]

    def _stream(self, version: str) -> str | None:
        """One watch from `version`: the version to go on from, or None when the server says it is too old."""
        params = {
            "watch": "1",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(_WATCH_SECONDS),
        }
        with self._client.stream("GET", "/api/v1/pods", params=params) as response:
            if response.status_code != 200:
                response.read()
                raise KubeError(response)
            for line in response.iter_lines():
                if not line:
                    continue
                event = json.loads(line)
                if event["type"] == "ERROR":
                    return None  # 410 Gone: list again
                pod = event["object"]
                version = pod["metadata"]["resourceVersion"]
                if event["type"] == "DELETED":
                    self._forget(pod["metadata"]["uid"])
                elif event["type"] != "BOOKMARK":
                    self._reconcile(pod)
        return version

    def _reconcile(self, pod: dict[str, Any]) -> None:
        if pod["spec"].get("nodeName") not in self.nodes:
            return
        uid = pod["metadata"]["uid"]
        if pod["metadata"].get("deletionTimestamp"):
            self._forget(uid)
            self._delete_finally(pod)
            return
        with self._lock:
            if uid in self._running or uid in self._refused or pod["status"].get("phase") in ("Succeeded", "Failed"):
                return
        try:
            self._start_pod(pod)
        except PodWaiting as wait:
            with self._lock:
                first = uid not in self._waiting
                self._waiting[uid] = _key(pod)
            if first:
                log.info("node stand-in: pod %s/%s waits: %s", *_key(pod), wait)
                self._patch_pod_status(pod, _pending_status(pod, "ContainerCreating", str(wait)))
            return
        except PodNotRunnable as refusal:
            log.warning("node stand-in: pod %s/%s stays Pending: %s", *_key(pod), refusal)
            with self._lock:
                self._refused.add(uid)
            self._report_not_runnable(pod, str(refusal))

    def _retry_waiting(self) -> None:
        with self._lock:
            waiting = list(self._waiting.items())
        for uid, (namespace, name) in waiting:
            response = self._client.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
            if response.status_code not in (200, 404):
                raise KubeError(response)
            if response.status_code == 404 or response.json()["metadata"]["uid"] != uid:
                self._forget(uid)
            else:
                self._reconcile(response.json())

    def _restart_exited(self) -> None:
        """A container whose process exited starts again, as restartPolicy Always has a kubelet do; the Pod is
        not Ready until it accepts connections again."""
        with self._lock:
            exited = [(pod, c) for pod in self._running.values() for c in pod.containers if c.exited()]
        for pod, container in exited:
            assert container.process is not None
            log.warning(
                "node stand-in: container %s of pod %s/%s exited with %s; starting it again (log: %s)",
                container.name,
                pod.namespace,
                pod.name,
                container.process.popen.returncode,
                container.log_path,
            )
            container.stop()
            container.restarts += 1
            self._report_running(pod, ready=False)
            with self._lock:
                if pod.uid not in self._running:
                    continue
                container.start()
            try:
                pod.wait_ready(container)
            except (RuntimeError, TimeoutError):
                continue  # exited again: the next round restarts it
            self._report_running(pod, ready=True)

    def _forget(self, uid: str) -> None:
        with self._lock:
            self._refused.discard(uid)
            self._waiting.pop(uid, None)
            if uid in self._running:
                self._stop_pod(uid)

    # Running a Pod

    def _start_pod(self, pod: dict[str, Any]) -> None:
        namespace, name = _key(pod)
        node = pod["spec"]["nodeName"]
        commands = [(container, self._image(container)) for container in pod["spec"]["containers"]]
        volume_sources = {volume["name"]: volume for volume in pod["spec"].get("volumes") or []}
        ip = self._allocate_ip(node)
        resources = contextlib.ExitStack()
        running = _RunningPod(pod["metadata"]["uid"], namespace, name, ip, node, resources)
        try:
            home = Path(tempfile.mkdtemp(prefix=f"pod-{name}-", dir=self.log_dir))
            resources.callback(shutil.rmtree, home, ignore_errors=True)
            volumes = {
                volume: self._materialize(namespace, volume_sources, volume, home / "volumes")
                for volume in volume_sources
            }
            netns = resources.enter_context(network_namespace("mp-pod"))
            resources.enter_context(host_link(netns, ip))
            for container, image in commands:
                mounts = {
                    mount["mountPath"]: volumes[mount["name"]]
                    for mount in container.get("volumeMounts") or []
                    if mount["name"] in volumes
                }
                args = [_under_mounts(arg, mounts) for arg in container.get("args") or []]
                process = _Container(
                    name=container["name"],
                    image=container["image"],
                    argv=netns.command([str(image.binary), *args]),
                    env=_environment(pod, container, ip, mounts),
                    cwd=home,
                    log_path=self.log_dir / f"pod-{namespace}-{name}-{container['name']}.log",
                    ready_port=image.ready_port,
                )
                resources.callback(process.stop)
                running.containers.append(process)
                process.start()
            for process in running.containers:
                running.wait_ready(process)
        except (PodNotRunnable, RuntimeError, TimeoutError, OSError) as exc:
            resources.close()
            if isinstance(exc, PodNotRunnable):
                raise
            raise PodNotRunnable(str(exc)) from exc
        with self._lock:
            self._running[pod["metadata"]["uid"]] = running
            self._waiting.pop(pod["metadata"]["uid"], None)
        self._report_running(running, ready=True)
        log.info("node stand-in: pod %s/%s runs on %s at %s", namespace, name, node, ip)

    def _image(self, container: dict[str, Any]) -> RunnableImage:
        image = container["image"]
        repository = image.split("@", 1)[0].rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
        if repository not in self.images:
            runnable = ", ".join(sorted(self.images))
            raise PodNotRunnable(f"container {container['name']}: image {image} cannot run here (runnable: {runnable})")
        if container.get("command"):
            raise PodNotRunnable(f"container {container['name']}: command is not supported (args are)")
        return self.images[repository]

    def _allocate_ip(self, node: str) -> str:
        with self._lock:
            taken = {pod.ip for pod in self._running.values()}
        network = ipaddress.ip_network(self.nodes[node])
        for address in list(network.hosts())[1:]:  # the first host address is the node's, by convention
            if str(address) not in taken:
                return str(address)
        raise PodNotRunnable(f"node {node} has no free address left in {network}")

    def _materialize(self, namespace: str, sources: Mapping[str, Any], volume: str, root: Path) -> Path:
        """The files of volume `volume` under `root/<volume>`: a Secret's or ConfigMap's keys, or nothing."""
        source = sources[volume]
        directory = root / volume
        directory.mkdir(parents=True)
        if "emptyDir" in source:
            return directory
        if "secret" in source:
            path, items = f"/api/v1/namespaces/{namespace}/secrets/{source['secret']['secretName']}", "data"
            spec = source["secret"]
        elif "configMap" in source:
            path, items = f"/api/v1/namespaces/{namespace}/configmaps/{source['configMap']['name']}", "data"
            spec = source["configMap"]
        else:
            raise PodNotRunnable(f"volume {volume}: only secret, configMap and emptyDir volumes are supported")
        response = self._client.get(path)
        if response.status_code == 404:
            raise PodWaiting(f"volume {volume}: {path} does not exist yet")
        if response.status_code != 200:
            raise KubeError(response)
        data: dict[str, str] = response.json().get(items) or {}
        wanted = spec.get("items") or [{"key": key, "path": key} for key in data]
        for item in wanted:
            if item["key"] not in data:
                raise PodWaiting(f"volume {volume}: no key {item['key']} in {path} yet")
            value = data[item["key"]]
            target = directory / item["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(base64.b64decode(value) if "secret" in source else value.encode())
        return directory

    def _stop_pod(self, uid: str) -> None:
        """Called with the lock held."""
        running = self._running.pop(uid)
        running.resources.close()
        log.info("node stand-in: pod %s/%s stopped", running.namespace, running.name)

    def _delete_finally(self, pod: dict[str, Any]) -> None:
        """What a kubelet does once a Pod's containers are gone: the final delete, ending its grace period."""
        namespace, name = _key(pod)
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": pod["metadata"]["uid"]}}
        response = self._client.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", json=body)
        if response.status_code not in (200, 404, 409):
            raise KubeError(response)

    # Status

    def _report_running(self, running: _RunningPod, ready: bool) -> None:
        now = _now()
        readiness = "True" if ready else "False"
        conditions = [
            *(
                _condition(kind, "True", "", "", now)
                for kind in ("PodReadyToStartContainers", "Initialized", "PodScheduled")
            ),
            *(_condition(kind, readiness, "", "", now) for kind in ("ContainersReady", "Ready")),
        ]
        containers = [
            {
                "name": container.name,
                "image": container.image,
                "imageID": container.image,
                "containerID": f"{COMPONENT}://{container.process.pid if container.process else 0}",
                "ready": ready,
                "started": ready,
                "restartCount": container.restarts,
                "state": {"running": {"startedAt": now}},
            }
            for container in running.containers
        ]
        status = {
            "phase": "Running",
            "hostIP": HOST_GATEWAY,
            "hostIPs": [{"ip": HOST_GATEWAY}],
            "podIP": running.ip,
            "podIPs": [{"ip": running.ip}],
            "conditions": conditions,
            "containerStatuses": containers,
        }
        if not running.containers or all(container.restarts == 0 for container in running.containers):
            status["startTime"] = now
        self._patch_pod_status(running.reference, status)

    def _report_not_runnable(self, pod: dict[str, Any], message: str) -> None:
        now = _now()
        self._patch_pod_status(pod, _pending_status(pod, "ImageNotRunnable", message))
        namespace, name = _key(pod)
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": namespace,
                "name": name,
                "uid": pod["metadata"]["uid"],
            },
            "type": "Warning",
            "reason": "ImageNotRunnable",
            "message": message,
            "source": {"component": COMPONENT, "host": pod["spec"]["nodeName"]},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        response = self._client.post(f"/api/v1/namespaces/{namespace}/events", json=event)
        if response.status_code != 201:
            raise KubeError(response)

    def _patch_pod_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        namespace, name = _key(pod)
        response = self._client.patch(
            f"/api/v1/namespaces/{namespace}/pods/{name}/status",
            json={"metadata": {"uid": pod["metadata"]["uid"]}, "status": status},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        if response.status_code not in (200, 404):  # 404: deleted meanwhile
            raise KubeError(response)

    def _merge_patch(self, path: str, body: dict[str, Any]) -> None:
        response = self._client.patch(path, json=body, headers={"Content-Type": "application/merge-patch+json"})
        if response.status_code != 200:
            raise KubeError(response)


@contextlib.contextmanager
def run_nodes(
    kube: KubeAPIServer, cluster_cidr: str, node_names: Sequence[str], images: Sequence[RunnableImage], log_dir: Path
) -> Iterator[NodeStandIn]:
    """Nodes `node_names` with a /24 each of `cluster_cidr`, which the test's namespace never routes out."""
    subnets = ipaddress.ip_network(cluster_cidr).subnets(new_prefix=24)
    nodes = {name: str(next(subnets)) for name in node_names}
    with unreachable_route(cluster_cidr):
        stand_in = NodeStandIn(kube, nodes, images, log_dir)
        try:
            stand_in.start()
            yield stand_in
        finally:
            stand_in.stop()


def wait_for_pods_ready(kube: KubeAPIServer, namespace: str, selector: str, count: int, timeout: float) -> list[dict]:
    """The `count` Pods of `selector` in `namespace`, once each is Ready with an IP."""

    def ready() -> list[dict] | None:
        with kube.client() as client:
            response = client.get(f"/api/v1/namespaces/{namespace}/pods", params={"labelSelector": selector})
        if response.status_code != 200:
            raise KubeError(response)
        pods = [pod for pod in response.json()["items"] if not pod["metadata"].get("deletionTimestamp")]
        ready_pods = [pod for pod in pods if _is_ready(pod)]
        return ready_pods if len(ready_pods) == count == len(pods) else None

    return eventually(ready, timeout=timeout, what=f"{count} ready pods of {selector} in {namespace}")


def _pending_status(pod: dict[str, Any], reason: str, message: str) -> dict[str, Any]:
    """A Pod's status while its containers wait, each for `reason`."""
    now = _now()
    return {
        "phase": "Pending",
        "conditions": [
            _condition("PodScheduled", "True", "", "", now),
            _condition("ContainersReady", "False", "ContainersNotReady", message, now),
            _condition("Ready", "False", "ContainersNotReady", message, now),
        ],
        "containerStatuses": [
            {
                "name": container["name"],
                "image": container["image"],
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": message}},
            }
            for container in pod["spec"]["containers"]
        ],
    }


def _is_ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    conditions = status.get("conditions") or []
    return bool(status.get("podIP")) and any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _environment(pod: dict[str, Any], container: dict[str, Any], ip: str, mounts: Mapping[str, Path]) -> dict[str, str]:
    fields = {
        "metadata.name": pod["metadata"]["name"],
        "metadata.namespace": pod["metadata"]["namespace"],
        "metadata.uid": pod["metadata"]["uid"],
        "spec.nodeName": pod["spec"]["nodeName"],
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
        "status.podIP": ip,
        "status.podIPs": ip,
        "status.hostIP": HOST_GATEWAY,
        "status.hostIPs": HOST_GATEWAY,
    }
    for kind in ("labels", "annotations"):
        for key, value in (pod["metadata"].get(kind) or {}).items():
            fields[f"metadata.{kind}['{key}']"] = value
    env: dict[str, str] = {}
    for variable in container.get("env") or []:
        if "value" in variable:
            env[variable["name"]] = _under_mounts(variable["value"], mounts)
            continue
        field_path = ((variable.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if field_path is None:
            raise PodNotRunnable(f"env {variable['name']}: only value and valueFrom.fieldRef are supported")
        if field_path not in fields:
            raise PodNotRunnable(f"env {variable['name']}: field {field_path} is not supported")
        env[variable["name"]] = fields[field_path]
    return env


def _under_mounts(value: str, mounts: Mapping[str, Path]) -> str:
    for mount_path, directory in mounts.items():
        prefix = mount_path.rstrip("/")
        if value == prefix or value.startswith(prefix + "/"):
            return str(directory) + value[len(prefix) :]
    return value


def _key(pod: dict[str, Any]) -> tuple[str, str]:
    return pod["metadata"]["namespace"], pod["metadata"]["name"]


def _condition(kind: str, status: str, reason: str, message: str, now: str) -> dict[str, str]:
    condition = {"type": kind, "status": status, "lastTransitionTime": now}
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
