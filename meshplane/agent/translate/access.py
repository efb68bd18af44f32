"""Who may call an API, compiled into Envoy's own filters so that no service sits on the common path.

Filter chain, each filter but the first present only when some API needs it:
  header_mutation   drops identity headers a caller sent, so only the gateway sets them (and logs them)
  cors              answers preflights and decorates responses, per route
  jwt_authn         signed API keys (against the fleet's KeySet) and user JWTs, per route
  ext_authz         the enforcer, for opaque keys, enabled per route
  rbac "revoked"    refuses keys revoked or rotated out, and keys of an application this cluster does not
                    hold (deleted, even if one of the same name was created since: a key names its
                    application's uid), from each virtual host's config (answered 401 by a local-reply
                    mapper)
  rbac              subscriptions (one policy per plan, so the plan can be forwarded) and scopes, per route
  local_ratelimit / ratelimit   see limits.py
An API whose check needs a service the agent was not given (the enforcer) answers 503: the gateway never
points a filter at a service that is not there, and never lets such a request through.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from envoy.config.accesslog.v3 import accesslog_pb2
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.common.mutation_rules.v3 import mutation_rules_pb2
from envoy.config.core.v3 import base_pb2, config_source_pb2, grpc_service_pb2, http_uri_pb2
from envoy.config.rbac.v3 import rbac_pb2
from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.access_loggers.filters.cel.v3 import cel_pb2
from envoy.extensions.filters.http.cors.v3 import cors_pb2
from envoy.extensions.filters.http.ext_authz.v3 import ext_authz_pb2
from envoy.extensions.filters.http.header_mutation.v3 import header_mutation_pb2
from envoy.extensions.filters.http.jwt_authn.v3 import config_pb2 as jwt_pb2
from envoy.extensions.filters.http.rbac.v3 import rbac_pb2 as rbac_filter_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, tls_pb2
from envoy.type.matcher.v3 import metadata_pb2, regex_pb2, string_pb2
from envoy.type.v3 import http_status_pb2
from google.protobuf import duration_pb2, wrappers_pb2

from meshplane.agent.translate.apis import Api
from meshplane.agent.translate.clusters import inline_cluster, is_ip_literal
from meshplane.agent.translate.common import duration, packed
from meshplane.agent.translate.config import GatewaySettings
from meshplane.agent.translate.entitlements import Entitlements
from meshplane.dataplane import (
    APPLICATION_HEADER,
    CONTEXT_API,
    IDENTITY_HEADERS,
    KEY_APPLICATION_UID_CLAIM,
    KEY_ID_HEADER,
    PLAN_HEADER,
)
from meshplane.model.access import ApiKeyAuth, Cors, JwtAuth, KeyMode
from meshplane.model.kinds import Operation

HEADER_MUTATION = "envoy.filters.http.header_mutation"
CORS = "envoy.filters.http.cors"
JWT = "envoy.filters.http.jwt_authn"
EXT_AUTHZ = "envoy.filters.http.ext_authz"
RBAC = "envoy.filters.http.rbac"
REVOKED_RBAC = "meshplane.revoked"
ENFORCER_CLUSTER = "meshplane.enforcer"
KEY_ISSUER = "meshplane"
KEY_PAYLOAD = "apikey"
USER_PAYLOAD = "user"
REVOKED_POLICY = "revoked"
SCOPES_POLICY = "scopes"
SERVICE_TIMEOUT = "0.25s"
JWT_CACHE_SIZE = 10_000
"""Tokens each gateway worker remembers as verified (still checked for expiry): a caller's next request
skips the signature check, which is most of what a key costs."""
KEY_CLOCK_SKEW = 5
"""Seconds an API key's `exp` may be off by: the server and its gateways keep time with NTP."""


def filter_config(config: object) -> object:
    """Per-route config that also switches on a filter the listener keeps off by default."""
    return packed(route_components_pb2.FilterConfig(config=packed(config)))  # type: ignore[arg-type]


def jwt_metadata(payload: str, claim: str) -> metadata_pb2.MetadataMatcher:
    return metadata_pb2.MetadataMatcher(
        filter=JWT,
        path=[
            metadata_pb2.MetadataMatcher.PathSegment(key=payload),
            metadata_pb2.MetadataMatcher.PathSegment(key=claim),
        ],
    )


def _claim_is(payload: str, claim: str, value: str) -> rbac_pb2.Principal:
    matcher = jwt_metadata(payload, claim)
    matcher.value.string_match.exact = value
    return rbac_pb2.Principal(metadata=matcher)


