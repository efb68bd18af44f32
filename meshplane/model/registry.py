"""The one registry of kinds: REST routes, the store, the CLI, authorization, placement, the feeder and
the agent all read what a kind is here, never a list of kind names of their own."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from google.protobuf.message import Message
from pydantic import BaseModel, Field, ValidationError, create_model

from meshplane.model.access import (
    ApplicationKeySpec,
    ApplicationSpec,
    KeySetSpec,
    RateLimitPolicySpec,
    SubscriptionSpec,
)
from meshplane.model.base import WireModel
from meshplane.model.gatewayapi_routes import GRPCRouteSpec, HTTPRouteSpec, RouteStatus
from meshplane.model.gateways import GatewaySpec, TLSCertificateSpec
from meshplane.model.intents import EgressIntentSpec, IngressIntentSpec, LogicalCloudSpec, ServiceIntentSpec
from meshplane.model.kinds import APISpec, CertificateRevocationSpec, ClusterSpec, ProjectSpec
from meshplane.model.resource import API_VERSION, FieldError, InvalidObject, Resource, field_errors
from meshplane.model.roles import Role
from meshplane.model.rollouts import RolloutPolicySpec, RolloutSpec
from meshplane.model.services import ServiceEndpointSpec
from meshplane.model.status import ObjectStatus
from meshplane.proto.v1 import resources_pb2


class Scope(StrEnum):
    CLUSTER = "Cluster"
    PROJECT = "Project"


class Follows(StrEnum):
    """How a kind placed with the APIs it touches, rather than by a placement of its own, follows them."""

    NAMED_API = "named-api"
    """With the API its spec names (a subscription)."""
    PROJECT_APIS = "project-apis"
    """Wherever its project has an API (an application: any may call any API once subscribed)."""
    APPLICATION = "application"
    """With the application its spec names (a key record)."""
    POLICY_TARGET = "policy-target"
    """With the API it targets, or for a plan with the subscriptions on that plan (a rate-limit policy)."""
    GATEWAY_REFS = "gateway-refs"
    """With the Gateways whose listeners name it and the APIs whose backends present it (a certificate: no
    other cluster ever receives its key)."""


class Feed(StrEnum):
    """What a kind's objects feed, besides the store and REST."""

    FLEET = "fleet"
    """The clusters: what placement chooses among and what manifests are rendered for."""
    ROUTES = "routes"
    """The gateways' routes (and the enforcer's and limiter's view of each API)."""
    ACCESS = "access"
    """Who may call what at what rate: the gateways' checks, the enforcer's and the limiter's feeds."""
    MANIFESTS = "manifests"
    """The rendered Istio / DNS manifests (see `server/render`)."""
    REVOCATIONS = "revocations"
    """The revoked agent certificates every replica refuses."""
    ROLLOUTS = "rollouts"
    """The versions each cluster is held to while a change rolls out (see `server.projection.Hold`)."""
    ROLLOUT_POLICIES = "rolloutPolicies"
    """Which writes roll out: what a write is weighed against (see `server.rollout_policies`)."""


class OnDelete(StrEnum):
    """What deleting a named object does to the objects whose spec names it."""

    REFUSE = "refuse"
    """The delete is refused while one names it (a subscription is its consumer's agreement)."""
    CASCADE = "cascade"
    """They are deleted with it (an application's key records, bound to it and of no use to another)."""


@dataclass(frozen=True)
class Reference:
    """A field of a kind's spec that names an object of `kind` in the same project, which must be stored when
    the object is written and still be there when the write commits (else 422 on the field's path)."""

    field: str
    """The field's wire name, at the top of the spec."""
    kind: str
    on_delete: OnDelete = OnDelete.REFUSE

    @property
    def path(self) -> str:
        return f"spec.{self.field}"

    def named(self, spec: Mapping[str, Any]) -> Any:
        """The name this field holds in a spec's wire form (None when it holds none)."""
        return spec.get(self.field)


class ProjectOnCluster(WireModel):
    """A cluster's delivery summary over one project's objects alone."""

    out_of_date: int = 0
    behind_since: str | None = None
    last_error: str | None = None


