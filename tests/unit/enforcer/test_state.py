"""Updates from the agent: taken around what the enforcer cannot use, which keeps its previous version and is
reported in the NACK."""

from __future__ import annotations

import pytest
from google.protobuf import any_pb2, wrappers_pb2

from meshplane.dataplane import ENFORCER_API_TYPE, ENFORCER_APPLICATION_TYPE, ENFORCER_SUBSCRIPTION_TYPE
from meshplane.enforcer.decision import Allow, Denial, decide
from meshplane.enforcer.state import EnforcerState
from meshplane.proto.v1 import enforcer_pb2
from meshplane.xds.client import UpdateRejected
from meshplane.xds.resource import VersionedResource, pack
from meshplane_testing.enforcer_factories import (
    NOW,
    api,
    application,
    check_request,
    digest,
    key,
    loaded,
    subscription,
    update,
)

MOBILE = application("shop/mobile", key("mobile-key", "k1"))
BASE = (api("shop/orders"), MOBILE, subscription("shop/mobile-orders", "mobile", "orders"))
MOBILE_CALL = check_request(headers={"x-api-key": "mobile-key"})


def raw(name: str, type_url: str, value: bytes) -> VersionedResource:
    return VersionedResource(name, "v-raw", any_pb2.Any(type_url=type_url, value=value))


def bad_application(**fields: object) -> enforcer_pb2.EnforcerApplication:
    message = enforcer_pb2.EnforcerApplication(project="shop", name="mobile", keys=[key("mobile-key", "k1")])
    for field, value in fields.items():
        setattr(message.keys[0], field, value)
    return message


async def refused(state: EnforcerState, type_url: str, *resources: VersionedResource) -> str:
    """Apply an update some of which must be refused; the refusal's message."""
    with pytest.raises(UpdateRejected) as refusal:
        await state.apply(update(type_url, *resources))
    return str(refusal.value)


async def test_an_update_is_taken_and_reported_in_the_versions() -> None:
    state = await loaded(*BASE)

    assert isinstance(decide(state.snapshot, MOBILE_CALL, NOW), Allow)
    assert state.versions(ENFORCER_APPLICATION_TYPE) == {MOBILE.name: MOBILE.version}
    assert state.versions("type.googleapis.com/other.Type") == {}


@pytest.mark.parametrize(
    ("resource", "complaint"),
    [
        pytest.param(pack("shop/mobile", wrappers_pb2.StringValue(value="x")), "StringValue", id="wrong-message"),
        pytest.param(raw("shop/mobile", ENFORCER_APPLICATION_TYPE, b"\xff\xff"), "decode", id="undecodable"),
        pytest.param(pack("shop/mobile", bad_application(sha256=b"short")), "5 bytes", id="digest-too-short"),
        pytest.param(pack("shop/mobile", bad_application(sha256=digest("a") + b"!")), "33", id="digest-too-long"),
        pytest.param(pack("shop/mobile", bad_application(id="")), "id is empty", id="key-without-id"),
        pytest.param(pack("shop/mobile", bad_application(expires_unix=-5)), "negative", id="negative-expiry"),
        pytest.param(pack("mobile", bad_application()), "not project/name", id="name-without-project"),
        pytest.param(pack("shop/mobile/x", bad_application()), "not project/name", id="name-too-deep"),
        pytest.param(pack("/mobile", bad_application()), "not project/name", id="empty-project"),
        pytest.param(pack("shop/web", bad_application()), "shop/mobile", id="name-is-not-the-body"),
    ],
)
async def test_a_malformed_application_is_left_out_the_last_good_one_kept_and_the_rest_taken(
    resource: VersionedResource, complaint: str
) -> None:
    state = await loaded(*BASE)
    web = application("shop/web", key("web-key", "w1"))

    message = await refused(state, ENFORCER_APPLICATION_TYPE, web, resource)

    assert resource.name in message and complaint in message
    assert state.versions(ENFORCER_APPLICATION_TYPE) == {MOBILE.name: MOBILE.version, web.name: web.version}
    assert isinstance(decide(state.snapshot, MOBILE_CALL, NOW), Allow)
    assert state.snapshot.keys[digest("web-key")].application == "web"


async def test_an_api_where_no_key_can_be_read_is_refused() -> None:
    state = await loaded(*BASE)

    message = await refused(state, ENFORCER_API_TYPE, api("shop/orders", header="", query=""))

    assert "neither key_header nor key_query" in message
    assert isinstance(decide(state.snapshot, MOBILE_CALL, NOW), Allow)


@pytest.mark.parametrize(("app", "api_name"), [("", "orders"), ("mobile", ""), ("other/mobile", "orders")])
async def test_a_subscription_naming_no_application_or_api_is_refused(app: str, api_name: str) -> None:
    state = await loaded(*BASE)

    await refused(state, ENFORCER_SUBSCRIPTION_TYPE, subscription("shop/mobile-orders", app, api_name, active=False))

    assert isinstance(decide(state.snapshot, MOBILE_CALL, NOW), Allow)


async def test_keys_of_two_applications_with_one_digest_are_left_out() -> None:
    state = await loaded(*BASE)

    message = await refused(state, ENFORCER_APPLICATION_TYPE, application("shop/web", key("mobile-key", "w1")))

    assert "digest" in message and "shop/mobile" in message and "shop/web" in message
    assert decide(state.snapshot, MOBILE_CALL, NOW) is Denial.INVALID_KEY


async def test_an_update_of_a_type_the_enforcer_does_not_serve_is_refused() -> None:
    state = await loaded(*BASE)

    await refused(state, "type.googleapis.com/google.protobuf.StringValue")


async def test_removals_take_effect() -> None:
    state = await loaded(*BASE)

    await state.apply(update(ENFORCER_SUBSCRIPTION_TYPE, removed=["shop/mobile-orders"]))
    assert decide(state.snapshot, MOBILE_CALL, NOW) is Denial.NOT_SUBSCRIBED

    await state.apply(update(ENFORCER_APPLICATION_TYPE, removed=["shop/mobile", "shop/never-held"]))
    assert decide(state.snapshot, MOBILE_CALL, NOW) is Denial.INVALID_KEY
    assert state.versions(ENFORCER_APPLICATION_TYPE) == {}

    await state.apply(update(ENFORCER_API_TYPE, removed=["shop/orders"]))
    assert decide(state.snapshot, MOBILE_CALL, NOW) is Denial.UNKNOWN_API


async def test_a_new_version_replaces_the_old_one() -> None:
    state = await loaded(*BASE)
    rotated = application("shop/mobile", key("new-key", "k2"))

    await state.apply(update(ENFORCER_APPLICATION_TYPE, rotated))

    assert decide(state.snapshot, MOBILE_CALL, NOW) is Denial.INVALID_KEY
    renewed = decide(state.snapshot, check_request(headers={"x-api-key": "new-key"}), NOW)
    assert isinstance(renewed, Allow) and renewed.key.key_id == "k2"
    assert state.versions(ENFORCER_APPLICATION_TYPE) == {rotated.name: rotated.version}


async def test_an_update_of_one_type_leaves_the_others_untouched() -> None:
    state = await loaded(*BASE)
    before = state.snapshot

    await state.apply(update(ENFORCER_APPLICATION_TYPE, application("shop/web", key("web-key", "w1"))))

    assert state.snapshot.apis is before.apis
    assert state.snapshot.subscriptions is before.subscriptions
    assert len(state.snapshot.keys) == 2
