"""Where an API may make the gateway connect for a caller: never to the host's own loopback (unless the
cluster's operator allows it), to link-local, unspecified or cloud metadata addresses, nor to the ports the
agent and Envoy are administered and configured on (those even where loopback is allowed).

The check reads what the API says (backend hosts, the JWKS URI) against the facts of this cluster's agent.
Not covered: a DNS name that resolves to such an address when Envoy looks it up (a public name pointing at
127.0.0.1, a Kubernetes ExternalName service): Envoy resolves names itself, after translation, and has no
hook to refuse the address it found. Close that in the network (an egress policy for the gateways, the
metadata service's hop limit).
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from meshplane.agent.translate.apis import Api
from meshplane.agent.translate.memo import by_identity
from meshplane.model.shaping import MirrorBackend

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(address)
    for address in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200")
)
"""Instance metadata and credential services: AWS, GCP, Azure, OpenStack (and ECS tasks, AWS over IPv6,
Alibaba Cloud)."""
METADATA_NAMES = frozenset({"metadata", "metadata.google.internal", "metadata.goog"})
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
"""Names every resolver maps to the host itself (RFC 6761 reserves `localhost` and all names under it)."""
ALLOW_FLAG = "--allow-loopback-backends"


@dataclass(frozen=True)
class ProtectedPort:
    """A port this cluster's agent or gateway is administered or configured on."""

    what: str
    """What listens there, as a reason names it: "the agent's admin"."""
    host: str
    """The address it is bound to; a wildcard (0.0.0.0, ::) means every address of its host."""
    port: int

    @property
    def everywhere(self) -> bool:
        address = _ip(self.host)
        return address is not None and address.is_unspecified


@dataclass(frozen=True)
class BackendPolicy:
    """What this cluster's agent lets the gateway reach: the operator's choice about loopback, and the
    agent's own listening ports."""

    allow_loopback: bool = False
    protected: tuple[ProtectedPort, ...] = ()

    def refusal(self, host: str, port: int) -> str | None:
        """Why the gateway must not connect to host:port here, or None."""
        name = host.strip("[]").rstrip(".").lower()
        address = _ip(name)
        local = _is_local(name, address)
        for protected in self.protected:
            if port == protected.port and (local or protected.everywhere or name == protected.host.lower()):
                return f"{host}:{port} is {protected.what}"
        if address is None:
            return self._name_refusal(host, name)
        if address in METADATA_ADDRESSES:
            return f"{host} is a cloud metadata address"
        if address.is_unspecified:
            return f"{host} is the unspecified address, which reaches the gateway's own host"
        if address.is_loopback and not self.allow_loopback:
            return f"{host} is a loopback address, which this cluster does not allow as a backend ({ALLOW_FLAG})"
        if address.is_link_local:
            return f"{host} is a link-local address"
        return None

    def _name_refusal(self, host: str, name: str) -> str | None:
        if name in METADATA_NAMES:
            return f"{host} is a cloud metadata address"
        last = name.rsplit(".", 1)[-1]
        if last.isdigit() or last.startswith("0x"):
            # 127.1, 2130706433, 0x7f.0.0.1: resolvers that take these as addresses would reach anything.
            return f"{host} is not an IP address in standard form nor a DNS name"
        if _is_loopback_name(name) and not self.allow_loopback:
            return f"{host} is a loopback address, which this cluster does not allow as a backend ({ALLOW_FLAG})"
        return None


@by_identity
def api_refusal(api: Api, policy: BackendPolicy) -> str | None:
    """Why this cluster refuses to serve the API (the first thing it may not reach), or None; kept per held
    API, since every rebuild asks it of every one, twice."""
    for index, backend in enumerate(api.spec.backends):
        if backend.host is None:
            continue
        reason = policy.refusal(backend.host, backend.port)
        if reason is not None:
            return f"backends[{index}]: {reason}"
    for path, mirror in mirror_backends(api):
        reason = policy.refusal(mirror.host, mirror.port)
        if reason is not None:
            return f"{path}: {reason}"
    auth = api.spec.authentication
    if auth is not None and auth.jwt is not None and auth.jwt.jwks_uri is not None:
        parts = urlsplit(str(auth.jwt.jwks_uri))
        reason = policy.refusal(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
        if reason is not None:
            return f"authentication.jwt.jwksUri: {reason}"
    return None


def mirror_backends(api: Api) -> list[tuple[str, MirrorBackend]]:
    """Every mirror an API names, with the field path it is named at (for refusals)."""
    found = []
    if api.spec.shaping is not None and api.spec.shaping.request_mirror is not None:
        found.append(("shaping.requestMirror.backend", api.spec.shaping.request_mirror.backend))
    for index, op in enumerate(api.spec.operations):
        if op.shaping is not None and op.shaping.request_mirror is not None:
            found.append((f"operations[{index}].shaping.requestMirror.backend", op.shaping.request_mirror.backend))
    return found


@functools.lru_cache(maxsize=65536)
def _ip(name: str) -> IpAddress | None:
    """The address a host names literally, or None; parsed once per host, since every rebuild asks of every
    backend."""
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _is_loopback_name(name: str) -> bool:
    return name in LOOPBACK_NAMES or name.endswith(".localhost")


def _is_local(name: str, address: IpAddress | None) -> bool:
    """Reaches the gateway's own host: loopback, or the unspecified address (which Linux connects locally)."""
    if address is None:
        return _is_loopback_name(name)
    return address.is_loopback or address.is_unspecified
