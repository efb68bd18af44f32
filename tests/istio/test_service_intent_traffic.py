"""ServiceIntents proven by traffic: meshplane renders them per cluster (`render_cluster`), the objects go to each
cluster's API server, istiod configures real sidecars and the east-west gateway, and requests between pods show
what the intent says: its declared client admitted, anyone else refused by the server's sidecar, DENY paths held
(with `//` too), a client of another cluster carried over mTLS through the server cluster's east-west gateway,
plaintext refused under STRICT, one app in two logical clouds kept apart, and one app twice in one cloud (two
Services over its pods, an intent each) kept to each intent's port and mTLS mode.

The server cluster's Cluster object declares its east-west gateway at the address that gateway's pod really has
on the fabric, so the ServiceEntry the client cluster gets points at a gateway that exists.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from meshplane.model.intents import REQUIRED_PATH_NORMALIZATION, LogicalCloudSpec
from meshplane.model.kinds import EastWestGateway
from meshplane.model.resource import InvalidObject
from meshplane.server.render.cluster import render_cluster
from meshplane.server.render.fleet import ClusterInfo
from meshplane.server.render.fleet import Fleet as RenderFleet
from meshplane.server.render.names import EAST_WEST_PORT, VIP_NETWORK, service_host
from meshplane.server.render.service import render_service_intent
from meshplane_testing.eventually import eventually
from meshplane_testing.istio import (
    EAST_WEST,
    Fleet,
    Gateway,
    IstioCluster,
    Pod,
    ServicePort,
    Workload,
    start_gateway,
)
from meshplane_testing.netns import Response
from meshplane_testing.render_scenarios import parse
from meshplane_testing.upstream import run_upstream

pytestmark = pytest.mark.timeout(400)

PROJECT = "shop"
RETAIL = "s2s-retail"
OPS = "s2s-ops"
PORT = 8080
ADMIN_PORT = 9090
"""The port of orders-admin: the same pods of orders behind a second Service, with an intent of its own."""
FABRIC = "10.80.0.0/16"
"""Every pod address of the test run (meshplane_testing.istio): the partner range the ops intent declares."""
SERVER, REMOTE = "cluster-a", "cluster-b"


def _retail_intent() -> dict[str, Any]:
    """As examples/intents/service-to-service.yaml, on the fixture's clusters, STRICT and without the CIDR client."""
    return {
        "service": {"name": "orders", "app": "orders", "port": PORT, "protocol": "HTTP"},
        "placement": {"logicalCloud": "retail", "clusters": [SERVER]},
        "mtls": "STRICT",
        "trafficPolicy": {"timeout": "5s", "retries": {"attempts": 2}},
        "clients": [
            {
                "service": {"name": "cart", "serviceAccount": "cart", "logicalCloud": "retail"},
                "access": [
                    {"action": "ALLOW", "methods": ["GET"], "paths": ["/orders/*"]},
                    {"action": "DENY", "paths": ["/orders/admin/*"]},
                ],
            }
        ],
    }


def _ops_intent() -> dict[str, Any]:
    """The same app in the ops cloud, PERMISSIVE: its cart, and plaintext partners of the fabric's range."""
    return {
        "service": {"name": "orders", "app": "orders", "port": PORT, "protocol": "HTTP"},
        "placement": {"logicalCloud": "ops", "clusters": [SERVER]},
        "mtls": "PERMISSIVE",
        "clients": [
            {"service": {"name": "cart", "logicalCloud": "ops"}, "access": [{"action": "ALLOW", "methods": ["GET"]}]},
            {"cidrs": [FABRIC], "access": [{"action": "ALLOW", "methods": ["GET"]}]},
        ],
    }


def _admin_intent() -> dict[str, Any]:
    """The same app a second time in the retail cloud: orders' pods behind orders-admin, PERMISSIVE for the
    plaintext partners of the fabric's range, with reports as its one mesh client."""
    return {
        "service": {"name": "orders-admin", "app": "orders", "port": ADMIN_PORT, "protocol": "HTTP"},
        "placement": {"logicalCloud": "retail", "clusters": [SERVER]},
        "mtls": "PERMISSIVE",
        "clients": [
            {"service": {"name": "reports"}, "access": [{"action": "ALLOW", "methods": ["GET"]}]},
            {"cidrs": [FABRIC], "access": [{"action": "ALLOW", "methods": ["GET"]}]},
        ],
    }


