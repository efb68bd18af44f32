"""An IngressIntent's access rules → DENY AuthorizationPolicies on the shared ingress gateway.

Two facts of Istio's enforcement (`pilot/pkg/security/authz`) shape them:

- An ALLOW policy on a workload closes everything it does not match: on the ingress gateway, every
  other intent's hosts and every host no intent names. So ALLOW entries are rendered as their
  complement, a DENY of "this intent's hosts, from none of the allowed sources" (one rule per way
  of missing every entry); with no ALLOW entry, or one without conditions, there is nothing to deny.
- On a TCP filter chain (TLS passthrough), istiod drops the HTTP-only fields of a DENY rule (hosts,
  request principals, JWT claims) and the rule widens: a DENY by principal becomes deny-all. So
  every rule also carries a condition a TCP chain can check and that holds on no passthrough chain
  but the intent's own: `connection.sni` in the intent's hosts where the gateway terminates TLS (a
  passthrough chain for one of them would be the same host twice on one port), no SNI at all (and
  no TLS port) for plain HTTP. A passthrough entity sees no request: its rules check source ranges
  only, validation refuses a DENY by principal or claims with it, and ALLOW entries by them admit
  nobody through it.

One policy per entity, in `istio-system` where the gateway runs (an AuthorizationPolicy reaches only
workloads of its own namespace), named `<intent>-ingress.<entity>.<project>`, selecting the gateway
pods of that entity. Source ranges are `remote.ip`: the client's address, from X-Forwarded-For when
the gateway trusts a load balancer in front of it.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict

from meshplane.model.intents import Action, Entity, IngressAccess, IngressIntentSpec, TlsMode
from meshplane.model.resource import Resource
from meshplane.server.render.egress import GATEWAY_NAMESPACE, SECURITY, k8s_object
from meshplane.server.render.fleet import owner_labels
from meshplane.server.render.names import object_name

Condition = tuple[str, str]
"""(attribute, value) of a `when` condition: `remote.ip`, `request.auth.principal` or a JWT claim."""
TLS_PORTS = ["443", "8443"]
"""The gateway's TLS ports, as Service port and as target port (the policy matches the latter, which is
8443 on istioctl's ingress gateway and 443 in the Helm chart)."""


def _conditions(entry: IngressAccess, passthrough: bool) -> list[list[Condition]] | None:
    """The entry's conditions, each a list of alternatives; None when it can never match here."""
    http_only = bool(entry.sources.request_principals or entry.jwt_claims)
    if passthrough and http_only:
        return None
    out: list[list[Condition]] = []
    if entry.sources.ip_blocks:
        out.append([("remote.ip", b) for b in sorted(set(entry.sources.ip_blocks))])
    if entry.sources.request_principals:
        out.append([("request.auth.principal", p) for p in sorted(set(entry.sources.request_principals))])
    out += [[(f"request.auth.claims[{name}]", value)] for name, value in sorted(entry.jwt_claims.items())]
    return out


def _rule(scope: dict, positive: list[list[Condition]], negative: list[list[Condition]]) -> dict:
    """A rule matching the scope, each of `positive` (one of its alternatives) and none of `negative`.

    Every condition is a `when`: istiod's validation warns of a DENY whose `from` or `to` holds only
    HTTP attributes (it cannot see that the SNI condition keeps the rule off TCP chains)."""
    when: dict[tuple[str, str], set[str]] = defaultdict(set)
    for alternatives, which in [(c, "values") for c in positive] + [(c, "notValues") for c in negative]:
        for attribute, value in alternatives:
            when[(attribute, which)].add(value)
    rule = {k: v for k, v in scope.items() if k != "when"}
    rule["when"] = scope["when"] + [{"key": key, which: sorted(v)} for (key, which), v in sorted(when.items())]
    return rule


def _scope(hosts: list[str], entity: Entity) -> dict:
    """What every rule of the entity holds, with a condition TCP chains keep (see above).

    Where the gateway terminates TLS, the SNI alone scopes: that server's routes hold only the intent's
    hosts. Plain HTTP shares one route table with every intent's plain hosts, so the Host header counts
    (in any letter case: Istio's host matching ignores it); `notPorts` keeps the rule off TLS ports too."""
    if entity.tls is not None:
        return {"when": [{"key": "connection.sni", "values": hosts}]}
    host_match = sorted({*hosts, *(f"{h}:*" for h in hosts)})
    return {
        "to": [{"operation": {"hosts": host_match, "notPorts": TLS_PORTS}}],
        "when": [{"key": "connection.sni", "notValues": ["*"]}],
    }


def _deny_rules(spec: IngressIntentSpec, entity: Entity) -> list[dict]:
    passthrough = entity.tls is not None and entity.tls.mode is TlsMode.PASSTHROUGH
    scope = _scope(sorted(set(spec.hosts)), entity)
    rules = []
    for entry in spec.access:
        if entry.action is Action.DENY:
            rules.append(_rule(scope, _conditions(entry, False) or [], []))
    allowed = [_conditions(e, passthrough) for e in spec.access if e.action is Action.ALLOW]
    if allowed and [] not in allowed:
        # Denied: missing every ALLOW entry, i.e. failing one condition of each (one rule per choice).
        reachable = [c for c in allowed if c is not None]
        for missed in itertools.product(*reachable):
            rules.append(_rule(scope, [], list(missed)))
    # Order-independent: the same access entries in any order give the same policy.
    return sorted(
        {json.dumps(r, sort_keys=True): r for r in rules}.values(), key=lambda r: json.dumps(r, sort_keys=True)
    )


def access_policy(intent: Resource, spec: IngressIntentSpec, entity: Entity, selector: dict[str, str]) -> dict | None:
    """The DENY policy of one entity's gateway pods (`selector`), or None when the intent's hosts are open."""
    rules = _deny_rules(spec, entity)
    if not rules:
        return None
    return k8s_object(
        SECURITY,
        "AuthorizationPolicy",
        object_name(intent.metadata.name, "ingress", f"{entity.name}.{intent.metadata.project}"),
        GATEWAY_NAMESPACE,
        owner_labels(intent),
        {"selector": {"matchLabels": dict(selector)}, "action": "DENY", "rules": rules},
    )
