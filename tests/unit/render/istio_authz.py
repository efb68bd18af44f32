"""How Istio enforces rendered AuthorizationPolicies on a gateway, as a test oracle.

Read from istiod's builder (`pilot/pkg/security/authz/builder` and `model`): every policy selecting
the workload is translated once for HTTP filter chains and once for TCP ones (TLS passthrough,
`tcp_proxy`). On a TCP chain the HTTP-only conditions (hosts, paths, methods, request principals,
JWT claims, headers) cannot be generated: an ALLOW rule holding one is skipped whole (it admits
nobody), while in a DENY rule that condition alone is dropped, so the rule *widens*. DENY rules are
checked first; then, if any ALLOW policy selects the workload, one of its rules must match. Matching
follows Istio's string matchers: `*` alone is "present and non-empty", a leading `*` a suffix, a
trailing `*` a prefix; hosts ignore case, and the SNI reaches the filters lower-cased. `ports` are the
port the gateway itself listens on: the target port of its Service, not the Service port clients dial.

Only what the renderers use is modelled; anything else raises, so the oracle never guesses.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

HTTP_ONLY_SOURCE = {"requestPrincipals", "notRequestPrincipals"}
HTTP_ONLY_OPERATION = {"hosts", "notHosts"}
"""`ports` and `notPorts` are the TCP-visible operation fields."""


@dataclass(frozen=True)
class Connection:
    """One request on an HTTP filter chain, or one connection on a TCP chain (`http=False`)."""

    remote_ip: str
    """The client's address, as `remoteIpBlocks` see it."""
    peer: str | None = None
    """The mTLS identity of the direct peer (`<trust domain>/ns/<ns>/sa/<sa>`), None without mTLS."""
    sni: str = ""
    """The TLS server name; empty for plaintext."""
    http: bool = True
    host: str = ""
    principal: str | None = None
    """`<iss>/<sub>` of a validated JWT."""
    claims: dict[str, str] = field(default_factory=dict)
    port: int = 0
    """The gateway's target port the connection arrived on (0: any the rules do not name)."""


def _string_match(pattern: str, value: str, ignore_case: bool = False) -> bool:
    if ignore_case:
        pattern, value = pattern.lower(), value.lower()
    if pattern == "*":
        return value != ""
    if pattern.startswith("*"):
        return value.endswith(pattern[1:])
    if pattern.endswith("*"):
        return value.startswith(pattern[:-1])
    return value == pattern


def _any(patterns: Iterable[str], value: str | None, ignore_case: bool = False) -> bool:
    return value is not None and any(_string_match(p, value, ignore_case) for p in patterns)


def _in_blocks(blocks: Iterable[str], address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return any(ip in ipaddress.ip_network(b, strict=False) for b in blocks)


def _source(source: dict, conn: Connection, deny: bool) -> bool | None:
    """Whether a `from.source` matches; None when an ALLOW rule cannot be generated for this chain."""
    result = True
    for key, values in source.items():
        if key in HTTP_ONLY_SOURCE and not conn.http:
            if deny:
                continue
            return None
        if key == "remoteIpBlocks":
            result &= _in_blocks(values, conn.remote_ip)
        elif key == "notRemoteIpBlocks":
            result &= not _in_blocks(values, conn.remote_ip)
        elif key == "principals":
            result &= _any(values, conn.peer)
        elif key == "notPrincipals":
            result &= not _any(values, conn.peer)
        elif key == "requestPrincipals":
            result &= _any(values, conn.principal)
        elif key == "notRequestPrincipals":
            result &= not _any(values, conn.principal)
        else:
            raise NotImplementedError(f"source field {key}")
    return result


def _operation(operation: dict, conn: Connection, deny: bool) -> bool | None:
    result = True
    for key, values in operation.items():
        if key in HTTP_ONLY_OPERATION and not conn.http:
            if deny:
                continue
            return None
        if key == "hosts":
            result &= _any(values, conn.host, ignore_case=True)
        elif key == "notHosts":
            result &= not _any(values, conn.host, ignore_case=True)
        elif key == "ports":
            result &= str(conn.port) in values
        elif key == "notPorts":
            result &= str(conn.port) not in values
        else:
            raise NotImplementedError(f"operation field {key}")
    return result


def _claim(key: str) -> str | None:
    inner = key.removeprefix("request.auth.claims[")
    return inner.removesuffix("]") if inner != key and inner.endswith("]") else None


def _attribute(key: str, values: list[str], conn: Connection) -> bool:
    if key == "remote.ip":
        return _in_blocks(values, conn.remote_ip)
    if key == "connection.sni":
        return _any(values, conn.sni.lower())
    if key == "request.auth.principal":
        return _any(values, conn.principal)
    claim = _claim(key)
    if claim is None:
        raise NotImplementedError(f"condition key {key}")
    return _any(values, conn.claims.get(claim))


def _condition(condition: dict, conn: Connection, deny: bool) -> bool | None:
    key = condition["key"]
    if not conn.http and (key == "request.auth.principal" or _claim(key) is not None):
        return True if deny else None
    result = True
    if "values" in condition:
        result &= _attribute(key, condition["values"], conn)
    if "notValues" in condition:
        result &= not _attribute(key, condition["notValues"], conn)
    return result


def _all(parts: Iterable[bool | None]) -> bool | None:
    result = True
    for part in parts:
        if part is None:
            return None
        result &= part
    return result


def _rule(rule: dict, conn: Connection, deny: bool) -> bool:
    sources = [_source(f["source"], conn, deny) for f in rule.get("from", [])] or [True]
    operations = [_operation(t["operation"], conn, deny) for t in rule.get("to", [])] or [True]
    conditions = _all(_condition(c, conn, deny) for c in rule.get("when", []))
    if None in sources or None in operations or conditions is None:
        return False
    return any(sources) and any(operations) and conditions


def _selects(policy: dict, labels: dict[str, str]) -> bool:
    wanted = policy["spec"].get("selector", {}).get("matchLabels", {})
    return all(labels.get(k) == v for k, v in wanted.items())


def admitted(
    objects: Iterable[dict], conn: Connection, labels: dict[str, str], namespace: str = "istio-system"
) -> bool:
    """Whether the gateway pod with `labels` in `namespace` lets `conn` through, by these policies."""
    policies = [
        o
        for o in objects
        if o["kind"] == "AuthorizationPolicy" and o["metadata"]["namespace"] == namespace and _selects(o, labels)
    ]
    by_action: dict[str, list[dict]] = {"DENY": [], "ALLOW": []}
    for policy in policies:
        by_action[policy["spec"].get("action", "ALLOW")].append(policy)
    for policy in by_action["DENY"]:
        if any(_rule(r, conn, deny=True) for r in policy["spec"].get("rules", [])):
            return False
    if not by_action["ALLOW"]:
        return True
    return any(_rule(r, conn, deny=False) for p in by_action["ALLOW"] for r in p["spec"].get("rules", []))