class ClusterStatus(WireModel):
    """What the server knows of a cluster's agent. A token bound to a project is shown the summary of its
    project's objects only (`by_project`), in place of the one over all projects."""

    model_config = WireModel.model_config | {"extra": "allow"}

    connected: bool = False
    last_seen: str | None = None
    agent_version: str | None = None
    synced_revision: int | None = None
    out_of_date: int | None = None
    """Objects placed here whose current version the cluster has not applied."""
    behind_since: str | None = None
    """When the oldest change it has not applied was made; absent when in sync."""
    last_error: str | None = None
    """Why an object fails here now (the newest such failure)."""
    by_project: dict[str, ProjectOnCluster] | None = None
    """The three fields above over each project's objects, for the projects with objects out of date here."""


@dataclass(frozen=True)
class KindInfo:
    """Everything the system needs to know about one kind."""

    kind: str
    plural: str
    scope: Scope
    spec: type[BaseModel]
    status: type[BaseModel] = ObjectStatus
    message: type[Message] | None = None
    """The proto message delivered to agents; None for kinds that stay at the server."""
    writable: bool = True
    """False for kinds only the system writes: REST serves them read-only."""
    exposed: bool = True
    """False for kinds neither REST nor the watch serve (credential records: their own endpoints show
    what may be shown of them)."""
    cluster_made: bool = False
    """True for kinds a data-plane cluster makes itself (CRs of its own) and may report up to be published;
    no other kind is ever taken from a cluster."""
    names: tuple[str, ...] = ()
    """Kinds whose objects this kind's objects name and must find stored when written (a project-scoped
    object also needs its project): what `meshplane apply` stores first."""
    references: tuple[Reference, ...] = ()
    """The spec fields that name one object each, checked and kept by the server alike for every kind; the kinds
    they name are among `names`. Other names (a policy's target, an intent's logical clouds) are the checks' own."""
    follows: Follows | None = None
    """How a delivered kind follows the APIs it touches; None: placed by its own placement (everywhere when
    its spec has none)."""
    writers: frozenset[Role] = frozenset()
    """Non-admin roles that may change its objects in the projects they cover (admins may change any)."""
    feeds: frozenset[Feed] = frozenset()
    model: type[Resource] = field(init=False)

    def __post_init__(self) -> None:
        # A spec whose every field has a default may be left out, as Kubernetes takes a Namespace without one.
        optional_spec = not any(field.is_required() for field in self.spec.model_fields.values())
        spec_field = {"spec": (self.spec, Field(default_factory=self.spec))} if optional_spec else {}
        model = create_model(
            self.kind,
            __base__=Resource[self.spec, self.status],  # type: ignore[name-defined]
            kind=(Literal[self.kind], self.kind),  # type: ignore[valid-type]
            status=(self.status, Field(default_factory=self.status, json_schema_extra={"readOnly": True})),
            **spec_field,  # type: ignore[arg-type]
        )
        object.__setattr__(self, "model", model)

    @property
    def namespaced(self) -> bool:
        return self.scope is Scope.PROJECT

    @property
    def delivered(self) -> bool:
        return self.message is not None

    @property
    def type_url(self) -> str:
        if self.message is None:
            raise ValueError(f"{self.kind} is not delivered to clusters")
        return f"type.googleapis.com/{self.message.DESCRIPTOR.full_name}"


class UnknownKind(LookupError):
    def __init__(self, word: str, known: list[str]):
        super().__init__(f"unknown kind {word!r}; known kinds: {', '.join(known)}")


