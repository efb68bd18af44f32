"""Whatever one cluster reports, nothing outside its rights changes: generated ReportObjects, ReportServices and
ReportStatus calls with cluster `a`'s certificate, against a real server.

Cluster `a` may publish APIs into project `shop` only, keep its own ServiceEndpoints and its own delivery
states, and have its presence recorded. After every generated call the store is read directly and compared
with what it held before: any other difference, or an INTERNAL / UNKNOWN answer, fails the property.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from meshplane.model.registry import REGISTRY
from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc
from meshplane_testing import documents
from meshplane_testing.meshplane import ServerProcess, run_server
from meshplane_testing.north import put

pytestmark = pytest.mark.timeout(120)

CLUSTER = "a"
ORIGIN = f"cluster/{CLUSTER}"
PUBLISHES_INTO = "shop"
BROKEN = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}

Row = tuple[Any, ...]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server holding what a cluster must not touch: another project, the control plane's API, application
    and subscription in `shop`, and cluster b's service endpoint; cluster a may publish into `shop`."""
    with run_server(tmp_path_factory.mktemp("server")) as running, running.http() as rest:
        for project in (PUBLISHES_INTO, "other"):
            rest.put(f"/v1/projects/{project}", json=documents.project(project))
        for project in (PUBLISHES_INTO, "other"):
            backends = [documents.backend(8080, host="orders")]
            put(rest, documents.api("orders", project=project, basePath=f"/{project}", backends=backends))
        put(rest, documents.application("mobile", project=PUBLISHES_INTO))
        put(
            rest,
            documents.subscription(
                "mobile-orders", project=PUBLISHES_INTO, application="mobile", api="orders", plan="gold"
            ),
        )
        running.allow_publishing(CLUSTER, PUBLISHES_INTO)
        running.allow_publishing("b")
        with grpc.secure_channel(running.grpc_address, running.agent_credentials("b")) as channel:
            service = struct({"namespace": PUBLISHES_INTO, "service": "orders", "ports": [{"port": 80}]})
            control_plane_pb2_grpc.ControlPlaneStub(channel).ReportServices(
                control_plane_pb2.ReportServicesRequest(
                    cluster="b", services=[control_plane_pb2.ReportedService(spec=service)]
                ),
                timeout=10,
            )
        settle(running)
        yield running


def settle(server: ServerProcess, quiet: float = 1.0, timeout: float = 20.0) -> None:
    """Until the store stops changing (the status roll-up of the setup is written behind)."""
    deadline = time.monotonic() + timeout
    last, since = snapshot(server), time.monotonic()
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, "the store never settled"
        time.sleep(0.1)
        if (now := snapshot(server)) != last:
            last, since = now, time.monotonic()


@pytest.fixture(scope="module")
def stub(server: ServerProcess) -> Iterator[control_plane_pb2_grpc.ControlPlaneStub]:
    with grpc.secure_channel(server.grpc_address, server.agent_credentials(CLUSTER)) as channel:
        yield control_plane_pb2_grpc.ControlPlaneStub(channel)


