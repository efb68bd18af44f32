"""A tiny HTTP upstream for gateway tests: it answers 200 with what it received, and remembers it."""

from __future__ import annotations

import contextlib
import json
import re
import ssl
import threading
import time
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextlib.contextmanager
def run_upstream(
    name: str,
    *,
    delay: float = 0.0,
    status: int = 200,
    tls: ssl.SSLContext | None = None,
    status_by_path: bool = False,
) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """(port, requests seen) of a server on a free loopback port; each answer and each entry in the list is
    `{"upstream": name, "path": path with query, "method": ..., "headers": {lower-case name: value}}`.
    Each answer comes `delay` seconds after its request, with `status`; over TLS with a `tls` server context.
    With `status_by_path`, a path ending in `/status/<code>` is answered with that code instead."""
    seen: list[dict[str, Any]] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(name, seen, delay, status, status_by_path))
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name=f"upstream-{name}", daemon=True)
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _joined(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Lower-case names; a header given several times is one, its values joined by ", " (as RFC 9110 allows)."""
    joined: dict[str, str] = {}
    for key, value in headers:
        name = key.lower()
        joined[name] = f"{joined[name]}, {value}" if name in joined else value
    return joined


def _handler(
    name: str, seen: list[dict[str, Any]], delay: float, status: int, status_by_path: bool
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body leave at once, not one delayed ACK apart

        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            request = {
                "upstream": name,
                "path": self.path,
                "method": self.command,
                "headers": _joined(self.headers.items()),
            }
            seen.append(request)
            time.sleep(delay)
            body = json.dumps(request).encode()
            asked = re.search(r"/status/([1-5][0-9][0-9])$", self.path.split("?")[0]) if status_by_path else None
            self.send_response(int(asked[1]) if asked else status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _answer

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test asserts on `seen`, not on stderr."""

    return Handler
