"""Who may call an API, compiled into Envoy's own filters so that no service sits on the common path.

The filter chain is the same whatever the catalog, since a listener change drains every open connection:
what changes with APIs, keys and applications reaches the filters as their discovered config (ECDS, see
`extensions`) or as per-route config.
  header_mutation   drops identity headers a caller sent, so only the gateway sets them (and logs them)
  cors              answers preflights and decorates responses, per route
  jwt_authn         signed API keys (against the fleet's KeySet) and user JWTs, per route; discovered
  meshplane.keys    opaque keys checked inside Envoy against their digests (see `keys_filter`), enabled per
                    route; discovered
  ext_authz         else the enforcer, for opaque keys, enabled per route (when the agent has an enforcer)
  rbac "revoked"    refuses keys revoked or rotated out, by key id in one hash lookup; discovered
  rbac "unbound"    refuses keys of an application this cluster does not hold (deleted, even if one of the
                    same name was created since: a key names its application's uid); discovered
                    (both answered 401 by a local-reply mapper)
  rbac              subscriptions (one policy per plan, so the plan can be forwarded) and scopes, per route;
                    for token callers also one shadow policy per application, which names the caller
                    (client certificates as a credential the same way: see `mtls`)
  local_ratelimit / ratelimit   see limits.py
An API whose check needs what the agent was not given (the keys filter or the enforcer) answers 503: the gateway never
points a filter at a service that is not there, and never lets such a request through.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from envoy.config.accesslog.v3 import accesslog_pb2
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.common.mutation_rules.v3 import mutation_rules_pb2
from envoy.config.core.v3 import base_pb2, config_source_pb2, extension_pb2, grpc_service_pb2, http_uri_pb2
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
from envoy.type.matcher.v3 import http_inputs_pb2, metadata_pb2, regex_pb2, string_pb2
from envoy.type.v3 import http_status_pb2
from google.protobuf import any_pb2, duration_pb2, empty_pb2, wrappers_pb2
from xds.core.v3 import extension_pb2 as xds_extension_pb2
from xds.type.matcher.v3 import matcher_pb2 as xds_matcher_pb2

from meshplane.agent.translate.apis import Api
from meshplane.agent.translate.clusters import inline_cluster, is_ip_literal
from meshplane.agent.translate.common import duration, packed
from meshplane.agent.translate.config import GatewaySettings
from meshplane.agent.translate.entitlements import KEY_CLOCK_SKEW, Entitlements, Grant
from meshplane.agent.translate.extensions import discovered_filter, extension_config
from meshplane.agent.translate.keys_filter import KEYS_FILTER, keys_filter_config
from meshplane.agent.translate.mtls import Credential, certificate_callers
from meshplane.dataplane import (
    APPLICATION_HEADER,
    CONTEXT_API,
    IDENTITY_HEADERS,
    KEY_APPLICATION_UID_CLAIM,
    KEY_ID_HEADER,
    PLAN_HEADER,
    QUOTA_HEADERS,
)
from meshplane.model.access import ApiKeyAuth, Cors, JwtAuth, JwtIssuer, KeyMode
from meshplane.model.kinds import Operation

HEADER_MUTATION = "envoy.filters.http.header_mutation"
CORS = "envoy.filters.http.cors"
JWT = "envoy.filters.http.jwt_authn"
EXT_AUTHZ = "envoy.filters.http.ext_authz"
RBAC = "envoy.filters.http.rbac"
REVOKED_RBAC = "meshplane.revoked"
UNBOUND_RBAC = "meshplane.unbound"
ENFORCER_CLUSTER = "meshplane.enforcer"
KEY_ISSUER = "meshplane"
KEY_PAYLOAD = "apikey"
USER_PAYLOAD = "user"
REVOKED_POLICY = "revoked"
SCOPES_POLICY = "scopes"
AUTHENTICATED_POLICY = "authenticated"
CLIENT_POLICY_KEY = "shadow_effective_policy_id"
"""Where the RBAC filter records which shadow policy matched: for token callers, their application's name."""
SERVICE_TIMEOUT = "0.25s"
JWT_CACHE_SIZE = 10_000
"""Tokens each gateway worker remembers as verified (still checked for expiry): a caller's next request
skips the signature check, which is most of what a key costs."""


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


