"""How the gateway calls backends, through a real server, agent and Envoy to local upstreams: TLS with SNI and
verified names, the Host sent, health checks, outlier detection, circuit breakers, timeouts and retries.

Each feature is a table of rows over one running fleet; Envoy's own stats say why a call failed."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from meshplane.security.ca import create_ca, issue_agent_certificate, issue_server_certificate
from meshplane_testing import documents
from meshplane_testing.envoy import EnvoyProcess, run_envoy
from meshplane_testing.eventually import eventually
from meshplane_testing.gateway import Gateway
from meshplane_testing.meshplane import AgentProcess, ServerProcess, run_agent, run_server
from meshplane_testing.north import put
from meshplane_testing.upstream import run_upstream, tls_context

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(120)]

SERVER_NAME = "orders.internal"
SLOW = 1.2
"""Seconds the slow upstreams take to answer."""
STREAM = (4, 0.7)
"""Lines the streaming upstream sends, and seconds between two: longer than the idle timeout, 2.1 s in all."""


@dataclass
class Fleet:
    server: ServerProcess
    agent: AgentProcess
    envoy: EnvoyProcess
    gateway: Gateway
    rest: httpx.Client
    seen: dict[str, list[dict[str, Any]]]
    """Requests each upstream received, by upstream name."""
    sni: list[str]
    """Server names sent to the SNI-checking TLS upstream."""
    ports: dict[str, int]
    """Each upstream's port, by name."""

    def server_stat(self, name: str) -> int:
        """An Envoy stat by its full name (`cluster_manager.cluster_added`)."""
        _, body = self.envoy.admin("/stats")
        return sum(int(line.partition(": ")[2]) for line in body.splitlines() if line.partition(": ")[0] == name)

    def stat(self, api: str, name: str) -> int:
        """An Envoy stat of the API's first backend cluster (`ssl.fail_verify_error`, `membership_healthy`)."""
        _, body = self.envoy.admin("/stats")
        prefix = f"cluster.api.{documents.PROJECT}.{api}.0."
        values = [
            int(value)
            for line in body.splitlines()
            for key, _, value in [line.partition(": ")]
            if key.startswith(prefix) and key.removeprefix(prefix).partition(".")[2] == name
        ]
        return sum(values)


CLIENT_CERTIFICATE = "gateway-client"
CREDENTIALS = {
    "cred-basic": (
        {"basic": {"username": "shop", "password": "basic-pa55"}},
        "authorization",
        "Basic c2hvcDpiYXNpYy1wYTU1",
    ),
    "cred-bearer": ({"bearer": {"token": "bearer-t0ken"}}, "authorization", "Bearer bearer-t0ken"),
    "cred-key": ({"apiKey": {"header": "x-backend-key", "value": "key-v4lue"}}, "x-backend-key", "key-v4lue"),
}
"""API -> (its backend's credential, the header the backend sees, its value there)."""
ROTATED = "cred-rotated"
SECRETS = ("basic-pa55", "bearer-t0ken", "key-v4lue", "c2hvcDpiYXNpYy1wYTU1", "first-t0ken", "second-t0ken")


