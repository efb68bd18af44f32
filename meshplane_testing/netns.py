"""Network namespaces for processes that must each own the same ports (Istio's gateways bind 8080, 8443, 15021…).

The namespaces of a test run meet on a `Fabric`: a namespace of its own holding a bridge, to which each
joins with a veth pair and its pod IP, so gateways and workloads reach each other at their pod IPs as in
a cluster network. Nothing joins the test's own namespace: the fabric has no route out, and no packet of
it can reach a real network. What must cross between the fabric and the test's namespace (a gateway to
istiod, a test's request to a gateway, a gateway to a workload process of the test) goes through a
`Forwarder`, which relays TCP between a socket opened inside one namespace and one opened in another (a
socket keeps the namespace it was made in, whichever thread uses it later). Creating namespaces needs
root (CI is root); without it the harness raises MissingRequirement.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from meshplane_testing.process import MissingRequirement, require_binary

_CLONE_NEWNET = 0x40000000
_T = TypeVar("_T")


def _ip(*args: str) -> None:
    result = subprocess.run([require_binary("ip", "/usr/sbin/ip"), *args], capture_output=True, text=True, timeout=10)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")


@dataclass(frozen=True)
class NetworkNamespace:
    """A namespace by its name under /run/netns; `None` in the APIs below means the test's own namespace."""

    name: str

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside this namespace."""
        return [require_binary("ip", "/usr/sbin/ip"), "netns", "exec", self.name, *argv]

    def route(self, destination: str) -> None:
        """`destination` on-link via the fabric (`eth0`); the fabric has no way out, whatever the destination."""
        _ip("-n", self.name, "route", "add", destination, "dev", "eth0")

    def inside(self, action: Callable[[], _T]) -> _T:
        """`action()` run on a thread that has entered this namespace: the sockets it makes live here."""
        outcome: list[_T] = []
        failure: list[BaseException] = []

        def enter_and_run() -> None:
            try:
                with open(f"/run/netns/{self.name}") as handle:
                    if _libc().setns(handle.fileno(), _CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), f"setns into {self.name}")
                outcome.append(action())
            except BaseException as exc:  # re-raised on the caller's thread
                failure.append(exc)

        thread = threading.Thread(target=enter_and_run, name=f"netns-{self.name}")
        thread.start()
        thread.join()
        if failure:
            raise failure[0]
        return outcome[0]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL("libc.so.6", use_errno=True)


NETNS_ETC = Path("/etc/netns")
"""Where `ip netns exec <name>` finds files it bind-mounts over /etc for what it runs (iproute2's convention)."""


@contextlib.contextmanager
def network_namespace(prefix: str = "mp", resolver: str | None = None) -> Iterator[NetworkNamespace]:
    """A fresh namespace with loopback up, deleted at the end; MissingRequirement where namespaces cannot be made.

    With `resolver` (a name server's address on the fabric), what runs in it by `NetworkNamespace.command`
    resolves names there: its own /etc/resolv.conf, as a pod's comes from the cluster's DNS. Threads of the
    test that enter it (`inside`) still read the test's."""
    if os.geteuid() != 0:
        raise MissingRequirement("network namespaces need root (CI runs as root)")
    namespace = NetworkNamespace(f"{prefix}-{secrets.token_hex(4)}")
    try:
        _ip("netns", "add", namespace.name)
    except RuntimeError as exc:
        raise MissingRequirement(f"cannot create a network namespace: {exc}") from None
    etc = NETNS_ETC / namespace.name
    try:
        _ip("-n", namespace.name, "link", "set", "lo", "up")
        if resolver is not None:
            etc.mkdir(parents=True)
            (etc / "resolv.conf").write_text(f"nameserver {resolver}\noptions timeout:1 attempts:2\n")
        yield namespace
    finally:
        shutil.rmtree(etc, ignore_errors=True)
        _ip("netns", "delete", namespace.name)


@dataclass(frozen=True)
class Fabric:
    """A bridge in a namespace of its own: the one link layer of every namespace that joins it."""

    namespace: NetworkNamespace
    prefix_length: int

    def join(self, member: NetworkNamespace, address: str) -> None:
        """A veth from `member` (its `eth0`, with `address`) to the bridge."""
        port = f"v{secrets.token_hex(4)}"
        fabric = self.namespace.name
        _ip("-n", fabric, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", member.name)
        _ip("-n", fabric, "link", "set", port, "master", "br0", "up")
        _ip("-n", member.name, "address", "add", f"{address}/{self.prefix_length}", "dev", "eth0")
        _ip("-n", member.name, "link", "set", "eth0", "up")

    @contextlib.contextmanager
    def host(
        self, address: str, served_at: Mapping[int, int], prefix: str = "mp-host", resolver: str | None = None
    ) -> Iterator[NetworkNamespace]:
        """A namespace on the fabric at `address` whose ports relay to processes of the test: `served_at` maps a
        port at `address` to the port of the test's 127.0.0.1 where the process listens. It stands for a pod,
        or for a host outside the mesh (an external API, a proxy) that the mesh reaches at `address`; its
        processes resolve names at `resolver`, if given (see `network_namespace`)."""
        with network_namespace(prefix, resolver) as member:
            self.join(member, address)
            forwarders = [
                Forwarder(member, (address, port), None, ("127.0.0.1", local)) for port, local in served_at.items()
            ]
            try:
                yield member
            finally:
                for forwarder in forwarders:
                    forwarder.close()


@contextlib.contextmanager
def start_fabric(prefix_length: int = 16) -> Iterator[Fabric]:
    """A fresh fabric; deleting its namespace at the end removes the bridge and every veth on it."""
    with network_namespace("mp-fabric") as namespace:
        _ip("-n", namespace.name, "link", "add", "br0", "type", "bridge")
        _ip("-n", namespace.name, "link", "set", "br0", "up")
        yield Fabric(namespace, prefix_length)


HOST_GATEWAY = "169.254.1.1"
"""The test's namespace as every `host_link`ed namespace sees it: the next hop of their default route."""


@contextlib.contextmanager
def host_link(member: NetworkNamespace, address: str) -> Iterator[str]:
    """A veth from `member` (its `eth0`, with `address`/32) straight to the test's namespace, which routes
    `address` to it; the name of the test's end, removed at the end with the route.

    Unlike a `Fabric`, this joins the test's own namespace, as a node's pods are joined to the node: a
    process of the test (Envoy) reaches `address` directly, and `member` answers via HOST_GATEWAY, an
    address of the test's end of the link. `member` reaches nothing else (the test's namespace does not
    forward), so no packet of it leaves the machine."""
    host_end = f"mph{secrets.token_hex(4)}"
    _ip("link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", member.name)
    try:
        _ip("address", "add", f"{HOST_GATEWAY}/32", "dev", host_end, "scope", "link")
        _ip("link", "set", host_end, "up")
        _ip("-n", member.name, "address", "add", f"{address}/32", "dev", "eth0")
        _ip("-n", member.name, "link", "set", "eth0", "up")
        _ip("-n", member.name, "route", "add", HOST_GATEWAY, "dev", "eth0", "scope", "link")
        _ip("-n", member.name, "route", "add", "default", "via", HOST_GATEWAY, "dev", "eth0")
        _ip("route", "add", f"{address}/32", "dev", host_end, "src", HOST_GATEWAY)
        yield host_end
    finally:
        with contextlib.suppress(RuntimeError):  # gone with `member` already
            _ip("link", "delete", host_end)


@contextlib.contextmanager
def unreachable_route(cidr: str) -> Iterator[None]:
    """`cidr` answered "unreachable" by the test's namespace instead of going out its default route: what
    of it is not `host_link`ed to a namespace never leaves the machine."""
    _ip("route", "add", "unreachable", cidr)
    try:
        yield
    finally:
        _ip("route", "delete", "unreachable", cidr)


Where = NetworkNamespace | None
"""A namespace, or None for the test's own."""


def _in(where: Where, action: Callable[[], _T]) -> _T:
    return where.inside(action) if where is not None else action()


class Forwarder:
    """Relays every TCP connection accepted on `listen` (in namespace `listen_in`) to `target` (in `target_in`)."""

    def __init__(self, listen_in: Where, listen: tuple[str, int], target_in: Where, target: tuple[str, int]):
        self.target_in = target_in
        self.target = target
        self._listener = _in(listen_in, lambda: _listening_socket(listen))
        self.address: tuple[str, int] = self._listener.getsockname()[:2]
        self._closed = threading.Event()
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name=f"forward-{listen}", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            upstream = _in(self.target_in, lambda: socket.create_connection(self.target, timeout=5))
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self._connections.update((client, upstream))
        pump = threading.Thread(target=copy_stream, args=(upstream, client), daemon=True)
        pump.start()
        copy_stream(client, upstream)
        pump.join()
        with self._lock:
            self._connections.difference_update((client, upstream))
        client.close()
        upstream.close()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            for connection in self._connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)


def _listening_socket(address: tuple[str, int]) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(address)
    listener.listen(64)
    return listener


def copy_stream(source: socket.socket, sink: socket.socket) -> None:
    """Copy until `source` ends, then pass the end on (half-close), as a TCP proxy does."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


def http_get(
    where: NetworkNamespace,
    host: str,
    port: int,
    path: str = "/",
    headers: Mapping[str, str] | None = None,
    tls: ssl.SSLContext | None = None,
    server_name: str | None = None,
) -> Response:
    """One HTTP/1.1 GET from inside `where`, on a connection opened there (so its capture rules apply); over
    TLS with a `tls` client context, sending and verifying `server_name` (by default `host`)."""
    sock = where.inside(lambda: socket.create_connection((host, port), timeout=10))
    if tls is not None:
        sock = tls.wrap_socket(sock, server_hostname=server_name or host)
    connection = http.client.HTTPConnection(host, port, timeout=10)
    connection.sock = sock
    try:
        connection.request("GET", path, headers=dict(headers or {}))
        response = connection.getresponse()
        return Response(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        connection.close()
