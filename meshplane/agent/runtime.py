"""The agent process: local state, sync from the control plane, translation, and the gateways' xDS."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Mapping
from typing import Any

import grpc
from envoy.config.core.v3 import base_pb2
from google.protobuf import any_pb2

from meshplane import __version__
from meshplane.agent.admin import admin_app, admin_token
from meshplane.agent.apply_span import apply_span
from meshplane.agent.gateway import (
    ENFORCERS,
    ENVOY_TYPE_ORDER,
    RATELIMITERS,
    GatewayPublisher,
    PublishOutcome,
    gateway_group,
)
from meshplane.agent.kube import KubeApplier, KubeClient
from meshplane.agent.kube.desired import DesiredObject, ObjectKey, desired_objects
from meshplane.agent.kube.operator import KubeOperator
from meshplane.agent.kube.serviceaccount import in_pod
from meshplane.agent.kube.services import ServiceKey, ServiceWatch
from meshplane.agent.local import LocalAPIs
from meshplane.agent.reporter import Reporter
from meshplane.agent.service_catalog import ServiceCatalogSync
from meshplane.agent.state import HeldResource, LocalState
from meshplane.agent.translate import GatewaySettings, translate_apis
from meshplane.agent.translate.catalog import Catalog
from meshplane.agent.translate.service_backends import LocalServices, service_key
from meshplane.agent.translate.services import Resources, enforcer_resources, ratelimiter_resources
from meshplane.agent.translate.targets import BackendPolicy, ProtectedPort
from meshplane.agent.translate.translate import api_views, refused_apis
from meshplane.config import AgentSettings, split_address
from meshplane.lifecycle import Backoff, HttpServer, Supervisor, retry_forever
from meshplane.model.kinds import APISpec, EastWestGateway
from meshplane.model.manifests import DELIVERED_TYPE_URLS, MANIFEST_TYPE, from_manifest
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import InvalidObject, Resource
from meshplane.model.status import DeliveryState
from meshplane.model.wire import from_message, resource_name
from meshplane.observability.grpc_tracing import TraceUnaryCalls
from meshplane.observability.logging import get_logger
from meshplane.observability.metrics import AGENT_UPDATES
from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc, resources_pb2
from meshplane.security.tls import INSECURE_WARNING, AgentCredentials, agent_channel_options
from meshplane.xds.cache import ResourceCache
from meshplane.xds.client import RECONNECT_CHANNEL_OPTIONS, DeltaClient, DeltaUpdate, UpdateRejected
from meshplane.xds.resource import pack
from meshplane.xds.server import XdsServer, add_to_server

log = get_logger("meshplane.agent")

API_TYPE = REGISTRY.get("API").type_url
ACCESS_KINDS = ("Application", "Subscription", "RateLimitPolicy", "ApplicationKey", "KeySet")
ACCESS_TYPES = tuple(REGISTRY.get(kind).type_url for kind in ACCESS_KINDS)
_DELIVERY_STATES = {
    DeliveryState.PENDING: control_plane_pb2.PENDING,
    DeliveryState.APPLIED: control_plane_pb2.APPLIED,
    DeliveryState.FAILED: control_plane_pb2.FAILED,
}


Held = Resource | dict[str, Any]
"""What the agent holds of a delivered resource: a validated object, or a rendered Kubernetes object."""


def decode(type_url: str, body: bytes) -> Held:
    """A delivered message back to its validated model, or to the Kubernetes object of a rendered
    manifest (InvalidObject / DecodeError / KeyError on bad input)."""
    if type_url == MANIFEST_TYPE:
        return from_manifest(resources_pb2.Manifest.FromString(body))
    info = REGISTRY.by_type_url(type_url)
    message = info.message()  # type: ignore[misc]
    message.ParseFromString(body)
    return from_message(info, message)


class Agent:
    def __init__(
        self,
        settings: AgentSettings,
        channel_credentials: grpc.ChannelCredentials | None = None,
    ):
        self.settings = settings
        # mTLS unless told otherwise; TlsConfigError (no certificate configured) stops the agent here.
        # Credentials handed in are kept as they are; those from the settings' files follow the files.
        self._tls = None if channel_credentials is not None else AgentCredentials(settings)
        self.channel_credentials = channel_credentials or (self._tls.current if self._tls is not None else None)
        # AdminTokenError (a token file without a token) stops the agent here too.
        self.admin_token = admin_token(settings)
        self.gateway_cache = ResourceCache()
        gw_host, gw_port = split_address(settings.gateway_address)
        self.gateway_settings = GatewaySettings(
            listener_address=gw_host,
            listener_port=gw_port,
            enforcer_address=settings.enforcer_address,
            ratelimiter_address=settings.ratelimiter_address,
            enforcer_fail_open=settings.enforcer_failure_mode == "open",
            ratelimiter_fail_closed=settings.ratelimiter_failure_mode == "closed",
            cluster_domain=settings.cluster_domain,
            jwks_ca_file=settings.jwks_ca_file,
            xff_num_trusted_hops=settings.xff_num_trusted_hops,
            backends=backend_policy(settings),
        )
        self.publisher = GatewayPublisher(
            self.gateway_cache, self.gateway_settings.listener_name, self.gateway_settings.route_config_name
        )
        self.objects: dict[str, dict[str, Held]] = {}
        self.serving: dict[str, dict[str, Held]] = {}
        self.reporter: Reporter | None = None
        self.state: LocalState | None = None
        self._channel: grpc.aio.Channel | None = None
        self._superseded: list[grpc.aio.Channel] = []
        self.kube: KubeApplier | None = None
        self.operator: KubeOperator | None = None
        self.services: ServiceWatch | None = None
        self.service_sync: ServiceCatalogSync | None = None
        self.local: LocalAPIs | None = None
        self._local_changes: dict[tuple[str, str], str | None] = {}
        self._local_task: asyncio.Task[None] | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self._expiry_task: asyncio.Task[None] | None = None
        self._rebuilding = asyncio.Lock()

    def _open_channel(self) -> grpc.aio.Channel:
        options = [
            ("grpc.keepalive_time_ms", 20_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.http2.ping_timeout_ms", 10_000),
            ("grpc.enable_retries", 1),
            ("grpc.service_config", self.settings.retry.service_config("meshplane.v1.ControlPlane")),
            *RECONNECT_CHANNEL_OPTIONS,
            *agent_channel_options(self.settings),
        ]
        interceptors = [TraceUnaryCalls()]
        if self.channel_credentials is None:
            log.warning(INSECURE_WARNING)
            return grpc.aio.insecure_channel(self.settings.server, options=options, interceptors=interceptors)
        return grpc.aio.secure_channel(
            self.settings.server, self.channel_credentials, options=options, interceptors=interceptors
        )

    def channel(self) -> grpc.aio.Channel:
        """The channel new calls to the server go on: a new one once the certificate files changed, so new
        connections carry the new certificate while the sync stream on the old channel goes on (the sync
        client closes that channel when it reconnects)."""
        assert self._channel is not None
        renewed = self._tls.renewed() if self._tls is not None else None
        if renewed is not None:
            self.channel_credentials = renewed
            self._superseded.append(self._channel)
            self._channel = self._open_channel()
        return self._channel

    async def _load_state(self) -> LocalState:
        state = await LocalState.open(self.settings.state_dir)
        for type_url in DELIVERED_TYPE_URLS:
            held = self.objects.setdefault(type_url, {})
            for name, resource in state.resources(type_url).items():
                try:
                    held[name] = decode(type_url, resource.body)
                except (InvalidObject, ValueError) as exc:
                    log.error("held resource no longer validates; skipped", name=name, error=str(exc))
        return state

    def _servable(self) -> dict[str, dict[str, Held]]:
        """What the gateways should serve: everything held, except versions they rejected.

        The cluster's own APIs are served as its Kubernetes has them now, never as the control plane's
        copy of them: one API each, and one deleted in the cluster is gone without the control plane.
        """
        assert self.state is not None and self.local is not None
        servable = {
            type_url: self._unrejected(type_url, held, self.state.versions(type_url))
            for type_url, held in self.objects.items()
        }
        apis = servable.setdefault(API_TYPE, {})
        for name in self._local_names():
            apis.pop(name, None)
        apis.update(self._unrejected(API_TYPE, self.local.objects, self.local.versions()))
        return servable

    def _unrejected(self, type_url: str, held: Mapping[str, Held], versions: Mapping[str, str]) -> dict[str, Held]:
        """`held`, except versions the gateways rejected: for those the last version they took stays in
        force (or nothing, for an object they never took)."""
        assert self.state is not None
        out: dict[str, Held] = {}
        for name, resource in held.items():
            if self.state.rejected.get((type_url, name)) != versions.get(name):
                out[name] = resource
            elif (good := self.serving.get(type_url, {}).get(name)) is not None:
                out[name] = good
        return out

    def _services(self) -> LocalServices | None:
        return self.services.specs() if self.services is not None else None

    def _refuse(self, servable: dict[str, dict[str, Held]]) -> dict[str, str]:
        """Take the APIs this cluster refuses (see translate.targets) out of `servable`, in place: an earlier
        version that it accepted stays in force, as after a gateway's rejection. Returns those refused."""
        apis = servable.get(API_TYPE, {})
        resources = [held for held in apis.values() if isinstance(held, Resource)]
        refused = refused_apis(resources, self.gateway_settings, self._services())
        for name in refused:
            good = self.serving.get(API_TYPE, {}).get(name)
            if isinstance(good, Resource) and not refused_apis([good], self.gateway_settings, self._services()):
                apis[name] = good
            else:
                apis.pop(name, None)
        return refused

    async def _publish(self, servable: dict[str, dict[str, Held]]) -> PublishOutcome:
        now = time.time()
        resources = [held for held in servable.get(API_TYPE, {}).values() if isinstance(held, Resource)]
        apis = api_views(resources)
        held = [obj for type_url in ACCESS_TYPES for obj in servable.get(type_url, {}).values()]
        catalog = Catalog.of(obj for obj in held if isinstance(obj, Resource))
        self._set_services(ENFORCERS, enforcer_resources(apis, catalog))
        self._set_services(RATELIMITERS, ratelimiter_resources(apis, self.gateway_settings, catalog))
        self._wake_at(catalog.next_expiry(now))
        config = translate_apis(resources, self.gateway_settings, catalog, now, self._services())
        return await self.publisher.publish(config)

    def _set_services(self, group: str, resources: Resources) -> None:
        """Enforcers and rate limiters take their resources as they come: no ordering to respect."""
        packed = {kind: {name: pack(name, msg) for name, msg in items.items()} for kind, items in resources.items()}
        self.gateway_cache.set_snapshot(group, packed)

    def _wake_at(self, moment: float | None) -> None:
        """Tell the gateways again when a key record runs out (a rotation's overlap ends)."""
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        if moment is not None:
            loop = asyncio.get_running_loop()
            delay = max(0.0, moment - time.time()) + 0.05
            self._expiry = loop.call_later(delay, self._rebuild_later)

    def _rebuild_later(self) -> None:
        self._expiry = None
        self._expiry_task = asyncio.create_task(self.rebuild(), name="key-expiry")

    async def rebuild(self, changed: Mapping[tuple[str, str], str] | None = None, report: bool = True) -> None:
        """Publish what is held to the gateways and report how `changed` (type URL, name -> version) fared
        (unless `report` is False: the cluster's own objects have no delivered version to report).

        When the gateways reject the new configuration, the changed versions are remembered as rejected
        and the last good configuration is published again: Envoy keeps serving it, and so do we.
        """
        async with self._rebuilding:  # one at a time: sync, local CRs, key expiry and services all ask
            assert self.state is not None
            servable = self._servable()
            refused = self._refuse(servable)
            outcome = await self._publish(servable)
            if outcome.state is DeliveryState.FAILED and changed:
                log.warning("gateways rejected the configuration; keeping the last good one", reason=outcome.message)
                for (type_url, name), version in changed.items():
                    if not (type_url == API_TYPE and name in refused):  # refused here, never offered to Envoy
                        await self.state.reject(type_url, name, version)
                servable = self._servable()
                self._refuse(servable)
                await self._publish(servable)
            if outcome.state is not DeliveryState.FAILED or changed:
                self.serving = servable
            reported = {**self._refusals_changed(refused), **(changed if report and changed else {})}
            await self.state.keep_refused(refused)
            if reported and self.reporter is not None:
                await self.reporter.report_status(
                    [
                        _delivery(type_url, name, version, outcome, refused if type_url == API_TYPE else {})
                        for (type_url, name), version in reported.items()
                        if type_url != MANIFEST_TYPE  # rendered manifests report once they are applied to Kubernetes
                    ]
                )
        if self.kube is not None:
            self.kube.trigger()

    def _refusals_changed(self, refused: Mapping[str, str]) -> dict[tuple[str, str], str]:
        """Delivered APIs whose refusal here began, ended or changed reason without a new version (the
        agent's settings changed across a restart, or a service backend moved): their status must say so."""
        assert self.state is not None
        versions = self.state.versions(API_TYPE)
        local = self.local.objects if self.local is not None else {}
        before = self.state.refused
        names = {name for name in {*refused, *before} if refused.get(name) != before.get(name)}
        return {(API_TYPE, name): versions[name] for name in sorted(names) if name in versions and name not in local}

    def _kube_desired(self) -> dict[ObjectKey, DesiredObject]:
        """What this cluster's Kubernetes should hold now: every held API object and rendered manifest."""
        assert self.state is not None
        versions = {type_url: self.state.versions(type_url) for type_url in self.objects}
        # Objects this cluster made itself come back from the control plane: they stay the cluster's own.
        own = {type_url: dict(held) for type_url, held in self.objects.items()}
        for name in self._local_names():
            own.get(API_TYPE, {}).pop(name, None)
        return desired_objects(own, versions, frozenset({API_TYPE}))

    def _local_names(self) -> list[str]:
        """Names (project/name) of held API objects whose origin is this cluster."""
        origin = f"cluster/{self.settings.cluster}"
        return [
            name
            for name, held in self.objects.get(API_TYPE, {}).items()
            if isinstance(held, Resource) and held.metadata.origin == origin
        ]

    async def keep_local(self, project: str, name: str, api: Resource | None) -> str | None:
        """The operator saw the cluster's own API change (None: gone, or no longer servable); serve that soon.
        Returns why this cluster will not serve it (see translate.targets), or None."""
        assert self.local is not None
        key = resource_name(project, name)
        refusal = refused_apis([api], self.gateway_settings, self._services()).get(key) if api is not None else None
        if not await self.local.keep(key, api):
            return refusal
        self._local_changes[(API_TYPE, key)] = self.local.versions().get(key)
        if self._local_task is None or self._local_task.done():
            self._local_task = asyncio.create_task(self._serve_local(), name="local-apis")
        return refusal

    async def _serve_local(self) -> None:
        """Rebuild for the local changes; those made during a rebuild are taken by one more, together."""
        while self._local_changes:
            changes, self._local_changes = self._local_changes, {}
            try:
                await self.rebuild({key: version for key, version in changes.items() if version}, report=False)
            except Exception:  # a bug here must not stop the agent serving what it served
                log.exception("serving the cluster's own APIs failed")

    def _own_apis(self) -> list[tuple[str, str]]:
        """(namespace, name) of every API the cluster made that the agent knows: kept, or back from the
        control plane; the operator reports those it no longer finds as deleted."""
        assert self.local is not None
        names = {*self._local_names(), *self.local.objects}
        return [(project, name) for project, _, name in (key.partition("/") for key in sorted(names))]

    async def _services_changed(self, keys: set[ServiceKey] | None) -> None:
        """The cluster's services changed (None: all of them, the first time): report them, and serve again
        if an API sends to one of them."""
        assert self.service_sync is not None
        self.service_sync.changed()
        named = {
            service_key(backend.service)
            for held in self.serving.get(API_TYPE, {}).values()
            if isinstance(held, Resource) and isinstance(held.spec, APISpec)
            for backend in held.spec.backends
            if backend.service is not None
        }
        if keys is not None and not keys & named:
            return
        try:
            await self.rebuild()
        except Exception:  # a bug here must not stop the agent following its services
            log.exception("serving the changed services failed")

    async def apply_update(self, update: DeltaUpdate) -> None:
        """Validate a whole delta before keeping any of it: a bad resource NACKs the response."""
        with apply_span(update, self.settings.cluster):
            await self._apply_update(update)

    async def _apply_update(self, update: DeltaUpdate) -> None:
        assert self.state is not None
        decoded: dict[str, Resource] = {}
        upserts = []
        for resource in update.upserts:
            message_bytes = _unpack(resource.resource, update.type_url)
            try:
                decoded[resource.name] = decode(update.type_url, message_bytes)
            except (InvalidObject, ValueError, KeyError) as exc:
                AGENT_UPDATES.labels("rejected").inc()
                raise UpdateRejected(f"{resource.name}: {exc}") from None
            upserts.append(HeldResource(resource.name, resource.version, message_bytes))
        await self.state.apply(update.type_url, upserts, update.removed)
        changed = {(update.type_url, r.name): r.version for r in upserts}
        held = self.objects.setdefault(update.type_url, {})
        held.update(decoded)
        for name in update.removed:
            held.pop(name, None)
        AGENT_UPDATES.labels("applied").inc()
        log.info(
            "update applied", type=update.type_url.rsplit(".", 1)[-1], upserts=len(upserts), removed=len(update.removed)
        )
        await self.rebuild(changed)

    async def register(self) -> None:
        """Announce this cluster until the server answers; the gateways keep serving meanwhile."""
        response = await retry_forever(
            self._register_once,
            what="registering with the control plane",
            backoff=Backoff.of(self.settings.retry),
            retry_on=(grpc.aio.AioRpcError,),
            logger=log,
        )
        log.info("registered with the control plane", revision=response.revision)

    async def _register_once(self) -> control_plane_pb2.RegisterClusterResponse:
        stub = control_plane_pb2_grpc.ControlPlaneStub(self.channel())
        return await stub.RegisterCluster(
            control_plane_pb2.RegisterClusterRequest(
                cluster=self.settings.cluster, agent_version=__version__, labels=self.settings.labels
            ),
            timeout=5,
        )

    async def sync(self) -> None:
        assert self.state is not None
        state = self.state
        await self.register()
        client = DeltaClient(
            self.channel,
            base_pb2.Node(id=self.settings.cluster, cluster=self.settings.cluster),
            DELIVERED_TYPE_URLS,
            initial_versions=state.versions,
            on_update=self.apply_update,
            backoff=Backoff.of(self.settings.retry),
        )
        await client.run()

    async def run(self, stop: asyncio.Event) -> None:
        backoff = Backoff.of(self.settings.retry)
        self.state = await self._load_state()
        self.local = LocalAPIs.load(self.state)
        self.reporter = Reporter(self.state, self.channel, self.settings.cluster, backoff=backoff)
        kube_client = _kube_client(self.settings)
        if kube_client is not None:
            self.kube = KubeApplier(kube_client, self._kube_desired, self.reporter.report_status, backoff=backoff)
            self.operator = KubeOperator(
                kube_client,
                self.reporter.report_objects,
                self.kube.notice,
                self.keep_local,
                known_local=self._own_apis,
                is_delivered=lambda key: key in self._kube_desired(),
                backoff=backoff,
            )
            self.reporter.objects_refused = self.operator.refused
            self.services = ServiceWatch(
                kube_client,
                self.settings.cluster,
                _east_west_gateway(self.settings),
                self._services_changed,
                backoff=backoff,
            )
            self.service_sync = ServiceCatalogSync(
                self.channel,
                self.settings.cluster,
                self.services.reportable,
                backoff=backoff,
            )
        await self.rebuild()
        admin = HttpServer(admin_app(self, self.admin_token), self.settings.admin_address, what="agent's admin")
        admin.bind()  # a port in use stops the agent before it serves anything
        xds = grpc.aio.server()
        add_to_server(
            XdsServer(
                self.gateway_cache,
                node_group=gateway_group,
                type_order=ENVOY_TYPE_ORDER,
                callbacks=self.publisher,
                name="gateway",
            ),
            xds,
        )
        xds.add_insecure_port(self.settings.xds_address)
        await xds.start()
        log.info(
            "agent serving gateways",
            cluster=self.settings.cluster,
            xds=self.settings.xds_address,
            admin=self.settings.admin_address,
            held=sum(len(v) for v in self.objects.values()),
        )
        self._channel = self._open_channel()
        try:
            async with Supervisor("agent", backoff) as tasks:
                tasks.start("agent-admin", admin.serve, on_failure="exit")
                tasks.start("cp-sync", self.sync, on_failure="exit")
                tasks.start("reports", self.reporter.run, on_failure="restart")
                for name, task in (
                    ("kube-apply", self.kube),
                    ("kube-operator", self.operator),
                    ("kube-services", self.services),
                    ("service-catalog", self.service_sync),
                ):
                    if task is not None:
                        tasks.start(name, task.run, on_failure="restart")
                await stop.wait()
        finally:
            admin.close()
            if self._local_task is not None:
                self._local_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._local_task
            await xds.stop(grace=0.5)
            for channel in (*self._superseded, self._channel):
                await channel.close()
            if kube_client is not None:
                await kube_client.close()
            await self.state.close()


