"""A tiny gRPC backend for tests: one unary method that answers `<name>:<request bytes>`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent import futures

import grpc

ECHO_SERVICE = "meshplane.test.Echo"
ECHO_METHOD = f"/{ECHO_SERVICE}/Say"


@contextlib.contextmanager
def run_echo(name: str) -> Iterator[int]:
    """The port of a gRPC server on a free loopback port; bytes in, bytes out, so no generated stubs."""

    def say(request: bytes, context: grpc.ServicerContext) -> bytes:
        return name.encode() + b":" + request

    handler = grpc.method_handlers_generic_handler(ECHO_SERVICE, {"Say": grpc.unary_unary_rpc_method_handler(say)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port
    finally:
        server.stop(grace=None).wait(timeout=5)
