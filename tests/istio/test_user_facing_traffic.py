"""IngressIntents proven with real traffic: meshplane renders them (with the ServiceIntents of the services
they route to, whose ALLOW policies must admit the ingress gateway), the objects go to the clusters' API
servers, istiod configures the ingress gateway, and users on the fabric call it over HTTPS.

cluster-a runs the ingress gateway and `books`; `ledger` runs in cluster-b only, which the ingress reaches
through cluster-b's east-west gateway. Users connect straight to the gateway's pod IP from namespaces of
their own on the fabric, so the gateway sees their own address as the peer (no X-Forwarded-For is trusted):
that is the `remote.ip` the source-range rules match.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from meshplane.security.ca import KeyPair, create_ca, issue_server_certificate, server_names_of
from meshplane.server.render.offline import project_documents
from meshplane_testing.eventually import eventually
from meshplane_testing.istio import (
    EAST_WEST,
    INGRESS,
    Fleet,
    Gateway,
    IstioCluster,
    ServicePort,
    Workload,
    served_certificate,
    start_gateway,
    tls_secret,
)
from meshplane_testing.netns import NetworkNamespace, Response, http_get
from meshplane_testing.upstream import run_upstream

pytestmark = pytest.mark.timeout(300)

NAMESPACE = "storefront"
ISSUER = "https://login.storefront.test"
KEY_ID = "storefront-1"
BOOKS_HOST, LEDGER_HOST, OFFICE_HOST, OPS_HOST = (
    f"{name}.storefront.test" for name in ("books", "ledger", "office", "ops")
)
HTTPS_PORT = 8443
"""The stock ingress gateway's HTTPS target port (Service port 443), where users reach its pod IP."""


def _documents(east_west: str, office: str, jwks: str) -> list[dict[str, Any]]:
    """The fleet and intents: `east_west` is cluster-b's east-west gateway, `office` the one address the
    office host admits, `jwks` the test issuer's key set."""

    def ingress(name: str, host: str, service: str, **extra: Any) -> dict[str, Any]:
        spec = {
            "hosts": [host],
            "entities": [{"name": "public", "tls": {"mode": "SIMPLE", "credentialName": f"{name}-cert"}}],
            "routes": [{"match": {"prefix": "/"}, "to": {"service": service, "port": 8080}}],
            "placement": {"logicalCloud": "front"},
            **extra,
        }
        return {"kind": "IngressIntent", "metadata": {"name": name, "project": NAMESPACE}, "spec": spec}

    def service(name: str, cloud: str) -> dict[str, Any]:
        spec = {
            "service": {"name": name, "app": name, "port": 8080, "protocol": "HTTP"},
            "placement": {"logicalCloud": cloud},
        }
        return {"kind": "ServiceIntent", "metadata": {"name": name, "project": NAMESPACE}, "spec": spec}

    def cloud(name: str, cluster: str) -> dict[str, Any]:
        spec = {"clusters": [{"name": cluster, "namespace": NAMESPACE}]}
        return {"kind": "LogicalCloud", "metadata": {"name": name, "project": NAMESPACE}, "spec": spec}

    return [
        {"kind": "Cluster", "metadata": {"name": "cluster-a"}, "spec": {}},
        {
            "kind": "Cluster",
            "metadata": {"name": "cluster-b"},
            "spec": {"eastWestGateway": {"address": east_west, "port": 15443}},
        },
        {"kind": "Project", "metadata": {"name": NAMESPACE}, "spec": {}},
        cloud("front", "cluster-a"),
        cloud("back", "cluster-b"),
        service("books", "front"),
        service("ledger", "back"),
        ingress("books-front", BOOKS_HOST, "books"),
        ingress("ledger-front", LEDGER_HOST, "ledger"),
        ingress("office", OFFICE_HOST, "books", access=[{"sources": {"ipBlocks": [f"{office}/32"]}}]),
        ingress(
            "ops",
            OPS_HOST,
            "books",
            authentication={"jwt": [{"issuer": ISSUER, "jwks": jwks}]},
            access=[{"jwtClaims": {"group": "ops"}}],
        ),
    ]


def _rendered(documents: list[dict[str, Any]], cluster: str) -> list[dict[str, Any]]:
    """The Kubernetes objects meshplane delivers to `cluster` (its own kinds left out)."""
    wire = [{"apiVersion": "meshplane.io/v1alpha1", **document} for document in documents]
    return [o for o in project_documents(wire, cluster) if not o["apiVersion"].startswith("meshplane.io/")]


@contextlib.contextmanager
def _applied(cluster: IstioCluster, objects: Iterable[Mapping[str, Any]]) -> Iterator[None]:
    """`objects` in `cluster` until the end, then deleted, so later modules find the cluster as it was."""
    written = list(objects)
    try:
        cluster.apply_all(written)
        yield
    finally:
        for body in reversed(written):
            cluster.delete(body["kind"], body["metadata"]["namespace"], body["metadata"]["name"])


def _jwks(key: ec.EllipticCurvePrivateKey) -> str:
    public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    return json.dumps({"keys": [{**public, "kid": KEY_ID, "alg": "ES256", "use": "sig"}]})


def _token(key: ec.EllipticCurvePrivateKey, group: str) -> str:
    claims = {"iss": ISSUER, "sub": f"{group}-user", "group": group, "exp": int(time.time()) + 3600}
    return jwt.encode(claims, key, algorithm="ES256", headers={"kid": KEY_ID})


