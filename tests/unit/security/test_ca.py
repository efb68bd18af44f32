"""The server's CA on disk: created once, loaded ever after, keys private, identities in the certificates."""

from __future__ import annotations

import stat
from datetime import UTC, datetime, timedelta
from ipaddress import ip_address
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from meshplane.security.ca import (
    CA_VALIDITY,
    LEAF_VALIDITY,
    Pki,
    PkiError,
    cluster_of_certificate,
    cluster_of_uris,
    load_certificate,
    server_names_of,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_first_use_creates_the_ca_and_every_later_use_loads_the_same_one(tmp_path: Path) -> None:
    pki = Pki.of_data_dir(tmp_path)

    first = pki.ensure_ca()
    again = Pki.of_data_dir(tmp_path).ensure_ca()

    assert again.certificate == first.certificate
    assert again.key_pem() == first.key_pem()
    assert pki.ca_certificate == tmp_path / "pki" / "ca.crt"


def test_issuing_again_reuses_the_certificates_on_disk(tmp_path: Path) -> None:
    pki = Pki.of_data_dir(tmp_path)
    server, agent = pki.ensure_server(), pki.ensure_agent("edge-1")
    before = {p: p.read_bytes() for p in (server.certificate, server.key, agent.certificate, agent.key)}

    assert pki.ensure_server() == server
    assert pki.ensure_agent("edge-1") == agent
    assert {p: p.read_bytes() for p in before} == before


def test_private_keys_are_readable_by_their_owner_only(tmp_path: Path) -> None:
    pki = Pki.of_data_dir(tmp_path)
    server, agent = pki.ensure_server(), pki.ensure_agent("edge-1")

    assert mode(pki.ca_key) == 0o600
    assert mode(server.key) == 0o600
    assert mode(agent.key) == 0o600
    assert mode(pki.directory) == 0o700


def test_an_agent_certificate_names_its_cluster_and_is_for_clients_only(tmp_path: Path) -> None:
    pki = Pki.of_data_dir(tmp_path)
    ca = pki.ensure_ca().certificate
    certificate = load_certificate(pki.ensure_agent("edge-1").certificate)

    sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert sans.get_values_for_type(x509.UniformResourceIdentifier) == ["spiffe://meshplane/cluster/edge-1"]
    assert certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "edge-1"
    assert cluster_of_certificate(certificate) == "edge-1"
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    certificate.verify_directly_issued_by(ca)


def test_certificates_last_a_year_and_the_ca_ten(tmp_path: Path) -> None:
    pki = Pki.of_data_dir(tmp_path)
    ca = pki.ensure_ca().certificate
    leaf = load_certificate(pki.ensure_agent("edge-1").certificate)

    def lifetime(certificate: x509.Certificate) -> timedelta:
        return certificate.not_valid_after_utc - certificate.not_valid_before_utc

    assert lifetime(ca) == CA_VALIDITY
    assert lifetime(leaf) == LEAF_VALIDITY
    assert leaf.not_valid_before_utc <= datetime.now(UTC) < leaf.not_valid_after_utc


def test_the_server_certificate_covers_loopback_and_the_configured_names(tmp_path: Path) -> None:
    pki = Pki.of_data_dir(tmp_path)
    certificate = load_certificate(pki.ensure_server(["mesh.example.com", "10.1.2.3"]).certificate)

    sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert server_names_of(certificate) == {"localhost", "127.0.0.1", "mesh.example.com", "10.1.2.3"}
    assert ip_address("10.1.2.3") in sans.get_values_for_type(x509.IPAddress)
    assert cluster_of_certificate(certificate) is None


def test_an_existing_server_certificate_is_kept_and_what_it_lacks_is_reported(tmp_path: Path) -> None:
    pki = Pki.of_data_dir(tmp_path)
    files = pki.ensure_server()
    before = files.certificate.read_bytes()

    pki.ensure_server(["mesh.example.com"])

    assert files.certificate.read_bytes() == before
    assert pki.missing_server_names(["mesh.example.com", "localhost"]) == {"mesh.example.com"}


def test_a_key_without_its_certificate_is_an_error_not_a_new_ca(tmp_path: Path) -> None:
    pki = Pki.of_data_dir(tmp_path)
    pki.ensure_ca()
    key = pki.ca_key.read_bytes()
    pki.ca_certificate.unlink()

    with pytest.raises(PkiError, match=r"ca\.key exists but .*ca\.crt does not"):
        pki.ensure_ca()
    assert pki.ca_key.read_bytes() == key


def test_a_certificate_from_another_ca_is_refused(tmp_path: Path) -> None:
    ours, theirs = Pki(tmp_path / "ours"), Pki(tmp_path / "theirs")
    ours.ensure_ca()
    foreign = theirs.ensure_agent("edge-1")
    target = ours.agent_files("edge-1")
    target.certificate.parent.mkdir(parents=True)
    target.certificate.write_bytes(foreign.certificate.read_bytes())
    target.key.write_bytes(foreign.key.read_bytes())

    with pytest.raises(PkiError, match="was not issued by"):
        ours.ensure_agent("edge-1")


@pytest.mark.parametrize("cluster", ["../escape", "Edge", "", "a/b"])
def test_a_cluster_name_must_be_a_dns_label(tmp_path: Path, cluster: str) -> None:
    with pytest.raises(ValueError, match="DNS-1123"):
        Pki.of_data_dir(tmp_path).ensure_agent(cluster)


def test_export_copies_the_agent_files_and_never_overwrites_different_ones(tmp_path: Path) -> None:
    pki = Pki.of_data_dir(tmp_path / "server")
    out = tmp_path / "out"

    files = pki.export_agent("edge-1", out)
    again = pki.export_agent("edge-1", out)

    assert again == files
    assert (files.certificate, files.key, files.ca) == (out / "edge-1.crt", out / "edge-1.key", out / "ca.crt")
    assert files.ca.read_bytes() == pki.ca_certificate.read_bytes()
    assert mode(files.key) == 0o600
    other = Pki(tmp_path / "other")
    with pytest.raises(PkiError, match="exists and differs"):
        other.export_agent("edge-1", out)


@pytest.mark.parametrize(
    ("uris", "cluster"),
    [
        (["spiffe://meshplane/cluster/edge-1"], "edge-1"),
        (["spiffe://meshplane/cluster/edge-1", "https://example.com"], "edge-1"),
        (["spiffe://meshplane/server"], None),
        (["spiffe://meshplane/cluster/a", "spiffe://meshplane/cluster/b"], None),
        (["spiffe://meshplane/cluster/Not_A_Name"], None),
        (["localhost"], None),
        ([], None),
    ],
)
def test_a_certificate_speaks_for_exactly_one_cluster_or_none(uris: list[str], cluster: str | None) -> None:
    assert cluster_of_uris(uris) == cluster
