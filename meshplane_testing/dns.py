"""User-facing DNS for tests, with its real consumer: external-dns publishing DNSEndpoints into bind9.

Per DNS server named in IngressIntents (`spec.dns[].server`): a private `named` (Debian's bind9) on a
free loopback port, serving one zone that accepts RFC 2136 updates signed with a TSIG key generated
for it; and an external-dns per cluster that publishes to it, reading the cluster's API server
(`--source=crd`, DNSEndpoint objects labelled `meshplane.io/dns-server=<server>`), owning its records
through the TXT registry. Answers are read with `dig` (bind9-dnsutils).

Inside the mesh: `start_fabric_name_server`, a `named` on the Istio harness's fabric serving fixed
records, which the pods and gateways given it as resolver (their Envoys among them) resolve through.

external-dns and the DNSEndpoint CRD of the same module are built by `scripts/build-external-dns`
into `~/.cache/meshplane/external-dns-<version>/` (the version is `scripts/external-dns-version`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from meshplane.agent.kube.applier import KubeApplier
from meshplane.agent.kube.client import KubeClient
from meshplane.agent.kube.desired import desired_objects
from meshplane.model.manifests import MANIFEST_TYPE, manifest_name
from meshplane.server.render.ingress import DNS_API_VERSION, DNS_SERVER_LABEL
from meshplane_testing.kube import KubeAPIServer
from meshplane_testing.netns import Fabric, NetworkNamespace, network_namespace
from meshplane_testing.process import MissingRequirement, Process, free_port, require_binary, running

REPO = Path(__file__).resolve().parents[1]
EXTERNAL_DNS_VERSION = (REPO / "scripts" / "external-dns-version").read_text().strip()
DNSENDPOINT_CRD_FILE = "dnsendpoints.externaldns.k8s.io.yaml"
TSIG_ALGORITHM = "hmac-sha256"
SYNC_INTERVAL = "1s"
"""How often external-dns compares the DNSEndpoints with the zone; its default (1m) would make tests wait."""


def external_dns_dir() -> Path:
    """Where `scripts/build-external-dns` leaves the binary and the CRD of EXTERNAL_DNS_VERSION."""
    cache = Path(
        os.environ.get("MESHPLANE_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache") / "meshplane"
    )
    return cache.expanduser() / f"external-dns-{EXTERNAL_DNS_VERSION}"


def dnsendpoint_crd() -> dict[str, Any]:
    """external-dns's own DNSEndpoint CRD, as its build left it (MissingRequirement when not built)."""
    path = external_dns_dir() / DNSENDPOINT_CRD_FILE
    if not path.is_file():
        raise MissingRequirement(f"{path} is missing (scripts/build-external-dns writes it; see .ci/run)")
    return yaml.safe_load(path.read_text())


def dnsendpoint_path(namespace: str, name: str = "") -> str:
    path = f"/apis/{DNS_API_VERSION}/namespaces/{namespace}/dnsendpoints"
    return f"{path}/{name}" if name else path


def apply_as_agent(kube: KubeAPIServer, rendered: Iterable[dict[str, Any]]) -> None:
    """One reconcile pass of the agent's own applier: `rendered` is everything the cluster receives now,
    so what was applied before and is not in it any more is deleted, as the agent does."""
    held = {manifest_name(obj): obj for obj in rendered}
    versions = {name: "test" for name in held}

    async def reconcile() -> None:
        client = KubeClient.from_kubeconfig(kube.kubeconfig)
        try:
            applier = KubeApplier(
                client, lambda: desired_objects({MANIFEST_TYPE: held}, {MANIFEST_TYPE: versions}, frozenset()), _ignore
            )
            result = await applier.reconcile()
        finally:
            await client.close()
        failures = [o.failure for o in result.outcomes if o.failure]
        if failures or not result.complete:
            raise RuntimeError(f"the API server did not take every object: {failures or 'incomplete pass'}")

    asyncio.run(reconcile())


async def _ignore(_: object) -> None:
    """The applier's delivery report, which no control plane reads here."""


