"""The agent's side of service registering: Service objects as catalog entries, what the watch tells of
changes, and the reports that keep the server's copy equal to the cluster's (on a real gRPC server)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest

from meshplane.agent import service_endpoints
from meshplane.agent.kube.client import ResourceType, WatchExpired
from meshplane.agent.kube.gatewayapi import backend_services
from meshplane.agent.kube.services import LocalService, ServiceKey, ServiceWatch, local_service
from meshplane.agent.service_endpoints import ServiceEndpointSync
from meshplane.model.kinds import EastWestGateway
from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc

PATIENCE = 5.0


def service_object(namespace: str, name: str, port: int = 8080, **extra: Any) -> dict[str, Any]:
    spec = {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"], "ports": [{"port": port, "protocol": "TCP"}]}
    return {"metadata": {"namespace": namespace, "name": name, "labels": {"app": name}}, "spec": {**spec, **extra}}


def test_a_service_object_becomes_a_catalog_entry() -> None:
    obj = service_object("shop", "orders")
    obj["spec"]["ports"] = [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "web", "nodePort": 30080}]
    entry = local_service("edge-1", obj, EastWestGateway(address="203.0.113.7", port=15443))
    assert entry.labels == {"app": "orders"}
    assert entry.spec.to_wire() == {
        "cluster": "edge-1",
        "namespace": "shop",
        "service": "orders",
        "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "web"}],
        "clusterIPs": ["10.96.0.10"],
        "eastWestGateway": {"address": "203.0.113.7", "port": 15443},
    }


def test_a_port_keeps_its_app_protocol_so_a_gateway_speaks_h2c_to_an_h2c_port() -> None:
    obj = service_object("shop", "orders")
    obj["spec"]["ports"] = [
        {"name": "http", "port": 80, "protocol": "TCP"},
        {"name": "h2c", "port": 8081, "protocol": "TCP", "appProtocol": "kubernetes.io/h2c", "targetPort": 3001},
    ]
    entry = local_service("edge-1", obj, None)
    assert entry.spec.to_wire()["ports"][1] == {
        "name": "h2c",
        "port": 8081,
        "protocol": "TCP",
        "targetPort": 3001,
        "appProtocol": "kubernetes.io/h2c",
    }
    ports = backend_services({("shop", "orders"): entry.spec}, {})[("shop", "orders")].ports
    assert [(port.port, port.app_protocol) for port in ports] == [(80, None), (8081, "kubernetes.io/h2c")]


def test_a_headless_service_has_no_cluster_ip() -> None:
    obj = service_object("shop", "orders", clusterIP="None", clusterIPs=["None"])
    assert local_service("edge-1", obj, None).spec.cluster_ips == []


class ScriptedKube:
    """A Kubernetes client that answers lists and watches from a script; each watch ends expired."""

    def __init__(self, lists: list[list[dict[str, Any]]], watches: list[list[tuple[str, dict[str, Any]]]]):
        self.lists = lists
        self.watches = watches

    async def list_at(self, resource: ResourceType, label_selector: str = "") -> tuple[list[dict[str, Any]], str]:
        if not self.lists:
            await asyncio.Event().wait()
        return self.lists.pop(0), "1"

    async def watch(self, resource: ResourceType, version: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        for event in self.watches.pop(0) if self.watches else []:
            yield event
        raise WatchExpired()


async def test_the_watch_tells_what_changed_and_nothing_when_nothing_did() -> None:
    told: list[set[ServiceKey] | None] = []
    new_port = service_object("shop", "orders", port=9090)
    kube = ScriptedKube(
        lists=[
            [service_object("shop", "orders"), service_object("shop", "cart")],
            [new_port, service_object("ops", "db")],  # after the watch expired: cart went, db came
        ],
        watches=[
            [
                ("MODIFIED", service_object("shop", "orders")),  # no change
                ("MODIFIED", new_port),
                ("ADDED", service_object("shop", "pay")),
                ("DELETED", service_object("shop", "pay")),
            ]
        ],
    )
    done = asyncio.Event()

    async def on_change(keys: set[ServiceKey] | None) -> None:
        told.append(keys)
        if len(told) == 5:
            done.set()

    watch = ServiceWatch(kube, "edge-1", None, on_change)  # type: ignore[arg-type]
    assert watch.specs() is None and watch.reportable() is None
    task = asyncio.create_task(watch.run())
    try:
        await asyncio.wait_for(done.wait(), PATIENCE)
    finally:
        task.cancel()
    assert told == [None, {("shop", "orders")}, {("shop", "pay")}, {("shop", "pay")}, {("shop", "cart"), ("ops", "db")}]
    specs = watch.specs()
    assert specs is not None and sorted(specs) == [("ops", "db"), ("shop", "orders")]
    assert specs[("shop", "orders")].ports[0].port == 9090


def test_kubernetes_own_namespaces_are_not_reported_but_still_resolve() -> None:
    watch = ServiceWatch(ScriptedKube([], []), "edge-1", None, on_change=None)  # type: ignore[arg-type]
    watch.services = {
        ("kube-system", "kube-dns"): local_service("edge-1", service_object("kube-system", "kube-dns"), None),
        ("shop", "orders"): local_service("edge-1", service_object("shop", "orders"), None),
    }
    assert list(watch.reportable() or {}) == [("shop", "orders")]
    assert sorted(watch.specs() or {}) == [("kube-system", "kube-dns"), ("shop", "orders")]


class RecordingControlPlane(control_plane_pb2_grpc.ControlPlaneServicer):
    def __init__(self, failures: int = 0):
        self.reports: list[control_plane_pb2.ReportServicesRequest] = []
        self.failures = failures
        self.arrived = asyncio.Event()

    async def ReportServices(
        self, request: control_plane_pb2.ReportServicesRequest, context: grpc.aio.ServicerContext
    ) -> control_plane_pb2.ReportResponse:
        if self.failures:
            self.failures -= 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "not now")
        self.reports.append(request)
        self.arrived.set()
        return control_plane_pb2.ReportResponse()


@asynccontextmanager
async def control_plane(servicer: RecordingControlPlane) -> AsyncIterator[grpc.aio.Channel]:
    server = grpc.aio.server()
    control_plane_pb2_grpc.add_ControlPlaneServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield channel
    finally:
        await channel.close()
        await server.stop(grace=None)


@pytest.fixture(autouse=True)
def small_batches(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(service_endpoints, "BATCH", 2)
    monkeypatch.setattr(service_endpoints, "SETTLE", 0.01)
    yield


def catalog_of(*keys: tuple[str, str, int]) -> dict[ServiceKey, LocalService]:
    return {
        (namespace, name): local_service("edge-1", service_object(namespace, name, port), None)
        for namespace, name, port in keys
    }


def summary(request: control_plane_pb2.ReportServicesRequest) -> tuple[Any, ...]:
    """(services as namespace/name, removed, complete, present) of one report."""
    services = [f"{s.spec['namespace']}/{s.spec['service']}" for s in request.services]
    removed = [f"{k.namespace}/{k.name}" for k in request.removed]
    present = [f"{k.namespace}/{k.name}" for k in request.present]
    return services, removed, request.complete, present


async def until(servicer: RecordingControlPlane, count: int) -> None:
    async def wait() -> None:
        while len(servicer.reports) < count:
            servicer.arrived.clear()
            await servicer.arrived.wait()

    await asyncio.wait_for(wait(), PATIENCE)


async def test_the_first_report_is_complete_and_later_ones_carry_only_the_difference() -> None:
    servicer = RecordingControlPlane()
    catalog: dict[ServiceKey, LocalService] | None = None
    async with control_plane(servicer) as channel:
        sync = ServiceEndpointSync(lambda: channel, "edge-1", lambda: catalog)
        task = asyncio.create_task(sync.run())
        try:
            sync.changed()  # not listed yet: nothing to say
            await asyncio.sleep(0.1)
            assert servicer.reports == []

            catalog = catalog_of(("shop", "a", 80), ("shop", "b", 80), ("shop", "c", 80))
            sync.changed()
            await until(servicer, 3)
            assert [summary(r) for r in servicer.reports] == [
                (["shop/a", "shop/b"], [], False, []),
                (["shop/c"], [], False, []),
                ([], [], True, ["shop/a", "shop/b", "shop/c"]),
            ]

            catalog = catalog_of(("shop", "a", 81), ("shop", "b", 80))
            sync.changed()
            await until(servicer, 5)
            assert [summary(r) for r in servicer.reports[3:]] == [
                (["shop/a"], [], False, []),
                ([], ["shop/c"], False, []),
            ]
        finally:
            task.cancel()
    keys = [r.idempotency_key for r in servicer.reports]
    assert len(set(keys)) == len(keys) and all(key.startswith("edge-1/services/") for key in keys)


async def test_an_unreachable_server_gets_the_same_reports_once_it_answers() -> None:
    servicer = RecordingControlPlane(failures=2)
    catalog = catalog_of(("shop", "a", 80))
    async with control_plane(servicer) as channel:
        sync = ServiceEndpointSync(lambda: channel, "edge-1", lambda: catalog)
        task = asyncio.create_task(sync.run())
        try:
            sync.changed()
            await until(servicer, 2)
        finally:
            task.cancel()
    assert [summary(r) for r in servicer.reports] == [(["shop/a"], [], False, []), ([], [], True, ["shop/a"])]
