"""Traffic decides: what cluster a reports does not change what cluster b's gateway serves.

Real processes on loopback: the server, cluster b's agent and its Envoy, and an upstream. Cluster a, even
one allowed to publish into the project, reports a KeySet holding its own signing key and an API of its
own; b's gateway must go on refusing an API key a signed, and must not serve a's API.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import grpc
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from google.protobuf import struct_pb2

from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc
from meshplane_testing import documents
from meshplane_testing.envoy import run_envoy
from meshplane_testing.gateway import Gateway, from_upstream, status
from meshplane_testing.meshplane import ServerProcess, run_agent, run_server
from meshplane_testing.north import put
from meshplane_testing.upstream import run_upstream

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(120)]

PROJECT = "shop"


def struct(value: dict) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(value)
    return out


def forged_key(private: ec.EllipticCurvePrivateKey) -> str:
    """An API key for application `mobile`, shaped as the server issues them, signed with the attacker's key."""
    claims = {
        "iss": "meshplane",
        "sub": f"{PROJECT}/mobile",
        "app": "mobile",
        "project": PROJECT,
        "jti": "k-forged",
        "iat": int(time.time()),
    }
    return jwt.encode(claims, private, algorithm="ES256", headers={"kid": "attacker"})


def report_as_a(server: ServerProcess, *objects: control_plane_pb2.LocalObject) -> list[grpc.StatusCode]:
    """Each object reported on its own by cluster a, as its agent would: the status of each call."""
    codes = []
    with grpc.secure_channel(server.grpc_address, server.agent_credentials("a")) as channel:
        stub = control_plane_pb2_grpc.ControlPlaneStub(channel)
        stub.RegisterCluster(control_plane_pb2.RegisterClusterRequest(cluster="a"), timeout=10)
        for local in objects:
            try:
                stub.ReportObjects(control_plane_pb2.ReportObjectsRequest(cluster="a", objects=[local]), timeout=10)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as exc:
                codes.append(exc.code())
    return codes


def test_what_cluster_a_reports_does_not_change_what_cluster_bs_gateway_serves(tmp_path: Path) -> None:
    attacker = ec.generate_private_key(ec.SECP256R1())
    public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(attacker.public_key()))
    with (
        run_upstream("orders") as (port, _),
        run_server(tmp_path) as server,
        server.http() as rest,
    ):
        rest.put(f"/v1/projects/{PROJECT}", json=documents.project(PROJECT))
        backends = [documents.backend(port)]
        signed = {"apiKey": {"header": "x-api-key"}}
        on_b = {"clusters": ["b"]}
        for document in (
            documents.api("orders", project=PROJECT, backends=backends, authentication=signed, placement=on_b),
            documents.application("mobile", project=PROJECT),
            documents.subscription("mobile-orders", project=PROJECT, application="mobile", api="orders", plan="gold"),
        ):
            put(rest, document)
        issued = rest.post(f"/v1/projects/{PROJECT}/applications/mobile/keys", json={}).raise_for_status().json()
        server.allow_publishing("a", PROJECT)  # the worst case: a cluster trusted with the project

        with (
            run_agent(tmp_path, "b", server) as agent,
            run_envoy(tmp_path, "gw-b", agent.xds_port) as envoy,
        ):
            envoy.wait_listener(agent.gateway_port)
            gateway = Gateway(agent.gateway_port)
            try:
                gateway.wait_for("/orders/items", from_upstream("orders"), headers={"x-api-key": issued["key"]})
                forged = {"x-api-key": forged_key(attacker)}
                assert gateway.request("GET", "/orders/items", headers=forged).status_code == 401

                codes = report_as_a(
                    server,
                    control_plane_pb2.LocalObject(
                        kind="KeySet",
                        name="zz-attacker",
                        spec=struct({"issuer": "meshplane", "keys": [{**public, "kid": "attacker", "alg": "ES256"}]}),
                    ),
                    control_plane_pb2.LocalObject(
                        kind="API",
                        project=PROJECT,
                        name="stolen",
                        spec=struct({"basePath": "/stolen", "backends": backends}),
                    ),
                )
                assert codes == [grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.OK]

                # Everything written so far has reached b's gateway once a later change placed on b has.
                put(rest, documents.api("marker", project=PROJECT, backends=backends, placement=on_b))
                gateway.wait_for("/marker/x", from_upstream("orders"))

                assert gateway.request("GET", "/orders/items", headers=forged).status_code == 401
                assert gateway.request("GET", "/stolen/x").status_code == 404
                gateway.wait_for("/orders/items", from_upstream("orders"), headers={"x-api-key": issued["key"]})
                gateway.wait_for("/stolen/x", status(404), timeout=1)
            finally:
                gateway.close()
