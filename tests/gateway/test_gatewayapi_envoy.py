"""What `program` gives, served by a real Envoy: matches and precedence, listener isolation by hostname, each
filter, weighted splits, mirrors, timeouts, HTTPS by SNI with certificates from Secrets, and GRPCRoute to a
real gRPC backend. One Envoy for the module; each test publishes its own Gateway on its own loopback address."""

from __future__ import annotations

import contextlib
import itertools
import socket
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from cryptography import x509

from meshplane.gatewayapi.state import BackendService, CertificatePair
from meshplane.security.ca import create_ca, issue_server_certificate
from meshplane_testing.eventually import eventually
from meshplane_testing.gatewayapi_envoy import ProgrammedEnvoy, run_programmed_envoy
from meshplane_testing.gatewayapi_objects import backend, gateway, listener, route, rule, service, state
from meshplane_testing.grpc_echo import ECHO_METHOD, run_echo
from meshplane_testing.process import free_port
from meshplane_testing.upstream import run_upstream
from meshplane_testing.websocket_upstream import run_websocket_upstream

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(90)]

_ADDRESSES = (f"127.0.42.{index}" for index in itertools.count(1))


@pytest.fixture(scope="module")
def envoy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProgrammedEnvoy]:
    with run_programmed_envoy(tmp_path_factory.mktemp("gwapi")) as served:
        yield served


class Served:
    """A Gateway `gw` with one HTTP listener on its own address, serving the given objects."""

    def __init__(
        self,
        envoy: ProgrammedEnvoy,
        *objects: dict[str, Any],
        services: dict,
        listeners: list | None = None,
        port: int | None = None,
    ):
        self.address, self.port = next(_ADDRESSES), port or free_port()
        gw = gateway("gw", *(listeners or [listener("http", self.port)]))
        envoy.serve(
            state(gw, *objects, services=services, addresses={("default", "gw"): self.address}),
            self.address,
            self.port,
        )
        self.http = httpx.Client(base_url=f"http://{self.address}:{self.port}", timeout=10)

    def get(self, path: str, method: str = "GET", **headers: str) -> httpx.Response:
        return self.http.request(method, path, headers={key.replace("_", "-"): v for key, v in headers.items()})

    def upstream(self, path: str, method: str = "GET", **headers: str) -> str:
        response = self.get(path, method, **headers)
        assert response.status_code == 200, (path, response.status_code, response.text)
        return str(response.json()["upstream"])


@contextlib.contextmanager
def upstreams(*names: str, **options: Any) -> Iterator[tuple[dict[tuple[str, str], BackendService], dict]]:
    """Services named like the upstreams, each with one ready endpoint; and what each upstream saw."""
    with contextlib.ExitStack() as stack:
        services, seen = {}, {}
        for name in names:
            port, requests = stack.enter_context(run_upstream(name, **options))
            services[("default", name)] = service(("127.0.0.1", port))
            seen[name] = requests
        yield services, seen


def path(kind: str, value: str, **extra: Any) -> dict[str, Any]:
    return {"path": {"type": kind, "value": value}, **extra}


def test_matches_follow_the_precedence_rules_and_unmatched_requests_answer_404(envoy: ProgrammedEnvoy) -> None:
    with upstreams("exact", "prefix", "header", "method", "query", "regex", "old") as (services, _):
        rules = [
            rule(backend("prefix"), matches=[path("PathPrefix", "/shop")]),
            rule(backend("exact"), matches=[path("Exact", "/shop")]),
            rule(
                backend("header"), matches=[path("PathPrefix", "/shop", headers=[{"name": "x-tier", "value": "gold"}])]
            ),
            rule(backend("method"), matches=[path("PathPrefix", "/shop", method="POST")]),
            rule(backend("query"), matches=[path("PathPrefix", "/shop", queryParams=[{"name": "v", "value": "2"}])]),
            rule(backend("regex"), matches=[path("RegularExpression", "/items/[0-9]+")]),
        ]
        young = route(
            "young", rule(backend("prefix"), matches=[path("PathPrefix", "/same")]), created="2026-05-01T00:00:00Z"
        )
        old = route("old", rule(backend("old"), matches=[path("PathPrefix", "/same")]))
        served = Served(envoy, route("shop", *rules), young, old, services=services)

        assert served.upstream("/shop") == "exact"
        assert served.upstream("/shop/cart") == "prefix"
        assert served.upstream("/shop/cart", x_tier="gold") == "header"
        assert served.upstream("/shop/cart", "POST", x_tier="gold") == "method"
        assert served.upstream("/shop/cart?v=2") == "query"
        assert served.upstream("/items/42") == "regex"
        assert served.upstream("/same/x") == "old"
        assert served.get("/shopping").status_code == 404, "a prefix matches whole segments"
        assert served.get("/items/abc").status_code == 404


