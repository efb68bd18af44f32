"""Gateways: an Envoy listener per port their listeners use, a filter chain per hostname group (picked by SNI),
a route table per Gateway listener, and the certificates as SDS secrets (never inline in a listener).

A listener names its secrets only; a new certificate changes the secret, not the listener, so Envoy
rotates it without draining a connection. What is missing (a certificate not held here) leaves its
filter chain out and is told in `problems`, by Gateway; the rest is served all the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

from cryptography import x509
from envoy.config.core.v3 import base_pb2
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.filters.listener.tls_inspector.v3 import tls_inspector_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, secret_pb2, tls_pb2
from google.protobuf import wrappers_pb2

from meshplane.agent.translate.apis import Api
from meshplane.agent.translate.common import ads_source, packed
from meshplane.agent.translate.config import GatewaySettings
from meshplane.model.gateways import ClientValidationMode, GatewayListener, GatewaySpec, ListenerProtocol
from meshplane.model.gateways import TLSCertificateSpec as CertificateSpec
from meshplane.model.resource import Resource

SECRET_TYPE = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
TLS_INSPECTOR = "envoy.filters.listener.tls_inspector"
TLS_SOCKET = "envoy.transport_sockets.tls"

ListenerBuilder = Callable[[GatewaySettings], listener_pb2.Listener]
"""The gateway's HTTP listener for these settings (its name, port and route table): `listener.gateway_listener`."""
RoutesBuilder = Callable[[str, Sequence[Api]], route_pb2.RouteConfiguration]
"""A route table of this name holding these APIs: `routes.route_configuration` with the access decorations."""


@dataclass
class GatewayResources:
    listeners: list[listener_pb2.Listener] = field(default_factory=list)
    routes: list[route_pb2.RouteConfiguration] = field(default_factory=list)
    secrets: list[secret_pb2.Secret] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)
    """Gateways (`project/name`) with a part this cluster cannot serve, each with why."""


@dataclass(frozen=True)
class _Chain:
    """One Gateway listener's part of a port: its route table and, for HTTPS, its TLS."""

    key: str
    """`project/gateway/listener`."""
    project: str
    listener: GatewayListener


def certificate_secret_name(project: str, certificate: str) -> str:
    return f"tls/{project}/{certificate}"


def certificate_secret(project: str, certificate: str, spec: CertificateSpec) -> secret_pb2.Secret | None:
    """A certificate and its key as an SDS secret; None for one whose key this agent does not hold."""
    if spec.certificate is None or spec.private_key is None:
        return None
    pair = common_pb2.TlsCertificate(
        certificate_chain=base_pb2.DataSource(inline_string=spec.certificate),
        private_key=base_pb2.DataSource(inline_string=spec.private_key.plaintext or ""),
    )
    return secret_pb2.Secret(name=certificate_secret_name(project, certificate), tls_certificate=pair)


def client_ca_secret_name(chain_key: str) -> str:
    return f"client-ca/{chain_key}"


def listener_name(port: int) -> str:
    return f"gateway-{port}"


def route_name(chain_key: str) -> str:
    return f"gateway/{chain_key}"


def served_by(api: Api, project: str, gateway: str) -> bool:
    return api.project == project and gateway in api.spec.gateways


def held_gateways(gateways: Iterable[Resource]) -> frozenset[tuple[str, str]]:
    """(project, name) of each Gateway held here."""
    return frozenset((resource.metadata.project or "", resource.metadata.name) for resource in gateways)


def gateway_refusal(api: Api, held: AbstractSet[tuple[str, str]]) -> str | None:
    """Why an API that names Gateways is not served here: none of them is placed on this cluster."""
    if not api.spec.gateways or any((api.project, name) in held for name in api.spec.gateways):
        return None
    return f"gateways: none of {', '.join(api.spec.gateways)} is placed on this cluster"


