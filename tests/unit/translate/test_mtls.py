"""Client certificates as a credential (`authentication.mtls`) as the translator compiles them: RBAC over the
verified peer, combined with keys or tokens, never served where certificates are not verified."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.filters.http.jwt_authn.v3 import config_pb2 as jwt_pb2
from envoy.extensions.filters.http.rbac.v3 import rbac_pb2
from google.protobuf import json_format
from pydantic import ValidationError

from meshplane.agent.translate import EnvoyConfig, GatewaySettings, translate_apis
from meshplane.agent.translate.entitlements import Entitlements
from meshplane.model.access import Authentication, ClientCertificate
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import Resource
from meshplane.security.ca import create_ca
from meshplane_testing import documents
from meshplane_testing.envoy import validate
from meshplane_testing.static_bootstrap import static_bootstrap
from meshplane_testing.translate_factories import LOOPBACK, backend

NOW = 1_800_000_000.0
SETTINGS = GatewaySettings(backends=LOOPBACK)
JWK = {"kty": "EC", "crv": "P-256", "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "kid": "k1", "alg": "ES256"}
JWK["y"] = "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"
FINGERPRINT = "ab" * 32
CA_PEM = create_ca().certificate_pem().decode()
KEY = {"apiKey": {"header": "x-api-key"}}
TOKEN = {"jwt": {"issuer": "https://idp", "jwks": '{"keys": [{"kty": "oct"}]}', "requireSubscription": True}}


def parsed(kind: str, name: str, spec: dict[str, Any], uid: str | None = None) -> Resource:
    doc = documents.document(kind, name, spec=spec)
    if uid is not None:
        doc["metadata"]["uid"] = uid
    return REGISTRY.parse(doc)


def gateway(validation: bool) -> Resource:
    tls: dict[str, Any] = {"certificateRefs": ["cert"]}
    if validation:
        tls["clientValidation"] = {"caCertificates": CA_PEM}
    listener = {"name": "https", "port": 10443, "protocol": "HTTPS", "hostnames": ["*"], "tls": tls}
    return parsed("Gateway", "public", {"listeners": [listener]})


def entitlements() -> Entitlements:
    certificates = [{"san": "spiffe://shop/mobile"}, {"fingerprint": FINGERPRINT}, {"subject": "CN=mobile,O=Shop"}]
    mobile = {"clientCertificates": certificates, "clientIds": [{"issuer": "https://idp", "clientId": "m-1"}]}
    return Entitlements.of(
        [
            parsed("KeySet", "api-keys", {"issuer": "meshplane", "keys": [JWK]}),
            parsed("Application", "mobile", mobile, uid="uid-mobile"),
            parsed("Application", "web", {"clientCertificates": [{"san": "web.shop"}]}, uid="uid-web"),
            parsed("Subscription", "mobile-orders", {"application": "mobile", "api": "orders", "plan": "gold"}),
            parsed("Subscription", "web-orders", {"application": "web", "api": "orders", "state": "blocked"}),
        ]
    )


def translated(authentication: dict[str, Any], *, validation: bool = True, **spec: Any) -> EnvoyConfig:
    fields = {"backends": [backend()], "authentication": authentication, "gateways": ["public"], **spec}
    orders = parsed("API", "orders", {"basePath": "/orders", **fields})
    return translate_apis([orders], SETTINGS, entitlements(), NOW, gateways=[gateway(validation)])


def orders_route(config: EnvoyConfig) -> route_components_pb2.Route:
    (table,) = [table for table in config.routes if table.name.startswith("gateway/")]
    return table.virtual_hosts[0].routes[0]


def route_rbac(route: route_components_pb2.Route) -> dict[str, Any]:
    config = rbac_pb2.RBACPerRoute()
    route.typed_per_filter_config["envoy.filters.http.rbac"].Unpack(config)
    return json_format.MessageToDict(config)


def route_requirement(route: route_components_pb2.Route) -> str | None:
    if "envoy.filters.http.jwt_authn" not in route.typed_per_filter_config:
        return None
    config = jwt_pb2.PerRouteConfig()
    route.typed_per_filter_config["envoy.filters.http.jwt_authn"].Unpack(config)
    return config.requirement_name


def test_a_certificate_alone_admits_the_subscribed_application_by_san_subject_or_fingerprint() -> None:
    route = orders_route(translated({"mtls": {}}))
    rbac = route_rbac(route)["rbac"]

    assert route_requirement(route) is None
    assert sorted(rbac["rules"]["policies"]) == ["gold"]  # web's subscription is blocked
    (caller,) = rbac["rules"]["policies"]["gold"]["principals"]
    ways = caller["orIds"]["ids"]
    assert ways[0] == {"authenticated": {"principalName": {"exact": "spiffe://shop/mobile"}}}
    hashed = ways[1]["andIds"]["ids"]
    assert hashed[0] == {"authenticated": {}}
    assert hashed[1]["header"]["name"] == "x-forwarded-client-cert"
    assert f"Hash={FINGERPRINT}" in hashed[1]["header"]["stringMatch"]["safeRegex"]["regex"]
    assert ways[2] == {"authenticated": {"principalName": {"exact": "CN=mobile,O=Shop"}}}
    # The shadow policy names the caller; the route forwards it and the plan.
    assert sorted(rbac["shadowRules"]["policies"]) == ["mobile"]
    forwarded = {header.header.key: header.header.value for header in route.request_headers_to_add}
    assert "shadow_effective_policy_id" in forwarded["x-meshplane-application"]
    assert "enforced_effective_policy_id" in forwarded["x-meshplane-plan"]


def test_both_required_asks_for_the_certificate_and_the_key_of_the_same_application() -> None:
    route = orders_route(translated(KEY | {"mtls": {"required": True}}))
    (caller,) = route_rbac(route)["rbac"]["rules"]["policies"]["gold"]["principals"]

    assert route_requirement(route) == "apikey:x-api-key:"
    certificate, key = caller["andIds"]["ids"]
    assert len(certificate["orIds"]["ids"]) == 3
    assert key["metadata"]["value"]["stringMatch"]["exact"] == "uid-mobile"


def test_either_one_lets_the_key_be_missing_but_never_bad() -> None:
    config = translated(KEY | {"mtls": {"required": False}})
    route = orders_route(config)
    (caller,) = route_rbac(route)["rbac"]["rules"]["policies"]["gold"]["principals"]

    assert route_requirement(route) == "apikey:x-api-key:?"
    assert len(caller["orIds"]["ids"]) == 4  # three certificates, one key
    (extension,) = [item for item in config.extension_configs if item.name == "envoy.filters.http.jwt_authn"]
    jwt = jwt_pb2.JwtAuthentication()
    extension.typed_config.Unpack(jwt)
    alternatives = jwt.requirement_map["apikey:x-api-key:?"].requires_any.requirements
    assert [item.provider_name for item in alternatives] == ["apikey:x-api-key:", ""]
    assert alternatives[1].HasField("allow_missing") and not alternatives[1].HasField("allow_missing_or_failed")


def test_with_a_token_either_one_leaves_scoped_operations_to_the_token() -> None:
    operations = [{"method": "GET", "path": "/items"}, {"method": "POST", "path": "/items", "scopes": ["write"]}]
    config = translated(TOKEN | {"mtls": {"required": False}}, operations=operations)
    (table,) = [table for table in config.routes if table.name.startswith("gateway/")]
    by_method = {route.match.headers[0].string_match.exact: route for route in table.virtual_hosts[0].routes}

    (read,) = route_rbac(by_method["GET"])["rbac"]["rules"]["policies"]["gold"]["principals"]
    (write,) = route_rbac(by_method["POST"])["rbac"]["rules"]["policies"]["gold"]["principals"]
    assert len(read["orIds"]["ids"]) == 4
    assert "authenticated" not in str(write)  # no certificate stands in for a scope
    assert "write" in str(write)


def test_a_listener_that_verifies_no_certificate_answers_503_saying_why() -> None:
    route = orders_route(translated({"mtls": {}}, validation=False))

    assert route.direct_response.status == 503
    assert "does not verify client certificates" in route.direct_response.body.inline_string
    assert not route.HasField("route") and not route.typed_per_filter_config


def test_the_gateway_is_told_which_listener_serves_certificate_apis_it_does_not_verify() -> None:
    assert (
        "does not verify client certificates"
        in translated({"mtls": {}}, validation=False).gateway_problems["default/public"]
    )
    assert "does not verify" not in translated({"mtls": {}}).gateway_problems.get("default/public", "")


def test_an_api_with_mtls_on_the_default_listener_is_refused() -> None:
    orders = parsed("API", "orders", {"basePath": "/orders", "backends": [backend()], "authentication": {"mtls": {}}})
    config = translate_apis([orders], SETTINGS, entitlements(), NOW)

    assert "clientValidation" in config.refused["default/orders"]
    assert all(not host.routes for table in config.routes for host in table.virtual_hosts)


def test_a_certificate_caller_s_plan_limit_is_counted_per_application() -> None:
    limit = {"kind": "SubscriptionPlan", "name": "gold", "api": "orders"}
    policy = parsed(
        "RateLimitPolicy", "gold", {"target": limit, "requestsPerUnit": 5, "unit": "hour", "scope": "local"}
    )
    orders = parsed(
        "API",
        "orders",
        {"basePath": "/orders", "backends": [backend()], "authentication": {"mtls": {}}, "gateways": ["public"]},
    )
    held = Entitlements.of([*_resources(), policy])
    config = translate_apis([orders], SETTINGS, held, NOW, gateways=[gateway(True)])
    actions = orders_route(config).route.rate_limits[-1].actions
    caller = actions[-1].metadata

    assert caller.descriptor_key == "application"
    assert caller.metadata_key.key == "envoy.filters.http.rbac"
    assert [segment.key for segment in caller.metadata_key.path] == ["shadow_effective_policy_id"]


def _resources() -> list[Resource]:
    mobile = {"clientCertificates": [{"san": "spiffe://shop/mobile"}]}
    return [
        parsed("Application", "mobile", mobile, uid="uid-mobile"),
        parsed("Subscription", "mobile-orders", {"application": "mobile", "api": "orders", "plan": "gold"}),
    ]


def test_envoy_accepts_every_mode(tmp_path: Path) -> None:
    for authentication in ({"mtls": {}}, KEY | {"mtls": {"required": True}}, KEY | {"mtls": {"required": False}}):
        accepted, output = validate(tmp_path, static_bootstrap(translated(authentication)))
        assert accepted, output


@pytest.mark.parametrize(
    ("authentication", "message"),
    [
        ({"mtls": {"required": False}}, "a client certificate alone must be required"),
        ({"apiKey": {"mode": "opaque"}, "mtls": {}}, "signed API keys only"),
        ({"jwt": {**TOKEN["jwt"], "requireSubscription": False}, "mtls": {}}, "requireSubscription"),
        ({}, "give one of apiKey, jwt and mtls"),
    ],
)
def test_combinations_that_cannot_name_an_application_are_refused(authentication: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Authentication.model_validate(authentication)


@pytest.mark.parametrize(
    "mapping",
    [{}, {"san": "a.shop", "fingerprint": FINGERPRINT}, {"fingerprint": "abc"}, {"subject": "no-equals"}],
)
def test_a_client_certificate_is_named_one_way_exactly(mapping: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        ClientCertificate.model_validate(mapping)


def test_a_fingerprint_may_be_written_with_colons_in_either_case() -> None:
    written = ":".join(["AB"] * 32)
    assert ClientCertificate.model_validate({"fingerprint": written}).fingerprint == FINGERPRINT