def test_header_modifiers_change_what_the_backend_and_the_client_see(envoy: ProgrammedEnvoy) -> None:
    filters = [
        {
            "type": "RequestHeaderModifier",
            "requestHeaderModifier": {
                "set": [{"name": "x-set", "value": "new"}],
                "add": [{"name": "x-add", "value": "more"}],
                "remove": ["x-drop"],
            },
        },
        {
            "type": "ResponseHeaderModifier",
            "responseHeaderModifier": {"set": [{"name": "x-answer", "value": "yes"}], "remove": ["content-type"]},
        },
    ]
    own = [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "x-backend", "value": "b"}]}}]
    with upstreams("shop", "tagged") as (services, seen):
        rules = [
            rule(backend("shop"), filters=filters),
            rule(backend("tagged", filters=own), matches=[path("PathPrefix", "/tagged")]),
        ]
        served = Served(envoy, route("r", *rules), services=services)
        assert served.upstream("/tagged") == "tagged"
        assert seen["tagged"][-1]["headers"]["x-backend"] == "b", "a backend's own filter"
        response = served.get("/", x_set="old", x_add="first", x_drop="secret")
        assert response.status_code == 200
        headers = seen["shop"][-1]["headers"]
        assert headers["x-set"] == "new"
        assert headers["x-add"] == "first, more"
        assert "x-drop" not in headers
        assert response.headers["x-answer"] == "yes"
        assert "content-type" not in response.headers


def test_redirects_answer_with_the_location_and_code_asked_for(envoy: ProgrammedEnvoy) -> None:
    redirect_all = {"scheme": "https", "hostname": "shop.example.com", "statusCode": 301}
    prefix = {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/new"}, "port": 8443}
    full = {"path": {"type": "ReplaceFullPath", "replaceFullPath": "/elsewhere"}, "hostname": "other.example.com"}
    rules = [
        rule(
            matches=[path("PathPrefix", "/secure")],
            filters=[{"type": "RequestRedirect", "requestRedirect": redirect_all}],
        ),
        rule(matches=[path("PathPrefix", "/old")], filters=[{"type": "RequestRedirect", "requestRedirect": prefix}]),
        rule(matches=[path("Exact", "/moved")], filters=[{"type": "RequestRedirect", "requestRedirect": full}]),
    ]
    served = Served(envoy, route("r", *rules), services={})
    secure = served.get("/secure/pay", Host="shop.example.org")
    assert (secure.status_code, secure.headers["location"]) == (301, "https://shop.example.com/secure/pay")
    old = served.get("/old/page?x=1", Host="shop.example.org")
    assert (old.status_code, old.headers["location"]) == (302, "http://shop.example.org:8443/new/page?x=1")
    moved = served.get("/moved")
    assert moved.headers["location"] == f"http://other.example.com:{served.port}/elsewhere", "the listener's port"


def test_url_rewrites_change_the_host_and_path_the_backend_sees(envoy: ProgrammedEnvoy) -> None:
    prefix = {"hostname": "inner.example.com", "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v2"}}
    strip = {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}
    full = {"path": {"type": "ReplaceFullPath", "replaceFullPath": "/fixed"}}
    rules = [
        rule(
            backend("shop"),
            matches=[path("PathPrefix", "/api")],
            filters=[{"type": "URLRewrite", "urlRewrite": prefix}],
        ),
        rule(
            backend("shop"),
            matches=[path("PathPrefix", "/strip")],
            filters=[{"type": "URLRewrite", "urlRewrite": strip}],
        ),
        rule(
            backend("shop"), matches=[path("PathPrefix", "/full")], filters=[{"type": "URLRewrite", "urlRewrite": full}]
        ),
    ]
    with upstreams("shop") as (services, seen):
        served = Served(envoy, route("r", *rules), services=services)
        for asked, expected in (("/api/items?q=1", "/v2/items?q=1"), ("/api", "/v2"), ("/strip/a/b", "/a/b"),
                                ("/strip", "/"), ("/full/any/thing", "/fixed")):  # fmt: skip
            assert served.get(asked).status_code == 200
            assert seen["shop"][-1]["path"] == expected, asked
        served.get("/api/x")
        assert seen["shop"][-1]["headers"]["host"] == "inner.example.com"


def test_a_mirror_sees_each_request_while_the_backend_answers(envoy: ProgrammedEnvoy) -> None:
    mirror = {"type": "RequestMirror", "requestMirror": {"backendRef": backend("copy")}}
    with upstreams("shop", "copy") as (services, seen):
        served = Served(envoy, route("r", rule(backend("shop"), filters=[mirror])), services=services)
        assert served.upstream("/orders/1") == "shop"
        eventually(lambda: [r["path"] for r in seen["copy"]] == ["/orders/1"], timeout=5)


