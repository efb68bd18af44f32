"""The `meshplane` command: run the processes, and operate the north API from a shell."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from meshplane.bulk import apply_file, delete_file
from meshplane.cli_options import DEFAULT_SERVER, CaCertOpt, ServerUrl, TokenOpt, defaulted
from meshplane.client import ApiError, Applied, MeshplaneClient, ServerUnreachable, load_documents, object_label
from meshplane.config import AgentSettings, DataPlaneServiceSettings, LogFormat, ServerSettings
from meshplane.enforcer.settings import EnforcerSettings
from meshplane.model.registry import UnknownKind
from meshplane.model.resource import API_VERSION
from meshplane.observability.logging import configure_logging
from meshplane.ratelimiter.settings import RateLimiterSettings
from meshplane.security.commands import certs_app

app = typer.Typer(no_args_is_help=True, add_completion=False, help="meshplane: multi-cluster API and L7 control plane")
agent_app = typer.Typer(help="Run the agent of one data-plane cluster (or a subcommand).")
app.add_typer(agent_app, name="agent")
app.add_typer(certs_app, name="certs")
keys_app = typer.Typer(no_args_is_help=True, help="API keys of an application: create, list, revoke, rotate.")
app.add_typer(keys_app, name="keys")
signing_keys_app = typer.Typer(no_args_is_help=True, help="The server's keys that sign API keys: rotate, retire.")
app.add_typer(signing_keys_app, name="signing-keys")
tokens_app = typer.Typer(no_args_is_help=True, help="Bearer tokens of the north API: create, list, revoke.")
app.add_typer(tokens_app, name="tokens")
tls_app = typer.Typer(no_args_is_help=True, help="TLSCertificates of a project's Gateways, from PEM files.")
app.add_typer(tls_app, name="tls")
rollout_app = typer.Typer(
    no_args_is_help=True, help="Changes on their way through the fleet: list, status, pause, resume, promote, abort."
)
app.add_typer(rollout_app, name="rollout")
out = Console()
err = Console(stderr=True, soft_wrap=True)

ConfigOpt = Annotated[Path | None, typer.Option("--config", help="TOML config file", envvar="MESHPLANE_CONFIG")]
LogFormatOpt = Annotated[LogFormat | None, typer.Option("--log-format", help="json (default) or text")]
OtlpEndpointOpt = Annotated[
    str | None, typer.Option("--otlp-endpoint", help="send traces to this OTLP gRPC collector (absent: off)")
]
ProjectOpt = Annotated[str, typer.Option("-p", "--project", envvar="MESHPLANE_PROJECT", help="project")]
T = TypeVar("T")


def run_until_signalled(main: Callable[[asyncio.Event], Awaitable[None]], fast_loop: bool = False) -> None:
    """Run a process body until SIGINT or SIGTERM asks it to stop; `fast_loop` runs it on uvloop. A task the
    process cannot do without that dies (TaskFailed), or an address it cannot listen on, ends it with one
    line saying so, and exit 1."""
    from meshplane.lifecycle import ListenError, TaskFailed

    try:
        _run_signalled(main, fast_loop)
    except (TaskFailed, ListenError) as exc:
        err.print("[red]error[/red]", escape(str(exc)), markup=True, highlight=False)
        raise typer.Exit(1) from None


def _run_signalled(main: Callable[[asyncio.Event], Awaitable[None]], fast_loop: bool) -> None:

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await main(stop)

    if fast_loop:
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner_:
            runner_.run(runner())
        return
    asyncio.run(runner())


@contextlib.contextmanager
def user_errors(code: int = 1) -> Iterator[None]:
    """API, network and input errors become a one-line message and exit `code`, never a traceback."""
    try:
        yield
    except (ApiError, ServerUnreachable, UnknownKind, ValueError, yaml.YAMLError, OSError) as exc:
        err.print("[red]error[/red]", escape(str(exc)), markup=True, highlight=False)
        raise typer.Exit(code) from None


def run_client(call: Coroutine[Any, Any, None]) -> None:
    """Run one CLI call against the server."""
    with user_errors():
        asyncio.run(call)


def _request(
    server: str,
    token: str | None,
    cacert: Path | None,
    send: Callable[[MeshplaneClient], Awaitable[T]],
    show: Callable[[T], None],
) -> None:
    """Send one request and show its answer: the shape of most verbs, their errors handled as `run_client`'s."""

    async def call() -> None:
        async with MeshplaneClient(server, token, cacert=cacert) as client:
            show(await send(client))

    run_client(call())


def _check_output(output: str, *choices: str) -> None:
    """A format the verb cannot print is a usage error (exit 2), found before anything is sent."""
    if output not in choices:
        raise typer.BadParameter(f"must be {', '.join(choices[:-1])} or {choices[-1]}", param_hint="--output")


def _load_settings(cls: type, config: Path | None, **flags: Any) -> Any:
    try:
        return cls.load(config, **flags)
    except (FileNotFoundError, ValueError) as exc:
        err.print(f"[red]invalid configuration[/red]\n{exc}")
        raise typer.Exit(2) from None


