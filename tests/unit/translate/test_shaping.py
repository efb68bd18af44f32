"""Request shaping, access logs and per-API stat names: what is refused at write time, what Envoy is given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings

from meshplane.agent.translate import GatewaySettings, translate_apis
from meshplane.agent.translate.config import EnvoyConfig
from meshplane.agent.translate.telemetry import ACCESS_LOG_FIELDS
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import InvalidObject
from meshplane_testing.envoy import envoy_binary, validate
from meshplane_testing.static_bootstrap import static_bootstrap
from meshplane_testing.translate_factories import LOOPBACK, api, backend, shaped_api_sets

HEADERS = "spec.shaping.requestHeaderModifier"
REFUSED = [
    ("forged identity", {"requestHeaderModifier": {"set": [{"name": "X-Meshplane-Application", "value": "good"}]}},
     f"{HEADERS}.set[0].name", "only the gateway sets it"),
    ("identity added", {"requestHeaderModifier": {"add": [{"name": "x-meshplane-plan", "value": "gold"}]}},
     f"{HEADERS}.add[0].name", "only the gateway sets it"),
    ("identity removed", {"requestHeaderModifier": {"remove": ["x-meshplane-key-id"]}},
     f"{HEADERS}.remove[0]", "only the gateway sets it"),
    ("not a token", {"requestHeaderModifier": {"set": [{"name": "x bad", "value": "1"}]}},
     f"{HEADERS}.set[0].name", "not a header name"),
    ("host", {"requestHeaderModifier": {"remove": ["Host"]}}, f"{HEADERS}.remove[0]", "urlRewrite.hostname"),
    ("credential in the clear", {"requestHeaderModifier": {"set": [{"name": "Authorization", "value": "Basic eA=="}]}},
     f"{HEADERS}.set[0].name", "credential in the clear"),
    ("pseudo-header", {"responseHeaderModifier": {"remove": [":status"]}},
     "spec.shaping.responseHeaderModifier.remove[0]", "not a header name"),
    ("header split", {"requestHeaderModifier": {"set": [{"name": "x-a", "value": "1\r\nx-b: 2"}]}},
     f"{HEADERS}.set[0].value", "control characters"),
    ("one header twice", {"requestHeaderModifier": {"set": [{"name": "x-a", "value": "1"}], "remove": ["X-A"]}},
     HEADERS, "x-a"),
    ("type without its field", {"urlRewrite": {"path": {"type": "ReplacePrefixMatch"}}},
     "spec.shaping.urlRewrite.path", "needs replacePrefixMatch"),
    ("two path forms", {"urlRewrite": {"path": {"type": "ReplaceFullPath", "replaceFullPath": "/a",
                                                "replacePrefixMatch": "/b"}}},
     "spec.shaping.urlRewrite.path", "takes no replacePrefixMatch"),
    ("path with a query", {"urlRewrite": {"path": {"type": "ReplaceFullPath", "replaceFullPath": "/a?b=1"}}},
     "spec.shaping.urlRewrite.path.replaceFullPath", "not a path"),
    ("lookahead", {"urlRewrite": {"path": {"type": "ReplaceRegexMatch",
                                           "replaceRegexMatch": {"pattern": "^/(?=a)", "substitution": "/"}}}},
     "spec.shaping.urlRewrite.path.replaceRegexMatch.pattern", "not RE2"),
    ("huge RE2 program", {"urlRewrite": {"path": {"type": "ReplaceRegexMatch",
                                                  "replaceRegexMatch": {"pattern": "^/(a{100}){100}$",
                                                                        "substitution": "/"}}}},
     "spec.shaping.urlRewrite.path.replaceRegexMatch.pattern", "multiply to 10000"),
    ("bad regex", {"urlRewrite": {"path": {"type": "ReplaceRegexMatch",
                                           "replaceRegexMatch": {"pattern": "^/(a", "substitution": "/"}}}},
     "spec.shaping.urlRewrite.path.replaceRegexMatch.pattern", "not a regular expression"),
    ("missing group", {"urlRewrite": {"path": {"type": "ReplaceRegexMatch",
                                               "replaceRegexMatch": {"pattern": "^/(a)", "substitution": "/\\2"}}}},
     "spec.shaping.urlRewrite.path.replaceRegexMatch", "1 group"),
    ("redirect code", {"requestRedirect": {"statusCode": 200}}, "spec.shaping.requestRedirect.statusCode", "301"),
    ("two answers", {"requestRedirect": {}, "directResponse": {"statusCode": 204}}, "spec.shaping", "give one"),
    ("answer and upstream", {"directResponse": {"statusCode": 204}, "requestMirror": {"backend": backend()}},
     "spec.shaping", "requestMirror would have no effect"),
    ("mirror share", {"requestMirror": {"backend": backend(), "percent": 101}},
     "spec.shaping.requestMirror.percent", "100"),
    ("direct status", {"directResponse": {"statusCode": 100}}, "spec.shaping.directResponse.statusCode", "200"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "shaping", "path", "message"), REFUSED, ids=[row[0] for row in REFUSED])
def test_shaping_that_cannot_work_is_refused_at_its_field(case: str, shaping: dict, path: str, message: str) -> None:
    with pytest.raises(InvalidObject) as refused:
        api("shaped", basePath="/shaped", backends=[backend()], shaping=shaping)

    errors = {error.path: error.message for error in refused.value.errors}
    assert path in errors, errors
    assert message in errors[path], errors


def test_an_operations_shaping_is_checked_at_its_own_path() -> None:
    document = {
        "kind": "API",
        "metadata": {"name": "a", "project": "p"},
        "spec": {
            "basePath": "/a",
            "backends": [backend()],
            "operations": [{"method": "GET", "path": "/x", "shaping": {"directResponse": {"statusCode": 99}}}],
        },
    }
    with pytest.raises(InvalidObject) as refused:
        REGISTRY.parse(document)

    assert [e.path for e in refused.value.errors] == ["spec.operations[0].shaping.directResponse.statusCode"]


def every_feature() -> list[Any]:
    """One API per shaping feature, plus one whose operations override its API's shaping."""
    prefix = {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v2"}
    regex = {"type": "ReplaceRegexMatch", "replaceRegexMatch": {"pattern": "^/regex/(\\w+)$", "substitution": "/r/\\1"}}
    headers = {
        "set": [{"name": "x-set", "value": "100%"}],
        "add": [{"name": "x-add", "value": "a"}],
        "remove": ["x-drop"],
    }
    return [
        api("headers", basePath="/headers", backends=[backend()], shaping={"requestHeaderModifier": headers,
                                                                         "responseHeaderModifier": headers}),
        api("prefix", basePath="/prefix", backends=[backend()], shaping={"urlRewrite": {"path": prefix}},
            operations=[{"method": "GET", "path": "/items/{id}/*"}]),
        api("full", basePath="/full", backends=[backend()],
            shaping={"urlRewrite": {"hostname": "full.internal",
                                    "path": {"type": "ReplaceFullPath", "replaceFullPath": "/status"}}}),
        api("regex", basePath="/regex", backends=[backend()], shaping={"urlRewrite": {"path": regex}}),
        api("redirect", basePath="/redirect", backends=[backend()],
            shaping={"requestRedirect": {"scheme": "https", "hostname": "new.example", "port": 8443,
                                         "path": prefix, "statusCode": 308}}),
        api("mirror", basePath="/mirror", backends=[backend()],
            shaping={"requestMirror": {"backend": backend(port=9002), "percent": 50}}),
        api("direct", basePath="/direct", backends=[backend()],
            shaping={"directResponse": {"statusCode": 418, "body": "teapot", "contentType": "text/plain"}}),
        api("mixed", basePath="/mixed", backends=[backend()], shaping={"directResponse": {"statusCode": 503}},
            operations=[{"method": "GET", "path": "/open", "shaping": {"requestMirror": {"backend": backend()}}},
                        {"method": "GET", "path": "/closed"}]),
    ]  # fmt: skip


def translated(settings: GatewaySettings | None = None) -> EnvoyConfig:
    return translate_apis(every_feature(), settings or GatewaySettings(backends=LOOPBACK))


def routes_by_name() -> dict[str, dict[str, Any]]:
    table = json_format.MessageToDict(translated().routes[0])
    return {route["name"]: route for host in table["virtualHosts"] for route in host["routes"]}


def test_each_feature_becomes_its_route_field() -> None:
    routes = routes_by_name()

    set_header = routes["shop/headers *"]["requestHeadersToAdd"][0]
    assert set_header["header"] == {"key": "x-set", "value": "100%%"}, "a value is literal, never a command"
    assert routes["shop/headers *"]["requestHeadersToRemove"] == ["x-drop"]
    assert routes["shop/headers *"]["responseHeadersToRemove"] == ["x-drop"]
    assert routes["shop/prefix GET /items/{id}/*"]["route"]["regexRewrite"]["substitution"] == "/v2\\1"
    assert routes["shop/full *"]["route"]["hostRewriteLiteral"] == "full.internal"
    assert routes["shop/regex *"]["route"]["regexRewrite"]["pattern"]["regex"] == "^/regex/(\\w+)$"
    assert routes["shop/redirect *"]["redirect"]["responseCode"] == "PERMANENT_REDIRECT"
    assert "route" not in routes["shop/redirect *"]
    mirror = routes["shop/mirror *"]["route"]["requestMirrorPolicies"][0]
    assert mirror["runtimeFraction"]["defaultValue"] == {"numerator": 50}
    assert routes["shop/direct *"]["directResponse"] == {"status": 418, "body": {"inlineString": "teapot"}}
    assert "requestMirrorPolicies" in routes["shop/mixed GET /open"]["route"], "the operation's own part"
    assert routes["shop/mixed GET /closed"]["directResponse"]["status"] == 503, "the API's answer"


def test_a_mirror_has_its_cluster_and_endpoints() -> None:
    config = translated()
    mirrors = [cluster.name for cluster in config.clusters if cluster.name.startswith("mirror.")]

    assert len(mirrors) == 2, mirrors  # /mirror's on 9002 and /mixed's on 9001: one each
    assert {e.cluster_name for e in config.endpoints} >= set(mirrors)


def test_a_mirror_this_cluster_forbids_refuses_its_api() -> None:
    metadata = {"requestMirror": {"backend": backend("169.254.169.254", 80)}}
    mirrored = api("m", basePath="/m", backends=[backend("192.0.2.10")], shaping=metadata)

    config = translate_apis([mirrored], GatewaySettings())

    assert config.refused == {"shop/m": "shaping.requestMirror.backend: 169.254.169.254 is a cloud metadata address"}


def test_every_route_names_its_api_and_operation_for_logs_and_stats() -> None:
    route = routes_by_name()["shop/prefix GET /items/{id}/*"]

    assert route["statPrefix"] == "api.shop.prefix"
    assert route["metadata"]["filterMetadata"]["meshplane"] == {
        "project": "shop",
        "api": "prefix",
        "operation": "GET /items/{id}/*",
    }


def access_log_of(settings: GatewaySettings) -> list[dict[str, Any]]:
    listener = json_format.MessageToDict(translated(settings).listeners[0])
    return listener["filterChains"][0]["filters"][0]["typedConfig"].get("accessLog", [])


def test_the_access_log_goes_to_stdout_by_default_as_one_json_line() -> None:
    logs = access_log_of(GatewaySettings(backends=LOOPBACK))

    assert [log["name"] for log in logs] == ["envoy.access_loggers.stdout"]
    assert logs[0]["typedConfig"]["logFormat"]["jsonFormat"] == ACCESS_LOG_FIELDS


@pytest.mark.parametrize(
    ("target", "otlp", "loggers"),
    [
        ("/var/log/gw.log", None, ["envoy.access_loggers.file"]),
        (None, None, []),
        (None, "127.0.0.1:4317", ["envoy.access_loggers.open_telemetry"]),
    ],
    ids=["file", "off", "otlp only"],
)
def test_the_access_log_setting_picks_the_loggers(target: str | None, otlp: str | None, loggers: list[str]) -> None:
    settings = GatewaySettings(backends=LOOPBACK, access_log=target, access_log_otlp_endpoint=otlp)

    assert [log["name"] for log in access_log_of(settings)] == loggers
    collector = [c.name for c in translated(settings).clusters if c.name == "meshplane.access_log_collector"]
    assert bool(collector) == (otlp is not None)


@pytest.mark.envoy
def test_envoy_accepts_every_feature_and_logger(tmp_path: Path) -> None:
    envoy_binary()
    settings = GatewaySettings(
        backends=LOOPBACK, access_log=str(tmp_path / "access.log"), access_log_otlp_endpoint="127.0.0.1:4317"
    )

    accepted, output = validate(tmp_path, static_bootstrap(translated(settings)))

    assert accepted, output


def test_a_callers_credential_may_be_kept_from_the_upstream() -> None:
    stripped = api("s", basePath="/s", backends=[backend()], shaping={"requestHeaderModifier": {"remove": ["Cookie"]}})

    assert stripped.spec.shaping.request_header_modifier.remove == ["cookie"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shaped_api_sets())
def test_envoy_accepts_generated_shaped_apis(tmp_path: Path, apis: list[Any]) -> None:
    envoy_binary()
    config = translate_apis(apis, GatewaySettings(backends=LOOPBACK))
    mirrored = {
        policy.cluster
        for table in config.routes
        for host in table.virtual_hosts
        for route in host.routes
        for policy in route.route.request_mirror_policies
    }
    assert mirrored <= {cluster.name for cluster in config.clusters}, "every mirror has its cluster"

    accepted, output = validate(tmp_path, static_bootstrap(config))

    assert accepted, output


def test_an_operation_that_answers_itself_drops_its_apis_upstream_parts_but_keeps_the_rest() -> None:
    shaping = {
        "requestHeaderModifier": {"set": [{"name": "x-to-upstream", "value": "1"}]},
        "responseHeaderModifier": {"set": [{"name": "x-to-caller", "value": "1"}]},
    }
    closed = {"method": "GET", "path": "/closed", "shaping": {"directResponse": {"statusCode": 410}}}
    config = translate_apis(
        [api("a", basePath="/a", backends=[backend()], shaping=shaping, operations=[closed])],
        GatewaySettings(backends=LOOPBACK),
    )

    (route,) = config.routes[0].virtual_hosts[0].routes
    assert route.direct_response.status == 410
    assert [h.header.key for h in route.request_headers_to_add] == []
    assert [h.header.key for h in route.response_headers_to_add] == ["x-to-caller"]


def test_shaping_lives_in_the_route_table_and_leaves_the_listener_as_it_was() -> None:
    """A listener change drains every open connection of the gateway: shaping must never cause one."""
    settings = GatewaySettings(backends=LOOPBACK)
    unshaped = [api(a.metadata.name, a.metadata.project or "", **unshape(a.spec.to_wire())) for a in every_feature()]

    shaped_listener = translate_apis(every_feature(), settings).listeners
    unshaped_listener = translate_apis(unshaped, settings).listeners

    assert [m.SerializeToString(deterministic=True) for m in shaped_listener] == [
        m.SerializeToString(deterministic=True) for m in unshaped_listener
    ]


def unshape(spec: dict[str, Any]) -> dict[str, Any]:
    operations = [{key: value for key, value in op.items() if key != "shaping"} for op in spec["operations"]]
    return {**{key: value for key, value in spec.items() if key != "shaping"}, "operations": operations}
