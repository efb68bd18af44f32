"""A third-party egress proxy for tests: it forwards TLS by the server name the client's hello carries.

It stands for the corporate proxy an EgressIntent routes `via: proxy` to, which must forward the
application's TLS as is (meshplane sends it the raw connection, not a CONNECT request). It remembers
each server name it was asked for, so a test can tell that a call went through it.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from meshplane_testing.netns import copy_stream

_HANDSHAKE = 0x16
_CLIENT_HELLO = 0x01
_SERVER_NAME = 0x0000
_HOST_NAME = 0x00
_RECORD_HEADER = 5


def server_name(hello: bytes) -> str | None:
    """The SNI host name of a TLS record holding a ClientHello; None when there is none."""
    if len(hello) < _RECORD_HEADER + 4 or hello[0] != _HANDSHAKE or hello[_RECORD_HEADER] != _CLIENT_HELLO:
        return None
    at = _RECORD_HEADER + 4 + 2 + 32  # handshake header, client version, random
    at += 1 + hello[at]  # session id
    at += 2 + struct.unpack_from("!H", hello, at)[0]  # cipher suites
    at += 1 + hello[at]  # compression methods
    end = at + 2 + struct.unpack_from("!H", hello, at)[0]
    at += 2
    while at + 4 <= end:
        kind, length = struct.unpack_from("!HH", hello, at)
        at += 4
        if kind == _SERVER_NAME:
            name_type, name_length = struct.unpack_from("!BH", hello, at + 2)
            return hello[at + 5 : at + 5 + name_length].decode() if name_type == _HOST_NAME else None
        at += length
    return None


def _client_hello(client: socket.socket) -> bytes:
    """The first TLS record, whole (the hello fits one record); what came, if it is no TLS."""
    data = b""
    while len(data) < _RECORD_HEADER or len(data) < _RECORD_HEADER + struct.unpack_from("!H", data, 3)[0]:
        chunk = client.recv(65536)
        if not chunk or (chunk[0] != _HANDSHAKE and not data):
            return data + chunk
        data += chunk
    return data


@dataclass
class SniProxy:
    """A running proxy on 127.0.0.1:`port`; `seen` lists the server names asked for, in order."""

    port: int
    seen: list[str] = field(default_factory=list)


@contextlib.contextmanager
def run_sni_proxy(upstreams: Mapping[str, int]) -> Iterator[SniProxy]:
    """A proxy on a free loopback port forwarding each TLS connection to the 127.0.0.1 port `upstreams` names
    for its server name; a connection for a name it does not know is closed."""
    listener = socket.create_server(("127.0.0.1", 0))
    proxy = SniProxy(listener.getsockname()[1])
    closed = threading.Event()

    def relay(client: socket.socket) -> None:
        with client, contextlib.suppress(OSError):
            client.settimeout(10)
            hello = _client_hello(client)
            name = server_name(hello)
            proxy.seen.append(name or "")
            if name not in upstreams:
                return
            client.settimeout(None)
            with socket.create_connection(("127.0.0.1", upstreams[name]), timeout=5) as upstream:
                upstream.settimeout(None)
                upstream.sendall(hello)
                back = threading.Thread(target=copy_stream, args=(upstream, client), daemon=True)
                back.start()
                copy_stream(client, upstream)
                back.join(timeout=10)

    def accept() -> None:
        while not closed.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=relay, args=(client,), daemon=True).start()

    thread = threading.Thread(target=accept, name="sni-proxy", daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        closed.set()
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(timeout=5)