def _apis(ports: dict[str, int], ca_pem: str, other_ca_pem: str) -> list[dict[str, Any]]:
    def one(name: str, upstream: str, spec: dict[str, Any] | None = None, **backend: Any) -> dict[str, Any]:
        return documents.api(name, backends=[documents.backend(ports[upstream], **backend)], **(spec or {}))

    tls = {"sni": SERVER_NAME, "caCertificates": ca_pem}
    retries = {"attempts": 1, "statusCodes": [503], "backoff": {"baseInterval": "10ms"}}
    return [
        one("tls-good", "tls-checking", tls=tls),
        one("tls-wrong-ca", "tls-checking", tls={**tls, "caCertificates": other_ca_pem}),
        one("tls-impostor", "tls-impostor", tls=tls),
        one("tls-wrong-sni", "tls-checking", tls={**tls, "sni": "billing.internal", "subjectAltNames": [SERVER_NAME]}),
        one("tls-mutual", "tls-mutual", tls={**tls, "clientCertificateRef": CLIENT_CERTIFICATE}),
        one("tls-mutual-none", "tls-mutual", tls=tls),
        *(one(api, "plain", credential=credential) for api, (credential, _, _) in CREDENTIALS.items()),
        one(ROTATED, "plain", credential={"bearer": {"token": "first-t0ken"}}),
        one("host-named", "plain", host="localhost"),
        one("host-literal", "plain", hostRewrite="shop.example.com"),
        one("host-address", "plain"),
        one("health-sick", "unavailable", healthCheck={"path": "/healthz", "interval": "200ms", "timeout": "1s"}),
        one("health-well", "plain", healthCheck={"path": "/healthz", "interval": "200ms", "timeout": "1s"}),
        one("outlier", "unavailable", outlierDetection={"consecutive5xx": 2, "baseEjectionTime": "30s"}),
        one("breaker", "slow-breaker", circuitBreaker={"maxConnections": 1, "maxPendingRequests": 1}),
        one(
            "timeouts",
            "slow",
            {
                "timeout": "500ms",
                "operations": [
                    {"method": "GET", "path": "/short"},
                    {"method": "GET", "path": "/none", "timeout": "none"},
                    {"method": "GET", "path": "/longer", "timeout": "10s"},
                ],
            },
        ),
        one(
            "stream",
            "streaming",
            {
                "timeout": "none",
                "idleTimeout": "400ms",
                "operations": [
                    {"method": "GET", "path": "/long", "idleTimeout": "none"},
                    {"method": "GET", "path": "/idle"},
                    {"method": "GET", "path": "/capped", "idleTimeout": "none", "streamTimeout": "1s"},
                ],
            },
        ),
        one("retry-listed", "unavailable-counted", retries=retries),
        one("retry-unlisted", "broken-counted", retries=retries),
    ]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("backends")
    ca, other_ca, client_ca = create_ca(), create_ca(), create_ca()
    client = issue_agent_certificate(client_ca, "gateway")
    sni: list[str] = []
    upstreams = {
        "tls-checking": {
            "tls": tls_context(issue_server_certificate(ca, [SERVER_NAME]), server_name=SERVER_NAME, names_seen=sni)
        },
        "tls-impostor": {"tls": tls_context(issue_server_certificate(ca, ["impostor.internal"]))},
        "tls-mutual": {"tls": tls_context(issue_server_certificate(ca, [SERVER_NAME]), client_ca=client_ca)},
        "plain": {},
        "unavailable": {"status": 503},
        "unavailable-counted": {"status": 503},
        "broken-counted": {"status": 500},
        "slow": {"delay": SLOW},
        "slow-breaker": {"delay": SLOW},
        "streaming": {"stream": STREAM},
    }
    with contextlib.ExitStack() as stack:
        ports, seen = {}, {}
        for name, options in upstreams.items():
            ports[name], seen[name] = stack.enter_context(run_upstream(name, **options))
        server = stack.enter_context(run_server(tmp))
        agent = stack.enter_context(run_agent(tmp, "edge-1", server.grpc_address))
        envoy = stack.enter_context(run_envoy(tmp, "gw-1", agent.xds_port))
        rest = stack.enter_context(server.http())
        envoy.wait_listener(agent.gateway_port)
        certificate = {"certificate": client.certificate_pem().decode(), "privateKey": client.key_pem().decode()}
        put(rest, documents.document("TLSCertificate", CLIENT_CERTIFICATE, spec=certificate))
        apis = _apis(ports, ca.certificate_pem().decode(), other_ca.certificate_pem().decode())
        for doc in apis:
            put(rest, doc)
        gateway = Gateway(agent.gateway_port)
        stack.callback(gateway.close)
        for doc in apis:
            operations = doc["spec"].get("operations") or [{"path": "/x"}]
            path = doc["spec"]["basePath"] + operations[0]["path"]
            gateway.wait_for(path, lambda r: r.status_code != 404, timeout=30)
        yield Fleet(server, agent, envoy, gateway, rest, seen, sni, ports)


TLS_CASES = [
    ("right CA and name", "tls-good", 200, None),
    ("wrong CA", "tls-wrong-ca", 503, "ssl.fail_verify_error"),
    ("name not in the certificate", "tls-impostor", 503, "ssl.fail_verify_san"),
    ("server name the upstream refuses", "tls-wrong-sni", 503, "ssl.connection_error"),
    ("client certificate presented", "tls-mutual", 200, None),
    ("no client certificate for an upstream that needs one", "tls-mutual-none", 503, "ssl.connection_error"),
]


