"""Istio's AuthorizationPolicy decision for one connection, as the rendered objects make it.

A small model of what istiod builds into a workload's RBAC filters, enough to ask the rendered
policies questions in unit tests (the fake istiod and real traffic stay the final judges):

- the policies that select the workload (by namespace and `matchLabels`) apply;
- any matching DENY rule refuses; else, when any ALLOW policy applies, one of its rules must match;
  else the connection passes;
- a rule matches when one of its `from`, one of its `to` and every `when` match (absent: any);
  within one source or operation every field holds, a field holds when one value matches and no
  `not` value does;
- `ports` and `destination.port` are the port the workload itself listens on: at a gateway, the
  target port of its Service, not the Service port clients dial;
- values are exact, `prefix*`, `*suffix` or `*`; SNI reaches the filters lower-cased.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Connection:
    """What one connection shows the workload's filters."""

    principal: str | None
    """The peer's mTLS identity (`<trust domain>/ns/<ns>/sa/<sa>`), None without mTLS."""
    sni: str
    port: int
    """The workload's own listening port."""
    host: str | None = None
    """The HTTP Host, for HTTP chains."""


@dataclass(frozen=True)
class Workload:
    namespace: str
    labels: dict[str, str] = field(default_factory=dict)


def _matches_value(pattern: str, value: str | None) -> bool:
    if value is None:
        return False
    if pattern == "*":
        return True
    if pattern.startswith("*"):
        return value.endswith(pattern[1:])
    if pattern.endswith("*"):
        return value.startswith(pattern[:-1])
    return value == pattern


def _holds(values: list[str] | None, not_values: list[str] | None, actual: str | None) -> bool:
    if values is not None and not any(_matches_value(v, actual) for v in values):
        return False
    return not (not_values is not None and any(_matches_value(v, actual) for v in not_values))


_SOURCE_FIELDS = {"principals": "principal"}
_OPERATION_FIELDS = {"ports": "port", "hosts": "host"}
_WHEN_KEYS = {"connection.sni": "sni", "destination.port": "port", "source.principal": "principal"}


def _attribute(connection: Connection, name: str) -> str | None:
    value = getattr(connection, name)
    if value is None:
        return None
    return str(value).lower() if name == "sni" else str(value)


def _fields_hold(body: dict, fields: dict[str, str], connection: Connection) -> bool:
    unknown = {k.removeprefix("not").lower() for k in body} - set(fields)
    assert not unknown, f"the model does not know {sorted(unknown)}"
    for name, attribute in fields.items():
        negated = "not" + name[0].upper() + name[1:]
        present = name in body or negated in body
        if present and not _holds(body.get(name), body.get(negated), _attribute(connection, attribute)):
            return False
    return True


def rule_matches(rule: dict, connection: Connection) -> bool:
    sources = rule.get("from")
    if sources is not None and not any(_fields_hold(s["source"], _SOURCE_FIELDS, connection) for s in sources):
        return False
    operations = rule.get("to")
    if operations is not None and not any(
        _fields_hold(o["operation"], _OPERATION_FIELDS, connection) for o in operations
    ):
        return False
    for condition in rule.get("when", []):
        attribute = _WHEN_KEYS[condition["key"]]
        if not _holds(condition.get("values"), condition.get("notValues"), _attribute(connection, attribute)):
            return False
    return True


def _applies(policy: dict, workload: Workload) -> bool:
    if policy["metadata"]["namespace"] != workload.namespace:
        return False
    selector = policy["spec"].get("selector", {}).get("matchLabels", {})
    return all(workload.labels.get(k) == v for k, v in selector.items())


def allowed(objects: list[dict], workload: Workload, connection: Connection) -> bool:
    """Whether the AuthorizationPolicies among `objects` let `connection` through to `workload`."""
    policies = [o for o in objects if o["kind"] == "AuthorizationPolicy" and _applies(o, workload)]
    by_action: dict[str, list[dict]] = {"ALLOW": [], "DENY": []}
    for policy in policies:
        by_action[policy["spec"].get("action", "ALLOW")].append(policy)
    if any(rule_matches(r, connection) for p in by_action["DENY"] for r in p["spec"].get("rules", [])):
        return False
    if by_action["ALLOW"]:
        return any(rule_matches(r, connection) for p in by_action["ALLOW"] for r in p["spec"].get("rules", []))
    return True