@dataclass(frozen=True)
class TsigKey:
    name: str
    secret: str
    """base64, as bind9's `key` statement and external-dns's --rfc2136-tsig-secret take it."""

    @classmethod
    def generate(cls, name: str) -> TsigKey:
        return cls(name, base64.b64encode(secrets.token_bytes(32)).decode())


@dataclass(frozen=True)
class DnsServer:
    """A running bind9: which meshplane DNS server it stands for, its zone, port and update key, and where it
    listens (the test's loopback, or an address on the fabric inside `namespace`)."""

    name: str
    zone: str
    port: int
    key: TsigKey
    address: str = "127.0.0.1"
    namespace: NetworkNamespace | None = None

    def answers(self, host: str, record_type: str = "A") -> list[str]:
        """The record set of `host`, sorted (empty when there is none), as a resolver asking this server gets it."""
        return sorted(
            line.strip().strip('"') for line in self._dig(host, record_type, "+short").splitlines() if line.strip()
        )

    def ttls(self, host: str, record_type: str = "A") -> set[int]:
        """The TTLs of `host`'s record set: how long a resolver may keep the answer."""
        lines = self._dig(host, record_type, "+noall", "+answer").splitlines()
        return {int(line.split()[1]) for line in lines if line.strip()}

    def _dig(self, host: str, record_type: str, *options: str) -> str:
        dig = require_binary("dig", "/usr/bin/dig")
        argv = [dig, f"@{self.address}", "-p", str(self.port), *options, "+time=2", "+tries=1", host, record_type]
        if self.namespace is not None:
            argv = self.namespace.command(argv)
        result = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"dig {host} {record_type} at port {self.port}: {result.stdout}{result.stderr}")
        return result.stdout


def _named_conf(home: Path, zone: str, address: str, port: int, key: TsigKey) -> str:
    """Authoritative for `zone` only, answering whoever reaches `address` (the test's loopback or the fabric)."""
    return f"""
options {{
    directory "{home}";
    pid-file "{home}/named.pid";
    session-keyfile "{home}/session.key";
    managed-keys-directory "{home}";
    listen-on port {port} {{ {address}; }};
    listen-on-v6 {{ none; }};
    recursion no;
    dnssec-validation no;
    notify no;
    allow-query {{ any; }};
}};
controls {{ }};
key "{key.name}" {{ algorithm {TSIG_ALGORITHM}; secret "{key.secret}"; }};
zone "{zone}" {{
    type primary;
    file "{home}/{zone}.zone";
    allow-update {{ key "{key.name}"; }};
    allow-transfer {{ key "{key.name}"; }};
}};
"""


def _zone_file(zone: str, records: Mapping[str, str]) -> str:
    """The zone's SOA, one name server and an A record per name of `records` (name -> address); a 1 s
    negative TTL so a deleted name is gone at once."""
    lines = [f"{name}. IN A {address}" for name, address in sorted(records.items())]
    return "\n".join(
        [
            "$TTL 60",
            f"@   IN SOA ns.{zone}. hostmaster.{zone}. ( 1 60 60 600 1 )",
            f"@   IN NS  ns.{zone}.",
            "ns  IN A   127.0.0.1",
            *lines,
            "",
        ]
    )


def _serving(server: DnsServer) -> bool:
    try:
        return bool(server.answers(server.zone, "SOA"))
    except RuntimeError:  # not listening yet
        return False


@contextlib.contextmanager
def start_bind9(log_dir: Path, name: str, zone: str = "example.com") -> Iterator[DnsServer]:
    """`named` in the foreground on a free loopback port, serving `zone` (empty, filled by RFC 2136 updates);
    stopped and its files removed at the end."""
    server = DnsServer(name, zone, free_port(), TsigKey.generate(f"{name}-update"))
    with _running_named(server, {}, log_dir):
        yield server


