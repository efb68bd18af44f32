"""The Kubernetes manifests under deploy/, read as objects, and where each of their kinds is served."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


# kind -> (API path prefix of its group/version, plural, namespaced)
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "Service": ("/api/v1", "services", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", True),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "CustomResourceDefinition": ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
}


APPLIED = {"list", "create", "patch", "delete"}  # server-side apply, and garbage collection by label
READ = {"get", "list", "watch"}
GATEWAY_API_KINDS = ("gatewayclasses", "gateways", "httproutes", "grpcroutes")

AGENT_PERMISSIONS: dict[tuple[str, str], set[str]] = {
    ("meshplane.io", "apis"): APPLIED | {"watch"},
    ("meshplane.io", "apis/status"): {"patch"},
    **{
        ("networking.istio.io", plural): APPLIED
        for plural in ("serviceentries", "virtualservices", "destinationrules", "gateways", "sidecars")
    },
    **{
        ("security.istio.io", plural): APPLIED
        for plural in ("authorizationpolicies", "peerauthentications", "requestauthentications")
    },
    ("externaldns.k8s.io", "dnsendpoints"): APPLIED,
    ("", "namespaces"): {"create"},
    ("", "services"): {"list", "watch"},
}
"""(group, resource) → verbs: what the agent's ClusterRole grants, every request the agent makes."""

AGENT_GATEWAY_API_PERMISSIONS: dict[tuple[str, str], set[str]] = {
    **AGENT_PERMISSIONS,
    ("", "namespaces"): {"create", "list", "watch"},
    **{("gateway.networking.k8s.io", plural): READ for plural in (*GATEWAY_API_KINDS, "referencegrants")},
    **{("gateway.networking.k8s.io", f"{plural}/status"): {"patch"} for plural in GATEWAY_API_KINDS},
    ("discovery.k8s.io", "endpointslices"): {"list", "watch"},
}
"""The same with Gateway API on: its kinds, namespaces' labels and EndpointSlices read, their status written."""


def granted(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    """(group, resource) → verbs a ClusterRole's rules grant; a rule naming anything else, or `*`, fails."""
    grants: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, f"unexpected rule fields: {rule}"
        assert "*" not in rule["apiGroups"] + rule["resources"] + rule["verbs"]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                grants.setdefault((group, resource), set()).update(rule["verbs"])
    return grants


def object_path(obj: dict[str, Any]) -> str:
    """The resource path of one object (…/namespaces/<ns>/<plural>/<name> or …/<plural>/<name>)."""
    prefix, plural, namespaced = RESOURCES[obj["kind"]]
    where = f"/namespaces/{obj['metadata']['namespace']}" if namespaced else ""
    return f"{prefix}{where}/{plural}/{obj['metadata']['name']}"


def documents(directory: str) -> list[tuple[str, dict[str, Any]]]:
    """(file name, object) of every YAML document under deploy/<directory>."""
    found = []
    for path in sorted((DEPLOY / directory).glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found.append((f"{directory}/{path.name}", doc))
    return found
