"""Revoked agent certificates: the serials every replica refuses, and the one check that refuses them.

Revocations are CertificateRevocation objects in the store, so every replica on it learns of one as
its projection does of any change (within a second, at once on PostgreSQL's NOTIFY). The check sits
in front of every call of the agent-facing gRPC server: a revoked certificate's unary call is
refused, and a stream it holds is ended, with UNAUTHENTICATED.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import grpc
from cryptography import x509

from meshplane.grpc_handlers import Behavior, HandlerInterceptor, behavior_of, same_shape
from meshplane.observability.logging import get_logger

log = get_logger("meshplane.security.revocation")

REVOCATION_KIND = "CertificateRevocation"


def serial_text(certificate: x509.Certificate) -> str:
    """A certificate's serial as revocations name it (lower-case hex)."""
    return format(certificate.serial_number, "x")


@functools.lru_cache(maxsize=4096)
def _serial_of_pem(pem: bytes) -> str:
    return serial_text(x509.load_pem_x509_certificate(pem))


def peer_serial(context: grpc.aio.ServicerContext) -> str | None:
    """The serial of the caller's verified certificate; None without one (plaintext)."""
    pem = (context.auth_context() or {}).get("x509_pem_cert")
    return _serial_of_pem(pem[0]) if pem else None


class RevokedCertificates:
    """The serials revoked so far, and whom to tell when one is revoked (its open streams)."""

    def __init__(self) -> None:
        self._serials: set[str] = set()
        self._holders: dict[str, set[Callable[[], None]]] = {}

    def __contains__(self, serial: object) -> bool:
        return serial in self._serials

    def reset(self, serials: Iterable[str]) -> None:
        """Exactly `serials` are revoked now (a fresh snapshot of the store)."""
        fresh = set(serials)
        for serial in fresh - self._serials:
            self.revoke(serial)
        self._serials = fresh

    def revoke(self, serial: str) -> None:
        if serial in self._serials:
            return
        self._serials.add(serial)
        holders = self._holders.pop(serial, set())
        log.info("agent certificate revoked", serial=serial, streams_ended=len(holders))
        for end in holders:
            end()

    def forget(self, serial: str) -> None:
        self._serials.discard(serial)

    def on_revoke(self, serial: str, end: Callable[[], None]) -> Callable[[], None]:
        """Call `end` when `serial` is revoked; the answer stops that."""
        self._holders.setdefault(serial, set()).add(end)

        def stop() -> None:
            holders = self._holders.get(serial)
            if holders is not None:
                holders.discard(end)
                if not holders:
                    del self._holders[serial]

        return stop


def _refusal(serial: str) -> str:
    return f"the client certificate (serial {serial}) is revoked; issue a new one with meshplane certs issue-agent"


class RevocationCheck(HandlerInterceptor):
    """Refuses every call whose client certificate is revoked, and ends a stream once its certificate is.

    Installed on the server that requires client certificates, for every method, whatever its shape:
    a call without a certificate (plaintext) has nothing to revoke.
    """

    def __init__(self, revoked: RevokedCertificates):
        self.revoked = revoked

    def wrap(self, handler: grpc.RpcMethodHandler, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        behavior = behavior_of(handler)
        if handler.response_streaming:
            return same_shape(handler, self._streaming(behavior))
        return same_shape(handler, self._unary(behavior))

    def _unary(self, behavior: Behavior) -> Behavior:
        async def checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
            serial = peer_serial(context)
            if serial is not None and serial in self.revoked:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, _refusal(serial))
            return await behavior(request, context)

        return checked

    def _streaming(self, behavior: Behavior) -> Behavior:
        async def checked(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            serial = peer_serial(context)
            if serial is None:
                async for response in behavior(request, context):
                    yield response
                return
            if serial in self.revoked:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, _refusal(serial))
            stream = EndableStream(behavior(request, context))
            stop = self.revoked.on_revoke(serial, stream.end)
            try:
                async for response in stream:
                    yield response
            finally:
                stop()
            if stream.ended:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, _refusal(serial))

        return checked


class EndableStream:
    """A handler's response stream that `end()` stops from outside, wherever it waits.

    The stream's task is cancelled only while it is inside the handler (waiting for its next response),
    where the handler's own clean-up runs; while gRPC is sending a response, the end waits for the next
    one to be asked for. Iterating it then simply finishes, and `ended` says why.
    """

    def __init__(self, responses: AsyncIterator[Any]):
        self._responses = responses
        self._task: asyncio.Task[Any] | None = None
        self._inside = False
        self.ended = False

    def end(self) -> None:
        self.ended = True
        if self._inside and self._task is not None:
            self._task.cancel()

    def __aiter__(self) -> EndableStream:
        return self

    async def __anext__(self) -> Any:
        if self.ended:
            await self._close()
            raise StopAsyncIteration
        self._task = asyncio.current_task()
        self._inside = True
        try:
            return await anext(self._responses)
        except asyncio.CancelledError:
            if not self.ended:
                raise
            assert self._task is not None
            self._task.uncancel()
            raise StopAsyncIteration from None
        finally:
            self._inside = False

    async def _close(self) -> None:
        close = getattr(self._responses, "aclose", None)
        if close is not None:
            await close()