@dataclass(frozen=True)
class Storefront:
    ingress: Gateway
    ca: KeyPair
    issuer_key: ec.EllipticCurvePrivateKey
    office: NetworkNamespace
    """A user at the one address the office host admits."""
    elsewhere: NetworkNamespace
    """A user at another address of the fabric."""
    seen: dict[str, list[dict[str, Any]]]
    """The requests each service's process saw, by service."""
    certificates: dict[str, x509.Certificate]
    """The certificate of each host, in the Secret its intent's credentialName names."""

    def trust(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca.certificate_pem().decode())

    def get(
        self, user: NetworkNamespace, host: str, path: str = "/", headers: Mapping[str, str] | None = None
    ) -> Response:
        """GET https://<host><path> as `user`, at the ingress gateway's address."""
        address = self.ingress.workload.address
        return http_get(user, address, HTTPS_PORT, path, {"Host": host, **(headers or {})}, self.trust(), host)

    def status(
        self, user: NetworkNamespace, host: str, path: str = "/", headers: Mapping[str, str] | None = None
    ) -> int | None:
        try:
            return self.get(user, host, path, headers).status
        except OSError:
            return None

    def answers(self, user: NetworkNamespace, host: str, status: int, **how: Any) -> None:
        """Wait until `host` answers `user` with `status` (istiod's configuration lands in steps)."""
        eventually(lambda: self.status(user, host, **how) == status, timeout=60, what=f"{host} -> {status}")


@pytest.fixture(scope="module")
def storefront(fleet: Fleet) -> Iterator[Storefront]:
    front, back = fleet["cluster-a"], fleet["cluster-b"]
    ports = (ServicePort("http", 8080, 8080),)

    def workload(cluster: IstioCluster, name: str) -> Workload:
        labels = {"app": name}
        return Workload(name, NAMESPACE, cluster.new_address(), labels, ports, service_account=name, sidecar=True)

    ca = create_ca()
    issuer_key = ec.generate_private_key(ec.SECP256R1())
    office_address, elsewhere_address = front.new_address(), front.new_address()
    with contextlib.ExitStack() as stack:
        ingress = stack.enter_context(start_gateway(front, INGRESS))
        east_west = stack.enter_context(start_gateway(back, EAST_WEST))
        seen = {}
        for cluster, name in ((front, "books"), (back, "ledger")):
            port, seen[name] = stack.enter_context(run_upstream(name))
            stack.enter_context(cluster.serve(workload(cluster, name), {8080: port}))
        office = stack.enter_context(front.fabric.host(office_address, {}, prefix="mp-user"))
        elsewhere = stack.enter_context(front.fabric.host(elsewhere_address, {}, prefix="mp-user"))
        documents = _documents(east_west.workload.address, office_address, _jwks(issuer_key))
        secrets, certificates = [], {}
        for name, host in (
            ("books-front", BOOKS_HOST),
            ("ledger-front", LEDGER_HOST),
            ("office", OFFICE_HOST),
            ("ops", OPS_HOST),
        ):
            served = issue_server_certificate(ca, [host])
            certificates[host] = served.certificate
            secrets.append(tls_secret(f"{name}-cert", served.certificate_pem(), served.key_pem()))
        stack.enter_context(_applied(front, [*secrets, *_rendered(documents, "cluster-a")]))
        stack.enter_context(_applied(back, _rendered(documents, "cluster-b")))
        yield Storefront(ingress, ca, issuer_key, office, elsewhere, seen, certificates)


def test_https_at_the_ingress_gateway_serves_the_intents_certificate_and_reaches_the_local_service(
    storefront: Storefront,
) -> None:
    storefront.answers(storefront.elsewhere, BOOKS_HOST, 200, path="/shelf/3")
    assert storefront.seen["books"][-1]["path"] == "/shelf/3"
    address = storefront.ingress.workload.address
    for host in (BOOKS_HOST, LEDGER_HOST):
        served = served_certificate(storefront.elsewhere, address, HTTPS_PORT, host, storefront.trust())
        assert served == storefront.certificates[host]
        assert host in server_names_of(served)


def test_the_ingress_gateway_reaches_a_service_of_another_cluster_through_its_east_west_gateway(
    storefront: Storefront,
) -> None:
    storefront.answers(storefront.elsewhere, LEDGER_HOST, 200, path="/entries")
    seen = storefront.seen["ledger"][-1]
    assert seen["path"] == "/entries"
    # Istio mTLS from the ingress gateway's identity, passed through by the east-west gateway.
    client_certificate = seen["headers"]["x-forwarded-client-cert"]
    assert f"By=spiffe://cluster.local/ns/{NAMESPACE}/sa/ledger" in client_certificate
    assert "URI=spiffe://cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account" in client_certificate


def test_a_source_range_admits_a_user_inside_it_and_refuses_one_outside(storefront: Storefront) -> None:
    storefront.answers(storefront.office, OFFICE_HOST, 200)
    storefront.answers(storefront.elsewhere, OFFICE_HOST, 403)
    assert storefront.status(storefront.office, OFFICE_HOST) == 200


def test_a_jwt_claim_admits_its_group_refuses_another_and_a_token_of_another_key_is_unauthenticated(
    storefront: Storefront,
) -> None:
    def bearer(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    ops = bearer(_token(storefront.issuer_key, "ops"))
    storefront.answers(storefront.elsewhere, OPS_HOST, 200, headers=ops)
    assert (
        storefront.status(storefront.elsewhere, OPS_HOST, headers=bearer(_token(storefront.issuer_key, "sales"))) == 403
    )
    forged = bearer(_token(ec.generate_private_key(ec.SECP256R1()), "ops"))
    assert storefront.status(storefront.elsewhere, OPS_HOST, headers=forged) == 401
    assert storefront.status(storefront.elsewhere, OPS_HOST) == 403
