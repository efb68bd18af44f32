"""Concurrent edits of a managed CR, against a real kube-apiserver: other writers update it with its
current resourceVersion (the optimistic concurrency that makes them see 409 Conflict) while the agent
applies. The agent's server-side apply with force sends no resourceVersion, so a racing update never
makes it fail, and what the control plane delivers ends up in the CR."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from meshplane.agent.kube import KubeClient
from meshplane.agent.kube.desired import kubernetes_object
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import API_VERSION
from meshplane_testing.documents import api, unique
from meshplane_testing.eventually import eventually
from meshplane_testing.kube import ORDERS_SERVICE, KubeAPIServer, cr_with_base_path, custom_resource
from meshplane_testing.meshplane import run_agent, run_server


@contextlib.contextmanager
def racing(kube: KubeAPIServer, namespace: str, name: str, writers: int = 3) -> Iterator[Counter[int]]:
    """Writers that, until the block ends, read the CR and PUT it back with another basePath and the
    resourceVersion they read; yields how often each status code came back."""
    codes: Counter[int] = Counter()
    stop = threading.Event()
    path = f"/apis/{API_VERSION}/namespaces/{namespace}/apis/{name}"

    def write(index: int) -> None:
        with kube.client() as client:
            while not stop.is_set():
                current = client.get(path)
                if current.status_code != 200:
                    codes[current.status_code] += 1
                    continue
                cr = current.json()
                cr["spec"]["basePath"] = f"/racer-{index}"
                codes[client.put(path, json=cr).status_code] += 1

    threads = [threading.Thread(target=write, args=(i,), name=f"racer-{i}", daemon=True) for i in range(writers)]
    for thread in threads:
        thread.start()
    try:
        yield codes
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)


async def test_the_agent_s_apply_wins_over_racing_updates_without_a_conflict(kube_apiserver: KubeAPIServer) -> None:
    name = unique("raced")
    resource = REGISTRY.parse(api(name, basePath="/agent", backends=[ORDERS_SERVICE]))
    body = kubernetes_object(resource, "7")
    client = KubeClient.from_kubeconfig(kube_apiserver.kubeconfig)
    try:
        crs = await client.resource_type(API_VERSION, "API")
        await client.apply(crs, body)
        with racing(kube_apiserver, "default", name) as codes:
            eventually(lambda: codes[200] >= 3, timeout=20.0, what="racing updates to land")
            for _ in range(40):
                applied = await client.apply(crs, body)  # KubeUnavailable (409) would fail the test
                assert applied["spec"]["basePath"] == "/agent"
        # The writers really raced: with each other and with the agent (409), and their updates landed (200).
        assert codes[200] > 3 and codes[409] > 0, codes
        applied = await client.apply(crs, body)
        assert applied["spec"]["basePath"] == "/agent"
        assert custom_resource(kube_apiserver, name)["spec"]["basePath"] == "/agent"  # type: ignore[index]
        await client.delete(crs, "default", name)
    finally:
        await client.close()


def test_a_delivered_change_ends_up_in_a_cr_others_are_updating(tmp_path: Path, kube_apiserver: KubeAPIServer) -> None:
    name = unique("orders")
    with (
        run_server(tmp_path) as server,
        run_agent(tmp_path, "edge-1", server, kubeconfig=kube_apiserver.kubeconfig) as agent,
        server.http() as rest,
    ):
        rest.put(
            f"/v1/projects/default/apis/{name}", json=api(name, basePath="/orders", backends=[ORDERS_SERVICE])
        ).raise_for_status()
        first = eventually(cr_with_base_path(kube_apiserver, name, "/orders"), timeout=20.0, what="the CR")
        with racing(kube_apiserver, "default", name) as codes:
            eventually(lambda: codes[200] >= 3, timeout=20.0, what="racing updates to land")
            rest.put(
                f"/v1/projects/default/apis/{name}", json=api(name, basePath="/orders-v2", backends=[ORDERS_SERVICE])
            ).raise_for_status()
            eventually(lambda: codes[200] >= 20, timeout=20.0, what="more racing updates")
        assert codes[409] > 0, codes
        final = eventually(
            cr_with_base_path(kube_apiserver, name, "/orders-v2"), timeout=20.0, what="the delivered version in the CR"
        )
        version = "meshplane.io/delivered-version"
        assert final["metadata"]["annotations"][version] != first["metadata"]["annotations"][version]
        log = agent.process.log()
        assert " 409 " not in log and "Conflict" not in log
        rest.delete(f"/v1/projects/default/apis/{name}").raise_for_status()
        eventually(lambda: custom_resource(kube_apiserver, name) is None, timeout=20.0, what="the CR to be deleted")
