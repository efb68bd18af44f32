"""The addresses the cluster's Gateways are served on: each Gateway of ours gets one from the pool the agent
is given, and keeps it across changes and restarts (kept in the agent's state directory), so a client that
found a Gateway's address does not lose it.

Without a pool every Gateway is served on the host of the agent's own gateway address.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from meshplane import secret_files
from meshplane.gatewayapi.state import KubeObject, ObjectKey

IP_ADDRESS_TYPE = "IPAddress"
STATE_FILE = "gateway-api-addresses.json"


def parse_pool(text: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...]:
    """`first-last`, a CIDR, or one address, several joined by commas, in order (ValueError when malformed)."""
    out: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for part in (piece.strip() for piece in text.split(",")):
        if not part:
            continue
        if "-" in part:
            first, last = (ipaddress.ip_address(end.strip()) for end in part.split("-", 1))
            if first.version != last.version or int(last) < int(first):
                raise ValueError(f"{part!r} is not a range from a lower address to a higher one")
            out += [ipaddress.ip_address(int(first) + n) for n in range(int(last) - int(first) + 1)]
        elif "/" in part:
            network = ipaddress.ip_network(part, strict=False)
            out += list(network.hosts()) if network.num_addresses > 2 else list(network)
        else:
            out.append(ipaddress.ip_address(part))
    if not out:
        raise ValueError("names no address")
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class Refusal:
    """Why a Gateway has no address, as the condition of its status that says so."""

    condition: str
    """Accepted (an address asked for that this agent does not serve) or Programmed (none left to give)."""
    reason: str
    message: str


@dataclass(frozen=True)
class Assignment:
    """Each Gateway's address, and why the others have none."""

    addresses: Mapping[ObjectKey, str]
    refused: Mapping[ObjectKey, Refusal]


def asked_addresses(gateway: KubeObject) -> list[str]:
    """The IP addresses a Gateway's `spec.addresses` asks for (those of type IPAddress, the default)."""
    asked = (gateway.get("spec") or {}).get("addresses") or []
    return [
        entry["value"]
        for entry in asked
        if entry.get("type", IP_ADDRESS_TYPE) == IP_ADDRESS_TYPE and entry.get("value")
    ]


class AddressPool:
    """Sorted allocation from the pool: a Gateway keeps what it had, a new one takes the lowest free address."""

    def __init__(
        self, pool: tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...] | None, default: str, state_dir: Path
    ):
        self.pool = pool
        self.default = default
        self.path = state_dir / STATE_FILE
        self.held: dict[ObjectKey, str] = self._load()

    def _load(self) -> dict[ObjectKey, str]:
        try:
            entries = json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            return {}
        return {(entry["namespace"], entry["name"]): entry["address"] for entry in entries}

    def _save(self) -> None:
        entries = [
            {"namespace": ns, "name": name, "address": address} for (ns, name), address in sorted(self.held.items())
        ]
        secret_files.replace(self.path, json.dumps(entries, indent=1).encode())

    def assign(self, gateways: Mapping[ObjectKey, KubeObject]) -> Assignment:
        """Addresses for `gateways` (ours, all of them); those gone let theirs go."""
        if self.pool is None:
            return self._without_pool(gateways)
        members = {str(address) for address in self.pool}
        held = {key: address for key, address in self.held.items() if key in gateways and address in members}
        refused: dict[ObjectKey, Refusal] = {}
        for key in sorted(gateways):
            asked = asked_addresses(gateways[key])
            if not asked:
                continue
            outside = [address for address in asked if address not in members]
            taken = [address for address in asked if any(a == address for k, a in held.items() if k != key)]
            if outside or taken or len(asked) > 1:
                refused[key] = _refusal(asked, outside, taken)
                held.pop(key, None)
            else:
                held[key] = asked[0]
        free = self._free(held)
        for key in sorted(gateways):
            if key not in held and key not in refused:
                address = next(free, None)
                if address is None:
                    refused[key] = Refusal(
                        "Programmed", "AddressNotAssigned", "the agent's Gateway address pool is used up"
                    )
                else:
                    held[key] = address
        if held != self.held:
            self.held = held
            self._save()
        return Assignment(dict(held), refused)

    def _free(self, held: Mapping[ObjectKey, str]) -> Iterator[str]:
        used = set(held.values())
        return (str(address) for address in self.pool or () if str(address) not in used)

    def _without_pool(self, gateways: Mapping[ObjectKey, KubeObject]) -> Assignment:
        addresses: dict[ObjectKey, str] = {}
        refused: dict[ObjectKey, Refusal] = {}
        for key, gateway in gateways.items():
            asked = asked_addresses(gateway)
            if asked and asked != [self.default]:
                refused[key] = _refusal(asked, [a for a in asked if a != self.default], [])
            else:
                addresses[key] = self.default
        return Assignment(addresses, refused)


def _refusal(asked: list[str], outside: list[str], taken: list[str]) -> Refusal:
    if outside:
        return Refusal("Accepted", "UnsupportedAddress", f"this agent serves no Gateway on {', '.join(outside)}")
    if taken:
        return Refusal("Programmed", "AddressNotUsable", f"{', '.join(taken)} is another Gateway's")
    return Refusal("Accepted", "UnsupportedAddress", f"this agent serves a Gateway on one address, not {len(asked)}")