class KindRegistry:
    def __init__(self, kinds: list[KindInfo]):
        self._by_kind = {k.kind: k for k in kinds}
        self._by_word = {w.lower(): k for k in kinds for w in (k.kind, k.plural)}
        self._by_type_url = {k.type_url: k for k in kinds if k.delivered}

    def __iter__(self) -> Iterator[KindInfo]:
        return iter(self._by_kind.values())

    def get(self, kind: str) -> KindInfo:
        try:
            return self._by_kind[kind]
        except KeyError:
            raise UnknownKind(kind, list(self._by_kind)) from None

    def resolve(self, word: str) -> KindInfo:
        """A kind from its name or plural, in any case (`api`, `APIs`, `API`)."""
        try:
            return self._by_word[word.lower()]
        except KeyError:
            raise UnknownKind(word, list(self._by_kind)) from None

    def depth(self, info: KindInfo) -> int:
        """0 for a kind that names no other; else one more than the deepest kind it names (a project-scoped
        kind names its project). Objects of lesser depth can all be stored before it."""
        named = [*info.names, *(["Project"] if info.namespaced else [])]
        return 1 + max(self.depth(self.get(kind)) for kind in named) if named else 0

    def by_type_url(self, type_url: str) -> KindInfo:
        return self._by_type_url[type_url]

    def delivered(self) -> list[KindInfo]:
        return [k for k in self if k.delivered]

    def cluster_made(self) -> list[KindInfo]:
        return [k for k in self if k.cluster_made]

    def referencing(self, kind: str) -> list[tuple[KindInfo, Reference]]:
        """The kinds whose spec names objects of `kind`, each with the field that does."""
        return [(info, ref) for info in self for ref in info.references if ref.kind == kind]

    def feeding(self, feed: Feed) -> list[KindInfo]:
        return [k for k in self if feed in k.feeds]

    def kinds_feeding(self, feed: Feed) -> tuple[str, ...]:
        return tuple(k.kind for k in self.feeding(feed))

    def parse(self, doc: Mapping[str, Any]) -> Resource:
        """Validate a user document (from YAML or JSON) into its kind's model.

        Raises InvalidObject with field paths; `status` from users is ignored.
        """
        if not isinstance(doc, Mapping):
            raise InvalidObject([FieldError(path="", message="an object must be a mapping")])
        api_version = doc.get("apiVersion", API_VERSION)
        if api_version != API_VERSION:
            raise InvalidObject([FieldError(path="apiVersion", message=f"must be {API_VERSION}")])
        kind_word = doc.get("kind")
        if not isinstance(kind_word, str):
            raise InvalidObject([FieldError(path="kind", message="is required")])
        try:
            info = self.resolve(kind_word)
        except UnknownKind as exc:
            raise InvalidObject([FieldError(path="kind", message=str(exc))]) from None
        body = {k: v for k, v in doc.items() if k != "status"}
        body["kind"] = info.kind
        try:
            resource = info.model.model_validate(body)
        except ValidationError as exc:
            raise InvalidObject(field_errors(exc)) from None
        problems = getattr(resource.spec, "field_problems", None)
        if problems is not None and (errors := problems()):
            raise InvalidObject([FieldError(path=f"spec.{path}", message=message) for path, message in errors])
        project = resource.metadata.project
        if info.namespaced and not project:
            raise InvalidObject([FieldError(path="metadata.project", message=f"{info.kind} needs a project")])
        if not info.namespaced and project:
            raise InvalidObject(
                [FieldError(path="metadata.project", message=f"{info.kind} is cluster-scoped: no project")]
            )
        return resource


_PUBLISHER = frozenset({Role.PUBLISHER})
_SUBSCRIBER = frozenset({Role.SUBSCRIBER})