def gateway_resources(
    gateways: Iterable[Resource],
    certificates: Mapping[str, CertificateSpec | str],
    apis: Sequence[Api],
    settings: GatewaySettings,
    build_listener: ListenerBuilder,
    build_routes: RoutesBuilder,
) -> GatewayResources:
    """Everything the Gateways held here make the gateway serve; `certificates` by `project/name`, each its
    spec with the PEM chain and key, or why it has none here (a Secret it names is missing)."""
    out = GatewayResources()
    by_port: dict[int, list[_Chain]] = {}
    for resource in sorted(gateways, key=lambda r: (r.metadata.project or "", r.metadata.name)):
        spec: GatewaySpec = resource.spec
        project, name = resource.metadata.project or "", resource.metadata.name
        for listener in spec.listeners:
            chain = _Chain(f"{project}/{name}/{listener.name}", project, listener)
            by_port.setdefault(listener.port, []).append(chain)
            out.routes.append(build_routes(route_name(chain.key), [a for a in apis if served_by(a, project, name)]))
    used: set[str] = set()
    for port, chains in sorted(by_port.items()):
        if port == settings.listener_port:
            for chain in chains:
                out.problems[_gateway_of(chain)] = f"port {port} is the default listener's on this cluster"
            continue
        base = build_listener(
            replace(settings, listener_name=listener_name(port), listener_port=port, route_config_name="")
        )
        template = base.filter_chains[0]
        filter_chains, taken = [], set()
        for chain in chains:
            for built in _filter_chains(chain, template, certificates, out.problems):
                match = built.filter_chain_match.SerializeToString(deterministic=True)
                if match in taken:
                    out.problems[_gateway_of(chain)] = f"port {port}: {chain.listener.name} overlaps another Gateway"
                    continue
                taken.add(match)
                filter_chains.append(built)
                used.update(_secret_names(built))
        if not filter_chains:
            continue
        del base.filter_chains[:]
        base.filter_chains.extend(filter_chains)
        if any(c.listener.protocol is ListenerProtocol.HTTPS for c in chains):
            base.listener_filters.append(
                listener_components_pb2.ListenerFilter(
                    name=TLS_INSPECTOR, typed_config=packed(tls_inspector_pb2.TlsInspector())
                )
            )
        out.listeners.append(base)
    out.secrets = _secrets(used, certificates, by_port)
    return out


def _gateway_of(chain: _Chain) -> str:
    return chain.key.rsplit("/", 1)[0]


def _filter_chains(
    chain: _Chain,
    template: listener_components_pb2.FilterChain,
    certificates: Mapping[str, CertificateSpec | str],
    problems: dict[str, str],
) -> list[listener_components_pb2.FilterChain]:
    """The chains of one Gateway listener: for HTTPS one per certificate, matching by SNI the hostnames it
    covers (a hostname no certificate names goes with the first)."""
    listener = chain.listener
    if listener.tls is None:
        return [_with_routes(template, chain, listener.hostnames, None)]
    held = []
    for ref in listener.tls.certificate_refs:
        spec = certificates.get(f"{chain.project}/{ref}", "is not held here")
        if isinstance(spec, str) or spec.certificate is None:
            why = spec if isinstance(spec, str) else "has no certificate here"
            problems[_gateway_of(chain)] = f"listener {listener.name}: TLSCertificate {ref!r} {why}"
        else:
            held.append((ref, spec.certificate))
    if not held:
        return []
    groups: dict[str, list[str]] = {}
    for hostname in listener.hostnames:
        ref = next((ref for ref, pem in held if _covers(pem, hostname)), held[0][0])
        groups.setdefault(ref, []).append(hostname)
    return [_with_routes(template, chain, hostnames, _tls_socket(chain, ref)) for ref, hostnames in groups.items()]


def _covers(pem: str, hostname: str) -> bool:
    """Whether the certificate chain's leaf names `hostname` (its DNS SANs, wildcards as TLS reads them)."""
    if hostname == "*" or hostname.startswith("*."):
        return False
    leaf = x509.load_pem_x509_certificates(pem.encode())[0]
    try:
        names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    parent = hostname.partition(".")[2]
    return any(
        name == hostname or (name.startswith("*.") and name[2:] == parent)
        for name in names.get_values_for_type(x509.DNSName)
    )


