"""A tiny HTTP upstream for gateway tests: it answers 200 with what it received, and remembers it."""

from __future__ import annotations

import contextlib
import json
import re
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from meshplane.security.ca import KeyPair


@contextlib.contextmanager
def run_upstream(
    name: str,
    *,
    delay: float = 0.0,
    status: int = 200,
    tls: ssl.SSLContext | None = None,
    stream: tuple[int, float] | None = None,
    status_by_path: bool = False,
) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """(port, requests seen) of a server on a free loopback port; each answer and each entry in the list is
    `{"upstream": name, "path": path with query, "method": ..., "headers": {lower-case name: value}}`.
    Each answer comes `delay` seconds after its request, with `status`; over TLS with a `tls` server context.
    With `stream` (lines, gap), the answer is instead a chunked stream of that many lines (`line <n>`), its
    headers at once and each line `gap` seconds after the one before. With `status_by_path`, a path ending in
    `/status/<code>` is answered with that code instead."""
    seen: list[dict[str, Any]] = []
    server = _Server(("127.0.0.1", 0), _handler(name, seen, delay, status, stream, status_by_path))
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


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet about callers that hang up (a gateway ending a stream, a client timing out); loud otherwise."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _handler(
    name: str,
    seen: list[dict[str, Any]],
    delay: float,
    status: int,
    stream: tuple[int, float] | None,
    status_by_path: bool,
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
            if stream is not None:
                self._stream(*stream)
                return
            body = json.dumps(request).encode()
            asked = re.search(r"/status/([1-5][0-9][0-9])$", self.path.split("?")[0]) if status_by_path else None
            self.send_response(int(asked[1]) if asked else status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _stream(self, lines: int, gap: float) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for index in range(lines):
                if index:
                    time.sleep(gap)
                line = f"line {index}\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _answer

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test asserts on `seen`, not on stderr."""

    return Handler


def tls_context(
    pair: KeyPair,
    *,
    server_name: str | None = None,
    names_seen: list[str] | None = None,
    client_ca: KeyPair | None = None,
) -> ssl.SSLContext:
    """A server context presenting `pair`; with `server_name`, a handshake that asks for another name (or none)
    is refused; every SNI name a client sends is appended to `names_seen`; with `client_ca`, a client without
    a certificate that CA signed is refused."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=client_ca.certificate_pem().decode())
    with tempfile.TemporaryDirectory() as scratch:
        certificate, key = Path(scratch) / "tls.crt", Path(scratch) / "tls.key"
        certificate.write_bytes(pair.certificate_pem())
        key.write_bytes(pair.key_pem())
        context.load_cert_chain(certificate, key)

    def check(_: ssl.SSLObject, name: str | None, __: ssl.SSLContext) -> int | None:
        if names_seen is not None:
            names_seen.append(name or "")
        if server_name is not None and name != server_name:
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
        return None

    context.sni_callback = check
    return context
