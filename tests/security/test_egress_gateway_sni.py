"""The egress gateway's DENY is scoped by SNI: a client must not get around it by changing the SNI's case.

Envoy picks a filter chain by server name without regard to case, so `API.Payments.Example` lands in
the chain of `api.payments.example`. The rendered DENY compares the SNI exactly, as istiod's RBAC
filter does (`requested_server_name`, case-sensitive): it holds only because Envoy lower-cases the
SNI before any filter sees it. This test asks a real Envoy, configured like the egress gateway's
TLS chain with the RBAC filter istiod builds for the rendered policy, whether that is so.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

import pytest

from meshplane_testing.envoy import envoy_binary, run_envoy_config
from meshplane_testing.process import free_port

pytestmark = pytest.mark.envoy

HOST = "api.payments.example"
TLS_INSPECTOR = "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"
CLIENT = "spiffe://cluster.local/ns/shop/sa/cart"


@contextmanager
def _byte_counting_upstream() -> Iterator[tuple[int, list[int]]]:
    """A TCP server that counts the bytes each connection sends it: (port, counts)."""
    counts: list[int] = []
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(1.0)
                received = 0
                try:
                    while chunk := conn.recv(4096):
                        received += len(chunk)
                except OSError:
                    pass
                counts.append(received)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], counts
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()


def _client_hello(server_name: str) -> bytes:
    """The first flight of a TLS client sending `server_name` as SNI, byte for byte as given."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    assert server_name.encode() in hello
    return hello


def _forwarded(port: int, counts: list[int], server_name: str) -> bool:
    """Whether the gateway passed a ClientHello with this SNI on to the upstream."""
    before = len(counts)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(_client_hello(server_name))
        conn.settimeout(2.0)
        with suppress(OSError):
            conn.recv(1)
    deadline = time.monotonic() + 5
    while len(counts) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    return any(counts[before:])


def _deny_unadmitted(sni: str) -> dict:
    """The network RBAC filter istiod builds for the rendered DENY: SNI `sni` from anyone but CLIENT."""
    return {
        "name": "envoy.filters.network.rbac",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC",
            "stat_prefix": "tcp.",
            "rules": {
                "action": "DENY",
                "policies": {
                    "ns[istio-system]-policy[payments-egress]-rule[0]": {
                        "permissions": [{"and_rules": {"rules": [{"requested_server_name": {"exact": sni}}]}}],
                        "principals": [
                            {
                                "and_ids": {
                                    "ids": [
                                        {
                                            "not_id": {
                                                "or_ids": {
                                                    "ids": [{"authenticated": {"principal_name": {"exact": CLIENT}}}]
                                                }
                                            }
                                        }
                                    ]
                                }
                            }
                        ],
                    }
                },
            },
        },
    }


def _chain(server_name: str, filters: list[dict]) -> dict:
    proxy = {
        "name": "envoy.filters.network.tcp_proxy",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
            "stat_prefix": server_name,
            "cluster": "external",
        },
    }
    return {"filter_chain_match": {"server_names": [server_name]}, "filters": [*filters, proxy]}


def _bootstrap(listen: int, admin: int, upstream: int) -> dict:
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin}}},
        "static_resources": {
            "listeners": [
                {
                    "name": "0.0.0.0_8443",
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": listen}},
                    "listener_filters": [
                        {
                            "name": "envoy.filters.listener.tls_inspector",
                            "typed_config": {"@type": TLS_INSPECTOR},
                        }
                    ],
                    "filter_chains": [_chain(HOST, [_deny_unadmitted(HOST)]), _chain("other.example", [])],
                }
            ],
            "clusters": [
                {
                    "name": "external",
                    "type": "STATIC",
                    "connect_timeout": "1s",
                    "load_assignment": {
                        "cluster_name": "external",
                        "endpoints": [
                            {
                                "lb_endpoints": [
                                    {
                                        "endpoint": {
                                            "address": {
                                                "socket_address": {"address": "127.0.0.1", "port_value": upstream}
                                            }
                                        }
                                    }
                                ]
                            }
                        ],
                    },
                }
            ],
        },
    }


@pytest.mark.timeout(60)
def test_an_upper_case_sni_does_not_get_around_the_egress_gateway_deny(tmp_path: Path) -> None:
    envoy_binary()
    listen, admin = free_port(), free_port()
    with ExitStack() as stack:
        upstream, counts = stack.enter_context(_byte_counting_upstream())
        envoy = stack.enter_context(run_envoy_config(tmp_path, "egress-sni", _bootstrap(listen, admin, upstream)))
        envoy.wait_listener(listen)
        # The set-up forwards: a host the policy does not name passes.
        assert _forwarded(listen, counts, "other.example"), envoy.log()[-2000:]
        assert not _forwarded(listen, counts, HOST)
        assert not _forwarded(listen, counts, "API.Payments.Example"), envoy.log()[-2000:]