def _claim_has_scope(claim: str, scope: str) -> rbac_pb2.Principal:
    """A scope in a list claim, or a word of a space-separated string claim (both are common)."""
    listed = jwt_metadata(USER_PAYLOAD, claim)
    listed.value.list_match.one_of.string_match.exact = scope
    spaced = jwt_metadata(USER_PAYLOAD, claim)
    spaced.value.string_match.safe_regex.regex = rf"(^|.* ){re.escape(scope)}( .*|$)"
    return rbac_pb2.Principal(
        or_ids=rbac_pb2.Principal.Set(ids=[rbac_pb2.Principal(metadata=listed), rbac_pb2.Principal(metadata=spaced)])
    )


def _key_provider_name(auth: ApiKeyAuth) -> str:
    return f"apikey:{auth.header or ''}:{auth.query or ''}"


def _user_provider_name(api: Api) -> str:
    return f"jwt:{api.project}/{api.name}"


def _jwks_cluster_name(api: Api) -> str:
    return f"jwks.{api.project}.{api.name}"


@dataclass
class AccessPlan:
    """What every API asks of the gateway, gathered once per translation."""

    settings: GatewaySettings
    entitlements: Entitlements
    now: float
    providers: dict[str, jwt_pb2.JwtProvider] = field(default_factory=dict)
    clusters: list[cluster_pb2.Cluster] = field(default_factory=list)
    uses_cors: bool = False
    uses_enforcer: bool = False
    uses_rbac: bool = False

    @classmethod
    def of(cls, apis: list[Api], settings: GatewaySettings, entitlements: Entitlements, now: float) -> AccessPlan:
        plan = cls(settings, entitlements, now)
        for api in apis:
            plan._survey(api)
        if plan.uses_enforcer:
            assert settings.enforcer_address is not None
            plan.clusters.append(service_cluster(ENFORCER_CLUSTER, settings.enforcer_address))
        return plan

    def _survey(self, api: Api) -> None:
        spec = api.spec
        self.uses_cors |= spec.cors is not None
        auth = spec.authentication
        if auth is None:
            return
        if auth.api_key is not None and auth.api_key.mode is KeyMode.OPAQUE:
            self.uses_enforcer |= self.settings.enforcer_address is not None
        elif auth.api_key is not None:
            jwks = self.entitlements.jwks()
            if jwks is not None:
                self.providers.setdefault(_key_provider_name(auth.api_key), _key_provider(auth.api_key, jwks))
                self.uses_rbac = True
        elif auth.jwt is not None:
            provider, cluster = _user_provider(api, auth.jwt, self.settings.jwks_ca_file)
            self.providers[_user_provider_name(api)] = provider
            if cluster is not None:
                self.clusters.append(cluster)
            self.uses_rbac |= any(op.scopes for op in spec.operations)

    def unavailable(self, api: Api) -> str | None:
        """Why the gateway cannot check this API's callers here (its routes then answer 503), or None."""
        auth = self.api_key(api)
        if auth is not None and auth.mode is KeyMode.OPAQUE and self.settings.enforcer_address is None:
            return "this gateway has no enforcer to check opaque API keys"
        if auth is not None and auth.mode is KeyMode.SIGNED and self.entitlements.jwks() is None:
            return "this gateway has not received the keys API keys are signed with"
        return None

    @staticmethod
    def api_key(api: Api) -> ApiKeyAuth | None:
        auth = api.spec.authentication
        return auth.api_key if auth is not None else None

    def filters(self) -> list[hcm_pb2.HttpFilter]:
        filters = [_strip_identity()]  # always: an open API's upstream and log must not believe a caller either
        if self.uses_cors:
            filters.append(hcm_pb2.HttpFilter(name=CORS, typed_config=packed(cors_pb2.Cors())))
        if self.providers:
            requirements = {name: jwt_pb2.JwtRequirement(provider_name=name) for name in sorted(self.providers)}
            config = jwt_pb2.JwtAuthentication(
                providers={name: self.providers[name] for name in sorted(self.providers)},
                requirement_map=requirements,
                bypass_cors_preflight=True,
            )
            filters.append(hcm_pb2.HttpFilter(name=JWT, typed_config=packed(config)))
        if self.uses_enforcer:
            filters.append(self._ext_authz())
        if self.uses_rbac:
            filters.append(hcm_pb2.HttpFilter(name=REVOKED_RBAC, typed_config=packed(rbac_filter_pb2.RBAC())))
            filters.append(hcm_pb2.HttpFilter(name=RBAC, typed_config=packed(rbac_filter_pb2.RBAC())))
        return filters

    def _ext_authz(self) -> hcm_pb2.HttpFilter:
        config = ext_authz_pb2.ExtAuthz(
            grpc_service=grpc_service_pb2.GrpcService(
                envoy_grpc=grpc_service_pb2.GrpcService.EnvoyGrpc(cluster_name=ENFORCER_CLUSTER),
                timeout=duration(SERVICE_TIMEOUT),
            ),
            transport_api_version=config_source_pb2.ApiVersion.V3,
            failure_mode_allow=self.settings.enforcer_fail_open,
            status_on_error=http_status_pb2.HttpStatus(code=503),
        )
        return hcm_pb2.HttpFilter(name=EXT_AUTHZ, typed_config=packed(config), disabled=True)

    def local_reply(self) -> hcm_pb2.LocalReplyConfig | None:
        """A revoked key is a bad credential (401), although the filter refusing it is an RBAC one (403)."""
        if not self.uses_rbac:
            return None
        expression = f"response.code_details == 'rbac_access_denied_matched_policy[{REVOKED_POLICY}]'"
        matcher = accesslog_pb2.AccessLogFilter(
            extension_filter=accesslog_pb2.ExtensionFilter(
                name="envoy.access_loggers.extension_filters.cel",
                typed_config=packed(cel_pb2.ExpressionFilter(expression=expression)),
            )
        )
        mapper = hcm_pb2.ResponseMapper(
            filter=matcher,
            status_code=wrappers_pb2.UInt32Value(value=401),
            body=base_pb2.DataSource(inline_string="API key revoked\n"),
        )
        return hcm_pb2.LocalReplyConfig(mappers=[mapper])

    def decorate_virtual_host(self, virtual_host: route_components_pb2.VirtualHost) -> None:
        """Keys that must stop working, on every virtual host: route tables reach open connections at once,
        where a listener change would wait for them to drain."""
        if self.uses_rbac:
            rules = _revoked_rules(self.entitlements.refused_key_ids(self.now), self.entitlements.application_uids())
            virtual_host.typed_per_filter_config[REVOKED_RBAC].CopyFrom(packed(rules))

    def decorate(self, api: Api, op: Operation | None, route: route_components_pb2.Route) -> None:
        """Attach the API's checks to one of its routes, or make the route refuse when they cannot run."""
        reason = self.unavailable(api)
        if reason is not None:
            route.ClearField("route")
            route.direct_response.status = 503
            route.direct_response.body.inline_string = reason + "\n"
            return
        per_filter = route.typed_per_filter_config
        if api.spec.cors is not None:
            per_filter[CORS].CopyFrom(packed(cors_policy(api.spec.cors)))
        auth = api.spec.authentication
        if auth is None:
            return
        if auth.api_key is not None and auth.api_key.mode is KeyMode.OPAQUE:
            check = ext_authz_pb2.ExtAuthzPerRoute(
                check_settings=ext_authz_pb2.CheckSettings(
                    context_extensions={CONTEXT_API: f"{api.project}/{api.name}"}
                )
            )
            per_filter[EXT_AUTHZ].CopyFrom(filter_config(check))  # type: ignore[arg-type]
        elif auth.api_key is not None:
            per_filter[JWT].CopyFrom(packed(jwt_pb2.PerRouteConfig(requirement_name=_key_provider_name(auth.api_key))))
            per_filter[RBAC].CopyFrom(packed(self._subscribers(api)))
            route.request_headers_to_add.append(_plan_header())
        elif auth.jwt is not None:
            per_filter[JWT].CopyFrom(packed(jwt_pb2.PerRouteConfig(requirement_name=_user_provider_name(api))))
            if op is not None and op.scopes:
                per_filter[RBAC].CopyFrom(packed(_scopes_required(auth.jwt, op.scopes)))

    def _subscribers(self, api: Api) -> rbac_filter_pb2.RBACPerRoute:
        """One ALLOW policy per plan, naming the applications subscribed on it by uid (the claim a key carries
        of the application it was issued to); its name is the plan, which Envoy records as the effective
        policy and the route forwards to the upstream."""
        by_plan: dict[str, list[str]] = {}
        for grant in self.entitlements.grants(api.project, api.name):
            by_plan.setdefault(grant.plan, []).append(grant.uid)
        policies = {
            plan: _anything_by([_claim_is(KEY_PAYLOAD, KEY_APPLICATION_UID_CLAIM, uid) for uid in sorted(uids)])
            for plan, uids in sorted(by_plan.items())
        }
        return rbac_filter_pb2.RBACPerRoute(rbac=rbac_filter_pb2.RBAC(rules=rbac_pb2.RBAC(policies=policies)))

    def preflight_route(
        self, api: Api, match: route_components_pb2.RouteMatch, action: route_components_pb2.RouteAction
    ) -> route_components_pb2.Route | None:
        """A route for CORS preflights under the API's basePath, which no operation declares; the cors
        filter answers them itself, before any credential is asked for. (It acts only on routes that
        forward, so the route carries the API's action; a preflight never reaches the backend.)"""
        if api.spec.cors is None:
            return None
        preflight = route_components_pb2.RouteMatch()
        preflight.CopyFrom(match)
        del preflight.headers[:]
        preflight.headers.extend(
            [
                route_components_pb2.HeaderMatcher(
                    name=":method", string_match=string_pb2.StringMatcher(exact="OPTIONS")
                ),
                route_components_pb2.HeaderMatcher(name="origin", present_match=True),
                route_components_pb2.HeaderMatcher(name="access-control-request-method", present_match=True),
            ]
        )
        route = route_components_pb2.Route(name=f"{api.project}/{api.name} preflight", match=preflight, route=action)
        route.typed_per_filter_config[CORS].CopyFrom(packed(cors_policy(api.spec.cors)))
        return route


