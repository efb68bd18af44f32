"""IngressIntents proven with real traffic: meshplane renders them (with the ServiceIntents of the services
they route to, whose ALLOW policies must admit the ingress gateway), the objects go to the clusters' API
servers, istiod configures the ingress gateway, and users on the fabric call it over HTTPS (and plain
HTTP for an entity without TLS).

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
from meshplane.server.render.ingress import ENTITY_LABEL
from meshplane.server.render.offline import project_documents
from meshplane.server.render.service import INGRESS_GATEWAY_SERVICE_ACCOUNT
from meshplane_testing.eventually import eventually
from meshplane_testing.istio import (
    EAST_WEST,
    INGRESS,
    Fleet,
    Gateway,
    GatewayKind,
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
BOOKS_HOST, LEDGER_HOST, OFFICE_HOST, OPS_HOST, GIFTS_HOST, LOBBY_HOST = (
    f"{name}.storefront.test" for name in ("books", "ledger", "office", "ops", "gifts", "lobby")
)
GIFT_ENTITIES = ("public", "partners")
"""The entities of the gifts intent: one host, each entity with its own certificate and its own gateway pods."""
HTTPS_PORT, HTTP_PORT = 8443, 8080
"""The stock ingress gateway's target ports (of Service ports 443 and 80), where users reach its pod IP."""


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

    office_only = [{"sources": {"ipBlocks": [f"{office}/32"]}}]
    lobby = ingress("lobby", LOBBY_HOST, "books", access=office_only)
    lobby["spec"]["entities"] = [{"name": "public"}]
    gifts = ingress("gifts", GIFTS_HOST, "books")
    gifts["spec"]["entities"] = [
        {"name": entity, "tls": {"mode": "SIMPLE", "credentialName": f"gifts-{entity}-cert"}}
        for entity in GIFT_ENTITIES
    ]
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
        ingress("office", OFFICE_HOST, "books", access=office_only),
        ingress(
            "ops",
            OPS_HOST,
            "books",
            authentication={"jwt": [{"issuer": ISSUER, "jwks": jwks}]},
            access=[{"jwtClaims": {"group": "ops"}}],
        ),
        gifts,
        lobby,
    ]


def _entity_gateway(entity: str) -> GatewayKind:
    """Ingress gateway pods of one entity: the stock gateway's labels and ports, and the entity's label."""
    name = f"{INGRESS.name}-{entity}"
    return GatewayKind(name, {**INGRESS.labels, "app": name, ENTITY_LABEL: entity}, INGRESS.ports)


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


def _token(key: ec.EllipticCurvePrivateKey, group: str, lifetime: int = 3600) -> str:
    claims = {"iss": ISSUER, "sub": f"{group}-user", "group": group, "exp": int(time.time()) + lifetime}
    return jwt.encode(claims, key, algorithm="ES256", headers={"kid": KEY_ID})


@dataclass(frozen=True)
class Storefront:
    ingress: Gateway
    ca: KeyPair
    issuer_key: ec.EllipticCurvePrivateKey
    office: NetworkNamespace
    """A user at the one address the office host admits, `office_address`."""
    office_address: str
    elsewhere: NetworkNamespace
    """A user at another address of the fabric."""
    seen: dict[str, list[dict[str, Any]]]
    """The requests each service's process saw, by service."""
    certificates: dict[str, x509.Certificate]
    """The certificate in each credentialName's Secret, by its name."""

    def trust(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca.certificate_pem().decode())

    def get(self, user: NetworkNamespace, host: str, path: str = "/", **how: Any) -> Response:
        """GET https://<host><path> (with `plain`, http://) as `user`, with `headers`, at the pod IP of
        `gateway` (by default the stock ingress gateway)."""
        address = how.get("gateway", self.ingress).workload.address
        headers = {"Host": host, **how.get("headers", {})}
        port, tls = (HTTP_PORT, None) if how.get("plain") else (HTTPS_PORT, self.trust())
        return http_get(user, address, port, path, headers, tls, host)

    def status(self, user: NetworkNamespace, host: str, path: str = "/", **how: Any) -> int | str:
        """The response's status, or why there was none."""
        try:
            return self.get(user, host, path, **how).status
        except OSError as exc:
            return repr(exc)

    def answers(self, user: NetworkNamespace, host: str, status: int, path: str = "/", **how: Any) -> None:
        """Wait until `host` answers `user` with `status` (istiod's configuration lands in steps)."""
        last: list[int | str] = []

        def answered() -> bool:
            last[:] = [self.status(user, host, path, **how)]
            return last[0] == status

        try:
            eventually(answered, timeout=60, what=f"{host}{path} -> {status}")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; the last answer was {last[0]}") from None


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
        credentials = [
            ("books-front-cert", BOOKS_HOST),
            ("ledger-front-cert", LEDGER_HOST),
            ("office-cert", OFFICE_HOST),
            ("ops-cert", OPS_HOST),
            *((f"gifts-{entity}-cert", GIFTS_HOST) for entity in GIFT_ENTITIES),
        ]
        for credential, host in credentials:
            served = issue_server_certificate(ca, [host])
            certificates[credential] = served.certificate
            secrets.append(tls_secret(credential, served.certificate_pem(), served.key_pem()))
        stack.enter_context(_applied(front, [*secrets, *_rendered(documents, "cluster-a")]))
        stack.enter_context(_applied(back, _rendered(documents, "cluster-b")))
        yield Storefront(ingress, ca, issuer_key, office, office_address, elsewhere, seen, certificates)