def struct(value: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(value)
    return out


# --- what a cluster could send ---

KIND_WORDS = sorted({w for info in REGISTRY for w in (info.kind, info.plural, info.kind.lower())} | {"Widget", ""})
PROJECTS = [PUBLISHES_INTO, "other", "default", "", "nope", "Shop"]
NAMES = ["orders", "mobile", "mobile-orders", "api-keys", "shop", CLUSTER, "b", "x1", "x2", "", "Bad_Name"]
CLUSTERS_CLAIMED = st.sampled_from([CLUSTER, CLUSTER, CLUSTER, "b", "", "A", "a-b"])

json_leaf = st.none() | st.booleans() | st.integers(-(2**31), 2**31) | st.text(max_size=8)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
api_spec = st.fixed_dictionaries(
    {
        "basePath": st.sampled_from(["/shop", "/other", "/x1", "/{id}", "/", "bad", "/x1/y"]),
        "backends": st.lists(
            st.fixed_dictionaries({"host": st.sampled_from(["h", "10.0.0.1", ""]), "port": st.sampled_from([80, 0])}),
            min_size=1,
            max_size=2,
        ),
    },
    optional={
        "placement": st.fixed_dictionaries({"clusters": st.lists(st.sampled_from(["a", "b", "c"]), max_size=2)}),
        "hostnames": st.lists(st.sampled_from(["*", "a.example", "*.example"]), max_size=2),
    },
)
other_spec = st.sampled_from(
    [
        {"issuer": "meshplane", "keys": [{"kty": "EC", "kid": "attacker"}]},
        {"application": "mobile", "created": "2026-01-01T00:00:00Z", "sha256": "ab" * 32},
        {"application": "mobile", "api": "orders", "plan": "gold"},
        {"target": {"kind": "API", "name": "orders"}, "requestsPerUnit": 1, "unit": "MINUTE"},
        {"publish": {"projects": ["other"]}},
        {"cluster": "b", "namespace": "shop", "service": "orders"},
        {},
    ]
)
specs = api_spec | other_spec | st.dictionaries(st.text(max_size=8), json_value, max_size=3)
labels = st.dictionaries(st.sampled_from(["team", "meshplane.io/cluster", "Bad Key"]), st.sampled_from(["x", "b"]))

plausible_apis = st.builds(
    lambda name, base_path, placement, deleted: control_plane_pb2.LocalObject(
        kind="API",
        project=PUBLISHES_INTO,
        name=name,
        spec=struct({"basePath": base_path, "backends": [{"host": "h", "port": 80}], **placement}),
        deleted=deleted,
    ),
    st.sampled_from(["x1", "x2", "orders", "mobile", CLUSTER]),
    st.sampled_from(["/x1", "/x2", "/shop", "/{id}", "/x1/y"]),
    st.sampled_from([{}, {"placement": {"clusters": ["b"]}}]),
    st.booleans(),
)
"""What an allowed cluster would send: APIs into its project, some clashing, some on names others hold."""
anything = st.builds(
    lambda kind, project, name, spec, labels, deleted: control_plane_pb2.LocalObject(
        kind=kind, project=project, name=name, spec=struct(spec), labels=labels, deleted=deleted
    ),
    st.sampled_from(KIND_WORDS),
    st.sampled_from(PROJECTS),
    st.sampled_from(NAMES),
    specs,
    labels,
    st.booleans(),
)
local_objects = plausible_apis | anything
service_keys = st.builds(control_plane_pb2.ServiceKey, namespace=st.sampled_from(PROJECTS), name=st.sampled_from(NAMES))
service_specs = st.fixed_dictionaries(
    {"namespace": st.sampled_from(PROJECTS), "service": st.sampled_from(NAMES)},
    optional={
        "ports": st.lists(st.fixed_dictionaries({"port": st.integers(0, 70_000)}), max_size=2),
        "cluster": st.sampled_from(["b", CLUSTER]),
        "clusterIPs": st.lists(st.sampled_from(["10.0.0.1", "nope"]), max_size=1),
    },
)
reported_services = st.builds(
    lambda spec, labels: control_plane_pb2.ReportedService(spec=struct(spec), labels=labels), service_specs, labels
)
TYPE_URLS = [info.type_url for info in REGISTRY.delivered()] + ["type.googleapis.com/nope", ""]
deliveries = st.builds(
    control_plane_pb2.ObjectDelivery,
    type_url=st.sampled_from(TYPE_URLS),
    name=st.sampled_from([f"{p}/{n}" for p in PROJECTS[:3] for n in NAMES[:4]] + ["api-keys", "", "/"]),
    version=st.text(max_size=6),
    state=st.integers(0, 5),
    message=st.text(max_size=10),
)

object_reports = st.builds(
    lambda cluster, objects, key: control_plane_pb2.ReportObjectsRequest(
        cluster=cluster, objects=objects, idempotency_key=key
    ),
    CLUSTERS_CLAIMED,
    st.lists(local_objects, min_size=1, max_size=2),
    st.text(max_size=6),
)
service_reports = st.builds(
    lambda cluster, services, removed, complete, present: control_plane_pb2.ReportServicesRequest(
        cluster=cluster, services=services, removed=removed, complete=complete, present=present
    ),
    CLUSTERS_CLAIMED,
    st.lists(reported_services, max_size=2),
    st.lists(service_keys, max_size=2),
    st.booleans(),
    st.lists(service_keys, max_size=2),
)
status_reports = st.builds(
    lambda cluster, entries: control_plane_pb2.ReportStatusRequest(cluster=cluster, deliveries=entries),
    CLUSTERS_CLAIMED,
    st.lists(deliveries, min_size=1, max_size=3),
)


# --- what the store holds, and what a's reports may change of it ---


def snapshot(server: ServerProcess) -> tuple[dict[Row, Row], dict[Row, Row]]:
    """(objects, deliveries) as the store holds them now, each keyed as the store keys it."""
    database = (server.data_dir / "meshplane.db").resolve()
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10) as db:
        objects = {
            (kind, project, name): (origin, bool(deleted), json.loads(spec), json.loads(labels), json.loads(status))
            for kind, project, name, origin, deleted, spec, labels, status in db.execute(
                "SELECT kind, project, name, origin, deleted, spec, labels, status FROM objects"
            )
        }
        delivered = {
            (cluster, kind, project, name): (version, state, message)
            for cluster, kind, project, name, version, state, message in db.execute(
                "SELECT cluster, kind, project, name, version, state, message FROM deliveries"
            )
        }
    return objects, delivered