def cors_policy(cors: Cors) -> cors_pb2.CorsPolicy:
    origins = [
        string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex=".*"))
        if origin == "*"
        else string_pb2.StringMatcher(exact=origin)
        for origin in cors.allow_origins
    ]
    policy = cors_pb2.CorsPolicy(
        allow_origin_string_match=origins,
        allow_methods=",".join(cors.allow_methods),
        allow_headers=",".join(cors.allow_headers),
        expose_headers=",".join(cors.expose_headers),
        allow_credentials=wrappers_pb2.BoolValue(value=cors.allow_credentials),
        forward_not_matching_preflights=wrappers_pb2.BoolValue(value=False),
    )
    if cors.max_age is not None:
        policy.max_age = str(int(duration(cors.max_age).seconds))
    return policy


def _strip_identity() -> hcm_pb2.HttpFilter:
    mutations = header_mutation_pb2.Mutations(
        request_mutations=[mutation_rules_pb2.HeaderMutation(remove=name) for name in IDENTITY_HEADERS]
    )
    return hcm_pb2.HttpFilter(
        name=HEADER_MUTATION, typed_config=packed(header_mutation_pb2.HeaderMutation(mutations=mutations))
    )


def _one_of(payload: str, claim: str, values: list[str]) -> rbac_pb2.Principal:
    """A claim that is one of `values`, as one RE2 alternation: matching stays one pass however many."""
    matcher = jwt_metadata(payload, claim)
    matcher.value.string_match.safe_regex.regex = "^(" + "|".join(re.escape(value) for value in values) + ")$"
    return rbac_pb2.Principal(metadata=matcher)