@app.command()
def server(
    config: ConfigOpt = None,
    http_address: Annotated[
        str | None, typer.Option(help=defaulted("REST listen address", ServerSettings, "http_address"))
    ] = None,
    grpc_address: Annotated[
        str | None, typer.Option(help=defaulted("agent sync gRPC address", ServerSettings, "grpc_address"))
    ] = None,
    data_dir: Annotated[Path | None, typer.Option(help=defaulted("data directory", ServerSettings, "data_dir"))] = None,
    database_url: Annotated[str | None, typer.Option(help="SQLAlchemy URL, e.g. postgresql+asyncpg://…")] = None,
    insecure: Annotated[bool, typer.Option("--insecure", help="plaintext agent sync, no identities")] = False,
    tls_cert: Annotated[Path | None, typer.Option(help="server certificate (absent: DATA_DIR/pki, created)")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="server key (with --tls-cert)")] = None,
    tls_ca: Annotated[Path | None, typer.Option(help="CA of agent certificates (with --tls-cert)")] = None,
    tls_server_name: Annotated[
        list[str] | None, typer.Option(help="extra name / IP for the created server certificate (repeatable)")
    ] = None,
    http_tls_cert: Annotated[
        Path | None, typer.Option(help="serve the north API over HTTPS with this certificate")
    ] = None,
    http_tls_key: Annotated[Path | None, typer.Option(help="its key (with --http-tls-cert)")] = None,
    history_keep: Annotated[
        int | None,
        typer.Option(help=defaulted("versions of each object history keeps (0: all)", ServerSettings, "history_keep")),
    ] = None,
    audit_keep_days: Annotated[
        float | None,
        typer.Option(help=defaulted("days the audit trail keeps an entry", ServerSettings, "audit_keep_days")),
    ] = None,
    log_format: LogFormatOpt = None,
    otlp_endpoint: OtlpEndpointOpt = None,
) -> None:
    """Run the management server."""
    from meshplane.observability.tracing import configure_tracing
    from meshplane.security.ca import PkiError
    from meshplane.server.main import run_server

    settings = _load_settings(
        ServerSettings,
        config,
        http_address=http_address,
        grpc_address=grpc_address,
        data_dir=data_dir,
        database_url=database_url,
        insecure=insecure or None,
        tls_cert=tls_cert,
        tls_key=tls_key,
        tls_ca=tls_ca,
        tls_server_names=tls_server_name,
        http_tls_cert=http_tls_cert,
        http_tls_key=http_tls_key,
        history_keep=history_keep,
        audit_keep_days=audit_keep_days,
        log_format=log_format,
        otlp_endpoint=otlp_endpoint,
    )
    configure_logging(settings.log_format, settings.log_level)
    configure_tracing("meshplane-server", settings.otlp_endpoint)
    try:
        run_until_signalled(lambda stop: run_server(settings, stop, own_process=True), fast_loop=True)
    except PkiError as exc:
        err.print(f"[red]TLS setup failed[/red]\n{escape(str(exc))}")
        raise typer.Exit(2) from None


