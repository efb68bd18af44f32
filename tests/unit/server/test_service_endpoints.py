"""How the server keeps a cluster's service reports: where each endpoint lives, and what a complete listing removes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import struct_pb2
from prometheus_client import REGISTRY

from meshplane.model.services import endpoint_name
from meshplane.proto.v1 import control_plane_pb2
from meshplane.server.service_endpoints import apply_report, rehome
from meshplane.store import Store

Key = control_plane_pb2.ServiceKey


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'meshplane.db'}")
    for project in ("default", "shop"):
        await opened.create("Project", "", project, spec={})
    yield opened
    await opened.close()


def reported(namespace: str, name: str, port: int = 8080, **labels: str) -> control_plane_pb2.ReportedService:
    spec = struct_pb2.Struct()
    spec.update({"namespace": namespace, "service": name, "ports": [{"port": port}], "clusterIPs": ["10.96.0.1"]})
    return control_plane_pb2.ReportedService(labels=labels, spec=spec)


def report(cluster: str = "edge-1", **fields: Any) -> control_plane_pb2.ReportServicesRequest:
    return control_plane_pb2.ReportServicesRequest(cluster=cluster, **fields)


def write_transactions() -> float:
    """Store `put` transactions so far (an unchanged put is one too, though it records nothing)."""
    return REGISTRY.get_sample_value("meshplane_store_transaction_duration_seconds_count", {"operation": "put"}) or 0.0


async def endpoints(store: Store) -> dict[tuple[str, str], dict[str, Any]]:
    """(project, name) -> the stored endpoint's origin, labels and spec."""
    items, _ = await store.list("ServiceEndpoint")
    return {(o.project, o.name): {"origin": o.origin, "labels": o.labels, "spec": o.spec} for o in items}


async def test_an_endpoint_lives_in_the_project_of_its_namespace_else_in_default(store: Store) -> None:
    await apply_report(
        store, "edge-1", report(services=[reported("shop", "orders", app="orders"), reported("ops", "db")])
    )
    held = await endpoints(store)
    orders = held[("shop", endpoint_name("edge-1", "shop", "orders"))]
    assert orders["origin"] == "cluster/edge-1"
    assert orders["labels"] == {"app": "orders", "meshplane.io/cluster": "edge-1"}
    assert orders["spec"] == {
        "cluster": "edge-1",
        "namespace": "shop",
        "service": "orders",
        "ports": [{"port": 8080, "protocol": "TCP"}],
        "clusterIPs": ["10.96.0.1"],
    }
    assert ("default", endpoint_name("edge-1", "ops", "db")) in held


async def test_the_cluster_is_the_callers_whatever_the_spec_says(store: Store) -> None:
    service = reported("shop", "orders")
    service.spec.update({"cluster": "edge-2"})
    await apply_report(store, "edge-1", report(services=[service]))
    [(_, name)] = await endpoints(store)
    assert name == endpoint_name("edge-1", "shop", "orders")


async def test_changes_and_removals_follow_and_other_clusters_are_left_alone(store: Store) -> None:
    await apply_report(store, "edge-1", report(services=[reported("shop", "orders"), reported("shop", "cart")]))
    await apply_report(store, "edge-2", report(services=[reported("shop", "orders")]))
    await apply_report(
        store,
        "edge-1",
        report(services=[reported("shop", "orders", port=9090)], removed=[Key(namespace="shop", name="cart")]),
    )
    held = await endpoints(store)
    assert sorted(held) == sorted(
        [("shop", endpoint_name("edge-1", "shop", "orders")), ("shop", endpoint_name("edge-2", "shop", "orders"))]
    )
    assert held[("shop", endpoint_name("edge-1", "shop", "orders"))]["spec"]["ports"][0]["port"] == 9090


async def test_a_complete_listing_removes_what_the_cluster_no_longer_has(store: Store) -> None:
    await apply_report(store, "edge-1", report(services=[reported("shop", "orders"), reported("ops", "db")]))
    await apply_report(store, "edge-2", report(services=[reported("ops", "db")]))
    await apply_report(store, "edge-1", report(complete=True, present=[Key(namespace="shop", name="orders")]))
    assert sorted(await endpoints(store)) == sorted(
        [("shop", endpoint_name("edge-1", "shop", "orders")), ("default", endpoint_name("edge-2", "ops", "db"))]
    )


async def test_endpoints_follow_a_project_named_like_their_namespace_as_it_comes_and_goes(store: Store) -> None:
    await apply_report(store, "edge-1", report(services=[reported("ops", "db")]))
    await apply_report(store, "edge-2", report(services=[reported("ops", "db")]))
    await store.create("Project", "", "ops", spec={})
    await rehome(store, "ops")
    assert {project for project, _ in await endpoints(store)} == {"ops"}

    await store.delete("Project", "", "ops")
    await rehome(store, "ops")
    assert {project for project, _ in await endpoints(store)} == {"default"}


async def test_a_complete_listing_also_puts_a_misplaced_endpoint_right(store: Store) -> None:
    await apply_report(store, "edge-1", report(services=[reported("ops", "db")]))
    await store.create("Project", "", "ops", spec={})  # without the move a project's creation makes
    await apply_report(store, "edge-1", report(complete=True, present=[Key(namespace="ops", name="db")]))
    assert list(await endpoints(store)) == [("ops", endpoint_name("edge-1", "ops", "db"))]


async def test_a_repeated_complete_listing_writes_only_what_changed(store: Store) -> None:
    services = [reported("shop", "orders"), reported("shop", "billing"), reported("other", "search")]
    present = [Key(namespace="shop", name="orders"), Key(namespace="shop", name="billing")]
    present.append(Key(namespace="other", name="search"))
    await apply_report(store, "edge-1", report(services=services, present=present, complete=True))
    before, puts = await store.current_revision(), write_transactions()

    await apply_report(store, "edge-1", report(services=services, present=present, complete=True))
    assert (await store.current_revision(), write_transactions()) == (before, puts)  # a restart: no writes

    services[1] = reported("shop", "billing", port=9090)
    await apply_report(store, "edge-1", report(services=services, present=present, complete=True))
    assert await store.current_revision() == before + 1
    stored = await endpoints(store)
    billing = stored[("shop", endpoint_name("edge-1", "shop", "billing"))]
    assert [port["port"] for port in billing["spec"]["ports"]] == [9090]


async def test_a_cluster_never_writes_or_removes_an_endpoint_another_cluster_holds(store: Store) -> None:
    # Names carry a short digest of (cluster, namespace, service); should two ever meet, the holder keeps its own.
    name = endpoint_name("edge-1", "shop", "orders")
    await store.create("ServiceEndpoint", "shop", name, spec={"cluster": "edge-2"}, origin="cluster/edge-2")
    before = await endpoints(store)

    await apply_report(store, "edge-1", report(services=[reported("shop", "orders")]))
    await apply_report(store, "edge-1", report(removed=[Key(namespace="shop", name="orders")]))
    await apply_report(store, "edge-1", report(complete=True))

    assert await endpoints(store) == before
