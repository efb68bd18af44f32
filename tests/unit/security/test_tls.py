"""TLS settings: what the server serves with, and an agent that cannot start without its certificate."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from pydantic import ValidationError

from meshplane.config import AgentSettings, ServerSettings
from meshplane.security.ca import Pki
from meshplane.security.tls import (
    TlsConfigError,
    agent_channel_credentials,
    agent_channel_options,
    server_credentials,
    server_names,
    server_tls_files,
)


def agent_settings(tmp_path: Path, cluster: str, issued_for: str, **extra: object) -> AgentSettings:
    files = Pki(tmp_path / "pki").ensure_agent(issued_for)
    return AgentSettings(cluster=cluster, tls_cert=files.certificate, tls_key=files.key, tls_ca=files.ca, **extra)


def test_the_server_creates_its_pki_in_its_data_directory_on_first_start(tmp_path: Path) -> None:
    settings = ServerSettings(data_dir=tmp_path)

    credentials = server_credentials(settings)

    assert isinstance(credentials, grpc.ServerCredentials)
    pki = Pki.of_data_dir(tmp_path)
    assert server_tls_files(settings) == pki.server_files()
    assert pki.ca_certificate.exists() and pki.ca_key.exists()


def test_configured_certificate_files_are_used_and_no_pki_is_created(tmp_path: Path) -> None:
    external = Pki(tmp_path / "external").ensure_server()
    settings = ServerSettings(
        data_dir=tmp_path / "data", tls_cert=external.certificate, tls_key=external.key, tls_ca=external.ca
    )

    assert server_tls_files(settings) == external
    server_credentials(settings)
    assert not (tmp_path / "data" / "pki").exists()


def test_server_certificate_files_are_configured_all_together_or_not_at_all(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="missing: tls_key, tls_ca"):
        ServerSettings(tls_cert=tmp_path / "server.crt")


def test_the_server_certificate_covers_the_host_the_grpc_port_listens_on() -> None:
    assert server_names(ServerSettings(grpc_address="10.0.0.7:18000", tls_server_names=["cp.example"])) == [
        "cp.example",
        "10.0.0.7",
    ]
    assert server_names(ServerSettings(grpc_address="0.0.0.0:18000")) == []


def test_an_agent_without_a_certificate_refuses_to_start_and_says_how_to_issue_one() -> None:
    with pytest.raises(TlsConfigError) as refused:
        agent_channel_credentials(AgentSettings(cluster="edge-1"))

    assert "meshplane certs issue-agent --cluster edge-1" in str(refused.value)
    assert "--tls-cert" in str(refused.value)


def test_an_agent_refuses_a_certificate_for_another_cluster(tmp_path: Path) -> None:
    with pytest.raises(TlsConfigError, match="is for cluster 'edge-1', but this agent runs as cluster 'edge-2'"):
        agent_channel_credentials(agent_settings(tmp_path, "edge-2", issued_for="edge-1"))


def test_an_agent_with_its_certificate_gets_client_credentials(tmp_path: Path) -> None:
    settings = agent_settings(tmp_path, "edge-1", issued_for="edge-1", tls_server_name="cp.example")

    assert isinstance(agent_channel_credentials(settings), grpc.ChannelCredentials)
    assert agent_channel_options(settings) == [("grpc.ssl_target_name_override", "cp.example")]


def test_an_insecure_agent_needs_no_certificate() -> None:
    settings = AgentSettings(cluster="edge-1", insecure=True, tls_server_name="ignored")

    assert agent_channel_credentials(settings) is None
    assert agent_channel_options(settings) == []


def test_an_unreadable_key_is_named(tmp_path: Path) -> None:
    settings = agent_settings(tmp_path, "edge-1", issued_for="edge-1")
    settings.tls_key.unlink()  # type: ignore[union-attr]

    with pytest.raises(TlsConfigError, match=r"cannot read agent key .*edge-1\.key"):
        agent_channel_credentials(settings)