def _with_routes(
    template: listener_components_pb2.FilterChain,
    chain: _Chain,
    hostnames: Sequence[str],
    socket: base_pb2.TransportSocket | None,
) -> listener_components_pb2.FilterChain:
    """The template chain (the gateway's HTTP connection manager) reading this listener's route table, matched
    by SNI to `hostnames` (any name when one is '*'), over TLS when `socket` is given; with client validation,
    the client certificate is forwarded upstream in x-forwarded-client-cert."""
    built = listener_components_pb2.FilterChain()
    built.CopyFrom(template)
    built.name = f"{chain.key}/{hostnames[0]}"
    manager = hcm_pb2.HttpConnectionManager()
    built.filters[0].typed_config.Unpack(manager)
    manager.rds.route_config_name = route_name(chain.key)
    if chain.listener.tls is not None and chain.listener.tls.client_validation is not None:
        # The upstream learns the verified client certificate (its SHA-256, subject and SANs) and nothing a
        # caller wrote: Envoy replaces any x-forwarded-client-cert it was sent (elsewhere it only strips it).
        manager.forward_client_cert_details = hcm_pb2.HttpConnectionManager.SANITIZE_SET
        details = manager.set_current_client_cert_details
        details.subject.value, details.uri, details.dns = True, True, True
    built.filters[0].typed_config.Pack(manager)
    if socket is not None:
        built.transport_socket.CopyFrom(socket)
        if "*" not in hostnames:
            built.filter_chain_match.server_names.extend(sorted(hostnames))
    return built


def _tls_socket(chain: _Chain, ref: str) -> base_pb2.TransportSocket:
    """TLS whose certificate (and client CAs) come over SDS; HTTP/2 and HTTP/1.1 offered by ALPN."""
    tls = chain.listener.tls
    assert tls is not None
    common = tls_pb2.CommonTlsContext(
        alpn_protocols=["h2", "http/1.1"],
        tls_certificate_sds_secret_configs=[
            secret_pb2.SdsSecretConfig(name=certificate_secret_name(chain.project, ref), sds_config=ads_source())
        ],
    )
    context = tls_pb2.DownstreamTlsContext(common_tls_context=common)
    if tls.client_validation is not None:
        context.common_tls_context.validation_context_sds_secret_config.CopyFrom(
            secret_pb2.SdsSecretConfig(name=client_ca_secret_name(chain.key), sds_config=ads_source())
        )
        required = tls.client_validation.mode is ClientValidationMode.REQUIRED
        context.require_client_certificate.CopyFrom(wrappers_pb2.BoolValue(value=required))
    return base_pb2.TransportSocket(name=TLS_SOCKET, typed_config=packed(context))


def _secret_names(chain: listener_components_pb2.FilterChain) -> set[str]:
    if not chain.HasField("transport_socket"):
        return set()
    context = tls_pb2.DownstreamTlsContext()
    chain.transport_socket.typed_config.Unpack(context)
    common = context.common_tls_context
    names = {config.name for config in common.tls_certificate_sds_secret_configs}
    if common.HasField("validation_context_sds_secret_config"):
        names.add(common.validation_context_sds_secret_config.name)
    return names


def _secrets(
    used: set[str], certificates: Mapping[str, CertificateSpec | str], by_port: Mapping[int, list[_Chain]]
) -> list[secret_pb2.Secret]:
    """The SDS secrets the listeners name, sorted by name."""
    secrets = []
    for key, spec in certificates.items():
        project, _, name = key.partition("/")
        secret = certificate_secret(project, name, spec) if not isinstance(spec, str) else None
        if secret is not None and secret.name in used:
            secrets.append(secret)
    for chain in (chain for chains in by_port.values() for chain in chains):
        secret_name = client_ca_secret_name(chain.key)
        validation = chain.listener.tls.client_validation if chain.listener.tls else None
        if secret_name in used and validation is not None:
            context = common_pb2.CertificateValidationContext(
                trusted_ca=base_pb2.DataSource(inline_string=validation.ca_certificates)
            )
            secrets.append(secret_pb2.Secret(name=secret_name, validation_context=context))
    return sorted(secrets, key=lambda secret: secret.name)
