"""Gateways in the translator: listeners name their certificates (SDS), never hold them, so a new certificate
changes a secret and leaves the listener as it was; a certificate not held leaves its chain out, told."""

from __future__ import annotations

from typing import Any

from meshplane.agent.translate import GatewaySettings, translate_apis
from meshplane.agent.translate.config import EnvoyConfig
from meshplane.model.gateways import TLSCertificateSpec
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import Resource
from meshplane.security.ca import KeyPair, create_ca, issue_server_certificate
from meshplane_testing import documents
from meshplane_testing.translate_factories import LOOPBACK

CA = create_ca()
SHOP, BANK = issue_server_certificate(CA, ["shop.example.com"]), issue_server_certificate(CA, ["*.bank.example.com"])
SETTINGS = GatewaySettings(backends=LOOPBACK)


def certificate(pair: KeyPair) -> TLSCertificateSpec:
    spec = {"certificate": pair.certificate_pem().decode(), "privateKey": pair.key_pem().decode()}
    return REGISTRY.parse(documents.document("TLSCertificate", "c", spec=spec)).spec


def gateway(name: str = "public", **listener: Any) -> Resource:
    fields = {
        "name": "https",
        "port": 10443,
        "protocol": "HTTPS",
        "hostnames": ["shop.example.com", "www.bank.example.com"],
        "tls": {"certificateRefs": ["shop", "bank"]},
    }
    return REGISTRY.parse(documents.document("Gateway", name, spec={"listeners": [fields | listener]}))


def translated(*gateways: Resource, certificates: dict[str, TLSCertificateSpec] | None = None) -> EnvoyConfig:
    apis = [
        REGISTRY.parse(documents.api("orders", gateways=["public"])),
        REGISTRY.parse(documents.api("plain")),
    ]
    held = (
        {"default/shop": certificate(SHOP), "default/bank": certificate(BANK)} if certificates is None else certificates
    )
    return translate_apis(apis, SETTINGS, gateways=list(gateways), certificates=held)


def test_each_certificate_serves_the_hostnames_it_names_by_sni() -> None:
    config = translated(gateway())
    [listener] = [listener for listener in config.listeners if listener.name == "gateway-10443"]
    chains = {chain.name: list(chain.filter_chain_match.server_names) for chain in listener.filter_chains}
    assert chains == {
        "default/public/https/shop.example.com": ["shop.example.com"],
        "default/public/https/www.bank.example.com": ["www.bank.example.com"],
    }
    assert [secret.name for secret in config.secrets] == ["tls/default/bank", "tls/default/shop"]


def test_listeners_name_certificates_and_never_hold_a_key() -> None:
    config = translated(gateway())
    listeners = b"".join(listener.SerializeToString() for listener in config.listeners)
    key = SHOP.key_pem().decode().splitlines()[1].encode()
    assert b"tls/default/shop" in listeners and key not in listeners
    assert key in b"".join(secret.SerializeToString() for secret in config.secrets)


def test_a_new_certificate_changes_its_secret_and_no_listener() -> None:
    before = translated(gateway())
    rotated = issue_server_certificate(CA, ["shop.example.com"])
    after = translated(
        gateway(), certificates={"default/shop": certificate(rotated), "default/bank": certificate(BANK)}
    )
    assert [listener.SerializeToString() for listener in after.listeners] == [
        listener.SerializeToString() for listener in before.listeners
    ]
    assert after.secrets != before.secrets


def test_an_api_on_a_gateway_leaves_the_default_listener_and_has_its_own_routes() -> None:
    config = translated(gateway())
    routes = {
        table.name: {route.name for host in table.virtual_hosts for route in host.routes} for table in config.routes
    }
    assert any("orders" in name for name in routes["gateway/default/public/https"])
    assert not any("orders" in name for name in routes["gateway"]) and any("plain" in n for n in routes["gateway"])


def test_a_certificate_not_held_leaves_its_chain_out_and_is_told() -> None:
    config = translated(gateway(), certificates={"default/bank": certificate(BANK)})
    [listener] = [listener for listener in config.listeners if listener.name == "gateway-10443"]
    assert [chain.name for chain in listener.filter_chains] == ["default/public/https/shop.example.com"]
    assert [secret.name for secret in config.secrets] == ["tls/default/bank"]
    assert config.gateway_problems == {"default/public": "listener https: TLSCertificate 'shop' is not held here"}


def test_two_gateways_on_one_port_and_hostname_serve_the_first_and_tell_the_second() -> None:
    config = translated(gateway(), gateway("rival"))
    [listener] = [listener for listener in config.listeners if listener.name == "gateway-10443"]
    assert {chain.name.split("/")[1] for chain in listener.filter_chains} == {"public"}
    assert set(config.gateway_problems) == {"default/rival"}


def test_client_validation_comes_over_sds_too() -> None:
    validation = {"caCertificates": CA.certificate_pem().decode(), "mode": "Optional"}
    tls = {"certificateRefs": ["shop"], "clientValidation": validation}
    config = translated(gateway(hostnames=["shop.example.com"], tls=tls))
    assert [secret.name for secret in config.secrets] == ["client-ca/default/public/https", "tls/default/shop"]
    assert config.secrets[0].validation_context.trusted_ca.inline_string == validation["caCertificates"]


def test_an_api_naming_only_gateways_not_held_here_is_refused_with_why() -> None:
    config = translated(gateway("elsewhere"))
    assert config.refused == {"default/orders": "gateways: none of public is placed on this cluster"}
    routes = {
        table.name: [route.name for host in table.virtual_hosts for route in host.routes] for table in config.routes
    }
    assert not any("orders" in name for names in routes.values() for name in names)


def test_a_gateway_listener_on_the_default_listener_s_port_is_left_out_and_told() -> None:
    config = translated(gateway(port=SETTINGS.listener_port))
    assert [listener.name for listener in config.listeners] == ["gateway"]
    assert config.gateway_problems == {
        "default/public": f"port {SETTINGS.listener_port} is the default listener's on this cluster"
    }