def _labels(pairs: list[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise typer.BadParameter(f"{pair!r} is not key=value", param_hint="--label")
        labels[key] = value
    return labels


@agent_app.callback(invoke_without_command=True)
def agent(
    ctx: typer.Context,
    config: ConfigOpt = None,
    cluster: Annotated[str | None, typer.Option(help="this cluster's name")] = None,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            help=defaulted(
                "server sync address (a name may have an A record per replica), or replicas' ip:port by commas",
                AgentSettings,
                "server",
            ),
        ),
    ] = None,
    state_dir: Annotated[Path | None, typer.Option(help="local state directory")] = None,
    xds_address: Annotated[
        str | None, typer.Option(help=defaulted("xDS address for gateways", AgentSettings, "xds_address"))
    ] = None,
    gateway_address: Annotated[
        str | None, typer.Option(help=defaulted("gateway listener", AgentSettings, "gateway_address"))
    ] = None,
    admin_address: Annotated[
        str | None, typer.Option(help=defaulted("admin HTTP: config dump, metrics", AgentSettings, "admin_address"))
    ] = None,
    admin_token_file: Annotated[
        Path | None,
        typer.Option(help="token the config dump asks for (absent: none on loopback, else STATE_DIR/admin-token)"),
    ] = None,
    label: Annotated[list[str] | None, typer.Option("--label", help="cluster label key=value (repeatable)")] = None,
    insecure: Annotated[bool, typer.Option("--insecure", help="plaintext sync to an --insecure server")] = False,
    tls_cert: Annotated[Path | None, typer.Option(help="this cluster's certificate (certs issue-agent)")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="its key")] = None,
    tls_ca: Annotated[Path | None, typer.Option(help="the server's CA certificate")] = None,
    tls_server_name: Annotated[
        str | None, typer.Option(help="name to check the server certificate for (absent: the --server host)")
    ] = None,
    kubeconfig: Annotated[
        Path | None, typer.Option(help="apply delivered objects to this cluster's Kubernetes")
    ] = None,
    in_cluster: Annotated[
        bool | None,
        typer.Option(
            "--in-cluster/--no-in-cluster",
            help="without --kubeconfig, use the pod's service account (absent: when running in a pod)",
        ),
    ] = None,
    gateway_api: Annotated[
        bool | None,
        typer.Option(
            "--gateway-api/--no-gateway-api",
            help="with Kubernetes, serve its Gateway API objects and write their status (absent: on)",
        ),
    ] = None,
    gateway_api_addresses: Annotated[
        str | None,
        typer.Option(help="addresses for Gateways, one each: 127.0.0.10-127.0.0.60 or a CIDR (absent: the gateway's)"),
    ] = None,
    enforcer_address: Annotated[
        str | None,
        typer.Option(
            help=defaulted("enforcer for opaque API keys, e.g. 127.0.0.1:18081", AgentSettings, "enforcer_address")
        ),
    ] = None,
    keys_filter: Annotated[
        Path | None,
        typer.Option(help="the keys filter's .wasm on the gateways' host: opaque API keys checked inside Envoy"),
    ] = None,
    ratelimiter_address: Annotated[
        str | None,
        typer.Option(
            help=defaulted("rate limiter for global limits, e.g. 127.0.0.1:18082", AgentSettings, "ratelimiter_address")
        ),
    ] = None,
    enforcer_failure_mode: Annotated[
        str | None,
        typer.Option(
            help=defaulted("enforcer unreachable: closed (503) or open", AgentSettings, "enforcer_failure_mode")
        ),
    ] = None,
    ratelimiter_failure_mode: Annotated[
        str | None,
        typer.Option(
            help=defaulted("rate limiter unreachable: open or closed", AgentSettings, "ratelimiter_failure_mode")
        ),
    ] = None,
    global_limits: Annotated[
        str | None,
        typer.Option(
            help=defaulted(
                "global API and operation limits: exact (asked per request) or quota (assigned shares)",
                AgentSettings,
                "global_limits",
            )
        ),
    ] = None,
    east_west_gateway: Annotated[
        str | None,
        typer.Option(
            help=defaulted(
                "host:port where other clusters reach this cluster's services", AgentSettings, "east_west_gateway"
            )
        ),
    ] = None,
    allow_loopback_backends: Annotated[
        bool, typer.Option("--allow-loopback-backends", help="let API backends target this host's loopback")
    ] = False,
    envoy_admin_address: Annotated[
        str | None,
        typer.Option(
            help=defaulted(
                "the gateways' Envoy admin, which no backend may target", AgentSettings, "envoy_admin_address"
            )
        ),
    ] = None,
    more_envoy_admin_address: Annotated[
        list[str] | None,
        typer.Option(
            "--more-envoy-admin-address", help="a further gateway's Envoy admin whose figures are read (repeatable)"
        ),
    ] = None,
    figures_interval: Annotated[
        float | None,
        typer.Option(
            help=defaulted(
                "seconds between readings of the gateways' per-API figures", AgentSettings, "figures_interval"
            )
        ),
    ] = None,
    xff_num_trusted_hops: Annotated[
        int | None,
        typer.Option(
            help=defaulted(
                "proxies in front of the gateways whose x-forwarded-for is trusted",
                AgentSettings,
                "xff_num_trusted_hops",
            )
        ),
    ] = None,
    access_log: Annotated[
        str | None,
        typer.Option(
            help=defaulted("gateways' access log: stdout, off or an absolute path", AgentSettings, "access_log")
        ),
    ] = None,
    access_log_otlp_endpoint: Annotated[
        str | None, typer.Option(help="OTLP gRPC collector (host:port) for the gateways' access logs")
    ] = None,
    log_format: LogFormatOpt = None,
    otlp_endpoint: OtlpEndpointOpt = None,
) -> None:
    """Run the agent of one data-plane cluster."""
    if ctx.invoked_subcommand is not None:
        return
    from meshplane.agent.admin import AdminTokenError
    from meshplane.agent.kube.serviceaccount import NotInCluster
    from meshplane.agent.runtime import run_agent
    from meshplane.observability.tracing import configure_tracing
    from meshplane.security.ca import PkiError

    settings = _load_settings(
        AgentSettings,
        config,
        cluster=cluster,
        server=server,
        state_dir=state_dir,
        xds_address=xds_address,
        gateway_address=gateway_address,
        admin_address=admin_address,
        admin_token_file=admin_token_file,
        labels=_labels(label) if label else None,
        insecure=insecure or None,
        tls_cert=tls_cert,
        tls_key=tls_key,
        tls_ca=tls_ca,
        tls_server_name=tls_server_name,
        kubeconfig=kubeconfig,
        in_cluster=in_cluster,
        gateway_api=gateway_api,
        gateway_api_addresses=gateway_api_addresses,
        enforcer_address=enforcer_address,
        keys_filter=keys_filter,
        ratelimiter_address=ratelimiter_address,
        enforcer_failure_mode=enforcer_failure_mode,
        ratelimiter_failure_mode=ratelimiter_failure_mode,
        global_limits=global_limits,
        east_west_gateway=east_west_gateway,
        allow_loopback_backends=allow_loopback_backends or None,
        envoy_admin_address=envoy_admin_address,
        more_envoy_admin_addresses=more_envoy_admin_address or None,
        figures_interval=figures_interval,
        xff_num_trusted_hops=xff_num_trusted_hops,
        access_log=access_log,
        access_log_otlp_endpoint=access_log_otlp_endpoint,
        log_format=log_format,
        otlp_endpoint=otlp_endpoint,
    )
    configure_logging(settings.log_format, settings.log_level, cluster=settings.cluster)
    configure_tracing("meshplane-agent", settings.otlp_endpoint)
    try:
        run_until_signalled(lambda stop: run_agent(settings, stop))
    except PkiError as exc:
        err.print(f"[red]TLS setup failed[/red]\n{escape(str(exc))}")
        raise typer.Exit(2) from None
    except AdminTokenError as exc:
        err.print(f"[red]admin token[/red]\n{escape(str(exc))}")
        raise typer.Exit(2) from None
    except NotInCluster as exc:
        err.print(f"[red]cannot reach this cluster's Kubernetes[/red]\n{escape(str(exc))}")
        raise typer.Exit(2) from None


@agent_app.command("bootstrap")
def agent_bootstrap(
    node_id: Annotated[str, typer.Option(help="the Envoy node id")],
    xds_address: Annotated[str, typer.Option(help="the agent's xDS address")] = AgentSettings.model_fields[
        "xds_address"
    ].default,
    admin_port: Annotated[int, typer.Option(help="Envoy admin port on 127.0.0.1")] = 19000,
) -> None:
    """Print an Envoy bootstrap that takes its whole configuration from the agent."""
    from meshplane.agent.bootstrap import bootstrap_yaml
    from meshplane.config import split_address

    host, port = split_address(xds_address)
    sys.stdout.write(bootstrap_yaml(node_id, host, port, admin_port=admin_port))


@agent_app.command("config-dump")
def agent_config_dump(
    admin_address: Annotated[
        str, typer.Option(envvar="MESHPLANE_ADMIN_ADDRESS", help="the agent's admin address")
    ] = AgentSettings.model_fields["admin_address"].default,
    output: Annotated[str, typer.Option("-o", "--output", help="json or yaml")] = "json",
    token_file: Annotated[
        Path | None,
        typer.Option(envvar="MESHPLANE_ADMIN_TOKEN_FILE", help="the agent's admin token, when it asks for one"),
    ] = None,
) -> None:
    """Show what an agent serves its gateways, and the objects (and rejected versions) it holds."""
    from meshplane.cli_ops import fetch_config_dump, render_dump

    _check_output(output, "json", "yaml")
    with user_errors():
        token = token_file.read_text().strip() if token_file is not None else None
        sys.stdout.write(render_dump(fetch_config_dump(admin_address, token=token), output))