@pytest.mark.parametrize(("case", "api", "expected", "failure"), TLS_CASES, ids=[c[0] for c in TLS_CASES])
def test_tls_to_the_backend(fleet: Fleet, case: str, api: str, expected: int, failure: str | None) -> None:
    response = fleet.gateway.request("GET", f"/{api}/x")

    assert response.status_code == expected, (case, response.text)
    if failure is None:
        assert response.json()["upstream"] == {"tls-good": "tls-checking"}.get(api, api)
        assert fleet.sni and set(fleet.sni) >= {SERVER_NAME}
    else:
        assert fleet.stat(api, failure) >= 1, (case, failure)


@pytest.mark.parametrize("api", sorted(CREDENTIALS))
def test_the_backend_sees_the_injected_credential_instead_of_the_callers(fleet: Fleet, api: str) -> None:
    _, header, value = CREDENTIALS[api]
    response = fleet.gateway.request("GET", f"/{api}/x", {header: "the caller's own"})

    assert response.status_code == 200, response.text
    assert response.json()["headers"][header] == value


def test_no_read_dump_or_log_shows_a_secret_in_the_clear(fleet: Fleet) -> None:
    project = f"/v1/projects/{documents.PROJECT}"
    reads = {
        "api": fleet.rest.get(f"{project}/apis/cred-basic").text,
        "apis": fleet.rest.get(f"{project}/apis").text,
        "certificate": fleet.rest.get(f"{project}/tlscertificates/{CLIENT_CERTIFICATE}").text,
    }
    _, reads["envoy"] = fleet.envoy.admin("/config_dump?include_eds")
    with httpx.Client(timeout=5) as client:
        reads["agent"] = client.get(f"http://127.0.0.1:{fleet.agent.admin_port}/config_dump").text
    reads.update(
        server_log=fleet.server.process.log(), agent_log=fleet.agent.process.log(), envoy_log=fleet.envoy.log()
    )

    assert "cred-basic" in reads["apis"] and "cred-bearer" in reads["agent"] and "credential.api" in reads["envoy"]
    for where, text in reads.items():
        assert not [secret for secret in SECRETS if secret in text], where
        assert "PRIVATE KEY" not in text, where


def test_a_new_credential_reaches_the_backend_as_a_secret_update_alone(fleet: Fleet) -> None:
    def seen_token(token: str) -> bool:
        response = fleet.gateway.request("GET", f"/{ROTATED}/x")
        return response.status_code == 200 and response.json()["headers"]["authorization"] == f"Bearer {token}"

    assert seen_token("first-t0ken")
    clusters = [fleet.server_stat(f"cluster_manager.{what}") for what in ("cluster_added", "cluster_modified")]
    put(
        fleet.rest,
        documents.api(
            ROTATED,
            backends=[documents.backend(fleet.ports["plain"], credential={"bearer": {"token": "second-t0ken"}})],
        ),
    )

    eventually(lambda: seen_token("second-t0ken"), timeout=15, what="the new token at the backend")
    assert [fleet.server_stat(f"cluster_manager.{what}") for what in ("cluster_added", "cluster_modified")] == clusters


HOST_CASES = [
    ("hostname backend", "host-named", "localhost"),
    ("literal rewrite", "host-literal", "shop.example.com"),
    ("address backend keeps the caller's", "host-address", "127.0.0.1"),  # the listener strips the port
]


@pytest.mark.parametrize(("case", "api", "host"), HOST_CASES, ids=[c[0] for c in HOST_CASES])
def test_the_host_the_backend_sees(fleet: Fleet, case: str, api: str, host: str) -> None:
    response = fleet.gateway.request("GET", f"/{api}/x")

    assert response.status_code == 200, response.text
    assert response.json()["headers"]["host"] == host, case


@pytest.mark.parametrize(("api", "healthy"), [("health-sick", 0), ("health-well", 1)])
def test_an_endpoint_failing_its_health_check_is_unhealthy(fleet: Fleet, api: str, healthy: int) -> None:
    eventually(
        lambda: fleet.stat(api, "health_check.attempt") >= 3 and fleet.stat(api, "membership_healthy") == healthy,
        timeout=10,
        what=f"{api} healthy endpoints == {healthy}",
    )
    if not healthy:
        assert fleet.stat(api, "health_check.failure") >= 1


def test_an_endpoint_answering_errors_is_ejected(fleet: Fleet) -> None:
    for _ in range(3):
        fleet.gateway.request("GET", "/outlier/x")

    eventually(lambda: fleet.stat("outlier", "outlier_detection.ejections_active") == 1, timeout=5, what="ejection")
    assert fleet.stat("outlier", "outlier_detection.ejections_enforced_consecutive_5xx") >= 1
    assert fleet.stat("outlier", "membership_healthy") == 0