def others_view(key: Row, row: Row | None) -> Row | None:
    """What of an object is outside a's say: all of it but a's own delivery states and presence."""
    if row is None:
        return None
    origin, deleted, spec, labels, status = row
    if key[0] == "Cluster" and key[2] == CLUSTER:
        return origin, deleted, spec, labels
    entries = [entry for entry in status.get("clusters", []) if entry.get("cluster") != CLUSTER]
    return origin, deleted, spec, labels, {**status, "clusters": entries}


def may_change(key: Row, before: Row | None, after: Row | None) -> bool:
    """A change cluster a may make: its own API in `shop`, or its own service endpoint, made or withdrawn."""
    kind, project, _ = key
    if kind == "API" and project != PUBLISHES_INTO:
        return False
    if kind not in ("API", "ServiceEndpoint"):
        return False
    was_mine = before is None or before[1] or before[0] == ORIGIN
    is_mine = after is not None and after[0] == ORIGIN
    return was_mine and is_mine


def assert_only_its_own_changed(
    server: ServerProcess, stub: control_plane_pb2_grpc.ControlPlaneStub, method: str, request: Any
) -> None:
    """Send one call; whatever it answers, it is no internal error, and the store changed within a's rights."""
    objects_before, delivered_before = snapshot(server)

    try:
        getattr(stub, method)(request, timeout=10)
        event("OK")
    except grpc.RpcError as exc:
        assert exc.code() not in BROKEN, f"{method} answered {exc.code().name}: {exc.details()}"
        event(exc.code().name)

    objects_after, delivered_after = snapshot(server)
    for key in objects_before.keys() | objects_after.keys():
        before, after = objects_before.get(key), objects_after.get(key)
        if others_view(key, before) != others_view(key, after):
            assert may_change(key, before, after), f"{method} changed {key}: {before} -> {after}"
    for key in delivered_before.keys() | delivered_after.keys():
        if key[0] != CLUSTER:
            assert delivered_before.get(key) == delivered_after.get(key), f"{method} changed delivery {key}"


def bounded(examples: int) -> settings:
    return settings(
        max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
    )


@bounded(60)
@given(request=object_reports)
def test_no_object_a_cluster_reports_changes_what_is_not_its_own(
    server: ServerProcess, stub: control_plane_pb2_grpc.ControlPlaneStub, request: Any
) -> None:
    assert_only_its_own_changed(server, stub, "ReportObjects", request)


@bounded(30)
@given(request=service_reports)
def test_no_service_a_cluster_reports_changes_another_clusters_catalog(
    server: ServerProcess, stub: control_plane_pb2_grpc.ControlPlaneStub, request: Any
) -> None:
    assert_only_its_own_changed(server, stub, "ReportServices", request)


@bounded(30)
@given(request=status_reports)
def test_no_status_a_cluster_reports_changes_another_clusters_deliveries(
    server: ServerProcess, stub: control_plane_pb2_grpc.ControlPlaneStub, request: Any
) -> None:
    assert_only_its_own_changed(server, stub, "ReportStatus", request)