LocalXdsOpt = Annotated[
    str | None, typer.Option(help=defaulted("the local agent's xDS address", DataPlaneServiceSettings, "xds_address"))
]
MetricsAddressOpt = Annotated[str | None, typer.Option(help="serve Prometheus /metrics here; off when absent")]


def _run_fed_service(ctx: typer.Context, cls: type, run: Callable[[Any, asyncio.Event], Awaitable[None]]) -> None:
    """Run a service the local agent feeds (enforcer, rate limiter) on uvloop, as it sits on the request path.
    Its command's options are its settings' fields, by name."""
    flags = dict(ctx.params)
    settings = _load_settings(cls, flags.pop("config"), **flags)
    configure_logging(settings.log_format, settings.log_level)
    run_until_signalled(lambda stop: run(settings, stop), fast_loop=True)


@app.command()
def enforcer(
    ctx: typer.Context,
    config: ConfigOpt = None,
    grpc_address: Annotated[
        str | None, typer.Option(help=defaulted("ext_authz gRPC listen address", EnforcerSettings, "grpc_address"))
    ] = None,
    xds_address: LocalXdsOpt = None,
    node_id: Annotated[str | None, typer.Option(help="xDS node id; enforcer-HOSTNAME-PID when absent")] = None,
    metrics_address: MetricsAddressOpt = None,
    log_format: LogFormatOpt = None,
) -> None:
    """Run the ext_authz service that checks opaque API keys for the gateways, fed by the agent."""
    from meshplane.enforcer.process import run_enforcer

    _run_fed_service(ctx, EnforcerSettings, run_enforcer)


@app.command()
def ratelimiter(
    ctx: typer.Context,
    config: ConfigOpt = None,
    grpc_address: Annotated[
        str | None, typer.Option(help=defaulted("RateLimitService gRPC address", RateLimiterSettings, "grpc_address"))
    ] = None,
    xds_address: LocalXdsOpt = None,
    redis_url: Annotated[
        str | None, typer.Option(help="count in Redis, shared by replicas: redis://host:port/db; in memory when absent")
    ] = None,
    node_id: Annotated[str | None, typer.Option(help="xDS node id; ratelimiter-HOSTNAME-PID when absent")] = None,
    metrics_address: MetricsAddressOpt = None,
    log_format: LogFormatOpt = None,
) -> None:
    """Run the global rate-limit service the gateways call, its limits fed by the agent."""
    from meshplane.ratelimiter.main import run_ratelimiter

    _run_fed_service(ctx, RateLimiterSettings, run_ratelimiter)


def _print_applied(done: Applied) -> None:
    out.print(f"{done.label} {'created' if done.created else 'configured'}", highlight=False)


@app.command()
def apply(
    file: Annotated[str, typer.Option("-f", "--filename", help="YAML file, or - for standard input")],
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="follow delivery until every placed cluster applied it, or a governed change's rollout until it ends "
            "(exit 1: failed, rolled back, aborted or superseded; 3: paused)",
        ),
    ] = False,
    through_pauses: Annotated[
        bool, typer.Option("--through-pauses", help="with --wait: keep following a paused rollout")
    ] = False,
    timeout: Annotated[float, typer.Option(help="seconds --wait waits (then exit 2)")] = 60.0,
    project: ProjectOpt = "default",
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """Create or replace every object of a (multi-document) YAML file, those that others name first (projects,
    then APIs and applications, then what names them), many at a time; the first refusal stops it."""
    with user_errors():
        docs = load_documents(sys.stdin.read() if file == "-" else Path(file).read_text())
    code = 0

    async def call() -> None:
        nonlocal code

        async with MeshplaneClient(server, token, cacert=cacert) as client:
            applied = await apply_file(client, docs, project, on_applied=_print_applied)
            if wait:
                from meshplane.cli_rollouts import wait_for_writes

                code = await wait_for_writes(client, applied, timeout, out, through_pauses)

    run_client(call())
    if code:
        raise typer.Exit(code)