def test_weights_split_the_requests_and_an_unresolved_share_answers_500(envoy: ProgrammedEnvoy) -> None:
    with upstreams("heavy", "light", "idle") as (services, _):
        split = rule(backend("heavy", weight=3), backend("light", weight=1), backend("idle", weight=0),
                     matches=[path("PathPrefix", "/split")])  # fmt: skip
        broken = rule(backend("heavy", weight=1), backend("missing", weight=1), matches=[path("PathPrefix", "/half")])
        nothing = rule(backend("missing"), matches=[path("PathPrefix", "/none")])
        served = Served(envoy, route("r", split, broken, nothing), services=services)
        counts: dict[str, int] = {}
        for _ in range(200):
            name = served.upstream("/split")
            counts[name] = counts.get(name, 0) + 1
        assert "idle" not in counts
        assert 120 <= counts["heavy"] <= 180, counts
        codes = [served.get("/half").status_code for _ in range(100)]
        assert set(codes) == {200, 500}
        assert 25 <= codes.count(500) <= 75, codes.count(500)
        assert served.get("/none").status_code == 500


def test_a_request_timeout_answers_504_when_the_backend_is_slower(envoy: ProgrammedEnvoy) -> None:
    with upstreams("slow", delay=1.5) as (services, _):
        quick = rule(backend("slow"), matches=[path("PathPrefix", "/quick")], timeouts={"request": "300ms"})
        patient = rule(backend("slow"), matches=[path("PathPrefix", "/patient")], timeouts={"request": "5s"})
        per_try = rule(backend("slow"), matches=[path("PathPrefix", "/try")], timeouts={"backendRequest": "300ms"})
        served = Served(envoy, route("r", quick, patient, per_try), services=services)
        assert served.get("/quick").status_code == 504
        assert served.get("/try").status_code == 504
        assert served.get("/patient").status_code == 200


