"""`meshplane certs …`: the CA of the agent ↔ server link, from a shell on the server's host.

Agents get certificate files issued here and copied to their host (`--out`), the way kubeadm hands
out certificates: no token exchange, no enrolment endpoint to protect. Revoking one goes through the
north API, as an admin, because the revocation must reach every replica on the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from meshplane.cli_options import DEFAULT_SERVER, CaCertOpt, ServerUrl, TokenOpt
from meshplane.client import ApiError, MeshplaneClient, ServerUnreachable
from meshplane.security.ca import (
    CertificateFiles,
    Pki,
    PkiError,
    cluster_of_certificate,
    load_certificate,
    server_names_of,
)
from meshplane.security.revocation import serial_text

certs_app = typer.Typer(
    no_args_is_help=True,
    help="Certificates of the agent ↔ server link: create the CA, issue and revoke agent certificates.",
)

DataDirOpt = Annotated[
    Path, typer.Option(envvar="MESHPLANE_DATA_DIR", help="the server's data directory; files go to DATA_DIR/pki")
]
DEFAULT_DATA_DIR = Path(".meshplane")


@contextlib.contextmanager
def _user_errors() -> Iterator[None]:
    try:
        yield
    except (PkiError, ValueError, OSError, ApiError, ServerUnreachable) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


def _state(path: Path, existed: bool) -> str:
    return f"{path.resolve()}{'' if not existed else '  (existing, kept)'}"


def _ensure_ca(pki: Pki) -> None:
    existed = pki.ca_certificate.exists()
    pki.ensure_ca()
    typer.echo(f"CA certificate      {_state(pki.ca_certificate, existed)}")
    typer.echo(f"CA key              {_state(pki.ca_key, existed)}")


def _agent_flags(cluster: str, files: CertificateFiles) -> str:
    return shlex.join(
        [
            "meshplane",
            "agent",
            "--cluster",
            cluster,
            "--tls-cert",
            str(files.certificate.resolve()),
            "--tls-key",
            str(files.key.resolve()),
            "--tls-ca",
            str(files.ca.resolve()),
        ]
    )


@certs_app.command("init")
def init(
    data_dir: DataDirOpt = DEFAULT_DATA_DIR,
    server_name: Annotated[
        list[str] | None,
        typer.Option("--server-name", help="DNS name or IP agents dial, besides localhost and 127.0.0.1 (repeatable)"),
    ] = None,
    cluster: Annotated[
        list[str] | None, typer.Option("--cluster", help="also issue an agent certificate for it (repeatable)")
    ] = None,
    renew_server: Annotated[
        bool,
        typer.Option(
            "--renew-server",
            help="issue a new server certificate in place of the existing one (running servers take it)",
        ),
    ] = False,
) -> None:
    """Create the CA and the server certificate (the server also does on first start). Existing files are kept.

    The server certificate also serves the north API's HTTPS: --http-tls-cert DATA_DIR/pki/server.crt
    --http-tls-key DATA_DIR/pki/server.key, trusted by clients with --cacert DATA_DIR/pki/ca.crt.
    """
    pki = Pki.of_data_dir(data_dir)
    names = server_name or []
    with _user_errors():
        _ensure_ca(pki)
        files = pki.server_files()
        existed = files.certificate.exists() and not renew_server
        if renew_server:
            pki.reissue_server(names)
        pki.ensure_server(names)
        typer.echo(f"server certificate  {_state(files.certificate, existed)}")
        typer.echo(f"server key          {_state(files.key, existed)}")
        missing = pki.missing_server_names(names)
        if missing:
            typer.echo(
                f"warning: the existing server certificate does not cover {', '.join(sorted(missing))}; "
                f"remove {files.certificate} and {files.key} and run this again to reissue it",
                err=True,
            )
        else:
            covered = server_names_of(load_certificate(files.certificate))
            typer.echo(f"server names        {', '.join(sorted(covered))}")
        typer.echo(
            f"north API HTTPS     --http-tls-cert {files.certificate.resolve()} --http-tls-key {files.key.resolve()}"
            f" (clients: --cacert {pki.ca_certificate.resolve()})"
        )
        for name in cluster or []:
            agent = pki.ensure_agent(name)
            typer.echo(f"agent {name:<13} {agent.certificate.resolve()}")


@certs_app.command("issue-agent")
def issue_agent(
    cluster: Annotated[str, typer.Option(help="the cluster the agent runs for; its certificate's identity")],
    data_dir: DataDirOpt = DEFAULT_DATA_DIR,
    out: Annotated[
        Path | None, typer.Option(help="also copy the certificate, its key and ca.crt here, for the agent's host")
    ] = None,
) -> None:
    """Issue a new client certificate for CLUSTER's agent (kept in DATA_DIR/pki/agents), replacing the files of
    the one before: an agent reading them picks it up for new connections. The one before keeps working
    until it expires or is revoked (certs revoke-agent)."""
    pki = Pki.of_data_dir(data_dir)
    with _user_errors():
        if not pki.ca_certificate.exists():
            typer.echo(f"no CA in {pki.directory.resolve()} yet; creating one (the server will use it)")
        files, previous = pki.reissue_agent(cluster)
        if out is not None:
            files = pki.export_agent(cluster, out, renewed=True)
        serial = serial_text(load_certificate(files.certificate))
    typer.echo(f"agent certificate for cluster {cluster}, serial {serial}:")
    typer.echo(f"  certificate  {files.certificate.resolve()}")
    typer.echo(f"  key          {files.key.resolve()}")
    typer.echo(f"  CA           {files.ca.resolve()}")
    typer.echo("start the agent with:")
    typer.echo(f"  {_agent_flags(cluster, files)}")
    if previous is not None:
        old = serial_text(previous)
        typer.echo(f"it replaces certificate {old}, which works until it expires or is revoked; once the agent")
        typer.echo(f"uses the new one: meshplane certs revoke-agent --cluster {cluster} --serial {old}")


def _serial(given: str | None, cluster: str, pki: Pki) -> str:
    """The serial to revoke: the one given, else that of the certificate last issued for `cluster` here."""
    if given is not None:
        try:
            return format(int(given.replace(":", ""), 16), "x")
        except ValueError:
            raise ValueError(f"--serial {given!r} is not a hexadecimal serial number") from None
    path = pki.agent_files(cluster).certificate
    if not path.exists():
        raise PkiError(f"no certificate of cluster {cluster!r} in {path.parent}; give its --serial")
    certificate = load_certificate(path)
    if cluster_of_certificate(certificate) != cluster:
        raise PkiError(f"{path} is not a certificate of cluster {cluster!r}")
    return serial_text(certificate)


@certs_app.command("revoke-agent")
def revoke_agent(
    cluster: Annotated[str, typer.Option(help="the cluster the certificate was issued for")],
    serial: Annotated[
        str | None, typer.Option(help="the certificate's serial (hex) [the one DATA_DIR/pki/agents/CLUSTER.crt holds]")
    ] = None,
    reason: Annotated[str, typer.Option(help="why, kept with the revocation")] = "",
    data_dir: DataDirOpt = DEFAULT_DATA_DIR,
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """Revoke an agent certificate through the north API (as an admin): every server on the store refuses it
    and ends its streams within seconds. Issue the cluster a new one with certs issue-agent."""

    async def revoke(serial: str) -> None:
        async with MeshplaneClient(server, token, cacert=cacert) as client:
            await client.revoke_agent_certificate(cluster, serial, reason)

    with _user_errors():
        chosen = _serial(serial, cluster, Pki.of_data_dir(data_dir))
        asyncio.run(revoke(chosen))
    typer.echo(f"certificate {chosen} of cluster {cluster} revoked: every server refuses it within seconds")
