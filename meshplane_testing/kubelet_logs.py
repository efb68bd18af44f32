"""The node stand-in's kubelet endpoint for container logs: the API server's `pods/log` comes here (HTTPS on
127.0.0.1, the Node's kubeletEndpoint), as the conformance suite's mirror tests read the echo servers' logs.

Only `/containerLogs/<namespace>/<pod>/<container>` is served, the whole log each time (a log line has no
timestamp to filter `sinceTime` by); the API server authenticates to no one here, as it verifies no kubelet."""

from __future__ import annotations

import contextlib
import re
import ssl
import tempfile
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from meshplane.security.ca import create_ca, issue_server_certificate

LogOf = Callable[[str, str, str], Path | None]
"""(namespace, pod, container) → its log file, None for one not running here."""
_PATH = re.compile(r"^/containerLogs/([^/]+)/([^/]+)/([^/]+)$")


@contextlib.contextmanager
def serve_container_logs(log_of: LogOf) -> Iterator[int]:
    """The port, on 127.0.0.1, of the endpoint, until the block ends."""
    pair = issue_server_certificate(create_ca())
    with tempfile.TemporaryDirectory(prefix="kubelet-logs-") as home:
        certificate, key = Path(home, "serving.crt"), Path(home, "serving.key")
        certificate.write_bytes(pair.certificate_pem())
        key.write_bytes(pair.key_pem())
        key.chmod(0o600)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certificate, key)
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(log_of))
        server.socket = context.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="kubelet-logs", daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _handler(log_of: LogOf) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = _PATH.match(self.path.split("?", 1)[0])
            path = log_of(*found.groups()) if found else None
            if path is None or not path.exists():
                self.send_error(404, "no such container here")
                return
            body = path.read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the suite reads logs once a second."""

    return Handler
