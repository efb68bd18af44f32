"""Request token validation (Istio RequestAuthentication) for the intents that declare issuers.

Istio sets `request.auth.claims` and request principals only from a token a RequestAuthentication
validated on the same workload: without one, authorization rules on them never match (ALLOW) and
never apply (DENY). Service and ingress renders both build theirs here.
"""

from __future__ import annotations

from collections.abc import Mapping

from meshplane.model.intents import IntentAuthentication, JwtRule
from meshplane.model.resource import Resource
from meshplane.server.render.egress import SECURITY, k8s_object
from meshplane.server.render.fleet import owner_labels


def request_authentication(
    intent: Resource, authentication: IntentAuthentication, name: str, namespace: str, selector: Mapping[str, str]
) -> list[dict]:
    """The RequestAuthentication of the workloads `selector` picks in `namespace`; none without issuers.

    Istio merges every RequestAuthentication of a workload, so several intents' issuers add up.
    """
    if not authentication.jwt:
        return []
    rules = [_jwt_rule(rule) for rule in sorted(authentication.jwt, key=lambda r: r.issuer)]
    spec = {"selector": {"matchLabels": dict(selector)}, "jwtRules": rules}
    return [k8s_object(SECURITY, "RequestAuthentication", name, namespace, owner_labels(intent), spec)]


def _jwt_rule(rule: JwtRule) -> dict:
    out: dict = {"issuer": rule.issuer}
    if rule.jwks_uri is not None:
        out["jwksUri"] = str(rule.jwks_uri)
    if rule.jwks is not None:
        out["jwks"] = rule.jwks
    if rule.audiences:
        out["audiences"] = sorted(set(rule.audiences))
    return out