@app.command()
def diff(
    kind: Annotated[
        str | None, typer.Argument(help="with NAME: two revisions of one object", show_default=False)
    ] = None,
    name: Annotated[str | None, typer.Argument(show_default=False)] = None,
    file: Annotated[
        str | None, typer.Option("-f", "--filename", help="YAML file, or - for standard input", show_default=False)
    ] = None,
    from_revision: Annotated[int | None, typer.Option("--from", help="with KIND NAME: the older revision")] = None,
    to_revision: Annotated[
        int | None, typer.Option("--to", help="with KIND NAME: the newer revision [the object as it is now]")
    ] = None,
    project: ProjectOpt = "default",
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """Show what applying a file would change (-f), or what changed between two revisions of an object (KIND
    NAME --from REV [--to REV]): exit 0 when nothing, 1 when something, 2 on error."""
    from meshplane.cli_ops import diff_documents, revision_diff

    if (file is None) == (kind is None or name is None) or (file is None and from_revision is None):
        raise typer.BadParameter("give -f FILE, or KIND NAME --from REV [--to REV]")
    diffs: list[str] = []

    async def call() -> None:
        async with MeshplaneClient(server, token, cacert=cacert) as client:
            if file is not None:
                diffs.extend(await diff_documents(client, docs, project))
            else:
                assert kind is not None and name is not None and from_revision is not None
                diffs.append(await revision_diff(client, kind, name, project, from_revision, to_revision))

    with user_errors(code=2):
        docs = load_documents(sys.stdin.read() if file == "-" else Path(file).read_text()) if file else []
        asyncio.run(call())
    sys.stdout.write("".join(diffs))
    if any(diffs):
        raise typer.Exit(1)


@app.command()
def history(
    kind: Annotated[str, typer.Argument(help="kind or plural", show_default=False)],
    name: Annotated[str, typer.Argument(show_default=False)],
    output: Annotated[str, typer.Option("-o", "--output", help="table, yaml or json")] = "table",
    project: ProjectOpt = "default",
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """The kept versions of an object, newest first (a deleted object's too): revision, operation, who, when."""
    from meshplane.cli_ops import history_table

    _check_output(output, "table", "yaml", "json")
    _request(
        server,
        token,
        cacert,
        lambda client: client.history(kind, name, project),
        lambda entries: _print_table(history_table(entries)) if output == "table" else _print_data(entries, output),
    )


@app.command()
def rollback(
    kind: Annotated[str, typer.Argument(help="kind or plural", show_default=False)],
    name: Annotated[str, typer.Argument(show_default=False)],
    to_revision: Annotated[int, typer.Option("--to-revision", help="the revision whose spec to write again")],
    project: ProjectOpt = "default",
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """Write the spec, labels and annotations an object had at a revision as a new change (refused if the object
    changes meanwhile). It is an ordinary write: checked, governed and rolled out like any other."""
    _request(
        server,
        token,
        cacert,
        lambda client: client.rollback(kind, name, to_revision, project),
        lambda done: out.print(
            f"{done.label} rolled back to revision {to_revision} "
            f"(now revision {done.object['metadata']['resourceVersion']})",
            highlight=False,
        ),
    )


def _since(text: str | None) -> str | None:
    """An ISO 8601 time as given, or a duration back from now (`90s`, `30m`, `2h`, `7d`) as one."""
    if text and text[-1] in _DURATION_UNITS and text[:-1].isdigit():
        return (datetime.now(UTC) - timedelta(seconds=int(text[:-1]) * _DURATION_UNITS[text[-1]])).isoformat()
    return text


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@app.command()
def audit(
    since: Annotated[
        str | None, typer.Option(help="only changes since a time (ISO 8601) or a duration ago (30m, 2h, 7d)")
    ] = None,
    project: Annotated[str | None, typer.Option("-p", "--project", help="only this project's objects")] = None,
    kind: Annotated[str | None, typer.Option(help="only this kind")] = None,
    who: Annotated[
        str | None, typer.Option(help="only this actor: token/NAME, oidc/SUBJECT, cluster/NAME, ...")
    ] = None,
    limit: Annotated[int, typer.Option(help="at most this many entries", min=1)] = 100,
    output: Annotated[str, typer.Option("-o", "--output", help="table, yaml or json")] = "table",
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """Who changed what, when and from where, newest first (a project-bound token sees its project alone)."""
    from meshplane.cli_ops import audit_table

    _check_output(output, "table", "yaml", "json")
    _request(
        server,
        token,
        cacert,
        lambda client: client.audit(_since(since), project, kind, who, limit),
        lambda entries: _print_table(audit_table(entries)) if output == "table" else _print_data(entries, output),
    )


def _print_data(data: Any, output: str) -> None:
    """JSON or YAML, never wrapped, for scripts to parse."""
    if output == "json":
        out.print_json(json.dumps(data))
    else:
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False))


def _print_table(table: Table) -> None:
    """As wide as its content, whatever the terminal (or a pipe's 80 columns): a cell cut short is a wrong name."""
    natural = Measurement.get(out, out.options.update_width(sys.maxsize), table).maximum
    Console(width=max(natural, out.width)).print(table)


def _print_objects(items: list[dict[str, Any]], output: str, single: bool) -> None:
    if output == "yaml" and not single:
        sys.stdout.write(yaml.safe_dump_all(items, sort_keys=False))
    elif output != "table":
        _print_data(items[0] if single else items, output)
    else:
        table = Table(box=None, header_style="bold")
        for column in ("NAME", "PROJECT", "LABELS", "VERSION", "CREATED"):
            table.add_column(column)
        for item in items:
            meta = item["metadata"]
            labels = ",".join(f"{k}={v}" for k, v in sorted(meta.get("labels", {}).items()))
            table.add_row(
                meta["name"],
                meta.get("project", ""),
                labels,
                meta.get("resourceVersion", ""),
                meta.get("creationTimestamp", "")[:19],
            )
        _print_table(table)


@app.command()
def get(
    kind: Annotated[str, typer.Argument(help="kind or plural, any case (api, apis, API)")],
    name: Annotated[str | None, typer.Argument()] = None,
    output: Annotated[str, typer.Option("-o", "--output", help="table, yaml or json")] = "table",
    watch: Annotated[
        bool, typer.Option("-w", "--watch", help="list, then print each change (TYPE kind/name revision)")
    ] = False,
    project: ProjectOpt = "default",
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """Show one object or list a kind; with -w, stream changes until Ctrl-C."""
    _check_output(output, "table", "yaml", "json")
    if watch:
        from meshplane.cli_ops import print_event, stream_changes, until_stopped

        async def follow(stop: asyncio.Event) -> None:
            async with MeshplaneClient(server, token, cacert=cacert) as client:
                await until_stopped(stream_changes(client, kind, name, project, print_event(output)), stop)

        with user_errors():
            run_until_signalled(follow)
        return

    async def call() -> None:
        async with MeshplaneClient(server, token, cacert=cacert) as client:
            if name:
                _print_objects([await client.get(kind, name, project)], output, single=True)
            else:
                _print_objects(await client.list(kind, project), output, single=False)

    run_client(call())


@app.command()
def delete(
    kind: Annotated[str | None, typer.Argument(help="kind or plural", show_default=False)] = None,
    name: Annotated[str | None, typer.Argument(show_default=False)] = None,
    file: Annotated[
        str | None, typer.Option("-f", "--filename", help="every object of a YAML file (or - for standard input)")
    ] = None,
    ignore_not_found: Annotated[
        bool, typer.Option("--ignore-not-found", help="with -f: an object already gone is not an error")
    ] = False,
    project: ProjectOpt = "default",
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """Delete an object, or every object a file declares (those naming others first, projects last); the
    first refusal stops it."""
    usage = "give KIND NAME, or -f FILE"
    if file is not None:
        if kind is not None:
            raise typer.BadParameter(usage)
        _delete_file(file, ignore_not_found, project, server, token, cacert)
        return
    if kind is None or name is None:
        raise typer.BadParameter(usage)
    _request(
        server,
        token,
        cacert,
        lambda client: client.delete(kind, name, project),
        lambda deleted: out.print(
            f"{object_label(deleted['kind'], name, deleted['metadata'].get('project'))} deleted", highlight=False
        ),
    )


@app.command()
def adopt(
    kind: Annotated[str, typer.Argument(help="kind or plural (a kind clusters make: api)", show_default=False)],
    name: Annotated[str, typer.Argument(show_default=False)],
    cluster: Annotated[
        list[str] | None,
        typer.Option("--cluster", help="place it on this cluster (repeatable) [where its spec's placement asks]"),
    ] = None,
    project: ProjectOpt = "default",
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """Adopt an object a cluster made (admins only): it becomes the control plane's, placed where its spec
    asks or on the --cluster given, and its cluster's reports no longer change it."""
    _request(
        server,
        token,
        cacert,
        lambda client: client.adopt(kind, name, project, cluster),
        lambda adopted: out.print(
            f"{object_label(adopted['kind'], name, adopted['metadata'].get('project'))} adopted", highlight=False
        ),
    )


def _delete_file(
    file: str, ignore_not_found: bool, project: str, server: str, token: str | None, cacert: Path | None
) -> None:
    with user_errors():
        docs = load_documents(sys.stdin.read() if file == "-" else Path(file).read_text())

    async def call() -> None:
        async with MeshplaneClient(server, token, cacert=cacert) as client:
            await delete_file(
                client,
                docs,
                project,
                on_deleted=lambda target: out.print(f"{target.label} deleted", highlight=False),
                ignore_not_found=ignore_not_found,
            )

    run_client(call())


def _cluster_rows(clusters: list[dict[str, Any]]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("CLUSTER", "CONNECTED", "LAST SEEN", "AGENT", "OUT OF DATE", "LAG", "LABELS", "LAST ERROR"):
        table.add_column(column, no_wrap=column != "LAST ERROR")
    now = datetime.now(UTC)
    for cluster in clusters:
        st = cluster.get("status", {})
        labels = ",".join(f"{k}={v}" for k, v in sorted(cluster["metadata"].get("labels", {}).items()))
        connected = "yes" if st.get("connected") else "no"
        behind = st.get("behindSince")
        lag = f"{(now - datetime.fromisoformat(behind)).total_seconds():.0f}s" if behind else "0s"
        table.add_row(
            cluster["metadata"]["name"],
            connected,
            (st.get("lastSeen") or "")[:19],
            st.get("agentVersion", ""),
            str(st.get("outOfDate", "")),
            lag,
            labels,
            st.get("lastError") or "",
        )
    return table


def _delivery_rows(obj: dict[str, Any]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("CLUSTER", "STATE", "VERSION", "SINCE", "MESSAGE"):
        table.add_column(column, no_wrap=column != "MESSAGE")
    for entry in obj.get("status", {}).get("clusters", []):
        table.add_row(
            entry["cluster"],
            entry["state"],
            entry.get("version", ""),
            (entry.get("lastTransitionTime") or "")[:19],
            entry.get("message", ""),
        )
    return table


@app.command()
def status(
    kind: Annotated[str | None, typer.Argument(help="with NAME: show one object's delivery per cluster")] = None,
    name: Annotated[str | None, typer.Argument()] = None,
    output: Annotated[str, typer.Option("-o", "--output", help="table or json")] = "table",
    project: ProjectOpt = "default",
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """Clusters (connected, last seen, objects out of date), or one object's delivery to each cluster."""
    if (kind is None) != (name is None):
        raise typer.BadParameter("give both KIND and NAME, or neither")
    _check_output(output, "table", "json")

    async def call() -> None:
        async with MeshplaneClient(server, token, cacert=cacert) as client:
            if kind and name:
                obj = await client.get(kind, name, project)
                if output == "json":
                    out.print_json(json.dumps(obj.get("status", {}).get("clusters", [])))
                else:
                    out.print(_delivery_rows(obj))
                return
            clusters = await client.list("clusters")
            if output == "json":
                out.print_json(json.dumps([{"name": c["metadata"]["name"], **c.get("status", {})} for c in clusters]))
            else:
                out.print(_cluster_rows(clusters))

    run_client(call())


OutputOpt = Annotated[str, typer.Option("-o", "--output", help="table, yaml or json")]


@app.command()
def figures(
    api: Annotated[str, typer.Argument(help="the API's name")],
    output: OutputOpt = "table",
    project: ProjectOpt = "default",
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """Per cluster, the requests and 5xx answers its gateways counted for an API."""
    from meshplane.cli_ops import figures_table

    _check_output(output, "table", "yaml", "json")
    _request(
        server,
        token,
        cacert,
        lambda client: client.api_figures(api, project),
        lambda answer: _print_data(answer, output) if output != "table" else _print_table(figures_table(answer)),
    )


ExpiresInOpt = Annotated[
    str | None, typer.Option("--expires-in", help="how long the key works, e.g. 720h [until revoked]")
]
KeyOnlyOpt = Annotated[
    bool, typer.Option("--key-only", help="print the key alone, for KEY=$(meshplane keys create APP --key-only)")
]


def _check_issue_output(output: str, key_only: bool) -> None:
    _check_output(output, "table", "yaml", "json")
    if key_only and output != "table":
        raise typer.BadParameter("prints the key alone; leave out --output", param_hint="--key-only")


def _print_views(views: list[dict[str, Any]], output: str, table: Callable[[list[dict[str, Any]]], Table]) -> None:
    """Keys or tokens as a table for people, or as data for scripts."""
    if output == "table":
        _print_table(table(views))
    else:
        _print_data(views, output)


def _print_issued(answer: dict[str, Any], output: str, key_only: bool) -> None:
    """The answer of create or rotate, the only one that holds the key: print it whole, once."""
    from meshplane.cli_ops import issued_key_text, key_table

    if key_only:
        sys.stdout.write(answer["key"] + "\n")
    elif output == "table":
        _print_table(key_table([answer]))
        sys.stdout.write(issued_key_text(answer))
    else:
        _print_data(answer, output)


@keys_app.command("create")
def keys_create(
    application: Annotated[str, typer.Argument(help="the application the key is for")],
    expires_in: ExpiresInOpt = None,
    import_key_file: Annotated[
        Path | None,
        typer.Option(exists=True, dir_okay=False, help="import the opaque key this file holds [issue a signed one]"),
    ] = None,
    key_only: KeyOnlyOpt = False,
    output: OutputOpt = "table",
    project: ProjectOpt = "default",
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """Issue an API key (or import one) and print it: the server keeps only its digest."""
    _check_issue_output(output, key_only)
    with user_errors():
        imported = import_key_file.read_text().strip() if import_key_file else None
    _request(
        server,
        token,
        cacert,
        lambda client: client.issue_key(application, project, expires_in, imported),
        lambda answer: _print_issued(answer, output, key_only),
    )


@keys_app.command("list")
def keys_list(
    application: Annotated[str, typer.Argument()],
    output: OutputOpt = "table",
    project: ProjectOpt = "default",
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """An application's keys (never the keys themselves)."""
    from meshplane.cli_ops import key_table

    _check_output(output, "table", "yaml", "json")
    _request(
        server,
        token,
        cacert,
        lambda client: client.list_keys(application, project),
        lambda views: _print_views(views, output, key_table),
    )


@keys_app.command("revoke")
def keys_revoke(
    application: Annotated[str, typer.Argument()],
    key_id: Annotated[str, typer.Argument(help="as keys list shows it")],
    project: ProjectOpt = "default",
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """Revoke a key: every gateway refuses it once its configuration catches up."""
    _request(
        server,
        token,
        cacert,
        lambda client: client.revoke_key(application, key_id, project),
        lambda revoked: out.print(
            f"key {revoked['id']} of {revoked['application']} revoked", markup=False, highlight=False
        ),
    )


@keys_app.command("rotate")
def keys_rotate(
    application: Annotated[str, typer.Argument()],
    key_id: Annotated[str, typer.Argument(help="the key to replace")],
    overlap: Annotated[str | None, typer.Option(help="how long the old key keeps working [24h]")] = None,
    expires_in: ExpiresInOpt = None,
    key_only: KeyOnlyOpt = False,
    output: OutputOpt = "table",
    project: ProjectOpt = "default",
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """Issue a key to replace another and print it; the old one works for the overlap, then stops."""
    _check_issue_output(output, key_only)
    _request(
        server,
        token,
        cacert,
        lambda client: client.rotate_key(application, key_id, project, overlap, expires_in),
        lambda answer: _print_issued(answer, output, key_only),
    )


@signing_keys_app.command("rotate")
def signing_keys_rotate(server: ServerUrl = DEFAULT_SERVER, token: TokenOpt = None, cacert: CaCertOpt = None) -> None:
    """Sign new API keys with a new key; keys signed before keep working until their signer is retired."""
    _request(
        server,
        token,
        cacert,
        lambda client: client.rotate_signing_key(),
        lambda answer: out.print(f"signing key {answer['kid']} now signs new API keys", markup=False, highlight=False),
    )


@signing_keys_app.command("retire")
def signing_keys_retire(
    kid: Annotated[str, typer.Argument(help="the signing key's id, as rotate printed it")],
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """Retire a signing key: every API key it signed stops working."""
    _request(
        server,
        token,
        cacert,
        lambda client: client.retire_signing_key(kid),
        lambda _: out.print(f"signing key {kid} retired", markup=False, highlight=False),
    )


@app.command()
def render(
    files: Annotated[list[Path], typer.Option("-f", "--filename", help="YAML file (repeatable)")],
    cluster: Annotated[str, typer.Option("--cluster", help="the cluster to compute")],
    trust_domain: Annotated[
        str, typer.Option("--trust-domain", help="Istio's trust domain, as the server's trust_domain setting")
    ] = "cluster.local",
) -> None:
    """Print what CLUSTER would receive, from files alone: placed objects and rendered Istio / DNS objects."""
    from meshplane.server.render.offline import project_documents

    with user_errors():
        docs = [doc for path in files for doc in load_documents(path.read_text())]
        objects = project_documents(docs, cluster, trust_domain)
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False))


@app.command()
def demo(
    data_dir: Annotated[Path, typer.Option(help="where the demo keeps its state")] = Path(".meshplane-demo"),
) -> None:
    """Run a whole embedded setup on localhost: server, agent, Envoy and a sample upstream."""
    from meshplane.demo import run_demo

    run_until_signalled(lambda stop: run_demo(data_dir, stop))


@app.command()
def crds(
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="write one file per kind into this directory (deploy/crds)")
    ] = None,
) -> None:
    """Print the CustomResourceDefinitions of every kind an agent applies, as multi-document YAML."""
    from meshplane.model.crds import GENERATED_HEADER, crd_documents, crd_files, custom_resource_definitions

    if out_dir is None:
        sys.stdout.write(crd_documents(custom_resource_definitions()))
        return
    with user_errors():
        files = crd_files()
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (out_dir / name).write_text(text)
            out.print(f"wrote {out_dir / name}", highlight=False)
        # A kind that left the registry leaves no CRD behind; hand-written files are not ours to remove.
        for stale in sorted(out_dir.glob("*.yaml")):
            if stale.name not in files and stale.read_text().startswith(GENERATED_HEADER):
                stale.unlink()
                out.print(f"removed {stale}", highlight=False)


@tokens_app.command("create")
def tokens_create(
    name: Annotated[str, typer.Argument(help="what the token is for, e.g. ci-shop")],
    role: Annotated[str, typer.Option(help="admin, publisher, subscriber or viewer")],
    project: Annotated[str | None, typer.Option("-p", "--project", help="the one project it covers [all]")] = None,
    expires_in: Annotated[str | None, typer.Option("--expires-in", help="e.g. 720h [until revoked]")] = None,
    token_only: Annotated[bool, typer.Option("--token-only", help="print the token alone")] = False,
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """Create a bearer token and print it once: the server keeps only its digest."""
    from meshplane.cli_ops import token_table

    def show(answer: dict[str, Any]) -> None:
        if token_only:
            sys.stdout.write(answer["token"] + "\n")
            return
        _print_table(token_table([answer]))
        sys.stdout.write(f"\n{answer['token']}\n\nStore this token now: it is not shown again.\n")

    _request(server, token, cacert, lambda client: client.create_token(name, role, project, expires_in), show)


@tokens_app.command("list")
def tokens_list(
    output: OutputOpt = "table", server: ServerUrl = DEFAULT_SERVER, token: TokenOpt = None, cacert: CaCertOpt = None
) -> None:
    """Every token (never the tokens themselves)."""
    from meshplane.cli_ops import token_table

    _check_output(output, "table", "yaml", "json")
    _request(
        server,
        token,
        cacert,
        lambda client: client.list_tokens(),
        lambda views: _print_views(views, output, token_table),
    )


@tokens_app.command("revoke")
def tokens_revoke(
    token_id: Annotated[str, typer.Argument()],
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """Revoke a token: every server refuses it within seconds."""
    _request(
        server,
        token,
        cacert,
        lambda client: client.revoke_token(token_id),
        lambda _: out.print(f"token {token_id} revoked", highlight=False),
    )


@tls_app.command("create")
def tls_create(
    name: Annotated[str, typer.Argument(help="the TLSCertificate, as a Gateway listener's certificateRefs names it")],
    cert: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="PEM certificate chain, leaf first")],
    key: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="its unencrypted PEM private key")],
    project: ProjectOpt = "default",
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """Create or replace a TLSCertificate from a certificate and key on disk, so the key never sits in a YAML
    file; the server stores it sealed and no read returns it."""
    with user_errors():
        spec = {"certificate": cert.read_text(), "privateKey": key.read_text()}
    doc = {"apiVersion": API_VERSION, "kind": "TLSCertificate", "metadata": {"name": name}, "spec": spec}
    _request(
        server,
        token,
        cacert,
        lambda client: client.put(doc, project),
        _print_applied,
    )


RolloutArg = Annotated[str, typer.Argument(help="the rollout (e.g. api-orders), or with NAME the object's KIND")]
ObjectNameArg = Annotated[str | None, typer.Argument(help="the object whose rollout it is (with KIND)")]


def _rollout_named(first: str, second: str | None) -> str:
    """A Rollout's name, given as such or as the KIND and NAME of the object it rolls out."""
    from meshplane.model.registry import REGISTRY
    from meshplane.model.rollouts import rollout_name

    if second is None:
        return first
    try:
        return rollout_name(REGISTRY.resolve(first).kind, second)
    except UnknownKind as exc:
        raise typer.BadParameter(str(exc), param_hint="KIND") from None


@rollout_app.command("list")
def rollout_list(
    every: Annotated[bool, typer.Option("--all", help="ended rollouts too [active ones only]")] = False,
    output: OutputOpt = "table",
    project: ProjectOpt = "default",
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """A project's rollouts: the object, its revision from → to, the phase, the wave it is at and why."""
    from meshplane.cli_rollouts import is_active, rollout_table

    _check_output(output, "table", "yaml", "json")

    def show(rollouts: list[dict[str, Any]]) -> None:
        shown = [r for r in rollouts if every or is_active(r)]
        _print_views(shown, output, rollout_table)

    _request(server, token, cacert, lambda client: client.list("Rollout", project), show)


@rollout_app.command("status")
def rollout_status(
    rollout: RolloutArg,
    name: ObjectNameArg = None,
    output: OutputOpt = "table",
    project: ProjectOpt = "default",
    server: ServerUrl = DEFAULT_SERVER,
    token: TokenOpt = None,
    cacert: CaCertOpt = None,
) -> None:
    """One rollout wave by wave: each cluster's state, message and since when, and each wave's bake."""
    from meshplane.cli_rollouts import status_view

    _check_output(output, "table", "yaml", "json")
    named = _rollout_named(rollout, name)

    def show(found: dict[str, Any]) -> None:
        if output == "table":
            out.print(status_view(found, datetime.now(UTC)), soft_wrap=True)
        else:
            _print_data(found, output)

    _request(server, token, cacert, lambda client: _rollout_call(client.get("Rollout", named, project), named), show)


async def _rollout_call(call: Awaitable[T], name: str, action: str | None = None) -> T:
    """A rollout read or action, its refusals said in the rollout's words."""
    try:
        return await call
    except ApiError as exc:
        verb = f"{action} rollout {name!r}" if action else f"read rollout {name!r}"
        why = {
            403: f"not allowed to {verb}: {exc.detail}",
            404: f"{exc.detail} (a rollout is named after its object, e.g. api-orders; see meshplane rollout list)",
            409: f"cannot {verb}: {exc.detail}",
        }
        if exc.status in why:
            raise ApiError(exc.status, why[exc.status]) from None
        raise


def _rollout_action(action: str, done: str) -> Callable[..., None]:
    def act(
        rollout: RolloutArg,
        name: ObjectNameArg = None,
        project: ProjectOpt = "default",
        server: ServerUrl = DEFAULT_SERVER,
        token: TokenOpt = None,
        cacert: CaCertOpt = None,
    ) -> None:
        named = _rollout_named(rollout, name)
        _request(
            server,
            token,
            cacert,
            lambda client: _rollout_call(client.act_on_rollout(named, action, project), named, action),
            lambda acted: out.print(
                f"rollout {named} {done}: {acted['spec']['phase']}, {acted['spec'].get('reason', '')}",
                markup=False,
                highlight=False,
            ),
        )

    return act


for _action, _done, _help in (
    ("pause", "paused", "Hold a progressing rollout where it is: no further cluster is given the change."),
    ("resume", "resumed", "Go on with a paused rollout (a failed wave is judged afresh)."),
    ("promote", "promoted", "Give every placed cluster the change now, skipping the remaining waves and bakes."),
    ("abort", "aborted", "Stop a rollout: the object goes back to the version before the change (or away if new)."),
):
    rollout_app.command(_action, help=_help)(_rollout_action(_action, _done))


def main() -> None:
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
    app()
