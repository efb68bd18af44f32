"""Certificate files read again on change: a renewal is taken once whole, a half-replaced pair is not."""

from __future__ import annotations

import shutil
from pathlib import Path

import grpc

from meshplane.config import AgentSettings
from meshplane.security.ca import Pki
from meshplane.security.tls import AgentCredentials, ServerCertificateReload


def test_the_server_takes_renewed_files_once_and_skips_a_pair_caught_half_replaced(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    files = pki.ensure_server()
    reload = ServerCertificateReload(files)
    assert reload() is None

    other = Pki(tmp_path / "other").reissue_server()
    shutil.copy(other.certificate, files.certificate)  # the certificate has landed, its key not yet
    assert reload() is None
    shutil.copy(other.key, files.key)

    assert isinstance(reload(), grpc.ServerCertificateConfiguration)
    assert reload() is None


def test_the_agent_takes_a_certificate_of_its_cluster_and_keeps_its_own_otherwise(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    files = pki.ensure_agent("edge-1")
    credentials = AgentCredentials(
        AgentSettings(cluster="edge-1", tls_cert=files.certificate, tls_key=files.key, tls_ca=files.ca)
    )
    assert credentials.renewed() is None

    foreign = pki.ensure_agent("edge-2")
    shutil.copy(foreign.certificate, files.certificate)
    shutil.copy(foreign.key, files.key)
    assert credentials.renewed() is None

    pki.reissue_agent("edge-1")
    assert isinstance(credentials.renewed(), grpc.ChannelCredentials)


def test_an_insecure_agent_has_nothing_to_reload(tmp_path: Path) -> None:
    assert AgentCredentials(AgentSettings(cluster="edge-1", insecure=True)).renewed() is None
