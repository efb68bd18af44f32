"""istiod's own configuration generator as a fast judge of what meshplane renders, with no cluster.

`tools/istio-judge` (built by `scripts/build-istio-judge` into `~/.cache/meshplane/istio-judge-<hash>/`)
feeds one cluster's objects to the fake discovery server Istio's own tests use, validates each Istio
object as istiod's admission webhook does, and runs Istio's traffic simulation over the listeners,
filter chains and routes istiod generates for a proxy, evaluating the chain's RBAC filters on the way.
`judge(objects, calls)` answers, per call, which listener, chain, route and cluster it meets and
whether RBAC lets it through; traffic through real Envoys stays the final judge.

What it does not see: routes are matched by path only (as Istio's simulation does; methods and
headers count for RBAC, not for routing), certificates and Secrets are not resolved, and ext_authz
(CUSTOM) policies are not evaluated.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml

from meshplane_testing.process import MissingRequirement

REPO = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO / "scripts" / "build-istio-judge"
STOCK_GATEWAYS = Path(__file__).with_name("istio_gateways.yaml")
INGRESS_GATEWAY = "istio-system/istio-ingressgateway-0"
EGRESS_GATEWAY = "istio-system/istio-egressgateway-0"
EAST_WEST_GATEWAY = "istio-system/istio-eastwestgateway-0"

Protocol = Literal["HTTP", "HTTP2", "TLS", "TCP"]
Mode = Literal["", "outbound", "inbound", "gateway"]
TLSMode = Literal["", "plaintext", "tls", "mtls"]


class JudgeError(RuntimeError):
    """The judge could not read the input (a malformed object, an unknown pod), as it said on stderr."""


@dataclass(frozen=True)
class Jwt:
    """A token the caller presents, taken as validly signed by `issuer`."""

    issuer: str
    subject: str
    claims: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Call:
    """One connection or request as the proxy of pod `source` ("namespace/name") sees it.

    `router` marks a gateway's pod; `mode` is outbound (the pod's app calls out), inbound (a peer
    calls the pod's app, `port` its target port) or gateway (the default for a router: a client calls
    the gateway's Service `port`, which the judge maps to the pod's target port). `peer` is the
    caller's mTLS identity; with it, inbound and gateway calls are Istio mTLS unless `tls` says else.
    """

    name: str
    source: str
    port: int
    host: str = ""
    address: str = ""
    protocol: Protocol = "HTTP"
    router: bool = False
    mode: Mode = ""
    tls: TLSMode = ""
    sni: str = ""
    path: str = "/"
    method: str = "GET"
    headers: Mapping[str, str] = field(default_factory=dict)
    peer: str = ""
    source_ip: str = ""
    remote_ip: str = ""
    jwt: Jwt | None = None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "name": self.name,
            "from": self.source,
            "router": self.router,
            "mode": self.mode,
            "host": self.host,
            "address": self.address,
            "port": self.port,
            "protocol": self.protocol,
            "tls": self.tls,
            "sni": self.sni,
            "path": self.path,
            "method": self.method,
            "headers": dict(self.headers),
            "peer": self.peer,
            "sourceIp": self.source_ip,
            "remoteIp": self.remote_ip,
        }
        if self.jwt is not None:
            wire["jwt"] = {"issuer": self.jwt.issuer, "subject": self.jwt.subject, "claims": dict(self.jwt.claims)}
        return wire


@dataclass(frozen=True)
class RbacDecision:
    """What one RBAC filter of the matched chain decided, and which of its policies matched."""

    filter: str
    action: str
    policies: tuple[str, ...]
    matched: tuple[str, ...]
    allowed: bool
    reason: str


@dataclass(frozen=True)
class CallResult:
    """Where a call went: `decision` is allow (reached a cluster), deny (RBAC) or error (see `error`)."""

    name: str
    decision: Literal["allow", "deny", "error"]
    error: str
    listener: str
    filter_chain: str
    listener_port: int
    route_config: str
    virtual_host: str
    route: str
    cluster: str
    cluster_known: bool
    filters: tuple[str, ...]
    rbac: tuple[RbacDecision, ...]
    denied_by: str
    raw: Mapping[str, Any]

    @property
    def allowed(self) -> bool:
        return self.decision == "allow"

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> CallResult:
        return cls(
            name=wire["name"],
            decision=wire["decision"],
            error=wire.get("error", ""),
            listener=wire.get("listener", ""),
            filter_chain=wire.get("filterChain", ""),
            listener_port=wire.get("listenerPort", 0),
            route_config=wire.get("routeConfig", ""),
            virtual_host=wire.get("virtualHost", ""),
            route=wire.get("route", ""),
            cluster=wire.get("cluster", ""),
            cluster_known=wire.get("clusterKnown", False),
            filters=tuple(wire.get("filters") or ()),
            rbac=tuple(
                RbacDecision(
                    filter=d["filter"],
                    action=d["action"],
                    policies=tuple(d["policies"]),
                    matched=tuple(d["matched"]),
                    allowed=d["allowed"],
                    reason=d["reason"],
                )
                for d in wire.get("rbac") or ()
            ),
            denied_by=wire.get("deniedBy", ""),
            raw=wire,
        )


@dataclass(frozen=True)
class Finding:
    """istiod's validation of one object (the admission webhook's code): errors refuse it, warnings do not."""

    kind: str
    namespace: str
    name: str
    errors: tuple[str, ...]
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class Verdict:
    """The judge's answer: validation findings, objects istiod does not read, and one result per call."""

    validation: tuple[Finding, ...]
    ignored: tuple[str, ...]
    results: tuple[CallResult, ...]
    setup_ms: int
    call_ms: int

    def result(self, name: str) -> CallResult:
        return next(r for r in self.results if r.name == name)

    def errors_of(self, kind: str, name: str) -> tuple[str, ...]:
        """The validation errors of the object `kind`/`name` (empty when valid)."""
        return tuple(e for f in self.validation if f.kind == kind and f.name == name for e in f.errors)

    @property
    def invalid(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.validation if f.errors)


