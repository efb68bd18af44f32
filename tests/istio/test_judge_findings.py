"""The shipped examples, rendered, as istiod's configuration generator reads them (meshplane_testing.istio_judge).

Each cluster's render is judged once, with the stock gateways and the examples' workloads beside it,
and every call the tests below ask about. Each test asserts the correct behaviour.
"""

from __future__ import annotations

from typing import Any

import pytest

from meshplane_testing.istio_judge import (
    EAST_WEST_GATEWAY,
    EGRESS_GATEWAY,
    INGRESS_GATEWAY,
    Call,
    Jwt,
    Verdict,
    judge,
    namespace,
    stock_gateways,
    workload,
)
from meshplane_testing.renders import example_render, golden_scenarios

CART = "cluster.local/ns/shop/sa/cart"
INGRESS_IDENTITY = "cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account"
ORDERS_IP = "10.1.0.10"
CART_IP = "10.1.0.20"
REPORTS_IP = "10.1.0.30"
ORDERS_OPS_IP = "10.1.0.40"


def workloads(cluster: str) -> list[dict[str, Any]]:
    """The examples' workloads where they run: orders and cart (retail) on edge-1, reports and the ops
    orders on core-1, and the namespaces, so istiod builds their sidecars' listeners."""
    objects = [namespace("shop"), namespace("ops")]
    if cluster == "edge-1":
        objects += workload("shop", "orders", ORDERS_IP, 8080, cluster_ip="10.96.1.10")
        objects += workload("shop", "cart", CART_IP, 8080, cluster_ip="10.96.1.20")
        objects += workload("shop", "billing", "10.1.0.60", 8080, cluster_ip="10.96.1.60")
        objects += workload("shop", "vault", "10.1.0.80", 8200, cluster_ip="10.96.1.80")
        objects += user_owned_site()
    if cluster == "edge-2":
        objects += workload("shop", "cart", CART_IP, 8080, cluster_ip="10.96.1.20")
    if cluster == "core-1":
        objects += workload("ops", "orders", ORDERS_OPS_IP, 8080, cluster_ip="10.96.1.40")
        objects += workload("ops", "reports", REPORTS_IP, 8080, cluster_ip="10.96.1.30")
    return objects