def backend_policy(settings: AgentSettings) -> BackendPolicy:
    """What this agent's gateways may reach for an API: never its own admin and xDS, nor Envoy's admin."""
    ports = (
        ("the agent's xDS", settings.xds_address),
        ("the agent's admin", settings.admin_address),
        ("Envoy's admin", settings.envoy_admin_address),
    )
    return BackendPolicy(
        allow_loopback=settings.allow_loopback_backends,
        protected=tuple(ProtectedPort(what, *split_address(address)) for what, address in ports),
    )


def _delivery(
    type_url: str, name: str, version: str, outcome: PublishOutcome, refused: Mapping[str, str]
) -> control_plane_pb2.ObjectDelivery:
    """How one object fared: refused by this cluster (with the reason), else as the gateways took the whole."""
    if name in refused:
        state, message = control_plane_pb2.FAILED, f"not served on this cluster: {refused[name]}"
    else:
        state, message = _DELIVERY_STATES[outcome.state], outcome.message
    return control_plane_pb2.ObjectDelivery(type_url=type_url, name=name, version=version, state=state, message=message)


def _kube_client(settings: AgentSettings) -> KubeClient | None:
    """The cluster's Kubernetes: by the kubeconfig when one is given, else as the pod's service account
    (asked for, or found when unset), else none: the agent then runs on its local state alone."""
    if settings.kubeconfig is not None:
        return KubeClient.from_kubeconfig(settings.kubeconfig)
    if settings.in_cluster or (settings.in_cluster is None and in_pod(os.environ)):
        return KubeClient.in_cluster()
    return None


def _east_west_gateway(settings: AgentSettings) -> EastWestGateway | None:
    if settings.east_west_gateway is None:
        return None
    host, port = split_address(settings.east_west_gateway)
    return EastWestGateway(address=host, port=port)


def _unpack(body: any_pb2.Any, type_url: str) -> bytes:
    if body.type_url != type_url:
        raise UpdateRejected(f"resource of type {body.type_url} in a {type_url} response")
    return body.value