def _render_fleet(east_west: Gateway) -> RenderFleet:
    clouds = {
        (PROJECT, "retail"): {
            "clusters": [{"name": SERVER, "namespace": RETAIL}, {"name": REMOTE, "namespace": RETAIL}]
        },
        (PROJECT, "ops"): {"clusters": [{"name": SERVER, "namespace": OPS}, {"name": REMOTE, "namespace": OPS}]},
    }
    gateway = EastWestGateway(address=east_west.workload.address, port=EAST_WEST_PORT)
    return RenderFleet(
        clusters={
            SERVER: ClusterInfo(SERVER, {}, gateway),
            REMOTE: ClusterInfo(REMOTE),
            "cluster-c": ClusterInfo("cluster-c"),
        },
        logical_clouds={key: LogicalCloudSpec.model_validate(spec) for key, spec in clouds.items()},
        service_intents=[
            parse("ServiceIntent", "orders", _retail_intent(), PROJECT),
            parse("ServiceIntent", "orders-ops", _ops_intent(), PROJECT),
            parse("ServiceIntent", "orders-admin", _admin_intent(), PROJECT),
        ],
    )


ADMIN_PORT_SPEC = ServicePort("http-admin", ADMIN_PORT, ADMIN_PORT)


def _workload(cluster: IstioCluster, name: str, namespace: str, sidecar: bool = True) -> Workload:
    ports = (ServicePort("http", PORT, PORT),)
    labels = {"app": name}
    return Workload(name, namespace, cluster.new_address(), labels, ports, service_account=name, sidecar=sidecar)


@dataclass
class Mesh:
    """The rendered fleet, the running pods (`<name>` in retail, `<name>-ops` in ops, `remote-<name>[-ops]` in
    cluster-b), the east-west gateway, the requests each server's upstream saw, and the VIP of orders' host
    in cluster-b per namespace."""

    fleet: RenderFleet
    server: IstioCluster
    pods: dict[str, Pod]
    east_west: Gateway
    seen: dict[str, list[dict[str, Any]]]
    remote_vips: dict[str, str]


@pytest.fixture(scope="module")
def mesh(fleet: Fleet) -> Iterator[Mesh]:
    server, remote = fleet[SERVER], fleet[REMOTE]
    with contextlib.ExitStack() as stack:
        east_west = stack.enter_context(start_gateway(server, EAST_WEST))
        rendered = _render_fleet(east_west)
        stack.enter_context(server.applied(render_cluster(rendered, SERVER)))
        remote_objects = render_cluster(rendered, REMOTE)
        stack.enter_context(remote.applied(remote_objects))
        seen: dict[str, list[dict[str, Any]]] = {}
        pods: dict[str, Pod] = {}
        admin_port, seen["orders-admin"] = stack.enter_context(run_upstream("orders-admin"))
        for key, namespace in (("orders", RETAIL), ("orders-ops", OPS)):
            port, seen[key] = stack.enter_context(run_upstream(key))
            orders = _workload(server, "orders", namespace)
            served_at = {PORT: port}
            if namespace == RETAIL:
                stack.enter_context(server.applied(orders.another_service("orders-admin", (ADMIN_PORT_SPEC,))))
                served_at[ADMIN_PORT] = admin_port
            pods[key] = stack.enter_context(server.serve(orders, served_at))
        for key, name, namespace, sidecar in (
            ("cart", "cart", RETAIL, True),
            ("billing", "billing", RETAIL, True),
            ("reports", "reports", RETAIL, True),
            ("legacy", "legacy", RETAIL, False),
            ("cart-ops", "cart", OPS, True),
        ):
            pods[key] = stack.enter_context(server.serve(_workload(server, name, namespace, sidecar)))
        for key, namespace in (("remote-cart", RETAIL), ("remote-cart-ops", OPS)):
            pods[key] = stack.enter_context(remote.serve(_workload(remote, "cart", namespace)))
            # A VIP is no address of any network: the client's capture takes the connection, once it has a route.
            pods[key].namespace.route(str(VIP_NETWORK))
        vips = {
            o["metadata"]["namespace"]: o["spec"]["addresses"][0] for o in remote_objects if o["kind"] == "ServiceEntry"
        }
        yield Mesh(rendered, server, pods, east_west, seen, vips)