@cache
def judge_binary() -> Path:
    """The cached judge binary of the current sources; MissingRequirement until it is built."""
    path = Path(subprocess.run([BUILD_SCRIPT, "--path"], capture_output=True, text=True, check=True).stdout.strip())
    if not path.is_file():
        raise MissingRequirement(f"istio-judge is not built for these sources: run {BUILD_SCRIPT} (CI does)")
    return path


def stock_gateways() -> list[dict[str, Any]]:
    """The stock ingress, egress and east-west gateways' Services, Deployments and Pods."""
    return [doc for doc in yaml.safe_load_all(STOCK_GATEWAYS.read_text()) if doc]


def judge(
    objects: Iterable[Mapping[str, Any]],
    calls: Sequence[Call] = (),
    trust_domain: str = "cluster.local",
    timeout: float = 120.0,
) -> Verdict:
    """What istiod makes of one cluster's `objects` (Istio config and Kubernetes objects alike), and
    what happens to each of `calls`."""
    request = {
        "meshConfig": yaml.safe_dump({"trustDomain": trust_domain}),
        "objects": list(objects),
        "calls": [c.to_wire() for c in calls],
    }
    completed = subprocess.run(
        [judge_binary()], input=json.dumps(request), capture_output=True, text=True, timeout=timeout
    )
    if completed.returncode != 0:
        raise JudgeError(completed.stderr.strip().splitlines()[-1] if completed.stderr.strip() else "no output")
    wire = json.loads(completed.stdout)
    return Verdict(
        validation=tuple(
            Finding(f["kind"], f["namespace"], f["name"], tuple(f.get("errors") or ()), tuple(f.get("warnings") or ()))
            for f in wire["validation"]
        ),
        ignored=tuple(wire["ignored"]),
        results=tuple(CallResult.from_wire(r) for r in wire["results"]),
        setup_ms=wire["setupMillis"],
        call_ms=wire["callMillis"],
    )


def workload(
    namespace: str, app: str, address: str, port: int, service_account: str = "", cluster_ip: str = ""
) -> list[dict[str, Any]]:
    """A Service and one running Pod of `app`, as istiod needs them to build its sidecar's listeners."""
    labels = {"app": app}
    service: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": app, "namespace": namespace, "labels": labels},
        "spec": {"selector": labels, "ports": [{"name": f"http-{port}", "port": port, "targetPort": port}]},
    }
    if cluster_ip:
        service["spec"]["clusterIP"] = cluster_ip
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{app}-0", "namespace": namespace, "labels": labels},
        "spec": {"serviceAccountName": service_account or app, "containers": [{"name": app, "image": app}]},
        "status": {
            "phase": "Running",
            "podIP": address,
            "podIPs": [{"ip": address}],
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    return [service, pod]


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def istio_version() -> str:
    """The istio.io/istio module version the judge is built from (the Istio binaries' version too)."""
    for line in (REPO / "tools" / "istio-judge" / "go.mod").read_text().splitlines():
        parts = line.split()
        if parts[:1] == ["istio.io/istio"]:
            return parts[1]
    raise RuntimeError("tools/istio-judge/go.mod does not require istio.io/istio")
