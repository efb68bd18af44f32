"""`meshplane certs …`: the CA of the agent ↔ server link, from a shell on the server's host.

Agents get certificate files issued here and copied to their host (`--out`), the way kubeadm hands
out certificates: no token exchange, no enrolment endpoint to protect.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from meshplane.security.ca import CertificateFiles, Pki, PkiError, load_certificate, server_names_of

certs_app = typer.Typer(
    no_args_is_help=True, help="Certificates of the agent ↔ server link: create the CA, issue agent certificates."
)

DataDirOpt = Annotated[
    Path, typer.Option(envvar="MESHPLANE_DATA_DIR", help="the server's data directory; files go to DATA_DIR/pki")
]
DEFAULT_DATA_DIR = Path(".meshplane")


@contextlib.contextmanager
def _user_errors() -> Iterator[None]:
    try:
        yield
    except (PkiError, ValueError, OSError) as exc:
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
) -> None:
    """Create the CA and the server certificate (the server also does on first start). Existing files are kept."""
    pki = Pki.of_data_dir(data_dir)
    names = server_name or []
    with _user_errors():
        _ensure_ca(pki)
        files = pki.server_files()
        existed = files.certificate.exists()
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
    """Issue the client certificate of CLUSTER's agent (kept in DATA_DIR/pki/agents; reissued never, reused always)."""
    pki = Pki.of_data_dir(data_dir)
    with _user_errors():
        if not pki.ca_certificate.exists():
            typer.echo(f"no CA in {pki.directory.resolve()} yet; creating one (the server will use it)")
        existed = pki.agent_files(cluster).certificate.exists()
        files = pki.export_agent(cluster, out) if out is not None else pki.ensure_agent(cluster)
    typer.echo(f"agent certificate for cluster {cluster}{'  (existing, reused)' if existed else ''}:")
    typer.echo(f"  certificate  {files.certificate.resolve()}")
    typer.echo(f"  key          {files.key.resolve()}")
    typer.echo(f"  CA           {files.ca.resolve()}")
    typer.echo("start the agent with:")
    typer.echo(f"  {_agent_flags(cluster, files)}")