def _call(
    mesh: Mesh,
    client: str,
    namespace: str,
    path: str = "/orders/1",
    address: str | None = None,
    service: str = "orders",
    port: int = PORT,
) -> Response | None:
    """GET `path` of `service` in `namespace` from the pod `client`, at the Service's cluster IP unless
    `address` is given; None when the connection fails (as a refused plaintext caller's does)."""
    target = address or mesh.server.cluster_ip(namespace, service)
    try:
        return mesh.pods[client].request(target, port, path, {"Host": service_host(service, namespace)})
    except OSError:
        return None


def _status(mesh: Mesh, client: str, namespace: str, path: str = "/orders/1", address: str | None = None) -> int | None:
    answer = _call(mesh, client, namespace, path, address)
    return None if answer is None else answer.status


def _admin_status(mesh: Mesh, client: str, address: str | None = None) -> int | None:
    answer = _call(mesh, client, RETAIL, "/admin/1", address, "orders-admin", ADMIN_PORT)
    return None if answer is None else answer.status


def _client_certificate(answer: Response) -> str:
    """The x-forwarded-client-cert header the server's sidecar added: the caller's and the server's identities."""
    return json.loads(answer.body)["headers"].get("x-forwarded-client-cert", "")


def _identity(namespace: str, account: str) -> str:
    return f"spiffe://cluster.local/ns/{namespace}/sa/{account}"


def test_the_declared_client_is_admitted_and_an_undeclared_one_refused_by_the_servers_sidecar(mesh: Mesh) -> None:
    """The `-allow` AuthorizationPolicy names cart's principal only; billing, another ServiceAccount of the same
    namespace, gets the sidecar's RBAC 403 and never reaches the upstream. No listed defect touched this case;
    it is the baseline the others stand on (cart's Sidecar, the DestinationRule and PeerAuthentication)."""
    eventually(lambda: _status(mesh, "cart", RETAIL) == 200, timeout=60, what="cart -> orders")
    answer = _call(mesh, "cart", RETAIL)
    assert answer is not None
    identities = _client_certificate(answer)
    assert f"URI={_identity(RETAIL, 'cart')}" in identities
    assert f"By={_identity(RETAIL, 'orders')}" in identities

    eventually(lambda: _status(mesh, "billing", RETAIL, "/orders/from-billing") == 403, timeout=60, what="billing")
    refused = _call(mesh, "billing", RETAIL, "/orders/from-billing")
    assert refused is not None and refused.body == b"RBAC: access denied"
    assert all(request["path"] != "/orders/from-billing" for request in mesh.seen["orders"])


@pytest.mark.parametrize("path", ["/orders/admin/keys", "//orders/admin/keys", "/orders//admin/keys"])
def test_a_deny_path_refuses_the_declared_client_also_with_double_slashes(mesh: Mesh, path: str) -> None:
    """Defect #10: a path DENY holds against `//` only where the sidecar merges slashes. The harness runs
    istiod with the normalization meshplane requires (its live mesh config says so; this Istio also merges
    slashes by default, so under the old render too the sidecar refused these), and every spelling is refused
    before the upstream sees it."""
    mesh_config = mesh.server.istiod.debug("mesh")
    assert mesh_config["pathNormalization"]["normalization"] == REQUIRED_PATH_NORMALIZATION
    eventually(lambda: _status(mesh, "cart", RETAIL) == 200, timeout=60, what="cart -> orders")
    answer = _call(mesh, "cart", RETAIL, path)
    assert answer is not None and (answer.status, answer.body) == (403, b"RBAC: access denied")
    assert all("admin" not in request["path"] for request in mesh.seen["orders"])