def _revoked_rules(key_ids: list[str], application_uids: list[str]) -> rbac_filter_pb2.RBACPerRoute:
    """Keys that must not work although their signature is good: those revoked or run out by their record
    (`key_ids`), and those of an application that is not one of `application_uids`. Without the second, a
    key would outlive its application: one created again under the same name would answer to it."""
    any_key = jwt_metadata(KEY_PAYLOAD, "jti")
    any_key.value.present_match = True
    unbound = rbac_pb2.Principal(metadata=any_key)
    if application_uids:
        held = _one_of(KEY_PAYLOAD, KEY_APPLICATION_UID_CLAIM, application_uids)
        unbound = rbac_pb2.Principal(and_ids=rbac_pb2.Principal.Set(ids=[unbound, rbac_pb2.Principal(not_id=held)]))
    principals = [_one_of(KEY_PAYLOAD, "jti", key_ids), unbound] if key_ids else [unbound]
    rules = rbac_pb2.RBAC(action=rbac_pb2.RBAC.DENY, policies={REVOKED_POLICY: _anything_by(principals)})
    return rbac_filter_pb2.RBACPerRoute(rbac=rbac_filter_pb2.RBAC(rules=rules))


def _plan_header() -> object:
    """The plan of the caller's subscription: the name of the RBAC policy that let the request in."""
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(
            key=PLAN_HEADER, value="%DYNAMIC_METADATA(envoy.filters.http.rbac:enforced_effective_policy_id)%"
        ),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )


def _scopes_required(jwt: JwtAuth, scopes: list[str]) -> rbac_filter_pb2.RBACPerRoute:
    principal = rbac_pb2.Principal(
        and_ids=rbac_pb2.Principal.Set(ids=[_claim_has_scope(jwt.scopes_claim, scope) for scope in scopes])
    )
    rules = rbac_pb2.RBAC(policies={SCOPES_POLICY: _anything_by([principal])})
    return rbac_filter_pb2.RBACPerRoute(rbac=rbac_filter_pb2.RBAC(rules=rules))


