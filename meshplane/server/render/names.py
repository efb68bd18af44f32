"""Names, hosts and virtual IPs of rendered mesh objects: one scheme for every renderer.

Everything here is pure and deterministic, so the same intents give the same names and addresses
on every render, and an unchanged intent never causes a push.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable
from typing import NamedTuple

CLUSTER_DOMAIN = "cluster.local"
"""Kubernetes' cluster domain and Istio's trust domain: one mesh, one domain, in every cluster."""

VIP_NETWORK = ipaddress.IPv4Network("240.241.0.0/16")
"""Virtual IPs of cross-cluster hosts in clusters that have no Service for them.

Class E (240.0.0.0/4) is never routed, so a VIP never shadows a real address; 240.240.0.0/16 is
left alone because Istio's own DNS auto-allocation hands out addresses from it.
"""

EAST_WEST_GATEWAY = "eastwest.meshplane"
"""The name of the Gateway that opens a namespace's services to other clusters' east-west traffic.

Intent names are DNS labels, so a name with a dot never meets an `<intent>-<purpose>` name.
"""

EAST_WEST_SELECTOR = {"istio": "eastwestgateway"}
"""The labels of the east-west gateway pods, as Istio's multi-network install gives them."""

EAST_WEST_PORT = 15443
"""The port on which Istio's east-west gateway passes mTLS through by SNI (AUTO_PASSTHROUGH)."""


def service_host(service: str, namespace: str) -> str:
    """The fully qualified host of a Kubernetes Service."""
    return f"{service}.{namespace}.svc.{CLUSTER_DOMAIN}"


def object_name(intent: str, purpose: str, qualifier: str | None = None) -> str:
    """`<intent>-<purpose>`, or `<intent>-<purpose>.<qualifier>` when one intent needs several.

    The purpose is the last `-` segment before any dot, so two intents' names never meet, and the
    dot (which intent names cannot hold) keeps qualified names apart from unqualified ones.
    """
    return f"{intent}-{purpose}" if qualifier is None else f"{intent}-{purpose}.{qualifier}"


def shared_object_name(project: str, intent: str, purpose: str) -> str:
    """A name in a namespace every project shares (istio-system): `<intent>-<purpose>-<project>-<digest>`.

    A DNS label, since istiod refuses a Gateway whose name is not one, and a VirtualService naming
    such a Gateway. Cut to 63 characters; the digest of all three parts keeps two projects' names
    apart however their parts join or get cut.
    """
    digest = hashlib.sha256("\x1f".join((project, intent, purpose)).encode()).hexdigest()[:10]
    readable = f"{intent}-{purpose}-{project}"[: 63 - len(digest) - 1].rstrip("-")
    return f"{readable}-{digest}"


def sidecar_name(workload: str) -> str:
    """The one Sidecar of a client workload: named after the workload, so renders of several
    intents that scope one client merge into one object (Istio honours a single Sidecar per workload)."""
    return f"{workload}-sidecar"


def principal(namespace: str, service_account: str) -> str:
    """The SPIFFE-derived principal Istio's authorization policies match for a workload identity."""
    return f"{CLUSTER_DOMAIN}/ns/{namespace}/sa/{service_account}"


class HostKey(NamedTuple):
    """What makes a host distinct across the fleet: its project, logical cloud, namespace and service.

    `cloud` is empty for intents placed without a logical cloud.
    """

    project: str
    cloud: str
    namespace: str
    service: str


def _first_choice(key: HostKey, size: int) -> int:
    digest = hashlib.sha256("\x1f".join(key).encode()).digest()
    return int.from_bytes(digest[:8], "big") % size


def allocate_vips(keys: Iterable[HostKey], network: ipaddress.IPv4Network = VIP_NETWORK) -> dict[HostKey, str]:
    """A distinct virtual IP for every key, from `network` (its network and broadcast addresses excluded).

    Each key hashes to a first-choice address; keys are placed in sorted order and a taken address
    moves the later key to the next free one. The result depends only on the set of keys, never on
    their order, and a key keeps its address as long as no key sorting before it collides with it.
    Raises ValueError when there are more keys than addresses.
    """
    unique = sorted(set(keys))
    size = network.num_addresses - 2
    if len(unique) > size:
        raise ValueError(f"{len(unique)} hosts do not fit in the {size} virtual IPs of {network}")
    taken: set[int] = set()
    out: dict[HostKey, str] = {}
    base = int(network.network_address) + 1
    for key in unique:
        offset = _first_choice(key, size)
        while offset in taken:
            offset = (offset + 1) % size
        taken.add(offset)
        out[key] = str(ipaddress.IPv4Address(base + offset))
    return out
