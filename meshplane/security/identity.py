"""Who is calling: the cluster named by a verified client certificate, and the checks that use it.

The server verifies every client certificate against its CA during the TLS handshake
(`require_client_auth`), so what gRPC reports in the auth context is already trusted; a call's
identity is the cluster in its URI SAN (``spiffe://meshplane/cluster/<name>``). Only a server started
with `--insecure` sees plaintext connections, which carry no identity: there the cluster a caller
names is taken at its word. Whether a certificate is still good, not revoked, is checked in front of
every call too (`revocation.RevocationCheck`).
"""

from __future__ import annotations

from typing import Any

import grpc

from meshplane.grpc_handlers import Behavior, HandlerInterceptor, same_shape
from meshplane.security.ca import CLUSTER_URI_PREFIX, cluster_of_uris

CONTROL_PLANE_PREFIX = "/meshplane.v1.ControlPlane/"


def _auth_context(context: grpc.aio.ServicerContext) -> dict[str, list[bytes]]:
    return context.auth_context() or {}


def is_plaintext(context: grpc.aio.ServicerContext) -> bool:
    """True for a connection without TLS, which only a server started with `--insecure` accepts."""
    return _auth_context(context).get("transport_security_type", [b""])[0] != b"ssl"


def peer_cluster(context: grpc.aio.ServicerContext) -> str | None:
    """The cluster named by the caller's verified certificate; None when there is none."""
    sans = _auth_context(context).get("x509_subject_alternative_name", [])
    return cluster_of_uris(value.decode(errors="replace") for value in sans)


def authorize_cluster(context: grpc.aio.ServicerContext, claimed: str) -> None:
    """Allow the caller to act for cluster `claimed`, or raise PermissionError saying why not."""
    if is_plaintext(context):
        return
    identity = peer_cluster(context)
    if identity is None:
        raise PermissionError(f"the client certificate names no cluster (no {CLUSTER_URI_PREFIX}<name> URI SAN)")
    if identity != claimed:
        raise PermissionError(f"certificate is for cluster {identity!r}, not {claimed!r}")


class ClusterIdentityInterceptor(HandlerInterceptor):
    """Refuses (PERMISSION_DENIED) every `meshplane.v1.ControlPlane` call whose `cluster` is not the caller's.

    Installed on servers that require client certificates. One check for every RPC of the service,
    present and future: a request without a `cluster` field, or a streaming RPC, is refused until this
    check learns about it, rather than let through unchecked.
    """

    def wrap(self, handler: grpc.RpcMethodHandler, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method = details.method
        if not method.startswith(CONTROL_PLANE_PREFIX):
            return handler
        if handler.unary_unary is None:
            return same_shape(handler, _refusing(f"{method}: streaming calls have no cluster identity check"))
        behavior: Behavior = handler.unary_unary

        async def checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                authorize_cluster(context, getattr(request, "cluster", None) or "")
            except PermissionError as exc:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
            return await behavior(request, context)

        return same_shape(handler, checked)


def _refusing(reason: str) -> Behavior:
    async def refuse(_request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, reason)

    return refuse
