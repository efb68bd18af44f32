"""An upstream that accepts an HTTP/1.1 WebSocket upgrade and then echoes every byte: enough to see that a
gateway let the upgrade through and carries the connection both ways afterwards."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

SWITCHING = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
REFUSED = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


@contextlib.contextmanager
def run_websocket_upstream() -> Iterator[int]:
    """The port, on 127.0.0.1, of the upstream; a request without `Upgrade: websocket` is answered 400."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stopping = threading.Event()

    def serve() -> None:
        while not stopping.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=_echo, args=(connection,), daemon=True).start()

    thread = threading.Thread(target=serve, name="websocket-upstream", daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stopping.set()
        thread.join(timeout=5)
        listener.close()


def _echo(connection: socket.socket) -> None:
    with connection:
        connection.settimeout(10)
        head = b""
        try:
            while b"\r\n\r\n" not in head:
                chunk = connection.recv(4096)
                if not chunk:
                    return
                head += chunk
            headers = head.split(b"\r\n\r\n", 1)[0].lower()
            if b"\r\nupgrade: websocket" not in headers:
                connection.sendall(REFUSED)
                return
            connection.sendall(SWITCHING)
            rest = head.split(b"\r\n\r\n", 1)[1]
            if rest:
                connection.sendall(rest)
            while chunk := connection.recv(4096):
                connection.sendall(chunk)
        except OSError:
            return