def ingress_intent(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": name, "project": "shop"}
    return {"apiVersion": "meshplane.io/v1alpha1", "kind": "IngressIntent", "metadata": meta, "spec": spec}


VAULT = ingress_intent(
    "vault",
    {
        "hosts": ["vault.example.com"],
        "entities": [{"name": "direct", "tls": {"mode": "PASSTHROUGH"}}],
        "routes": [{"match": {"prefix": "/"}, "to": {"service": "vault", "port": 8200}}],
        "access": [{"action": "ALLOW", "sources": {"ipBlocks": ["0.0.0.0/0"]}}],
        "placement": {"logicalCloud": "retail"},
    },
)
"""A user-facing host passed through by SNI to the service, which terminates TLS itself."""
PARTNER = ingress_intent(
    "partner",
    {
        "hosts": ["partner.example.com"],
        "entities": [{"name": "public", "tls": {"mode": "SIMPLE", "credentialName": "partner-cert"}}],
        "routes": [{"match": {"prefix": "/"}, "to": {"service": "orders", "port": 8080}}],
        "access": [{"action": "DENY", "sources": {"requestPrincipals": ["https://idp.example.com/banned"]}}],
        "authentication": {"jwt": [{"issuer": "https://idp.example.com", "jwksUri": "https://idp.example.com/keys"}]},
        "placement": {"logicalCloud": "retail"},
    },
)
"""A user-facing host on the same gateway that denies one token subject."""


def user_owned_site() -> list[dict[str, Any]]:
    """A site on the shared ingress gateway that no meshplane intent names: its own Gateway and route."""
    gateway = {
        "apiVersion": "networking.istio.io/v1",
        "kind": "Gateway",
        "metadata": {"name": "site", "namespace": "web"},
        "spec": {
            "selector": {"istio": "ingressgateway"},
            "servers": [{"port": {"number": 80, "name": "http", "protocol": "HTTP"}, "hosts": ["site.example.org"]}],
        },
    }
    route = {
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": "site", "namespace": "web"},
        "spec": {
            "hosts": ["site.example.org"],
            "gateways": ["web/site"],
            "http": [{"route": [{"destination": {"host": "site.web.svc.cluster.local", "port": {"number": 8080}}}]}],
        },
    }
    return [namespace("web"), *workload("web", "site", "10.1.0.50", 8080, cluster_ip="10.96.1.50"), gateway, route]


TAX_PROVIDER = {
    "apiVersion": "meshplane.io/v1alpha1",
    "kind": "EgressIntent",
    "metadata": {"name": "tax-provider", "project": "shop"},
    "spec": {
        "hosts": ["api.tax.example"],
        "ports": [{"number": 443, "protocol": "TLS"}],
        "resolution": "DNS",
        "clients": [{"service": {"name": "billing", "namespace": "shop", "logicalCloud": "retail"}}],
        "placement": {"logicalCloud": "retail"},
    },
}
"""An egress intent whose client (billing) no ServiceIntent names: it only calls out."""


def to_orders(name: str, peer: str, path: str = "/orders/1", **fields: Any) -> Call:
    """A request arriving at the orders sidecar on edge-1 from `peer`."""
    return Call(
        name,
        source="shop/orders-0",
        mode="inbound",
        port=8080,
        host="orders.shop.svc.cluster.local",
        path=path,
        peer=peer,
        **fields,
    )


EDGE_1_CALLS = [
    Call("cart to orders", source="shop/cart-0", port=8080, host="orders.shop.svc.cluster.local", path="/orders/1"),
    to_orders("declared client", CART),
    to_orders("undeclared client", "cluster.local/ns/shop/sa/intruder"),
    to_orders("declared client on a DENY path", CART, path="/orders/admin/keys"),
    to_orders("declared client on a DENY path, with //", CART, path="/orders//admin/keys"),
    to_orders("declared CIDR client without a sidecar", "", method="GET", tls="plaintext", source_ip="10.20.1.7"),
    to_orders("ingress gateway to orders", INGRESS_IDENTITY, path="/", headers={"x-forwarded-for": "203.0.113.9"}),
    Call("cart to the payment provider", source="shop/cart-0", port=443, host="api.payments.example", protocol="TLS"),
    Call(
        "egress gateway for cart",
        source=EGRESS_GATEWAY,
        router=True,
        port=443,
        host="api.payments.example",
        protocol="TLS",
        tls="mtls",
        peer=CART,
    ),
    Call(
        "storefront at the ingress gateway",
        source=INGRESS_GATEWAY,
        router=True,
        port=443,
        host="shop.example.com",
        tls="tls",
        path="/",
        source_ip="203.0.113.9",
    ),
    Call(
        "a site no intent names, at the ingress gateway",
        source=INGRESS_GATEWAY,
        router=True,
        port=80,
        host="site.example.org",
        source_ip="203.0.113.9",
    ),
    Call(
        "edge-2's cart through the east-west gateway",
        source=EAST_WEST_GATEWAY,
        router=True,
        port=15443,
        protocol="HTTP",
        tls="mtls",
        sni="outbound_.8080_._.orders.shop.svc.cluster.local",
        peer=CART,
    ),
    Call(
        "a passthrough host at the ingress gateway",
        source=INGRESS_GATEWAY,
        router=True,
        port=443,
        host="vault.example.com",
        protocol="TLS",
        source_ip="203.0.113.9",
    ),
    Call("egress-only billing to orders", source="shop/billing-0", port=8080, host="orders.shop.svc.cluster.local"),
]
SHOP_ISSUER = "https://auth.shop.example"
"""The issuer orders-ops declares (examples/intents/service-to-service.yaml): its RequestAuthentication's."""


def reports_to_orders(name: str, token: Jwt) -> Call:
    """reports calling orders in ops (whose ALLOW wants the claim role=auditor) with `token`."""
    return Call(
        name,
        source="ops/orders-0",
        mode="inbound",
        port=8080,
        host="orders.ops.svc.cluster.local",
        path="/",
        peer="cluster.local/ns/ops/sa/reports",
        jwt=token,
    )


CORE_1_CALLS = [
    reports_to_orders("reports to orders (ops)", Jwt(SHOP_ISSUER, "auditor-1", {"role": "auditor"})),
    reports_to_orders("reports to orders (ops), another claim", Jwt(SHOP_ISSUER, "viewer-1", {"role": "viewer"})),
    reports_to_orders(
        "reports to orders (ops), an issuer no RequestAuthentication names",
        Jwt("https://issuer.example", "auditor-1", {"role": "auditor"}),
    ),
]
EDGE_2_CALLS = [
    Call("cart to orders in edge-1", source="shop/cart-0", port=8080, host="orders.shop.svc.cluster.local"),
    Call(
        "storefront at the ingress gateway",
        source=INGRESS_GATEWAY,
        router=True,
        port=443,
        host="shop.example.com",
        tls="tls",
        path="/",
        source_ip="203.0.113.9",
    ),
]


@pytest.fixture(scope="module")
def edge_1() -> Verdict:
    return judge(
        [*stock_gateways(), *workloads("edge-1"), *example_render("edge-1", TAX_PROVIDER, VAULT, PARTNER)], EDGE_1_CALLS
    )


@pytest.fixture(scope="module")
def egress_golden_core_1() -> Verdict:
    """The egress golden scenario of core-1, with a workload in ops that no egress intent names."""
    objects = [*stock_gateways(), namespace("ops"), *workload("ops", "monitor", "10.1.0.70", 9090)]
    call = Call(
        "an unrelated TCP call on the proxy's port",
        source="ops/monitor-0",
        port=3128,
        address="198.51.100.7",
        protocol="TCP",
    )
    return judge([*objects, *golden_scenarios()["egress/core-1"]], [call])


@pytest.fixture(scope="module")
def edge_2() -> Verdict:
    return judge([*stock_gateways(), *workloads("edge-2"), *example_render("edge-2")], EDGE_2_CALLS)


@pytest.fixture(scope="module")
def core_1() -> Verdict:
    return judge([*stock_gateways(), *workloads("core-1"), *example_render("core-1")], CORE_1_CALLS)


# --- Service-to-service: what istiod already gets right ---


def test_a_declared_client_reaches_the_service_through_its_sidecar(edge_1: Verdict) -> None:
    outbound = edge_1.result("cart to orders")
    assert outbound.allowed, outbound.raw
    assert outbound.cluster == "outbound|8080||orders.shop.svc.cluster.local"


def test_the_service_sidecar_admits_a_declared_client(edge_1: Verdict) -> None:
    result = edge_1.result("declared client")
    assert result.allowed, result.raw
    assert result.cluster.startswith("inbound|8080")
    assert any("policy[orders-allow]" in m for d in result.rbac for m in d.matched)


def test_the_service_sidecar_refuses_an_undeclared_client(edge_1: Verdict) -> None:
    result = edge_1.result("undeclared client")
    assert result.decision == "deny", result.raw
    assert "no ALLOW policy matched" in result.denied_by


def test_a_deny_path_refuses_the_declared_client(edge_1: Verdict) -> None:
    result = edge_1.result("declared client on a DENY path")
    assert result.decision == "deny", result.raw
    assert "policy[orders-deny]" in result.denied_by


def test_a_deny_path_refuses_the_declared_client_also_with_a_double_slash(edge_1: Verdict) -> None:
    """Issue 18's #10: this Istio merges slashes by default (its connection settings), before RBAC."""
    result = edge_1.result("declared client on a DENY path, with //")
    assert result.decision == "deny", result.raw
    assert "policy[orders-deny]" in result.denied_by


def test_a_declared_client_is_admitted_under_the_mesh_trust_domain() -> None:
    """Issue 18's #12 (trust domain): istiod reads the rendered cluster.local principals as the mesh's own
    trust domain, so a mesh on another one admits its clients, and only them."""
    calls = [
        to_orders("acme cart", "acme.example/ns/shop/sa/cart"),
        to_orders("other cart", "other.example/ns/shop/sa/cart"),
    ]
    verdict = judge([*stock_gateways(), *workloads("edge-1"), *example_render("edge-1")], calls, "acme.example")
    assert verdict.result("acme cart").allowed, verdict.result("acme cart").raw
    assert verdict.result("other cart").decision == "deny", verdict.result("other cart").raw


def test_the_client_sidecar_sends_the_payment_provider_to_the_egress_gateway(edge_1: Verdict) -> None:
    result = edge_1.result("cart to the payment provider")
    assert result.allowed, result.raw
    assert result.cluster.endswith("|istio-egressgateway.istio-system.svc.cluster.local")


def test_a_client_in_another_cluster_is_sent_to_the_service_cluster(edge_2: Verdict) -> None:
    result = edge_2.result("cart to orders in edge-1")
    assert result.allowed, result.raw
    assert result.cluster == "outbound|8080||orders.shop.svc.cluster.local"


def test_the_east_west_gateway_passes_a_remote_client_through_to_the_service(edge_1: Verdict) -> None:
    result = edge_1.result("edge-2's cart through the east-west gateway")
    assert result.allowed, result.raw
    assert result.cluster == "outbound_.8080_._.orders.shop.svc.cluster.local"


# --- Defects of issue 18, asserting the correct behaviour ---


def test_the_egress_gateway_admits_a_declared_client(edge_1: Verdict) -> None:
    result = edge_1.result("egress gateway for cart")
    assert result.listener == "0.0.0.0_8443", result.raw
    assert result.allowed, result.raw


def test_the_service_sidecar_admits_the_ingress_gateway_for_a_user_facing_route(edge_1: Verdict) -> None:
    assert edge_1.result("storefront at the ingress gateway").cluster == "outbound|8080||orders.shop.svc.cluster.local"
    result = edge_1.result("ingress gateway to orders")
    assert result.allowed, result.raw


def test_the_ingress_gateway_of_a_cluster_without_the_service_has_a_route_to_it(edge_2: Verdict) -> None:
    result = edge_2.result("storefront at the ingress gateway")
    assert result.allowed and result.cluster_known, result.raw


def test_a_deny_by_token_on_the_gateway_leaves_a_passthrough_host_open(edge_1: Verdict) -> None:
    result = edge_1.result("a passthrough host at the ingress gateway")
    assert result.cluster == "outbound|8200||vault.shop.svc.cluster.local", result.raw
    assert result.allowed, result.raw


def test_the_shared_ingress_gateway_still_serves_a_host_no_intent_names(edge_1: Verdict) -> None:
    result = edge_1.result("a site no intent names, at the ingress gateway")
    assert result.cluster == "outbound|8080||site.web.svc.cluster.local", result.raw
    assert result.allowed, result.raw


def test_an_egress_only_client_calls_a_mesh_service_on_its_cluster(edge_1: Verdict) -> None:
    result = edge_1.result("egress-only billing to orders")
    assert result.cluster == "outbound|8080||orders.shop.svc.cluster.local", result.raw


def test_a_tcp_egress_route_leaves_other_destinations_on_its_port_alone(egress_golden_core_1: Verdict) -> None:
    result = egress_golden_core_1.result("an unrelated TCP call on the proxy's port")
    assert result.cluster == "PassthroughCluster", result.raw


def test_a_client_with_the_required_jwt_claim_is_admitted(core_1: Verdict) -> None:
    """The judge sets a token's claims only where the chain's jwt_authn filter has a provider for its issuer,
    which istiod generates from a RequestAuthentication selecting the workload: orders-ops' own."""
    result = core_1.result("reports to orders (ops)")
    assert result.allowed, result.raw
    assert [d.matched for d in result.rbac] == [("ns[ops]-policy[orders-ops-allow]-rule[0]",)], result.raw
    for refused in (
        "reports to orders (ops), another claim",
        "reports to orders (ops), an issuer no RequestAuthentication names",
    ):
        assert core_1.result(refused).decision == "deny", core_1.result(refused).raw


def test_a_jwt_claim_admits_nobody_where_no_request_authentication_selects_the_server() -> None:
    """Without the RequestAuthentication the render gives orders-ops, no filter validates the token, so no claim
    is set and the ALLOW rule on `request.auth.claims[role]` matches nobody (defect #4 of issue 18)."""
    objects = [o for o in example_render("core-1") if o["kind"] != "RequestAuthentication"]
    assert len(objects) < len(example_render("core-1"))
    verdict = judge([*stock_gateways(), *workloads("core-1"), *objects], CORE_1_CALLS[:1])
    result = verdict.result("reports to orders (ops)")
    assert result.decision == "deny", result.raw


def test_a_declared_cidr_client_without_a_sidecar_reaches_the_service(edge_1: Verdict) -> None:
    result = edge_1.result("declared CIDR client without a sidecar")
    assert result.allowed, result.raw


@pytest.mark.parametrize("cluster", ["edge-1", "edge-2", "core-1"])
def test_istiod_validation_accepts_every_rendered_object(
    cluster: str, edge_1: Verdict, edge_2: Verdict, core_1: Verdict
) -> None:
    verdict = {"edge-1": edge_1, "edge-2": edge_2, "core-1": core_1}[cluster]
    assert verdict.invalid == (), [(f.kind, f.namespace, f.name, f.errors) for f in verdict.invalid]