def test_the_circuit_breaker_refuses_what_overflows(fleet: Fleet) -> None:
    answers: list[httpx.Response] = []

    def call() -> None:
        with httpx.Client(base_url=str(fleet.gateway.http.base_url), timeout=10) as client:
            answers.append(client.get("/breaker/x"))

    callers = [threading.Thread(target=call) for _ in range(4)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(timeout=15)

    statuses = sorted(answer.status_code for answer in answers)
    assert 200 in statuses and 503 in statuses, statuses
    overflowed = [answer for answer in answers if answer.status_code == 503]
    assert all(answer.headers.get("x-envoy-overloaded") == "true" for answer in overflowed)
    assert fleet.stat("breaker", "upstream_rq_pending_overflow") >= 1


TIMEOUT_CASES = [
    ("the API's timeout", "/timeouts/short", 504),
    ("none on the operation", "/timeouts/none", 200),
    ("a longer one on the operation", "/timeouts/longer", 200),
]


@pytest.mark.parametrize(("case", "path", "expected"), TIMEOUT_CASES, ids=[c[0] for c in TIMEOUT_CASES])
def test_timeouts(fleet: Fleet, case: str, path: str, expected: int) -> None:
    with httpx.Client(base_url=str(fleet.gateway.http.base_url), timeout=10) as client:
        response = client.get(path)

    assert response.status_code == expected, (case, response.text)
    if expected == 504:
        assert response.text == "upstream request timeout"


STREAM_CASES = [
    ("the API's idle timeout ends a quiet stream", "/stream/idle", (1, 1)),
    ("none on the operation keeps it to its end", "/stream/long", (STREAM[0], STREAM[0])),
    ("a stream timeout ends it however busy", "/stream/capped", (1, STREAM[0] - 1)),
]
"""(case, path, fewest and most lines received)."""


@pytest.mark.parametrize(("case", "path", "lines"), STREAM_CASES, ids=[c[0] for c in STREAM_CASES])
def test_a_long_stream(fleet: Fleet, case: str, path: str, lines: tuple[int, int]) -> None:
    received: list[str] = []
    with (
        httpx.Client(base_url=str(fleet.gateway.http.base_url), timeout=10) as client,
        client.stream("GET", path) as response,
    ):
        assert response.status_code == 200, case
        with contextlib.suppress(httpx.RemoteProtocolError):  # a stream cut short ends without its last chunk
            received.extend(response.iter_lines())

    assert lines[0] <= len(received) <= lines[1], (case, received)
    assert received == [f"line {index}" for index in range(len(received))], case


RETRY_CASES = [
    ("a listed status is retried", "retry-listed", "unavailable-counted", 503, 2),
    ("another status is not", "retry-unlisted", "broken-counted", 500, 1),
]


@pytest.mark.parametrize(("case", "api", "upstream", "status", "tries"), RETRY_CASES, ids=[c[0] for c in RETRY_CASES])
def test_retries(fleet: Fleet, case: str, api: str, upstream: str, status: int, tries: int) -> None:
    fleet.seen[upstream].clear()
    response = fleet.gateway.request("GET", f"/{api}/x")

    assert response.status_code == status, case
    assert len(fleet.seen[upstream]) == tries, case


BAD_VALUES = [
    ({"retries": {"attempts": 1, "on": "5xx,sometimes"}}, "spec.backends[0].retries.on"),
    ({"retries": {"attempts": 1, "statusCodes": [42]}}, "spec.backends[0].retries.statusCodes[0]"),
    ({"timeout": "soon"}, "spec.backends[0].timeout"),
    ({"tls": {"caCertificates": "-----BEGIN CERTIFICATE-----"}}, "spec.backends[0].tls.caCertificates"),
]


@pytest.mark.parametrize(("fields", "path"), BAD_VALUES, ids=[case[1] for case in BAD_VALUES])
def test_bad_values_are_refused_with_their_field_and_nothing_stored(
    fleet: Fleet, fields: dict[str, Any], path: str
) -> None:
    name = documents.unique("bad")
    response = fleet.rest.put(
        f"/v1/projects/{documents.PROJECT}/apis/{name}",
        json=documents.api(name, backends=[documents.backend(9001, **fields)]),
    )

    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert path in [error["path"] for error in response.json()["errors"]]
    assert fleet.rest.get(f"/v1/projects/{documents.PROJECT}/apis/{name}").status_code == 404