def test_a_client_in_another_cluster_reaches_the_server_through_its_east_west_gateway_over_mtls(mesh: Mesh) -> None:
    """cluster-b has no replica: it gets a ServiceEntry for orders' host with a VIP and the east-west gateway's
    address (from the Cluster's `eastWestGateway`) as its one endpoint, and cluster-a the namespace's
    AUTO_PASSTHROUGH Gateway. The call shows cart's cluster-b identity at orders, and the gateway's SNI
    cluster carried it. (The old Gateway name `eastwest.meshplane`, defect #13, istiod itself serves: only its
    webhook refuses it, which the harness does not run; test_every_cluster_gets_objects_istiods_validation_accepts
    holds that.)"""
    stats_before = _passthrough_connections(mesh)
    eventually(
        lambda: _status(mesh, "remote-cart", RETAIL, address=mesh.remote_vips[RETAIL]) == 200,
        timeout=60,
        what="cart in cluster-b -> orders in cluster-a",
    )
    answer = _call(mesh, "remote-cart", RETAIL, address=mesh.remote_vips[RETAIL])
    assert answer is not None
    identities = _client_certificate(answer)
    assert f"URI={_identity(RETAIL, 'cart')}" in identities
    assert f"By={_identity(RETAIL, 'orders')}" in identities
    assert _passthrough_connections(mesh) > stats_before


def test_every_cluster_gets_objects_istiods_validation_accepts(mesh: Mesh) -> None:
    """istiod's validation (its admission webhook's code) on what each cluster got. Failed on the old render:
    the east-west Gateway was named `eastwest.meshplane`, no DNS label (defect #13), and a cluster running
    Istio's webhook would refuse the agent's apply of it."""
    judging = pytest.importorskip("meshplane_testing.istio_judge", reason="the istiod judge is not in this tree")
    for cluster in (SERVER, REMOTE):
        verdict = judging.judge(render_cluster(mesh.fleet, cluster))
        assert verdict.invalid == (), (cluster, verdict.invalid)


def _passthrough_connections(mesh: Mesh) -> int:
    """Connections the east-west gateway opened to orders' pod, on the SNI cluster AUTO_PASSTHROUGH routes by
    (the admin `/clusters` page counts them per host, whatever stats the proxy keeps)."""
    prefix = f"outbound_.{PORT}_._.{service_host('orders', RETAIL)}::{mesh.pods['orders'].workload.address}:{PORT}::"
    status, text = mesh.east_west.envoy.admin("/clusters")
    assert status == 200, text
    counter = f"{prefix}cx_total::"
    return sum(int(line.removeprefix(counter)) for line in text.splitlines() if line.startswith(counter))


def test_strict_refuses_a_caller_without_a_sidecar(mesh: Mesh) -> None:
    """The retail intent is STRICT: a plaintext connection to orders' pod fails outright (no HTTP answer at all,
    not even the 403 its ALLOW policy would give), while cart's mTLS call is admitted. So an intent that
    declares plaintext callers (CIDRs) under STRICT is refused with the reason (defect #9: the old model took
    it, and rendered an ALLOW no caller of the range could ever use)."""
    eventually(lambda: _status(mesh, "cart", RETAIL) == 200, timeout=60, what="cart -> orders")
    orders_pod = mesh.pods["orders"].workload.address
    eventually(lambda: _call(mesh, "legacy", RETAIL, address=orders_pod) is None, timeout=60, what="plaintext refused")
    with_partners = _retail_intent()
    with_partners["clients"].append({"cidrs": [FABRIC], "access": [{"action": "ALLOW"}]})
    with pytest.raises(InvalidObject, match="STRICT"):
        parse("ServiceIntent", "orders", with_partners, PROJECT)


