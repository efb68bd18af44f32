"""The gateway's discovered filter configs (ECDS) through the agent's publisher and xDS server to a real Envoy:
100,000 revoked keys served without a NACK, the route table no bigger for them, a revoked key refused while a
live one passes; and a config Envoy rejects reported as failed while the gateway keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from envoy.extensions.filters.http.local_ratelimit.v3 import local_rate_limit_pb2

from meshplane.agent.gateway import EXTENSION_CONFIG, GATEWAYS
from meshplane.agent.translate import GatewaySettings, translate_apis
from meshplane.agent.translate.access import REVOKED_RBAC
from meshplane.agent.translate.entitlements import Entitlements, Grant, KeyRecord
from meshplane.agent.translate.limits import LOCAL_RATELIMIT
from meshplane.dataplane import KEY_APPLICATION_UID_CLAIM
from meshplane.model.access import KeySetSpec
from meshplane.model.status import DeliveryState
from meshplane_testing.envoy import run_envoy
from meshplane_testing.gateway import Gateway, status
from meshplane_testing.gateway_xds import gateway_xds
from meshplane_testing.process import free_port
from meshplane_testing.translate_factories import LOOPBACK, api, backend
from meshplane_testing.upstream import run_upstream

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(90)]

REVOKED = 100_000
NOW = time.time()


def _entitlements(signer: ec.EllipticCurvePrivateKey, revoked: int) -> Entitlements:
    public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(signer.public_key()))
    keys = [
        KeyRecord("shop", f"k-{index:016x}", "good", "uid-good", b"", None, True, "s1", NOW + 86_400)
        for index in range(revoked)
    ]
    keys.append(KeyRecord("shop", "k-live", "good", "uid-good", b"", None, False, "s1", NOW + 86_400))
    return Entitlements(
        applications={("shop", "good"): "uid-good"},
        subscriptions={("shop", "signed"): [Grant("good", "gold", "uid-good")]},
        keys=keys,
        key_set=KeySetSpec(issuer="meshplane", keys=[{**public, "kid": "s1", "alg": "ES256"}]),
    )


def _key(signer: ec.EllipticCurvePrivateKey, key_id: str) -> str:
    claims = {
        "iss": "meshplane",
        "sub": "shop/good",
        "app": "good",
        KEY_APPLICATION_UID_CLAIM: "uid-good",
        "jti": key_id,
    }
    return jwt.encode(
        {**claims, "project": "shop", "iat": int(NOW), "exp": int(NOW) + 3600},
        signer,
        algorithm="ES256",
        headers={"kid": "s1"},
    )


async def test_a_hundred_thousand_revoked_keys_reach_envoy_without_growing_the_route_table(tmp_path: Path) -> None:
    signer = ec.generate_private_key(ec.SECP256R1())
    with run_upstream("signed") as (port, _):
        settings = GatewaySettings(listener_port=free_port(), backends=LOOPBACK)
        apis = [api("signed", basePath="/signed", backends=[backend(port=port)], authentication={"apiKey": {}})]
        few = translate_apis(apis, settings, _entitlements(signer, 1), NOW)
        started = time.perf_counter()
        many = translate_apis(apis, settings, _entitlements(signer, REVOKED), NOW)
        translated = time.perf_counter() - started

        (few_routes,), (many_routes,) = few.routes, many.routes
        assert many_routes.ByteSize() == few_routes.ByteSize(), "the route table grew with the revoked keys"
        revoked_bytes = next(e for e in many.extension_configs if e.name == REVOKED_RBAC).ByteSize()

        async with gateway_xds() as (publisher, xds_port):
            with run_envoy(tmp_path, "gw-scale", xds_port) as envoy:
                assert (await publisher.publish(few)).state is DeliveryState.APPLIED
                await asyncio.to_thread(envoy.wait_listener, settings.listener_port)
                started = time.perf_counter()
                outcome = await publisher.publish(many)
                applied = time.perf_counter() - started
                assert outcome.state is DeliveryState.APPLIED, outcome.message
                assert len(publisher.cache.resources(GATEWAYS, EXTENSION_CONFIG)) == len(many.extension_configs)

                gateway = Gateway(settings.listener_port)
                live, revoked = _key(signer, "k-live"), _key(signer, f"k-{REVOKED - 1:016x}")
                await asyncio.to_thread(
                    gateway.wait_for, "/signed/x", status(401), headers={"x-api-key": revoked}, timeout=30
                )
                assert gateway.request("GET", "/signed/x", {"x-api-key": live}).status_code == 200
                assert gateway.request("GET", "/signed/x", {"x-api-key": _key(signer, "k-0")}).status_code == 200
                gateway.close()
    print(
        f"\n{REVOKED} revoked keys: RDS {many_routes.ByteSize()} B (as with 1), revoked-key ECDS {revoked_bytes} B, "
        f"translated in {translated:.2f}s, applied by Envoy in {applied:.2f}s"
    )


async def test_a_discovered_config_envoy_rejects_fails_the_publish_and_the_gateway_keeps_serving(
    tmp_path: Path,
) -> None:
    signer = ec.generate_private_key(ec.SECP256R1())
    with run_upstream("signed") as (port, _):
        settings = GatewaySettings(listener_port=free_port(), backends=LOOPBACK)
        apis = [api("signed", basePath="/signed", backends=[backend(port=port)], authentication={"apiKey": {}})]
        good = translate_apis(apis, settings, _entitlements(signer, 1), NOW)
        bad = translate_apis(apis, settings, _entitlements(signer, 2), NOW)
        local = next(e for e in bad.extension_configs if e.name == LOCAL_RATELIMIT)
        config = local_rate_limit_pb2.LocalRateLimit()
        local.typed_config.Unpack(config)
        config.descriptors.add().entries.add(key="api", value="shop/signed")  # a descriptor without a bucket
        local.typed_config.Pack(config)

        async with gateway_xds(ack_timeout=10) as (publisher, xds_port):
            with run_envoy(tmp_path, "gw-reject", xds_port) as envoy:
                assert (await publisher.publish(good)).state is DeliveryState.APPLIED
                await asyncio.to_thread(envoy.wait_listener, settings.listener_port)
                outcome = await publisher.publish(bad)

                assert outcome.state is DeliveryState.FAILED
                assert outcome.message, "the gateway's reason is passed on"
                gateway = Gateway(settings.listener_port)
                live = {"x-api-key": _key(signer, "k-live")}
                assert gateway.request("GET", "/signed/x", live).status_code == 200
                gateway.close()