def _anything_by(principals: list[rbac_pb2.Principal]) -> rbac_pb2.Policy:
    return rbac_pb2.Policy(permissions=[rbac_pb2.Permission(any=True)], principals=principals)


def _key_provider(auth: ApiKeyAuth, jwks: str) -> jwt_pb2.JwtProvider:
    """Signed API keys: checked against the fleet's public keys, never forwarded upstream."""
    provider = jwt_pb2.JwtProvider(
        issuer=KEY_ISSUER,
        clock_skew_seconds=KEY_CLOCK_SKEW,
        local_jwks=base_pb2.DataSource(inline_string=jwks),
        forward=False,
        payload_in_metadata=KEY_PAYLOAD,
        jwt_cache_config=jwt_pb2.JwtCacheConfig(jwt_cache_size=JWT_CACHE_SIZE),
        claim_to_headers=[
            jwt_pb2.JwtClaimToHeader(header_name=APPLICATION_HEADER, claim_name="app"),
            jwt_pb2.JwtClaimToHeader(header_name=KEY_ID_HEADER, claim_name="jti"),
        ],
    )
    if auth.header is not None:
        provider.from_headers.append(jwt_pb2.JwtHeader(name=auth.header))
    if auth.query is not None:
        provider.from_params.append(auth.query)
    return provider


def _user_provider(
    api: Api, jwt: JwtAuth, system_ca_file: str
) -> tuple[jwt_pb2.JwtProvider, cluster_pb2.Cluster | None]:
    provider = jwt_pb2.JwtProvider(
        issuer=jwt.issuer,
        audiences=jwt.audiences,
        forward=True,
        payload_in_metadata=USER_PAYLOAD,
        jwt_cache_config=jwt_pb2.JwtCacheConfig(jwt_cache_size=JWT_CACHE_SIZE),
        from_headers=[
            jwt_pb2.JwtHeader(name=jwt.header, value_prefix="Bearer " if jwt.header == "authorization" else "")
        ],
    )
    if jwt.jwks is not None:
        provider.local_jwks.inline_string = jwt.jwks
        return provider, None
    uri = str(jwt.jwks_uri)
    parts = urlsplit(uri)
    tls = parts.scheme == "https"
    cluster = inline_cluster(
        _jwks_cluster_name(api),
        parts.hostname or "",
        parts.port or (443 if tls else 80),
        http2=False,
        connect_timeout=duration("5s"),
    )
    if tls:
        context = _verified_tls(parts.hostname or "", jwt.jwks_ca_certificates, system_ca_file)
        cluster.transport_socket.name = "envoy.transport_sockets.tls"
        cluster.transport_socket.typed_config.CopyFrom(packed(context))
    provider.remote_jwks.CopyFrom(
        jwt_pb2.RemoteJwks(
            http_uri=http_uri_pb2.HttpUri(uri=uri, cluster=cluster.name, timeout=duration("5s")),
            cache_duration=duration_pb2.Duration(seconds=300),
            async_fetch=jwt_pb2.JwksAsyncFetch(),
        )
    )
    return provider, cluster


def _verified_tls(host: str, ca_certificates: str | None, system_ca_file: str) -> tls_pb2.UpstreamTlsContext:
    """TLS to a key set server that must prove it is `host`, by a certificate from the API's CAs or else from
    the system's: a key set from anyone else would let them sign users' tokens."""
    trusted = (
        base_pb2.DataSource(inline_string=ca_certificates)
        if ca_certificates is not None
        else base_pb2.DataSource(filename=system_ca_file)
    )
    san_type = (
        common_pb2.SubjectAltNameMatcher.IP_ADDRESS if is_ip_literal(host) else common_pb2.SubjectAltNameMatcher.DNS
    )
    validation = common_pb2.CertificateValidationContext(
        trusted_ca=trusted,
        match_typed_subject_alt_names=[
            common_pb2.SubjectAltNameMatcher(san_type=san_type, matcher=string_pb2.StringMatcher(exact=host))
        ],
    )
    context = tls_pb2.UpstreamTlsContext(common_tls_context=tls_pb2.CommonTlsContext(validation_context=validation))
    if not is_ip_literal(host):
        context.sni = host
    return context


def service_cluster(name: str, address: str) -> cluster_pb2.Cluster:
    """A local gRPC service (enforcer, rate limiter) the gateway calls."""
    host, _, port = address.rpartition(":")
    return inline_cluster(name, host.strip("[]"), int(port), http2=True, connect_timeout=duration("1s"))
