"""100,000 revoked keys in one cluster: served by the agent's xDS server to a real Envoy without a NACK, the
route table no bigger for them, and a revoked key refused while a live one passes.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import grpc
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from meshplane.agent.gateway import ENVOY_TYPE_ORDER, GATEWAYS, GatewayPublisher, gateway_group
from meshplane.agent.translate import GatewaySettings, translate_apis
from meshplane.agent.translate.access import REVOKED_RBAC
from meshplane.agent.translate.entitlements import Entitlements, Grant, KeyRecord
from meshplane.dataplane import KEY_APPLICATION_UID_CLAIM
from meshplane.model.access import KeySetSpec
from meshplane.model.status import DeliveryState
from meshplane.xds.cache import ResourceCache
from meshplane.xds.server import XdsServer, add_to_server
from meshplane_testing.envoy import run_envoy
from meshplane_testing.gateway import Gateway, status
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

        cache = ResourceCache()
        publisher = GatewayPublisher(cache, ack_timeout=30)
        server = grpc.aio.server()
        add_to_server(
            XdsServer(cache, node_group=gateway_group, type_order=ENVOY_TYPE_ORDER, callbacks=publisher), server
        )
        xds_port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            with run_envoy(tmp_path, "gw-scale", xds_port) as envoy:
                assert (await publisher.publish(few)).state is DeliveryState.APPLIED
                await asyncio.to_thread(envoy.wait_listener, settings.listener_port)
                started = time.perf_counter()
                outcome = await publisher.publish(many)
                applied = time.perf_counter() - started
                assert outcome.state is DeliveryState.APPLIED, outcome.message
                assert len(cache.resources(GATEWAYS, ENVOY_TYPE_ORDER[3])) == len(many.extension_configs)

                gateway = Gateway(settings.listener_port)
                live, revoked = _key(signer, "k-live"), _key(signer, f"k-{REVOKED - 1:016x}")
                await asyncio.to_thread(
                    gateway.wait_for, "/signed/x", status(401), headers={"x-api-key": revoked}, timeout=30
                )
                assert gateway.request("GET", "/signed/x", {"x-api-key": live}).status_code == 200
                assert gateway.request("GET", "/signed/x", {"x-api-key": _key(signer, "k-0")}).status_code == 200
                gateway.close()
        finally:
            await server.stop(None)
    print(
        f"\n{REVOKED} revoked keys: RDS {many_routes.ByteSize()} B (as with 1), revoked-key ECDS {revoked_bytes} B, "
        f"translated in {translated:.2f}s, applied by Envoy in {applied:.2f}s"
    )