def test_https_at_the_ingress_gateway_serves_the_intents_certificate_and_reaches_the_local_service(
    storefront: Storefront,
) -> None:
    storefront.answers(storefront.elsewhere, BOOKS_HOST, 200, path="/shelf/3")
    assert storefront.seen["books"][-1]["path"] == "/shelf/3"
    address = storefront.ingress.workload.address
    for credential, host in (("books-front-cert", BOOKS_HOST), ("ledger-front-cert", LEDGER_HOST)):
        served = served_certificate(storefront.elsewhere, address, HTTPS_PORT, host, storefront.trust())
        assert served == storefront.certificates[credential]
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
    # The gateway trusts no proxy in front of it: a user's own X-Forwarded-For does not move it into the range.
    spoofed = {"X-Forwarded-For": storefront.office_address}
    assert storefront.status(storefront.elsewhere, OFFICE_HOST, headers=spoofed) == 403


def test_a_source_range_holds_over_plain_http_whatever_the_letter_case_of_the_host(storefront: Storefront) -> None:
    storefront.answers(storefront.office, LOBBY_HOST, 200, plain=True)
    for host in (LOBBY_HOST, LOBBY_HOST.upper(), f"{LOBBY_HOST}:80"):
        assert storefront.status(storefront.elsewhere, host, plain=True) == 403, host
    assert storefront.status(storefront.elsewhere, BOOKS_HOST, plain=True) == 404
    assert storefront.status(storefront.elsewhere, BOOKS_HOST) == 200


def test_each_entity_of_an_intent_is_served_by_its_own_gateway_pods_with_its_own_certificate(
    storefront: Storefront, fleet: Fleet
) -> None:
    front = fleet["cluster-a"]
    with contextlib.ExitStack() as stack:
        pods = {
            entity: stack.enter_context(
                start_gateway(front, _entity_gateway(entity), service_account=INGRESS_GATEWAY_SERVICE_ACCOUNT)
            )
            for entity in GIFT_ENTITIES
        }
        for entity, gateway in pods.items():
            storefront.answers(storefront.elsewhere, GIFTS_HOST, 200, f"/{entity}", gateway=gateway)
            assert storefront.seen["books"][-1]["path"] == f"/{entity}"
            address = gateway.workload.address
            served = served_certificate(storefront.elsewhere, address, HTTPS_PORT, GIFTS_HOST, storefront.trust())
            assert served == storefront.certificates[f"gifts-{entity}-cert"]
    # The stock gateway pods carry no entity of an intent with several: they do not serve its host.
    assert isinstance(storefront.status(storefront.elsewhere, GIFTS_HOST), str)


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
    expired = bearer(_token(storefront.issuer_key, "ops", lifetime=-600))
    assert storefront.status(storefront.elsewhere, OPS_HOST, headers=expired) == 401
    assert storefront.status(storefront.elsewhere, OPS_HOST) == 403
