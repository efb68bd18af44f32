"""How the gateway calls a backend, as translated: TLS and client certificates, Host, health, load thresholds,
credentials, timeouts and retries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.filters.http.credential_injector.v3 import credential_injector_pb2
from envoy.extensions.http.injected_credentials.generic.v3 import generic_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, tls_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2

from meshplane.agent.translate import EnvoyConfig, GatewaySettings, translate_apis
from meshplane.agent.translate.apis import Api
from meshplane.agent.translate.clusters import HTTP_PROTOCOL_OPTIONS
from meshplane.agent.translate.credentials import CREDENTIAL_INJECTOR, UPSTREAM_CODEC
from meshplane.config import SYSTEM_CA_FILE
from meshplane.model.gateways import TLSCertificateSpec
from meshplane.model.resource import InvalidObject
from meshplane.security.ca import create_ca, issue_server_certificate
from meshplane_testing.envoy import envoy_binary, unversioned, validate
from meshplane_testing.static_bootstrap import static_bootstrap
from meshplane_testing.translate_factories import LOOPBACK, api, backend

SETTINGS = GatewaySettings(backends=LOOPBACK)
CA_PEM = create_ca().certificate_pem().decode()


def translate(**spec: Any) -> EnvoyConfig:
    return translate_apis([api("orders", basePath="/orders", **spec)], SETTINGS)


def upstream_tls(config: EnvoyConfig) -> tls_pb2.UpstreamTlsContext:
    (cluster,) = [c for c in config.clusters if c.name.startswith("api.")]
    context = tls_pb2.UpstreamTlsContext()
    cluster.transport_socket.typed_config.Unpack(context)
    return context


def actions(config: EnvoyConfig) -> dict[str, route_components_pb2.RouteAction]:
    return {route.name: route.route for host in config.routes[0].virtual_hosts for route in host.routes}


def sans(context: tls_pb2.UpstreamTlsContext) -> list[tuple[int, str]]:
    matchers = context.common_tls_context.validation_context.match_typed_subject_alt_names
    return [(matcher.san_type, matcher.matcher.exact) for matcher in matchers]


def test_a_tls_backend_sends_its_sni_and_verifies_that_name_against_its_ca() -> None:
    tls = {"sni": "orders.internal", "caCertificates": CA_PEM}
    context = upstream_tls(translate(backends=[backend("10.0.0.1", 8443, tls=tls)]))

    assert context.sni == "orders.internal"
    assert context.common_tls_context.validation_context.trusted_ca.inline_string == CA_PEM
    assert sans(context) == [(common_pb2.SubjectAltNameMatcher.DNS, "orders.internal")]
    assert list(context.common_tls_context.alpn_protocols) == ["http/1.1"]


def test_a_tls_backend_by_name_is_verified_as_that_name_against_the_system_cas_by_default() -> None:
    context = upstream_tls(translate(backends=[backend("orders.example.com", 443, protocol="grpc", tls={})]))

    assert context.sni == "orders.example.com"
    assert context.common_tls_context.validation_context.trusted_ca.filename == SYSTEM_CA_FILE
    assert sans(context) == [(common_pb2.SubjectAltNameMatcher.DNS, "orders.example.com")]
    assert list(context.common_tls_context.alpn_protocols) == ["h2"]


def test_a_tls_backend_by_address_without_a_name_is_verified_as_that_address() -> None:
    context = upstream_tls(translate(backends=[backend("10.0.0.1", 8443, tls={"caCertificates": CA_PEM})]))

    assert not context.sni
    assert sans(context) == [(common_pb2.SubjectAltNameMatcher.IP_ADDRESS, "10.0.0.1")]


def test_named_subject_alt_names_are_what_is_verified() -> None:
    tls = {"sni": "orders.internal", "subjectAltNames": ["a.internal", "b.internal"]}
    context = upstream_tls(translate(backends=[backend("10.0.0.1", 8443, tls=tls)]))

    assert [name for _, name in sans(context)] == ["a.internal", "b.internal"]


def test_health_check_outlier_detection_and_circuit_breaker_reach_the_cluster() -> None:
    policy = {
        "healthCheck": {"path": "/healthz", "interval": "2s", "unhealthyThreshold": 1},
        "outlierDetection": {"consecutive5xx": 2, "baseEjectionTime": "1m"},
        "circuitBreaker": {"maxConnections": 10, "maxPendingRequests": 5, "maxRetries": 0},
    }
    config = translate(backends=[backend("orders.internal", 80, **policy)])
    (cluster,) = [c for c in config.clusters if c.name.startswith("api.")]

    (check,) = cluster.health_checks
    assert (check.http_health_check.path, check.http_health_check.host) == ("/healthz", "orders.internal")
    assert (check.interval.seconds, check.unhealthy_threshold.value, check.healthy_threshold.value) == (2, 1, 2)
    assert cluster.outlier_detection.consecutive_5xx.value == 2
    assert cluster.outlier_detection.base_ejection_time.seconds == 60
    (thresholds,) = cluster.circuit_breakers.thresholds
    assert (thresholds.max_connections.value, thresholds.max_pending_requests.value) == (10, 5)
    assert thresholds.HasField("max_retries") and thresholds.max_retries.value == 0
    assert not thresholds.HasField("max_requests"), "an absent threshold keeps Envoy's default"


def test_a_grpc_backend_is_checked_over_the_grpc_health_protocol() -> None:
    check = {"grpcService": "shop.Orders", "interval": "5s"}
    config = translate(backends=[backend("orders.internal", 50051, protocol="grpc", healthCheck=check)])
    (cluster,) = [c for c in config.clusters if c.name.startswith("api.")]

    (health,) = cluster.health_checks
    assert health.HasField("grpc_health_check") and not health.HasField("http_health_check")
    assert (health.grpc_health_check.service_name, health.grpc_health_check.authority) == (
        "shop.Orders",
        "orders.internal",
    )


@pytest.mark.parametrize(
    ("backends", "auto", "literal"),
    [
        ([backend("orders.internal", 80)], True, ""),
        ([backend("10.0.0.1", 80)], False, ""),
        ([backend("10.0.0.1", 80, hostRewrite="orders.example.com")], False, "orders.example.com"),
        ([{"service": "orders.shop", "port": 80}], False, ""),
    ],
    ids=["hostname", "address", "literal", "service"],
)
def test_the_host_a_backend_is_sent(backends: list[dict[str, Any]], auto: bool, literal: str) -> None:
    action = actions(translate(backends=backends))["shop/orders *"]

    assert (action.auto_host_rewrite.value, action.host_rewrite_literal) == (auto, literal)


def test_a_weighted_backend_keeps_its_own_literal_host() -> None:
    backends = [backend("10.0.0.1", 80, hostRewrite="one.internal"), backend("two.internal", 80)]
    action = actions(translate(backends=backends))["shop/orders *"]

    assert [c.host_rewrite_literal for c in action.weighted_clusters.clusters] == ["one.internal", ""]
    assert action.auto_host_rewrite.value


def test_an_operation_sets_its_own_timeouts_and_none_turns_one_off() -> None:
    operations = [
        {"method": "GET", "path": "/items"},
        {"method": "GET", "path": "/watch", "timeout": "none", "idleTimeout": "none", "streamTimeout": "none"},
        {"method": "GET", "path": "/slow", "timeout": "2m"},
    ]
    found = actions(translate(timeout="5s", idleTimeout="1m", operations=operations, backends=[backend()]))

    plain, watch, slow = (
        found["shop/orders GET /items"],
        found["shop/orders GET /watch"],
        found["shop/orders GET /slow"],
    )
    assert (plain.timeout.seconds, plain.idle_timeout.seconds) == (5, 60)
    assert not plain.HasField("max_stream_duration")
    assert watch.HasField("timeout") and watch.timeout.ToNanoseconds() == 0
    assert watch.idle_timeout.ToNanoseconds() == 0
    assert watch.max_stream_duration.HasField("max_stream_duration")
    assert watch.max_stream_duration.max_stream_duration.ToNanoseconds() == 0
    assert slow.timeout.seconds == 120


def test_retries_with_status_codes_and_backoff_per_operation_over_the_api() -> None:
    operations = [
        {"method": "GET", "path": "/items"},
        {
            "method": "POST",
            "path": "/items",
            "retries": {"attempts": 1, "on": "reset", "statusCodes": [503, 429], "backoff": {"baseInterval": "10ms"}},
        },
    ]
    found = actions(translate(retries={"attempts": 2, "on": "5xx"}, operations=operations, backends=[backend()]))

    get, post = found["shop/orders GET /items"].retry_policy, found["shop/orders POST /items"].retry_policy
    assert (get.retry_on, get.num_retries.value, list(get.retriable_status_codes)) == ("5xx", 2, [])
    assert (post.retry_on, post.num_retries.value) == ("reset,retriable-status-codes", 1)
    assert list(post.retriable_status_codes) == [503, 429]
    assert post.retry_back_off.base_interval.ToMilliseconds() == 10
    assert not post.retry_back_off.HasField("max_interval")


def test_what_only_the_routes_hold_leaves_the_cluster_name_alone() -> None:
    def cluster(**fields: Any) -> str:
        return Api.of(api("orders", basePath="/orders", backends=[backend("10.0.0.1", 80, **fields)])).cluster_name(0)

    before = cluster()
    assert cluster(timeout="3s", retries={"attempts": 1}, hostRewrite="a.internal") == before
    assert cluster(tls={}) != before
    assert cluster(circuitBreaker={"maxRequests": 3}) != before


INVALID = [
    ({"healthCheck": {}}, "spec.backends[0].healthCheck.path", "needs one"),
    ({"protocol": "grpc", "healthCheck": {"path": "/h"}}, "spec.backends[0].healthCheck.path", "over gRPC"),
    ({"healthCheck": {"path": "/h", "grpcService": "x"}}, "spec.backends[0].healthCheck.grpcService", "gRPC"),
    ({"retries": {"attempts": 1, "on": "5xx,sometimes"}}, "spec.backends[0].retries.on", "sometimes"),
    ({"retries": {"attempts": 1, "statusCodes": [700]}}, "spec.backends[0].retries.statusCodes[0]", "599"),
    (
        {"retries": {"attempts": 1, "backoff": {"baseInterval": "1s", "maxInterval": "10ms"}}},
        "spec.backends[0].retries.backoff.maxInterval",
        "baseInterval",
    ),
    ({"timeout": "forever"}, "spec.backends[0].timeout", "duration"),
    ({"tls": {"caCertificates": "not a certificate"}}, "spec.backends[0].tls.caCertificates", "PEM"),
    ({"tls": {"sni": "Not A Name"}}, "spec.backends[0].tls.sni", "DNS name"),
    ({"hostRewrite": "a b"}, "spec.backends[0].hostRewrite", "host name"),
    ({"healthCheck": {"path": "/h", "interval": "0s"}}, "spec.backends[0].healthCheck.interval", "longer than 0"),
    ({"circuitBreaker": {"maxConnections": 0}}, "spec.backends[0].circuitBreaker.maxConnections", "1"),
]


@pytest.mark.parametrize(("fields", "path", "words"), INVALID, ids=[case[1] for case in INVALID])
def test_bad_backend_values_are_refused_at_their_field(fields: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(InvalidObject) as refused:
        api("orders", basePath="/orders", backends=[backend("10.0.0.1", 80, **fields)])

    errors = {error.path: error.message for error in refused.value.errors}
    assert path in errors, errors
    assert words in errors[path]


def test_a_bad_operation_timeout_and_a_service_backend_over_tls_without_a_name_are_refused() -> None:
    with pytest.raises(InvalidObject) as refused:
        api(
            "orders",
            basePath="/orders",
            operations=[{"method": "GET", "path": "/x", "idleTimeout": "soon"}],
            backends=[{"service": "orders.shop", "port": 80, "tls": {}}],
        )
    assert [error.path for error in refused.value.errors] == ["spec.operations[0].idleTimeout"]

    with pytest.raises(InvalidObject) as refused:
        api("orders", basePath="/orders", backends=[{"service": "orders.shop", "port": 80, "tls": {}}])
    assert [error.path for error in refused.value.errors] == ["spec.backends[0].tls.sni"]


@pytest.mark.envoy
def test_envoy_accepts_every_backend_and_route_setting(tmp_path: Path) -> None:
    envoy_binary()
    everything = {
        "tls": {"sni": "orders.internal", "caCertificates": CA_PEM, "subjectAltNames": ["orders.internal"]},
        "healthCheck": {"path": "/healthz"},
        "outlierDetection": {},
        "circuitBreaker": {"maxConnections": 1, "maxPendingRequests": 1, "maxRequests": 1, "maxRetries": 1},
        "retries": {"attempts": 2, "statusCodes": [503], "backoff": {"baseInterval": "10ms", "maxInterval": "1s"}},
        "hostRewrite": "orders.internal",
    }
    apis = [
        api(
            "orders",
            basePath="/orders",
            timeout="none",
            streamTimeout="1h",
            operations=[{"method": "GET", "path": "/watch", "timeout": "none", "idleTimeout": "none"}],
            backends=[
                backend("10.0.0.1", 8443, **everything),
                backend("orders.internal", 443, protocol="grpc", tls={}, healthCheck={"grpcService": "shop.Orders"}),
            ],
        )
    ]
    config = translate_apis(apis, GatewaySettings(backends=LOOPBACK, listener_port=10002))
    assert {unversioned(c.name) for c in config.clusters} >= {"api.shop.orders.0", "api.shop.orders.1"}
    accepted, output = validate(tmp_path, static_bootstrap(config))
    assert accepted, output


CREDENTIALS = [
    ({"basic": {"username": "shop", "password": "pa:ss"}}, "authorization", "Basic c2hvcDpwYTpzcw=="),
    ({"bearer": {"token": "t0ken"}}, "authorization", "Bearer t0ken"),
    ({"apiKey": {"header": "x-backend-key", "value": "k3y"}}, "x-backend-key", "k3y"),
]


@pytest.mark.parametrize(("credential", "header", "value"), CREDENTIALS, ids=["basic", "bearer", "apiKey"])
def test_a_credential_is_an_sds_secret_that_an_upstream_filter_of_the_cluster_injects(
    credential: dict[str, Any], header: str, value: str
) -> None:
    config = translate(backends=[backend("10.0.0.1", 80, credential=credential)])
    (cluster,) = [c for c in config.clusters if c.name.startswith("api.")]
    (secret,) = config.secrets

    assert (secret.name, secret.generic_secret.secret.inline_string) == (f"credential.{cluster.name}", value)
    options = http_protocol_options_pb2.HttpProtocolOptions()
    cluster.typed_extension_protocol_options[HTTP_PROTOCOL_OPTIONS].Unpack(options)
    injector_filter, codec = options.http_filters
    assert (injector_filter.name, codec.name) == (CREDENTIAL_INJECTOR, UPSTREAM_CODEC)
    injector = credential_injector_pb2.CredentialInjector()
    injector_filter.typed_config.Unpack(injector)
    generic = generic_pb2.Generic()
    injector.credential.typed_config.Unpack(generic)
    assert (generic.header, generic.credential.name) == (header, secret.name)
    assert generic.credential.sds_config.HasField("ads")
    assert injector.overwrite and not injector.allow_request_without_credential
    for resource in (*config.clusters, *config.listeners, *config.routes):
        assert value.encode() not in resource.SerializeToString(), resource.name


def test_a_credential_needs_exactly_one_kind() -> None:
    for credential in ({}, {"bearer": {"token": "a"}, "apiKey": {"value": "b"}}):
        with pytest.raises(InvalidObject) as refused:
            api("orders", basePath="/orders", backends=[backend("10.0.0.1", 80, credential=credential)])
        assert [error.path for error in refused.value.errors] == ["spec.backends[0].credential"]


def test_a_client_certificate_is_named_in_the_cluster_and_served_as_a_secret_only_when_held() -> None:
    pair = issue_server_certificate(create_ca(), ["gateway.internal"])
    held = TLSCertificateSpec.model_validate(
        {"certificate": pair.certificate_pem().decode(), "privateKey": pair.key_pem().decode()}
    )
    tls = {"sni": "orders.internal", "caCertificates": CA_PEM, "clientCertificateRef": "client"}
    apis = [api("orders", basePath="/orders", backends=[backend("10.0.0.1", 8443, tls=tls)])]

    config = translate_apis(apis, SETTINGS, certificates={"shop/client": held})
    (named,) = upstream_tls(config).common_tls_context.tls_certificate_sds_secret_configs
    assert named.name == "tls/shop/client" and named.sds_config.HasField("ads")
    assert [secret.name for secret in config.secrets] == ["tls/shop/client"]
    assert b"PRIVATE KEY" not in b"".join(c.SerializeToString() for c in config.clusters)

    assert translate_apis(apis, SETTINGS).secrets == [], "a certificate not held here is not made up"


def test_no_timeout_for_proxyless_grpc_clients_is_an_unlimited_stream() -> None:
    grpc = api("orders", basePath="/", timeout="none", backends=[backend(protocol="grpc")])
    config = translate_apis([grpc], SETTINGS)
    (table,) = [table for table in config.routes if table.name == "grpc.shop.orders"]
    action = table.virtual_hosts[0].routes[0].route

    assert action.max_stream_duration.HasField("max_stream_duration")
    assert action.max_stream_duration.max_stream_duration.ToNanoseconds() == 0