@contextlib.contextmanager
def start_fabric_name_server(
    fabric: Fabric, address: str, zone: str, records: Mapping[str, str], log_dir: Path
) -> Iterator[DnsServer]:
    """A name server on `fabric` at `address`, port 53 (where resolv.conf sends a resolver), answering `zone`'s
    `records` (name -> address): the DNS the processes of the fabric's namespaces resolve through, given it
    (`network_namespace(resolver=address)`), in place of a cluster's. It reaches nothing beyond the fabric."""
    with network_namespace("mp-dns") as namespace:
        fabric.join(namespace, address)
        server = DnsServer(f"fabric-{zone}", zone, 53, TsigKey.generate("fabric-update"), address, namespace)
        with _running_named(server, records, log_dir):
            yield server


@contextlib.contextmanager
def _running_named(server: DnsServer, records: Mapping[str, str], log_dir: Path) -> Iterator[None]:
    """`named` in the foreground for `server` (in its namespace, if it has one) until it answers its zone."""
    named = require_binary("named", "/usr/sbin/named")
    require_binary("dig", "/usr/bin/dig")
    home = Path(tempfile.mkdtemp(prefix=f"meshplane-{server.name}-"))
    try:
        conf = home / "named.conf"
        conf.write_text(_named_conf(home, server.zone, server.address, server.port, server.key))
        conf.chmod(0o600)
        (home / f"{server.zone}.zone").write_text(_zone_file(server.zone, records))
        argv = [named, "-g", "-4", "-n", "1", "-c", str(conf)]
        if server.namespace is not None:
            argv = server.namespace.command(argv)
        with running(argv, log_dir / f"named-{server.name}.log") as process:
            process.wait_ready(lambda: _serving(server), timeout=30, what=f"named {server.name} on {server.port}")
            yield
    finally:
        shutil.rmtree(home, ignore_errors=True)


@dataclass(frozen=True)
class ExternalDns:
    """One running external-dns: whose records it owns (its TXT owner id) and its log."""

    owner: str
    server: DnsServer
    process: Process

    def log(self) -> str:
        return self.process.log()


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def start_external_dns(
    kube: KubeAPIServer, server: DnsServer, cluster: str, log_dir: Path, owner: str | None = None
) -> Iterator[ExternalDns]:
    """external-dns of `cluster` publishing `kube`'s DNSEndpoints for `server` into it, owning them as
    `owner`: the cluster's name unless told otherwise, since clusters sharing an owner id delete each
    other's records.

    The DNSEndpoint CRD must be installed in `kube` (`kube.install_crds([dnsendpoint_crd()])`).
    `--policy=sync`: records whose DNSEndpoint is gone are deleted, as a meshplane deployment runs it.
    """
    owner = owner or cluster
    override = [path for path in [os.environ.get("MESHPLANE_EXTERNAL_DNS")] if path]
    binary = require_binary("external-dns", *override, str(external_dns_dir() / "external-dns"))
    metrics_port = free_port()
    argv = [
        binary,
        f"--kubeconfig={kube.kubeconfig}",
        "--source=crd",
        f"--crd-source-apiversion={DNS_API_VERSION}",
        "--crd-source-kind=DNSEndpoint",
        f"--label-filter={DNS_SERVER_LABEL}={server.name}",
        "--provider=rfc2136",
        "--rfc2136-host=127.0.0.1",
        f"--rfc2136-port={server.port}",
        f"--rfc2136-zone={server.zone}",
        f"--rfc2136-tsig-keyname={server.key.name}",
        f"--rfc2136-tsig-secret-alg={TSIG_ALGORITHM}",
        "--rfc2136-axfr",
        f"--domain-filter={server.zone}",
        "--registry=txt",
        f"--txt-owner-id={owner}",
        "--policy=sync",
        f"--interval={SYNC_INTERVAL}",
        f"--metrics-address=127.0.0.1:{metrics_port}",
        "--log-level=debug",
    ]
    log_path = log_dir / f"external-dns-{server.name}-{cluster}.log"
    # The secret by environment (kingpin reads EXTERNAL_DNS_<FLAG>), not in argv for every `ps` to show.
    env = {"EXTERNAL_DNS_RFC2136_TSIG_SECRET": server.key.secret}
    with running(argv, log_path, env) as process:
        process.wait_ready(lambda: _healthy(metrics_port), timeout=30, what=f"external-dns {owner} for {server.name}")
        yield ExternalDns(owner, server, process)