def _user_provider_name(api: Api, index: int = 0) -> str:
    """The API's requirement (any of its issuers), and the provider of its first issuer."""
    return f"jwt:{api.project}/{api.name}" + (f"#{index}" if index else "")


def _jwks_cluster_name(api: Api, index: int) -> str:
    return f"jwks.{api.project}.{api.name}" + (f".{index}" if index else "")


@dataclass
class AccessPlan:
    """What every API asks of the gateway, gathered once per translation."""

    settings: GatewaySettings
    entitlements: Entitlements
    now: float
    providers: dict[str, jwt_pb2.JwtProvider] = field(default_factory=dict)
    requirements: dict[str, jwt_pb2.JwtRequirement] = field(default_factory=dict)
    clusters: list[cluster_pb2.Cluster] = field(default_factory=list)
    keys_routes: dict[str, str] = field(default_factory=dict)
    """Route name -> `project/name` of the API whose keys the keys filter checks there ("" when two APIs' routes
    share a name: the filter then knows no API there and refuses)."""

    @classmethod
    def of(cls, apis: list[Api], settings: GatewaySettings, entitlements: Entitlements, now: float) -> AccessPlan:
        plan = cls(settings, entitlements, now)
        for api in apis:
            plan._survey(api)
        if settings.enforcer_address is not None and settings.keys_filter is None:
            plan.clusters.append(service_cluster(ENFORCER_CLUSTER, settings.enforcer_address))
        return plan

    def _survey(self, api: Api) -> None:
        auth = api.spec.authentication
        if auth is None:
            return
        if auth.api_key is not None and auth.api_key.mode is KeyMode.SIGNED:
            jwks = self.entitlements.jwks()
            if jwks is not None:
                name = _key_provider_name(auth.api_key)
                self.providers.setdefault(name, _key_provider(auth.api_key, jwks))
                self.requirements.setdefault(name, jwt_pb2.JwtRequirement(provider_name=name))
        elif auth.jwt is not None:
            names = []
            for index, issuer in enumerate(auth.jwt.issuers()):
                name = _user_provider_name(api, index)
                provider, cluster = _user_provider(api, index, issuer, auth.jwt, self.settings.jwks_ca_file)
                self.providers[name] = provider
                names.append(name)
                if cluster is not None:
                    self.clusters.append(cluster)
            self.requirements[_user_provider_name(api)] = _any_of(names)
        if auth.mtls is not None and not auth.mtls.required:
            name = _key_provider_name(auth.api_key) if auth.api_key is not None else _user_provider_name(api)
            if name in self.requirements:
                self.requirements[_or_missing_name(name)] = _or_missing(self.requirements[name])

    def unavailable(self, api: Api) -> str | None:
        """Why the gateway cannot check this API's callers here (its routes then answer 503), or None."""
        auth = self.api_key(api)
        if (
            auth is not None
            and auth.mode is KeyMode.OPAQUE
            and self.settings.enforcer_address is None
            and self.settings.keys_filter is None
        ):
            return "this gateway has neither the keys filter nor an enforcer to check opaque API keys"
        if auth is not None and auth.mode is KeyMode.SIGNED and self.entitlements.jwks() is None:
            return "this gateway has not received the keys API keys are signed with"
        return None

    @staticmethod
    def api_key(api: Api) -> ApiKeyAuth | None:
        auth = api.spec.authentication
        return auth.api_key if auth is not None else None

    def filters(self) -> list[hcm_pb2.HttpFilter]:
        """The chain's checks, from the gateway's settings alone. Until their first config arrives the
        discovered filters hold defaults that fail closed: no provider (and every route that asks for one
        also requires its token in RBAC), and every key refused."""
        filters = [
            _strip_identity(quota_headers=self.settings.global_limits_by_quota),
            hcm_pb2.HttpFilter(name=CORS, typed_config=packed(cors_pb2.Cors())),
            discovered_filter(JWT, jwt_pb2.JwtAuthentication()),
        ]
        if self.settings.keys_filter is not None:
            keys = discovered_filter(KEYS_FILTER, keys_filter_config(self.settings.keys_filter, {}))
            keys.disabled = True
            filters.append(keys)
        elif self.settings.enforcer_address is not None:
            filters.append(self._ext_authz())
        filters += [
            discovered_filter(REVOKED_RBAC, _every_key_refused()),
            discovered_filter(UNBOUND_RBAC, _every_key_refused()),
            hcm_pb2.HttpFilter(name=RBAC, typed_config=packed(rbac_filter_pb2.RBAC())),
        ]
        return filters

    def extension_configs(self) -> list[extension_pb2.TypedExtensionConfig]:
        """What the discovered filters hold for this catalog. No `bypass_cors_preflight`: only the preflight
        routes of APIs with CORS skip credentials (they carry no requirement), and the cors filter answers
        those before jwt_authn runs; a preflight-looking request elsewhere is authenticated like any other."""
        jwt = jwt_pb2.JwtAuthentication(
            providers={name: self.providers[name] for name in sorted(self.providers)},
            requirement_map={name: self.requirements[name] for name in sorted(self.requirements)},
        )
        return [
            extension_config(JWT, jwt),
            extension_config(REVOKED_RBAC, _revoked_keys(self.entitlements.refused_key_ids(self.now))),
            extension_config(UNBOUND_RBAC, _unbound_keys(self.entitlements.application_uids())),
        ]

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

    def local_reply(self) -> hcm_pb2.LocalReplyConfig:
        """A revoked key is a bad credential (401), although the filter refusing it is an RBAC one (403)."""
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
        return hcm_pb2.LocalReplyConfig(mappers=[mapper, _no_credential()])

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
        if auth.mtls is not None:
            self._decorate_mtls(api, op, route)
            return
        if auth.api_key is not None and auth.api_key.mode is KeyMode.OPAQUE and self.settings.keys_filter is not None:
            self._check_keys_inside(api, op, route)
        elif auth.api_key is not None and auth.api_key.mode is KeyMode.OPAQUE:
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
            scopes = op.scopes if op is not None else []
            if auth.jwt.require_subscription:
                per_filter[RBAC].CopyFrom(packed(self._token_subscribers(api, auth.jwt, scopes)))
                route.request_headers_to_add.extend([_plan_header(), _token_application_header()])
            else:
                per_filter[RBAC].CopyFrom(packed(_scopes_required(auth.jwt, scopes) if scopes else _authenticated()))

    def _check_keys_inside(self, api: Api, op: Operation | None, route: route_components_pb2.Route) -> None:
        """Switch the keys filter on for this route, named so the filter's table can tell its API (a route the
        Gateway API core named keeps its name)."""
        if not route.name:
            route.name = f"{api.project}/{api.name}" + (f" {op.method.value} {op.path}" if op is not None else "")
        held = self.keys_routes.setdefault(route.name, f"{api.project}/{api.name}")
        if held != f"{api.project}/{api.name}":
            self.keys_routes[route.name] = ""
        # An empty FilterConfig is refused; one holding an empty Any switches the filter on with its own config.
        route.typed_per_filter_config[KEYS_FILTER].CopyFrom(
            packed(route_components_pb2.FilterConfig(config=any_pb2.Any()))
        )

    def _decorate_mtls(self, api: Api, op: Operation | None, route: route_components_pb2.Route) -> None:
        """An API taking client certificates (see `mtls`): its key or token, if any, checked by jwt_authn (and
        let be missing when either credential will do), its callers by RBAC, the caller and plan forwarded."""
        auth = api.spec.authentication
        assert auth is not None and auth.mtls is not None
        credential: Credential | None = None
        requirement = None
        scopes = op.scopes if op is not None and auth.jwt is not None else []
        if auth.api_key is not None:
            requirement = _key_provider_name(auth.api_key)

            def credential(grant: Grant) -> list[rbac_pb2.Principal]:
                return [_claim_is(KEY_PAYLOAD, KEY_APPLICATION_UID_CLAIM, grant.uid)]
        elif auth.jwt is not None:
            requirement, jwt = _user_provider_name(api), auth.jwt

            def credential(grant: Grant) -> list[rbac_pb2.Principal]:
                return _token_clients(
                    jwt, self.entitlements.client_ids.get((api.project, grant.application), []), scopes
                )

        per_filter = route.typed_per_filter_config
        if requirement is not None:
            name = requirement if auth.mtls.required else _or_missing_name(requirement)
            per_filter[JWT].CopyFrom(packed(jwt_pb2.PerRouteConfig(requirement_name=name)))
        callers = certificate_callers(
            api, self.entitlements, credential, with_certificate=auth.mtls.required or not scopes
        )
        per_filter[RBAC].CopyFrom(packed(callers))
        route.request_headers_to_add.extend([_plan_header(), _token_application_header()])

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

    def _token_subscribers(self, api: Api, jwt: JwtAuth, scopes: list[str]) -> rbac_filter_pb2.RBACPerRoute:
        """As `_subscribers`, for token callers: a plan's policy admits the client ids (by issuer) of the
        applications subscribed on it, and also asks for the operation's scopes; a shadow policy per
        application, named after it, records who the caller is (for the upstream and per-application limits)."""
        by_plan: dict[str, list[rbac_pb2.Principal]] = {}
        by_application: dict[str, list[rbac_pb2.Principal]] = {}
        for grant in self.entitlements.grants(api.project, api.name):
            known = _known_clients(jwt, self.entitlements.client_ids.get((api.project, grant.application), []))
            if known:
                by_plan.setdefault(grant.plan, []).extend(known)
                by_application[grant.application] = known
        required = [_claim_has_scope(jwt.scopes_claim, scope) for scope in scopes]

        def admitted(principals: list[rbac_pb2.Principal]) -> rbac_pb2.Policy:
            caller = rbac_pb2.Principal(or_ids=rbac_pb2.Principal.Set(ids=principals))
            if required:
                caller = rbac_pb2.Principal(and_ids=rbac_pb2.Principal.Set(ids=[caller, *required]))
            return _anything_by([caller])

        rules = rbac_pb2.RBAC(policies={plan: admitted(found) for plan, found in sorted(by_plan.items())})
        callers = rbac_pb2.RBAC(policies={app: _anything_by(found) for app, found in sorted(by_application.items())})
        return rbac_filter_pb2.RBACPerRoute(rbac=rbac_filter_pb2.RBAC(rules=rules, shadow_rules=callers))


