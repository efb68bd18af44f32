"""The service-intent scenario the render tests share: a fleet as a user would apply it, and reading helpers."""

from __future__ import annotations

from meshplane.model.registry import REGISTRY
from meshplane.server.render.fleet import ClusterInfo, Fleet
from meshplane.server.render.service import merge_sidecars, render_service_intent

SCENARIO = """
apiVersion: meshplane.io/v1alpha1
kind: Cluster
metadata: {name: edge-1, labels: {tier: edge, region: eu-west, zone: eu-west-1a}}
spec: {eastWestGateway: {address: 203.0.113.11, port: 15443}}
---
apiVersion: meshplane.io/v1alpha1
kind: Cluster
metadata: {name: edge-2, labels: {tier: edge, region: eu-west, zone: eu-west-1b}}
spec: {eastWestGateway: {address: 203.0.113.12, port: 15443}}
---
apiVersion: meshplane.io/v1alpha1
kind: Cluster
metadata: {name: core-1, labels: {tier: core, region: eu-central, zone: eu-central-1a}}
spec: {eastWestGateway: {address: ew.core-1.example.net, port: 15443}}
---
apiVersion: meshplane.io/v1alpha1
kind: LogicalCloud
metadata: {name: retail, project: shop}
spec:
  clusters: [{name: edge-1, namespace: shop}, {name: edge-2, namespace: shop}]
---
apiVersion: meshplane.io/v1alpha1
kind: LogicalCloud
metadata: {name: ops, project: shop}
spec:
  clusters: [{name: core-1, namespace: ops}, {name: edge-1, namespace: ops}]
---
# The shop's orders service, in the retail cloud: called by the cart next to it and by the audit
# job of the ops cloud (which runs in core-1, where retail has no replica).
apiVersion: meshplane.io/v1alpha1
kind: ServiceIntent
metadata: {name: orders, project: shop}
spec:
  service: {name: orders, app: orders, port: 8080, protocol: HTTP}
  placement: {logicalCloud: retail}
  mtls: STRICT
  authentication:
    jwt: [{issuer: "https://auth.example.com", jwksUri: "https://auth.example.com/.well-known/jwks.json"}]
  trafficPolicy:
    loadBalancer: LEAST_REQUEST
    localityFailover: true
    timeout: 5s
    retries: {attempts: 2, perTryTimeout: 1500ms}
    circuitBreaker: {maxConnections: 100, maxPendingRequests: 50, http2MaxRequests: 200, maxRequestsPerConnection: 20,
                     consecutiveErrors: 5, interval: 10s, baseEjectionTime: 1m}
  clients:
  - service: {name: cart, serviceAccount: cart}
    access:
    - {action: ALLOW, methods: [GET, POST], paths: ["/orders/*"]}
    - {action: DENY, paths: ["/orders/admin/*"]}
  - service: {name: audit, serviceAccount: audit-reader, logicalCloud: ops}
    access:
    - action: ALLOW
      methods: [GET]
      paths: ["/orders/*"]
      headers: {X-Audit-Reason: compliance}
      jwtClaims: {iss: "https://auth.example.com", groups: auditors}
---
# The same app instantiated a second time, in the ops cloud, for back-office tools over gRPC; a
# legacy batch system outside the mesh calls it from its network, hence PERMISSIVE.
apiVersion: meshplane.io/v1alpha1
kind: ServiceIntent
metadata: {name: orders-ops, project: shop}
spec:
  service: {name: orders, app: orders, port: 9090, protocol: GRPC}
  placement: {logicalCloud: ops}
  mtls: PERMISSIVE
  authentication:
    jwt: [{issuer: "https://auth.example.com", jwksUri: "https://auth.example.com/.well-known/jwks.json",
           audiences: [orders-ops]}]
  trafficPolicy: {localityFailover: true, timeout: 2s, consistentHash: {httpHeaderName: x-tenant}}
  clients:
  - service: {name: reporting}
    access:
    - {action: ALLOW, paths: ["/orders.v1.Orders/*"], jwtClaims: {scope: reports}}
  - service: {name: cart, logicalCloud: retail}
    access:
    - {action: ALLOW, paths: ["/orders.v1.Orders/*"]}
    - {action: DENY, paths: ["/orders.v1.Orders/DeleteOrder"]}
  - cidrs: ["10.20.0.0/16"]
    access:
    - {action: ALLOW, methods: [POST], paths: ["/orders.v1.Orders/GetOrder"]}
---
# A StatefulSet behind a headless Service: the cart connects to the pod it resolved.
apiVersion: meshplane.io/v1alpha1
kind: ServiceIntent
metadata: {name: stock, project: shop}
spec:
  service: {name: stock, port: 7000, protocol: TCP, headless: true}
  placement: {logicalCloud: retail}
  trafficPolicy: {circuitBreaker: {maxConnections: 10}}
  clients: [{service: {name: cart}}]
---
# A legacy ledger without a sidecar that terminates TLS itself: callers verify it with its CA.
apiVersion: meshplane.io/v1alpha1
kind: ServiceIntent
metadata: {name: ledger, project: shop}
spec:
  service:
    name: ledger
    port: 8443
    sidecar: false
    tls: {mode: SIMPLE, caConfigMap: ledger-ca, sni: ledger.shop.svc.cluster.local}
  placement: {logicalCloud: retail, clusters: [edge-1]}
  mtls: DISABLE
  clients: [{service: {name: cart}}]
---
# Shoppers reach the retail orders API through the ingress gateway: its identity is a caller too.
apiVersion: meshplane.io/v1alpha1
kind: IngressIntent
metadata: {name: storefront, project: shop}
spec:
  hosts: [shop.example.com]
  entities: [{name: public, tls: {mode: SIMPLE, credentialName: shop-cert}}]
  routes: [{match: {prefix: /orders/}, to: {service: orders, port: 8080}}]
  placement: {logicalCloud: retail}
"""


def fleet_from_docs(docs: list[dict]) -> Fleet:
    """A Fleet from the YAML documents a user would apply (Cluster, LogicalCloud, ServiceIntent, IngressIntent)."""
    resources = [REGISTRY.parse(doc) for doc in docs]
    clusters = {
        r.metadata.name: ClusterInfo(r.metadata.name, dict(r.metadata.labels), r.spec.east_west_gateway)
        for r in resources
        if r.kind == "Cluster"
    }
    clouds = {(r.metadata.project, r.metadata.name): r.spec for r in resources if r.kind == "LogicalCloud"}
    intents = [r for r in resources if r.kind == "ServiceIntent"]
    ingress = [r for r in resources if r.kind == "IngressIntent"]
    return Fleet(clusters=clusters, logical_clouds=clouds, service_intents=intents, ingress_intents=ingress)


def render_cluster(fleet: Fleet, cluster: str) -> list[dict]:
    """Everything `cluster` receives from every service intent, as the server would assemble it."""
    rendered = [obj for intent in fleet.service_intents for obj in render_service_intent(intent, fleet, cluster)]
    by_key: dict[tuple[str, str, str], dict] = {}
    for obj in merge_sidecars(rendered):
        key = (obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
        assert by_key.get(key, obj) == obj, f"two different objects named {key}"
        by_key[key] = obj
    return [by_key[k] for k in sorted(by_key)]


def objects_of(objects: list[dict], kind: str, namespace: str | None = None) -> dict[str, dict]:
    return {
        o["metadata"]["name"]: o
        for o in objects
        if o["kind"] == kind and (namespace is None or o["metadata"]["namespace"] == namespace)
    }
