"""What Envoy gets back over gRPC: identity headers and metadata on OK, a JSON error on a denial."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import grpc
import pytest
from envoy.config.core.v3.base_pb2 import HeaderValueOption
from envoy.service.auth.v3 import external_auth_pb2_grpc
from google.protobuf import json_format
from google.rpc import code_pb2
from prometheus_client import REGISTRY

from meshplane.callout_server import CalloutServer
from meshplane.enforcer.service import AuthorizationService
from meshplane_testing.enforcer_factories import NOW, api, application, check_request, key, loaded, subscription
from meshplane_testing.process import free_port


@pytest.fixture
async def stub() -> AsyncIterator[external_auth_pb2_grpc.AuthorizationStub]:
    state = await loaded(
        api("shop/orders", header="x-api-key", query="api_key"),
        application("shop/mobile", key("mobile-key", "k1")),
        application("shop/web", key("web-key", "w1")),
        subscription("shop/mobile-orders", "mobile", "orders", plan="gold"),
    )
    server = CalloutServer(AuthorizationService(lambda: state.snapshot, clock=lambda: NOW).methods())
    port = free_port()
    await server.start(f"127.0.0.1:{port}")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield external_auth_pb2_grpc.AuthorizationStub(channel)
    finally:
        await server.stop(0)


def headers(options: list[HeaderValueOption]) -> dict[str, str]:
    assert {option.append_action for option in options} == {HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD}
    return {option.header.key: option.header.value for option in options}


def counted(decision: str) -> float:
    return REGISTRY.get_sample_value("meshplane_enforcer_decisions_total", {"decision": decision}) or 0.0


async def test_allowed_request_carries_who_is_calling_and_loses_the_key(
    stub: external_auth_pb2_grpc.AuthorizationStub,
) -> None:
    allowed_before = counted("allowed")

    response = await stub.Check(check_request(headers={"x-api-key": "mobile-key"}), timeout=5)

    assert response.status.code == code_pb2.OK
    assert response.WhichOneof("http_response") == "ok_response"
    ok = response.ok_response
    assert headers(list(ok.headers)) == {
        "x-meshplane-application": "mobile",
        "x-meshplane-plan": "gold",
        "x-meshplane-key-id": "k1",
    }
    assert list(ok.headers_to_remove) == ["x-api-key"]
    assert list(ok.query_parameters_to_remove) == ["api_key"]
    assert json_format.MessageToDict(response.dynamic_metadata) == {"application": "shop/mobile", "plan": "gold"}
    assert counted("allowed") == allowed_before + 1


@pytest.mark.parametrize(
    ("request_headers", "status", "code", "reason", "counter"),
    [
        ({}, 401, code_pb2.UNAUTHENTICATED, "missing API key", "missing_key"),
        ({"x-api-key": "guess"}, 401, code_pb2.UNAUTHENTICATED, "invalid API key", "invalid_key"),
        ({"x-api-key": "web-key"}, 403, code_pb2.PERMISSION_DENIED, "not subscribed", "not_subscribed"),
    ],
)
async def test_denied_request_gets_a_json_error(
    stub: external_auth_pb2_grpc.AuthorizationStub,
    request_headers: dict[str, str],
    status: int,
    code: int,
    reason: str,
    counter: str,
) -> None:
    denied_before = counted(counter)

    response = await stub.Check(check_request(headers=request_headers), timeout=5)

    assert (response.status.code, response.status.message) == (code, reason)
    assert response.WhichOneof("http_response") == "denied_response"
    denied = response.denied_response
    assert denied.status.code == status
    assert json.loads(denied.body) == {"error": reason}
    expected = {"content-type": "application/json"}
    if status == 401:
        expected["www-authenticate"] = "APIKey"
    assert headers(list(denied.headers)) == expected
    assert not response.HasField("dynamic_metadata")
    assert counted(counter) == denied_before + 1


async def test_a_route_naming_no_api_is_forbidden(stub: external_auth_pb2_grpc.AuthorizationStub) -> None:
    response = await stub.Check(check_request(api=None, headers={"x-api-key": "mobile-key"}), timeout=5)

    assert response.status.code == code_pb2.PERMISSION_DENIED
    assert response.denied_response.status.code == 403