def test_one_app_in_two_logical_clouds_keeps_its_clients_apart(mesh: Mesh) -> None:
    """orders runs twice in cluster-a: in the retail cloud (namespace s2s-retail) and in the ops cloud (s2s-ops),
    both of which also hold cluster-b. Their objects never share a name in either cluster; each cart, local or in
    cluster-b (two hosts, two VIPs, one east-west gateway with a Gateway per namespace), reaches its own cloud's
    orders; and ops' PERMISSIVE CIDR client admits the plaintext partner of the range but no mesh caller from it
    (defect #9: the CIDR rendered as bare `ipBlocks` matched billing's sidecar, and any caller via the
    east-west gateway, whose address it holds: billing got 200 on the old render)."""
    intents = {intent.metadata.name: intent for intent in mesh.fleet.service_intents}
    retail, ops = intents["orders"], intents["orders-ops"]
    for cluster in (SERVER, REMOTE):
        keys = [
            (o["kind"], o["metadata"]["namespace"], o["metadata"]["name"])
            for intent in (retail, ops)
            for o in render_service_intent(intent, mesh.fleet, cluster)
        ]
        assert len(keys) == len(set(keys)), cluster
    assert len(set(mesh.remote_vips.values())) == 2

    eventually(lambda: _status(mesh, "cart-ops", OPS) == 200, timeout=60, what="cart of ops -> orders of ops")
    answer = _call(mesh, "cart-ops", OPS)
    assert answer is not None and json.loads(answer.body)["upstream"] == "orders-ops"
    assert f"URI={_identity(OPS, 'cart')}" in _client_certificate(answer)
    retail_answer = _call(mesh, "cart", RETAIL)
    assert retail_answer is not None and json.loads(retail_answer.body)["upstream"] == "orders"
    remote_ops = mesh.remote_vips[OPS]
    eventually(
        lambda: _status(mesh, "remote-cart-ops", OPS, address=remote_ops) == 200,
        timeout=60,
        what="cart of ops in cluster-b -> orders of ops in cluster-a",
    )
    for client, namespace, upstream in (("remote-cart-ops", OPS, "orders-ops"), ("remote-cart", RETAIL, "orders")):
        answer = _call(mesh, client, namespace, address=mesh.remote_vips[namespace])
        assert answer is not None and answer.status == 200, (client, answer)
        assert json.loads(answer.body)["upstream"] == upstream
        assert f"URI={_identity(namespace, 'cart')}" in _client_certificate(answer)

    ops_pod = mesh.pods["orders-ops"].workload.address
    eventually(lambda: _status(mesh, "legacy", OPS, address=ops_pod) == 200, timeout=60, what="plaintext partner")
    eventually(lambda: _status(mesh, "billing", OPS) == 403, timeout=60, what="billing refused by ops orders")


def test_one_app_twice_in_one_logical_cloud_keeps_each_intent_to_its_own_port(mesh: Mesh) -> None:
    """orders' pods in the retail cloud serve two intents: orders (8080, STRICT, cart) and orders-admin (9090,
    PERMISSIVE, reports and plaintext partners of the range). Their objects share a name only where both render
    one object alike (the namespace's east-west Gateway, the pods' PeerAuthentication), each declared client
    reaches its own service and is refused the other's, and each intent's mTLS mode holds on its own port: a
    plaintext caller reaches orders-admin but cannot connect to orders. Failed on the old render (here and in
    test_strict_refuses_a_caller_without_a_sidecar): each intent had a PeerAuthentication for the same pods,
    Istio honoured the oldest, orders-admin's PERMISSIVE, and the plaintext caller got orders' 403."""
    both = [i for i in mesh.fleet.service_intents if i.metadata.name in ("orders", "orders-admin")]
    for cluster in (SERVER, REMOTE):
        by_key: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for intent in both:
            for o in render_service_intent(intent, mesh.fleet, cluster):
                by_key.setdefault((o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]), []).append(o)
        # Named alike only where meant to be one object, rendered identically by both (merged Sidecars aside).
        shared = {key for key, objects in by_key.items() if len(objects) > 1 and key[0] != "Sidecar"}
        assert {kind for kind, _, _ in shared} <= {"Gateway", "PeerAuthentication"}, (cluster, shared)
        assert all(by_key[key][0] == by_key[key][1] for key in shared), cluster
    peers = [o for o in render_cluster(mesh.fleet, SERVER) if o["kind"] == "PeerAuthentication"]
    assert [p["metadata"]["name"] for p in peers if p["metadata"]["namespace"] == RETAIL] == ["orders-peer"]

    eventually(lambda: _admin_status(mesh, "reports") == 200, timeout=60, what="reports -> orders-admin")
    assert any(request["path"] == "/admin/1" for request in mesh.seen["orders-admin"])
    eventually(lambda: _status(mesh, "cart", RETAIL) == 200, timeout=60, what="cart -> orders")
    assert _admin_status(mesh, "cart") == 403
    assert _status(mesh, "reports", RETAIL) == 403

    orders_pod = mesh.pods["orders"].workload.address
    eventually(lambda: _admin_status(mesh, "legacy", orders_pod) == 200, timeout=60, what="plaintext partner")
    assert _call(mesh, "legacy", RETAIL, address=orders_pod) is None