REGISTRY = KindRegistry(
    [
        KindInfo("Project", "projects", Scope.CLUSTER, ProjectSpec),
        KindInfo(
            "Cluster", "clusters", Scope.CLUSTER, ClusterSpec, status=ClusterStatus, feeds=frozenset({Feed.FLEET})
        ),
        KindInfo(
            "CertificateRevocation",
            "certificaterevocations",
            Scope.CLUSTER,
            CertificateRevocationSpec,
            writable=False,
            feeds=frozenset({Feed.REVOCATIONS}),
        ),
        KindInfo(
            "API",
            "apis",
            Scope.PROJECT,
            APISpec,
            message=resources_pb2.API,
            cluster_made=True,
            writers=_PUBLISHER,
            feeds=frozenset({Feed.ROUTES}),
        ),
        KindInfo(
            "TLSCertificate",
            "tlscertificates",
            Scope.PROJECT,
            TLSCertificateSpec,
            message=resources_pb2.TLSCertificate,
            follows=Follows.GATEWAY_REFS,
            writers=_PUBLISHER,
            feeds=frozenset({Feed.ROUTES}),
        ),
        KindInfo(
            "Gateway",
            "gateways",
            Scope.PROJECT,
            GatewaySpec,
            message=resources_pb2.Gateway,
            names=("TLSCertificate",),  # applied after its certificates; one missing is a status, not a 422
            writers=_PUBLISHER,
            feeds=frozenset({Feed.ROUTES}),
        ),
        KindInfo(
            "LogicalCloud",
            "logicalclouds",
            Scope.PROJECT,
            LogicalCloudSpec,
            writers=_PUBLISHER,
            feeds=frozenset({Feed.MANIFESTS}),
        ),
        KindInfo(
            "ServiceIntent",
            "serviceintents",
            Scope.PROJECT,
            ServiceIntentSpec,
            names=("LogicalCloud",),
            writers=_PUBLISHER,
            feeds=frozenset({Feed.MANIFESTS}),
        ),
        KindInfo(
            "EgressIntent",
            "egressintents",
            Scope.PROJECT,
            EgressIntentSpec,
            names=("LogicalCloud",),
            writers=_PUBLISHER,
            feeds=frozenset({Feed.MANIFESTS}),
        ),
        KindInfo(
            "IngressIntent",
            "ingressintents",
            Scope.PROJECT,
            IngressIntentSpec,
            names=("LogicalCloud", "ServiceIntent"),
            writers=_PUBLISHER,
            feeds=frozenset({Feed.MANIFESTS}),
        ),
        KindInfo(
            "Application",
            "applications",
            Scope.PROJECT,
            ApplicationSpec,
            message=resources_pb2.Application,
            follows=Follows.PROJECT_APIS,
            writers=_SUBSCRIBER,
            feeds=frozenset({Feed.ACCESS}),
        ),
        KindInfo(
            "Subscription",
            "subscriptions",
            Scope.PROJECT,
            SubscriptionSpec,
            message=resources_pb2.Subscription,
            names=("Application", "API"),
            references=(Reference("application", "Application"), Reference("api", "API")),
            follows=Follows.NAMED_API,
            writers=_SUBSCRIBER,
            feeds=frozenset({Feed.ACCESS}),
        ),
        KindInfo(
            "RateLimitPolicy",
            "ratelimitpolicies",
            Scope.PROJECT,
            RateLimitPolicySpec,
            message=resources_pb2.RateLimitPolicy,
            names=("API",),
            follows=Follows.POLICY_TARGET,
            writers=_PUBLISHER,
            feeds=frozenset({Feed.ACCESS}),
        ),
        KindInfo(
            "ApplicationKey",
            "applicationkeys",
            Scope.PROJECT,
            ApplicationKeySpec,
            message=resources_pb2.ApplicationKey,
            writable=False,
            exposed=False,
            names=("Application",),
            references=(Reference("application", "Application", OnDelete.CASCADE),),
            follows=Follows.APPLICATION,
            writers=_SUBSCRIBER,
            feeds=frozenset({Feed.ACCESS}),
        ),
        KindInfo(
            "KeySet",
            "keysets",
            Scope.CLUSTER,
            KeySetSpec,
            message=resources_pb2.KeySet,
            writable=False,
            feeds=frozenset({Feed.ACCESS}),
        ),
        KindInfo(
            "ServiceEndpoint",
            "serviceendpoints",
            Scope.PROJECT,
            ServiceEndpointSpec,
            writable=False,
            feeds=frozenset({Feed.MANIFESTS}),  # the ingress gateway's load balancer: a cluster's ingress addresses
        ),
        # A cluster's Gateway API routes, shown with their origin; served by that cluster's agent alone.
        KindInfo(
            "HTTPRoute",
            "httproutes",
            Scope.PROJECT,
            HTTPRouteSpec,
            status=RouteStatus,
            writable=False,
            cluster_made=True,
        ),
        KindInfo(
            "GRPCRoute",
            "grpcroutes",
            Scope.PROJECT,
            GRPCRouteSpec,
            status=RouteStatus,
            writable=False,
            cluster_made=True,
        ),
        KindInfo(
            "RolloutPolicy",
            "rolloutpolicies",
            Scope.PROJECT,
            RolloutPolicySpec,
            writers=_PUBLISHER,
            feeds=frozenset({Feed.ROLLOUT_POLICIES}),
        ),
        KindInfo("Rollout", "rollouts", Scope.PROJECT, RolloutSpec, writable=False, feeds=frozenset({Feed.ROLLOUTS})),
    ]
)