def _served_names(address: str, port: int, server_name: str, ca: Path) -> tuple[list[str], bytes]:
    """The DNS names of the certificate served for `server_name`, and the answer to GET /."""
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection((address, port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=server_name) as tls,
    ):
        leaf = x509.load_der_x509_certificate(tls.getpeercert(binary_form=True) or b"")
        tls.sendall(f"GET / HTTP/1.1\r\nHost: {server_name}\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return names.get_values_for_type(x509.DNSName), answer


def test_https_listeners_serve_each_hostname_its_certificate_from_a_secret(envoy: ProgrammedEnvoy) -> None:
    ca = create_ca()
    shop, admin = (
        issue_server_certificate(ca, ["shop.example.com"]),
        issue_server_certificate(ca, ["admin.example.com"]),
    )
    secrets = {
        ("default", name): CertificatePair(pair.certificate_pem().decode(), pair.key_pem().decode())
        for name, pair in (("shop-tls", shop), ("admin-tls", admin))
    }
    with upstreams("shop", "admin") as (services, _), tempfile.TemporaryDirectory() as scratch:
        ca_file = Path(scratch) / "ca.crt"
        ca_file.write_bytes(ca.certificate_pem())
        address, port = next(_ADDRESSES), free_port()
        tls = {name: {"mode": "Terminate", "certificateRefs": [{"name": f"{name}-tls"}]} for name in ("shop", "admin")}
        listeners = [
            listener(name, port, "HTTPS", hostname=f"{name}.example.com", tls=tls[name]) for name in ("shop", "admin")
        ]
        routes = [route(name, rule(backend(name)), parents=[{"name": "gw", "sectionName": name}]) for name in tls]
        envoy.serve(
            state(
                gateway("gw", *listeners),
                *routes,
                services=services,
                secrets=secrets,
                addresses={("default", "gw"): address},
            ),
            address,
            port,
        )
        for name in ("shop", "admin"):
            names, answer = _served_names(address, port, f"{name}.example.com", ca_file)
            assert f"{name}.example.com" in names and len([n for n in names if n.endswith(".example.com")]) == 1
            assert answer.startswith(b"HTTP/1.1 200") and f'"upstream": "{name}"'.encode() in answer


def test_a_grpc_route_sends_each_method_to_its_backend(envoy: ProgrammedEnvoy) -> None:
    with run_echo("first") as first_port, run_echo("second") as second_port:
        services = {
            ("default", "first"): service(("127.0.0.1", first_port)),
            ("default", "second"): service(("127.0.0.1", second_port)),
        }
        say = {"method": {"service": "meshplane.test.Echo", "method": "Say"}}
        tiered = {**say, "headers": [{"name": "x-tier", "value": "gold"}]}
        grpc_route = route(
            "echo", rule(backend("first"), matches=[say]), rule(backend("second"), matches=[tiered]), kind="GRPCRoute"
        )
        served = Served(envoy, grpc_route, services=services)
        with grpc.insecure_channel(f"{served.address}:{served.port}") as channel:
            call = channel.unary_unary(ECHO_METHOD)
            assert call(b"hi", timeout=5) == b"first:hi"
            assert call(b"hi", timeout=5, metadata=[("x-tier", "gold")]) == b"second:hi"
            with pytest.raises(grpc.RpcError) as missing:
                channel.unary_unary("/meshplane.test.Other/Say")(b"hi", timeout=5)
            assert missing.value.code() is grpc.StatusCode.UNIMPLEMENTED


def test_a_host_reaches_only_the_routes_of_the_most_specific_listener_matching_it(envoy: ProgrammedEnvoy) -> None:
    with upstreams("any", "wild", "exact") as (services, _):
        port = free_port()
        listeners = [
            listener("any", port),
            listener("wild", port, hostname="*.example.com"),
            listener("exact", port, hostname="abc.example.com"),
        ]
        routes = [
            route(
                name,
                rule(backend(name), matches=[path("PathPrefix", f"/{name}")]),
                parents=[{"name": "gw", "sectionName": name}],
            )
            for name in ("any", "wild", "exact")
        ]
        served = Served(envoy, *routes, services=services, listeners=listeners, port=port)
        assert served.upstream("/any", Host="shop.example.org") == "any"
        assert served.get("/wild", Host="shop.example.org").status_code == 404
        assert served.upstream("/wild", Host="x.y.example.com") == "wild"
        assert served.get("/any", Host="x.example.com").status_code == 404
        assert served.upstream("/exact", Host="abc.example.com") == "exact"
        assert served.get("/wild", Host="abc.example.com").status_code == 404


def test_a_port_in_host_is_ignored_when_matching_hostnames_and_reaches_the_backend_unchanged(
    envoy: ProgrammedEnvoy,
) -> None:
    with upstreams("exact", "wild") as (services, seen):
        routes = [
            route("exact", rule(backend("exact")), hostnames=["very.specific.com"]),
            route("wild", rule(backend("wild")), hostnames=["*.wildcard.io"]),
        ]
        served = Served(envoy, *routes, services=services)
        assert served.upstream("/", Host="very.specific.com:1234") == "exact"
        assert seen["exact"][-1]["headers"]["host"] == "very.specific.com:1234", "the backend sees the Host sent"
        assert served.upstream("/", Host="foo.wildcard.io:8080") == "wild"
        assert served.get("/", Host="non.matching.com:1234").status_code == 404


def test_a_websocket_upgrade_reaches_a_websocket_backend_and_carries_the_connection_both_ways(
    envoy: ProgrammedEnvoy,
) -> None:
    with run_websocket_upstream() as port:
        services = {("default", "ws"): service(("127.0.0.1", port), app_protocol="kubernetes.io/ws")}
        served = Served(envoy, route("ws", rule(backend("ws"))), services=services)
        with socket.create_connection((served.address, served.port), timeout=10) as client:
            client.sendall(
                b"GET /ws HTTP/1.1\r\nHost: ws.example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
            )
            head = b""
            while b"\r\n\r\n" not in head:
                head += client.recv(4096) or b"\r\n\r\n"
            assert head.startswith(b"HTTP/1.1 101"), head
            client.sendall(b"frames both ways")
            assert client.recv(4096) == b"frames both ways"


def test_a_cors_filter_answers_preflights_for_the_origins_it_allows(envoy: ProgrammedEnvoy) -> None:
    cors = {
        "type": "CORS",
        "cors": {
            "allowOrigins": ["https://www.foo.com", "https://*.bar.com"],
            "allowMethods": ["GET", "PUT"],
            "allowHeaders": ["x-header-1"],
            "exposeHeaders": ["x-header-3"],
            "allowCredentials": True,
            "maxAge": 3600,
        },
    }
    with upstreams("shop") as (services, _):
        served = Served(envoy, route("shop", rule(backend("shop"), filters=[cors])), services=services)
        preflight = {"Origin": "https://a.b.bar.com", "Access-Control-Request-Method": "PUT"}
        allowed = served.get("/", "OPTIONS", **preflight)
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == "https://a.b.bar.com"
        assert allowed.headers["access-control-allow-credentials"] == "true"
        assert allowed.headers["access-control-max-age"] == "3600"
        refused = served.get("/", "OPTIONS", **{**preflight, "Origin": "https://bar.com"})
        assert "access-control-allow-origin" not in refused.headers
        answered = served.get("/", Origin="https://www.foo.com")
        assert answered.headers["access-control-allow-origin"] == "https://www.foo.com"
        assert answered.headers["access-control-expose-headers"] == "x-header-3"