def preflight_route(
    api: Api, match: route_components_pb2.RouteMatch, action: route_components_pb2.RouteAction
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
            route_components_pb2.HeaderMatcher(name=":method", string_match=string_pb2.StringMatcher(exact="OPTIONS")),
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


def _strip_identity(quota_headers: bool) -> hcm_pb2.HttpFilter:
    """Drops what a client sent under the names the gateway sets itself (and, with quotas, names buckets in)."""
    names = [*IDENTITY_HEADERS, *(QUOTA_HEADERS if quota_headers else ())]
    mutations = header_mutation_pb2.Mutations(
        request_mutations=[mutation_rules_pb2.HeaderMutation(remove=name) for name in names]
    )
    return hcm_pb2.HttpFilter(
        name=HEADER_MUTATION, typed_config=packed(header_mutation_pb2.HeaderMutation(mutations=mutations))
    )


def _one_of(payload: str, claim: str, values: list[str]) -> rbac_pb2.Principal:
    """A claim that is one of `values`, as one RE2 alternation: matching stays one pass however many."""
    matcher = jwt_metadata(payload, claim)
    matcher.value.string_match.safe_regex.regex = "^(" + "|".join(re.escape(value) for value in values) + ")$"
    return rbac_pb2.Principal(metadata=matcher)


def _any_key() -> rbac_pb2.Principal:
    """A request that carries a verified signed key."""
    any_key = jwt_metadata(KEY_PAYLOAD, "jti")
    any_key.value.present_match = True
    return rbac_pb2.Principal(metadata=any_key)


def _refusing(principal: rbac_pb2.Principal) -> rbac_filter_pb2.RBAC:
    rules = rbac_pb2.RBAC(action=rbac_pb2.RBAC.DENY, policies={REVOKED_POLICY: _anything_by([principal])})
    return rbac_filter_pb2.RBAC(rules=rules)


def _every_key_refused() -> rbac_filter_pb2.RBAC:
    """Before the gateway knows which keys must stop working, none works."""
    return _refusing(_any_key())


def _revoked_keys(key_ids: list[str]) -> rbac_filter_pb2.RBAC:
    """Keys that must not work although their signature is good (revoked, or run out by their record), by
    the key id jwt_authn copies from the verified token into a header (a caller's own is dropped first): one
    hash lookup per request however many, where a list of principals or a regex would grow with them."""
    if not key_ids:
        return rbac_filter_pb2.RBAC()
    refuse = xds_matcher_pb2.Matcher.OnMatch(
        action=xds_extension_pb2.TypedExtensionConfig(
            name=REVOKED_POLICY, typed_config=packed(rbac_pb2.Action(name=REVOKED_POLICY, action=rbac_pb2.RBAC.DENY))
        )
    )
    allow = xds_matcher_pb2.Matcher.OnMatch(
        action=xds_extension_pb2.TypedExtensionConfig(
            name="allow", typed_config=packed(rbac_pb2.Action(name="allow", action=rbac_pb2.RBAC.ALLOW))
        )
    )
    tree = xds_matcher_pb2.Matcher.MatcherTree(
        input=xds_extension_pb2.TypedExtensionConfig(
            name="key-id", typed_config=packed(http_inputs_pb2.HttpRequestHeaderMatchInput(header_name=KEY_ID_HEADER))
        ),
        exact_match_map=xds_matcher_pb2.Matcher.MatcherTree.MatchMap(map=dict.fromkeys(key_ids, refuse)),
    )
    return rbac_filter_pb2.RBAC(matcher=xds_matcher_pb2.Matcher(matcher_tree=tree, on_no_match=allow))


def _unbound_keys(application_uids: list[str]) -> rbac_filter_pb2.RBAC:
    """Keys of an application that is not one of `application_uids`. Without this, a key would outlive its
    application: one created again under the same name would answer to it."""
    unbound = _any_key()
    if application_uids:
        held = _one_of(KEY_PAYLOAD, KEY_APPLICATION_UID_CLAIM, application_uids)
        unbound = rbac_pb2.Principal(and_ids=rbac_pb2.Principal.Set(ids=[unbound, rbac_pb2.Principal(not_id=held)]))
    return _refusing(unbound)


def _authenticated() -> rbac_filter_pb2.RBACPerRoute:
    """A verified user token, whatever it says: jwt_authn already asks for one, this holds even while the
    gateway has not yet received the API's provider."""
    present = jwt_metadata(USER_PAYLOAD, "iss")
    present.value.present_match = True
    rules = rbac_pb2.RBAC(policies={AUTHENTICATED_POLICY: _anything_by([rbac_pb2.Principal(metadata=present)])})
    return rbac_filter_pb2.RBACPerRoute(rbac=rbac_filter_pb2.RBAC(rules=rules))


def _client_is(jwt: JwtAuth, issuer: str, client: str) -> rbac_pb2.Principal:
    """A token of `issuer` whose client is `client`, by any of the claims that may name it."""
    named = [_claim_is(USER_PAYLOAD, claim, client) for claim in jwt.client_id_claims]
    by_any = named[0] if len(named) == 1 else rbac_pb2.Principal(or_ids=rbac_pb2.Principal.Set(ids=named))
    return rbac_pb2.Principal(and_ids=rbac_pb2.Principal.Set(ids=[_claim_is(USER_PAYLOAD, "iss", issuer), by_any]))


def _token_clients(jwt: JwtAuth, clients: list[tuple[str, str]], scopes: list[str]) -> list[rbac_pb2.Principal]:
    """The tokens of an application's clients (by issuer) that carry `scopes`, as one principal; none if none."""
    known = _known_clients(jwt, clients)
    if not known:
        return []
    required = [_claim_has_scope(jwt.scopes_claim, scope) for scope in scopes]
    caller = known[0] if len(known) == 1 else rbac_pb2.Principal(or_ids=rbac_pb2.Principal.Set(ids=known))
    return [rbac_pb2.Principal(and_ids=rbac_pb2.Principal.Set(ids=[caller, *required]))] if required else [caller]


def _known_clients(jwt: JwtAuth, clients: list[tuple[str, str]]) -> list[rbac_pb2.Principal]:
    """The tokens of these (issuer, client id) pairs, for the issuers the API accepts."""
    accepted = {issuer.issuer for issuer in jwt.issuers()}
    return [_client_is(jwt, issuer, client) for issuer, client in sorted(clients) if issuer in accepted]


def _or_missing_name(requirement: str) -> str:
    return requirement + "?"


def _or_missing(requirement: jwt_pb2.JwtRequirement) -> jwt_pb2.JwtRequirement:
    """`requirement`, or no token at all (a bad one still fails): where a client certificate may stand in."""
    missing = jwt_pb2.JwtRequirement(allow_missing=empty_pb2.Empty())
    return jwt_pb2.JwtRequirement(requires_any=jwt_pb2.JwtRequirementOrList(requirements=[requirement, missing]))


def _no_credential() -> hcm_pb2.ResponseMapper:
    """A request RBAC refused that showed no credential at all (no client certificate, no verified key or
    token) answers 401, as one without a key does where jwt_authn asks for it: it was not who, but nobody."""
    expression = (
        f"response.code_details == 'rbac_access_denied_matched_policy[none]' && !connection.mtls"
        f" && !('{JWT}' in metadata.filter_metadata)"
    )
    matcher = accesslog_pb2.AccessLogFilter(
        extension_filter=accesslog_pb2.ExtensionFilter(
            name="envoy.access_loggers.extension_filters.cel",
            typed_config=packed(cel_pb2.ExpressionFilter(expression=expression)),
        )
    )
    return hcm_pb2.ResponseMapper(
        filter=matcher,
        status_code=wrappers_pb2.UInt32Value(value=401),
        body=base_pb2.DataSource(inline_string="credentials required\n"),
    )


def _token_application_header() -> object:
    """The application a token caller is: the shadow policy that matched it (see `_token_subscribers`)."""
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=APPLICATION_HEADER, value=f"%DYNAMIC_METADATA({RBAC}:{CLIENT_POLICY_KEY})%"),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )


def _any_of(providers: list[str]) -> jwt_pb2.JwtRequirement:
    """A token from any one of the providers: each checks only tokens of its own issuer."""
    if len(providers) == 1:
        return jwt_pb2.JwtRequirement(provider_name=providers[0])
    alternatives = [jwt_pb2.JwtRequirement(provider_name=name) for name in providers]
    return jwt_pb2.JwtRequirement(requires_any=jwt_pb2.JwtRequirementOrList(requirements=alternatives))


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
    api: Api, index: int, issuer: JwtIssuer, jwt: JwtAuth, system_ca_file: str
) -> tuple[jwt_pb2.JwtProvider, cluster_pb2.Cluster | None]:
    provider = jwt_pb2.JwtProvider(
        issuer=issuer.issuer,
        audiences=issuer.audiences,
        forward=True,
        payload_in_metadata=USER_PAYLOAD,
        jwt_cache_config=jwt_pb2.JwtCacheConfig(jwt_cache_size=JWT_CACHE_SIZE),
        from_headers=[
            jwt_pb2.JwtHeader(name=jwt.header, value_prefix="Bearer " if jwt.header == "authorization" else "")
        ],
    )
    if issuer.jwks is not None:
        provider.local_jwks.inline_string = issuer.jwks
        return provider, None
    uri = str(issuer.jwks_uri)
    parts = urlsplit(uri)
    tls = parts.scheme == "https"
    cluster = inline_cluster(
        _jwks_cluster_name(api, index),
        parts.hostname or "",
        parts.port or (443 if tls else 80),
        http2=False,
        connect_timeout=duration("5s"),
    )
    if tls:
        context = _verified_tls(parts.hostname or "", issuer.jwks_ca_certificates, system_ca_file)
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
