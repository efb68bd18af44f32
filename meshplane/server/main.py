"""The management server process: store, projection, sync gRPC and the north REST API together."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import ssl
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import partial

import grpc
import uvicorn
from envoy.config.core.v3 import base_pb2

from meshplane.config import ServerSettings
from meshplane.lifecycle import HttpServer, Supervisor, wait_at_most
from meshplane.model.kinds import APISpec
from meshplane.model.meta import check_name
from meshplane.observability.grpc_metrics import MeasureCalls
from meshplane.observability.grpc_tracing import TraceUnaryHandlers
from meshplane.observability.logging import get_logger
from meshplane.observability.metrics import CONNECTED_AGENTS
from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc
from meshplane.security.identity import ClusterIdentityInterceptor, authorize_cluster
from meshplane.security.revocation import RevocationCheck, RevokedCertificates
from meshplane.security.tls import (
    INSECURE_WARNING,
    TlsConfigError,
    keep_north_certificate_fresh,
    server_credentials,
)
from meshplane.server.access_checks import ApiLookup, KnownApis
from meshplane.server.app import create_app
from meshplane.server.auth.guard import Authenticator, FailureBrake
from meshplane.server.auth.oidc import OidcSettings, OidcVerifier
from meshplane.server.auth.tokens import TokenService
from meshplane.server.compaction import Compactor
from meshplane.server.console_sign_in import console_oidc
from meshplane.server.control_plane import ClusterRegistry, ControlPlaneService, delivery_of, now
from meshplane.server.feeder import ProjectionFeeder
from meshplane.server.leader import Leadership
from meshplane.server.manifests import ManifestProjection
from meshplane.server.objects import ObjectService
from meshplane.server.projection import FleetProjection
from meshplane.server.rollouts import RolloutDriver
from meshplane.server.sealing import Sealer, data_key_of
from meshplane.server.signing import SigningKeys, publish_key_set
from meshplane.server.status import StatusRollup
from meshplane.store.errors import AlreadyExists
from meshplane.store.store import Store
from meshplane.xds.cache import ResourceCache
from meshplane.xds.server import NoCallbacks, XdsServer, add_to_server

log = get_logger("meshplane.server")

DEFAULT_PROJECT = "default"
GC_THRESHOLDS = (50_000, 20, 100)
"""Allocations before a young collection (Python's default: 700), and young/middle collections per older one."""
COMPRESS_FROM = 8 * 1024
"""Sync responses from this size on are gzipped: catch-ups and first syncs shrink several times, while a
single change (well under it) costs no compression CPU on the fan-out path."""


def keepalive_options(interval: float, timeout: float) -> list[tuple[str, int]]:
    """Ping every agent after `interval` seconds of silence and drop it after `timeout` more: a stalled
    link (no FIN, no RST) ends its stream, and so marks its cluster disconnected, within both."""
    return [
        ("grpc.keepalive_time_ms", int(interval * 1000)),
        ("grpc.keepalive_timeout_ms", int(timeout * 1000)),
        # grpcio bounds the keepalive ping by the HTTP/2 ping timeout (60 s by default), not by the above.
        ("grpc.http2.ping_timeout_ms", int(timeout * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.http2.min_ping_interval_without_data_ms", 1000),
    ]


def cluster_of_node(node: base_pb2.Node, context: grpc.aio.ServicerContext) -> str:
    """The cache group of an agent's stream: its cluster, named by the node id and, over mTLS, by its certificate."""
    try:
        cluster = check_name(node.id)
    except ValueError as exc:
        raise PermissionError(f"node id: {exc}") from None
    authorize_cluster(context, cluster)
    return cluster


class ClusterPresence(NoCallbacks):
    """Marks clusters connected while their agent holds a sync stream, and keeps what it rejected."""

    def __init__(self, clusters: ClusterRegistry, reported: Callable[[], None]):
        self.clusters = clusters
        self.reported = reported
        self.streams: dict[str, int] = {}

    async def on_nack(
        self, group: str, node: base_pb2.Node, type_url: str, versions: Mapping[str, str], message: str
    ) -> None:
        """An agent refused a delivery: that version is Failed at that cluster, with the agent's reason."""
        at = datetime.now(UTC)
        entries = [
            control_plane_pb2.ObjectDelivery(
                type_url=type_url, name=name, version=version, state=control_plane_pb2.FAILED, message=message
            )
            for name, version in versions.items()
        ]
        await self.clusters.store.record_deliveries(delivery_of(group, entry, at) for entry in entries)
        self.reported()

    async def on_stream_open(self, node: base_pb2.Node, group: str, delta: bool) -> None:
        self.streams[group] = self.streams.get(group, 0) + 1
        CONNECTED_AGENTS.set(len(self.streams))
        self.clusters.update_status(group, connected=True, lastSeen=now())

    async def on_stream_close(self, node: base_pb2.Node, group: str) -> None:
        self.streams[group] = self.streams.get(group, 1) - 1
        if self.streams[group] <= 0:
            self.streams.pop(group, None)
            CONNECTED_AGENTS.set(len(self.streams))
            self.clusters.update_status(group, connected=False, lastSeen=now())


def current_api_lookup(feeder: ProjectionFeeder, projection: FleetProjection) -> ApiLookup:
    """The projection's known APIs once it holds every write this server has answered, so two writes in a
    row from one client are checked against each other, and the write at `seen_from` (another replica's, say)."""

    async def lookup(spec: APISpec, seen_from: int) -> KnownApis:
        await feeder.reached(max(seen_from, feeder.store.committed))
        return KnownApis(*projection.api_lookup(spec), feeder.revision)

    return lookup


def quiet_garbage_collector() -> None:
    """Collect less often, and never again walk what is alive once the projection is loaded: with a thousand
    streams the cyclic collector's full passes otherwise land in the middle of pushes (at 1,000 agents they
    took the p99 of a change to the last agent from 243 ms to 410 ms). Memory is freed by reference
    counting as before; only cycles wait longer."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_LARGE_BUFFER = 128 * 1024


def return_large_buffers() -> None:
    """Give buffers of 128 KiB and more mappings of their own, handed back to the system when freed. glibc
    otherwise raises that threshold as large buffers come and go, and then keeps a burst of them (a thousand
    agents' first syncs at once) in its heap for good: at 1,000 agents the server held 8 KB more per agent.
    Nothing happens where the C library has no `mallopt`."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, _LARGE_BUFFER)
    mallopt(_M_TRIM_THRESHOLD, _LARGE_BUFFER)


def north_tls_context(config: uvicorn.Config) -> ssl.SSLContext:
    """uvicorn's TLS context of the north API, made before anything starts: a file that does not load stops
    the server naming it, and renewed files are loaded into this context later."""
    try:
        config.load()
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(
            f"cannot serve the north API over HTTPS with {config.ssl_certfile} and {config.ssl_keyfile}: {exc}"
        ) from None
    assert config.ssl is not None
    return config.ssl


async def ensure_default_project(store: Store) -> None:
    """A fresh server has a `default` project, as a fresh Kubernetes has a `default` namespace."""
    if await store.current_revision() == 0:
        with contextlib.suppress(AlreadyExists):
            await store.create("Project", "", DEFAULT_PROJECT, spec={"description": "Default project"})


def authenticator_for(settings: ServerSettings, tokens: TokenService) -> Authenticator:
    oidc = None
    if settings.oidc_issuer is not None:
        oidc = OidcVerifier(
            OidcSettings(
                issuer=settings.oidc_issuer,
                audience=settings.oidc_audience or "",
                jwks_uri=settings.oidc_jwks_uri,
                jwks=settings.oidc_jwks,
                roles_claim=settings.oidc_roles_claim,
                console_client_id=settings.oidc_console_client_id,
            )
        )
    return Authenticator(tokens, oidc, FailureBrake(settings.failed_auth_per_minute))


async def run_server(
    settings: ServerSettings,
    stop: asyncio.Event,
    grpc_credentials: grpc.ServerCredentials | None = None,
    *,
    own_process: bool = False,
) -> None:
    """Serve until `stop` is set, then shut everything down in order. `own_process`: the server is the
    process (the CLI), so it may set process-wide policy such as the garbage collector's and the allocator's."""
    if own_process:
        return_large_buffers()
    settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # it holds the CA's and signing keys
    if settings.insecure:
        log.warning(INSECURE_WARNING)
    elif grpc_credentials is None:
        grpc_credentials = server_credentials(settings)
    store = await Store.open(settings.store_url)
    await ensure_default_project(store)
    signing = SigningKeys(settings.data_dir / "signing")
    await publish_key_set(store, signing)
    tokens = TokenService(store)
    configured = settings.admin_token.get_secret_value() if settings.admin_token else None
    await tokens.bootstrap(settings.data_dir / "admin-token", configured)
    sealer = Sealer(data_key_of(settings.sealing_key_file, settings.data_dir))
    cache = ResourceCache()
    projection = FleetProjection(cache, sealer.open)
    revoked = RevokedCertificates()
    feeder = ProjectionFeeder(store, projection, ManifestProjection(cache, settings.trust_domain), revoked=revoked)
    clusters = ClusterRegistry(store)
    leadership = Leadership(store)
    rollup = StatusRollup(store, projection, clusters, leadership)
    compactor = Compactor(
        store,
        leadership,
        settings.event_retention,
        settings.compaction_interval,
        settings.history_keep,
        settings.audit_keep_days,
    )
    rollouts = RolloutDriver(store, projection, feeder, leadership, settings.rollout_interval)

    def reported() -> None:
        rollup.wake.set()
        rollouts.wake.set()

    grpc_server = grpc.aio.server(
        interceptors=[
            MeasureCalls(),
            TraceUnaryHandlers(),
            *([] if grpc_credentials is None else [RevocationCheck(revoked), ClusterIdentityInterceptor()]),
        ],
        options=keepalive_options(settings.keepalive_interval, settings.keepalive_timeout),
    )
    add_to_server(
        XdsServer(
            cache,
            node_group=cluster_of_node,
            callbacks=ClusterPresence(clusters, reported),
            name="sync",
            compress_from=COMPRESS_FROM,
        ),
        grpc_server,
    )
    api_lookup = current_api_lookup(feeder, projection)
    control_plane_pb2_grpc.add_ControlPlaneServicer_to_server(
        ControlPlaneService(clusters, reported, ObjectService(store, api_lookup, sealer, feeder.known_policies)),
        grpc_server,
    )

    app = create_app(
        store,
        ready=feeder.ready.is_set,
        authenticator=authenticator_for(settings, tokens),
        metrics_need_token=settings.metrics_need_token,
        max_body=settings.max_body_bytes,
        api_lookup=api_lookup,
        policy_lookup=feeder.known_policies,
        tokens=tokens,
        signing=signing,
        projection=projection,
        revocations=True,
        sealer=sealer,
        console_oidc=await console_oidc(settings),
    )
    http = HttpServer(
        app,
        settings.http_address,
        what="north API",
        ssl_certfile=settings.http_tls_cert,
        ssl_keyfile=settings.http_tls_key,
    )
    north_tls = north_tls_context(http.config) if settings.http_tls_cert is not None else None
    try:
        http.bind()  # a port in use stops the server before anything else starts
        if grpc_credentials is None:
            grpc_server.add_insecure_port(settings.grpc_address)
        else:
            grpc_server.add_secure_port(settings.grpc_address, grpc_credentials)
        async with Supervisor("server") as tasks:
            tasks.start("projection-feeder", feeder.run, on_failure="exit")
            await feeder.ready.wait()
            if own_process:
                quiet_garbage_collector()
            await grpc_server.start()
            try:
                tasks.start("leadership", leadership.run, on_failure="restart")
                tasks.start("status-rollup", rollup.run, on_failure="restart")
                tasks.start("compaction", compactor.run, on_failure="restart")
                tasks.start("rollouts", rollouts.run, on_failure="restart")
                if north_tls is not None and settings.http_tls_cert is not None and settings.http_tls_key is not None:
                    renewals = partial(
                        keep_north_certificate_fresh, north_tls, settings.http_tls_cert, settings.http_tls_key
                    )
                    tasks.start("north-certificate", renewals, on_failure="restart")
                tasks.start("north-api", http.serve, on_failure="exit")
                log.info("server started", http=settings.http_address, grpc=settings.grpc_address, store=store.dialect)
                await stop.wait()
            finally:
                log.info("server stopping")
                await grpc_server.stop(grace=1.0)
        with contextlib.suppress(Exception):
            await wait_at_most(5, clusters.flush())  # agents' disconnects, as the streams closed
    finally:
        http.close()
        await store.close()
