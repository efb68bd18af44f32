"""Client certificates as a credential (`authentication.mtls`), compiled into the route's RBAC config.

A certificate counts as the Application whose `clientCertificates` name it: by SAN or subject, Envoy's
authenticated-peer principal (it reads the verified peer certificate, never a header); by fingerprint, the
`Hash` Envoy writes into x-forwarded-client-cert on listeners that verify client certificates (replacing any
a caller sent). As for API keys, one ALLOW policy per plan lets a subscribed caller in and names the plan,
and a shadow policy per application names the caller, for the upstream and per-application limits.

Beside a key or token, `required` asks for both, of the same application, or for either one. An API with
`mtls` is served only on Gateway listeners that verify client certificates: on the default listener it is
refused, and on a Gateway listener that does not verify them its routes answer 503 saying why.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from envoy.config.rbac.v3 import rbac_pb2
from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.filters.http.rbac.v3 import rbac_pb2 as rbac_filter_pb2
from envoy.type.matcher.v3 import regex_pb2, string_pb2

from meshplane.agent.translate.apis import Api
from meshplane.agent.translate.entitlements import Entitlements, Grant
from meshplane.agent.translate.gateways import route_name, served_by
from meshplane.model.access import ClientCertificate, MtlsAuth
from meshplane.model.gateways import GatewaySpec
from meshplane.model.resource import Resource

CLIENT_CERT_HEADER = "x-forwarded-client-cert"
UNVERIFIED = "this listener does not verify client certificates, which the API's authentication.mtls asks for"

Credential = Callable[[Grant], list[rbac_pb2.Principal]]
"""The principals of a grant's application for the API's other credential (its keys or token clients)."""


def mtls_of(api: Api) -> MtlsAuth | None:
    auth = api.spec.authentication
    return auth.mtls if auth is not None else None


def mtls_refusal(api: Api) -> str | None:
    """Why an API that asks for client certificates is not served here: it names no Gateway, and the
    default listener verifies none."""
    if mtls_of(api) is None or api.spec.gateways:
        return None
    return "authentication.mtls: client certificates are verified only on Gateway listeners with clientValidation"


def verifying_route_tables(gateways: Iterable[Resource]) -> frozenset[str]:
    """The route tables of the Gateway listeners that verify client certificates."""
    names = set()
    for resource in gateways:
        spec: GatewaySpec = resource.spec
        for listener in spec.listeners:
            if listener.tls is not None and listener.tls.client_validation is not None:
                names.add(route_name(f"{resource.metadata.project or ''}/{resource.metadata.name}/{listener.name}"))
    return frozenset(names)


def unverified_problems(gateways: Iterable[Resource], apis: Iterable[Api]) -> dict[str, str]:
    """Gateways (`project/name`) with a listener serving APIs that ask for client certificates it does not
    verify (their routes there answer 503), each with which."""
    apis = list(apis)
    problems: dict[str, str] = {}
    for resource in gateways:
        spec: GatewaySpec = resource.spec
        project, name = resource.metadata.project or "", resource.metadata.name
        asking = sorted(api.name for api in apis if served_by(api, project, name) and mtls_of(api) is not None)
        for listener in spec.listeners:
            if asking and (listener.tls is None or listener.tls.client_validation is None):
                told = (
                    f"listener {listener.name} does not verify client certificates, which {', '.join(asking)} ask for"
                )
                problems[f"{project}/{name}"] = "; ".join(filter(None, [problems.get(f"{project}/{name}"), told]))
    return problems


def refuse_unverified(api: Api, route: route_components_pb2.Route) -> None:
    """Make a route of an API with mtls, in a table whose listener verifies no certificate, answer 503."""
    if mtls_of(api) is None:
        return
    route.ClearField("route")
    route.typed_per_filter_config.clear()
    del route.request_headers_to_add[:]
    route.direct_response.status = 503
    route.direct_response.body.inline_string = UNVERIFIED + "\n"


def certificate_principal(certificate: ClientCertificate) -> rbac_pb2.Principal:
    """A verified peer certificate recognised as `certificate` says."""
    if certificate.fingerprint is None:
        name = certificate.san if certificate.san is not None else certificate.subject
        return rbac_pb2.Principal(
            authenticated=rbac_pb2.Principal.Authenticated(principal_name=string_pb2.StringMatcher(exact=name))
        )
    hashed = route_components_pb2.HeaderMatcher(
        name=CLIENT_CERT_HEADER,
        string_match=string_pb2.StringMatcher(
            safe_regex=regex_pb2.RegexMatcher(regex=f"(^|.*;)Hash={re.escape(certificate.fingerprint)}(;.*|$)")
        ),
    )
    verified = rbac_pb2.Principal(authenticated=rbac_pb2.Principal.Authenticated())
    return rbac_pb2.Principal(and_ids=rbac_pb2.Principal.Set(ids=[verified, rbac_pb2.Principal(header=hashed)]))


def certificate_callers(
    api: Api, entitlements: Entitlements, credential: Credential | None, with_certificate: bool = True
) -> rbac_filter_pb2.RBACPerRoute:
    """Who may call one of the API's routes: per plan, the subscribed applications by their certificates,
    combined with `credential` (None: the certificate alone) as `mtls.required` says; `with_certificate`
    False leaves certificates out (either-mode operations that ask a token for scopes)."""
    mtls = mtls_of(api)
    assert mtls is not None
    by_plan: dict[str, list[rbac_pb2.Principal]] = {}
    by_application: dict[str, rbac_pb2.Principal] = {}
    for grant in entitlements.grants(api.project, api.name):
        known = entitlements.client_certificates.get((api.project, grant.application), [])
        certificates = [certificate_principal(certificate) for certificate in known] if with_certificate else []
        others = credential(grant) if credential is not None else []
        caller = _caller(certificates, others, both=credential is not None and mtls.required)
        if caller is not None:
            by_plan.setdefault(grant.plan, []).append(caller)
            by_application[grant.application] = caller
    rules = rbac_pb2.RBAC(policies={plan: _anything_by(found) for plan, found in sorted(by_plan.items())})
    callers = rbac_pb2.RBAC(policies={app: _anything_by([found]) for app, found in sorted(by_application.items())})
    return rbac_filter_pb2.RBACPerRoute(rbac=rbac_filter_pb2.RBAC(rules=rules, shadow_rules=callers))


def _caller(
    certificates: list[rbac_pb2.Principal], others: list[rbac_pb2.Principal], both: bool
) -> rbac_pb2.Principal | None:
    """One application as a caller: any of its certificates and (both) or else any of its other credentials."""
    if both:
        if not certificates or not others:
            return None
        return rbac_pb2.Principal(and_ids=rbac_pb2.Principal.Set(ids=[_any(certificates), _any(others)]))
    found = [*certificates, *others]
    return _any(found) if found else None


def _any(principals: list[rbac_pb2.Principal]) -> rbac_pb2.Principal:
    return principals[0] if len(principals) == 1 else rbac_pb2.Principal(or_ids=rbac_pb2.Principal.Set(ids=principals))


def _anything_by(principals: list[rbac_pb2.Principal]) -> rbac_pb2.Policy:
    return rbac_pb2.Policy(permissions=[rbac_pb2.Permission(any=True)], principals=principals)
