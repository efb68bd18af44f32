"""The agent process: local state, sync from the control plane, translation, and the gateways' xDS."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence

import grpc
from envoy.config.core.v3 import base_pb2
from google.protobuf import any_pb2
from starlette.applications import Starlette

from meshplane import __version__
from meshplane.agent.admin import admin_app, admin_token
from meshplane.agent.apply_span import apply_span
from meshplane.agent.channel import ControlPlaneChannel
from meshplane.agent.deadline import Deadline
from meshplane.agent.deliveries import delivery_reports
from meshplane.agent.figures import FiguresReporter
from meshplane.agent.gateway import (
    ENFORCERS,
    ENVOY_TYPE_ORDER,
    RATELIMITERS,
    GatewayPublisher,
    PublishOutcome,
    gateway_group,
    with_resources,
)
from meshplane.agent.holdings import API_TYPE, Held, Holdings
from meshplane.agent.kube import KubeClient
from meshplane.agent.kube.desired import DesiredObject, ObjectKey, desired_objects
from meshplane.agent.kube.gatewayapi import Program
from meshplane.agent.kube.services import ServiceKey
from meshplane.agent.kubernetes import (
    ClusterKubernetes,
    Kubernetes,
    NoKubernetes,
    gateway_api_program,
    kube_client,
)
from meshplane.agent.local import LocalAPIs
from meshplane.agent.reporter import Reporter
from meshplane.agent.state import HeldResource, LocalState
from meshplane.agent.translate import GatewaySettings, translate_apis
from meshplane.agent.translate.entitlements import Entitlements
from meshplane.agent.translate.feeds import Resources, enforcer_feed, limiter_feed
from meshplane.agent.translate.service_backends import service_key
from meshplane.agent.translate.targets import BackendPolicy, ProtectedPort
from meshplane.agent.translate.translate import api_views, refused_apis
from meshplane.config import AgentSettings, split_address
from meshplane.lifecycle import Backoff, HttpServer, Supervisor, retry_forever
from meshplane.model.gateways import TLSCertificateSpec
from meshplane.model.kinds import APISpec
from meshplane.model.manifests import DELIVERED_TYPE_URLS, MANIFEST_TYPE, from_manifest
from meshplane.model.registry import REGISTRY, Feed
from meshplane.model.resource import InvalidObject, Resource
from meshplane.model.sealed import SealedValue
from meshplane.model.status import DeliveryState
from meshplane.model.wire import from_message, resource_name
from meshplane.observability.logging import get_logger
from meshplane.observability.metrics import AGENT_UPDATES
from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc, resources_pb2
from meshplane.xds.cache import ResourceCache
from meshplane.xds.client import DeltaClient, DeltaUpdate, UpdateRejected
from meshplane.xds.resource import pack
from meshplane.xds.server import XdsServer, add_to_server

log = get_logger("meshplane.agent")

ACCESS_TYPES = tuple(info.type_url for info in REGISTRY.feeding(Feed.ACCESS))
GATEWAY_TYPE = REGISTRY.get("Gateway").type_url
CERTIFICATE_TYPE = REGISTRY.get("TLSCertificate").type_url


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
    """One cluster's agent as `assemble` makes it: every collaborator present, Kubernetes or none."""

    def __init__(
        self,
        settings: AgentSettings,
        channel: ControlPlaneChannel,
        state: LocalState,
        admin_token: str | None,
        kube: KubeClient | None,
        program: Program | None = None,
    ):
        """`program`: the Gateway API core, to serve the cluster's Gateway API objects (None: they are not)."""
        self.settings = settings
        self.channel = channel
        self.state = state
        self.admin_token = admin_token
        self.gateway_settings = gateway_settings(settings)
        self.gateway_cache = ResourceCache()
        self.publisher = GatewayPublisher(
            self.gateway_cache, self.gateway_settings.listener_name, self.gateway_settings.route_config_name
        )
        self.objects = held_objects(state)
        self.local = LocalAPIs.load(state)
        self.serving: dict[str, dict[str, Held]] = {}
        self.backoff = Backoff.of(settings.retry)
        self.reporter = Reporter(state, channel, settings.cluster, backoff=self.backoff)
        self.figures = FiguresReporter(
            settings.cluster,
            envoy_admins(settings),
            channel,
            settings.figures_interval,
            served=lambda: self.serving.get(API_TYPE, {}),
        )
        self.kube: Kubernetes = (
            ClusterKubernetes(kube, self, self.reporter, channel, settings, self.backoff, program)
            if kube is not None
            else NoKubernetes()
        )
        self.key_expiry = Deadline()
        self._local_changes: dict[tuple[str, str], str | None] = {}
        self._local_changed = asyncio.Event()
        self._rebuilding = asyncio.Lock()
        self._in_part: dict[tuple[str, str], str] = {}
        """What the last translation could not serve of each Gateway (see `translate.gateways`) and of each
        API attached to Gateway API routes (see `translate.attached`), by (type URL, name)."""
        self._reported_problems: dict[tuple[str, str], str] = {}

    def holdings(self) -> Holdings:
        """What this agent holds, serves and rejected, now."""
        return Holdings(
            cluster=self.settings.cluster,
            delivered={type_url: dict(held) for type_url, held in self.objects.items()},
            versions={type_url: self.state.versions(type_url) for type_url in self.objects},
            local=dict(self.local.objects),
            local_versions=self.local.versions(),
            rejected=dict(self.state.rejected),
            refused=dict(self.state.refused),
            serving=self.serving,
        )

    def admin_endpoints(self) -> Starlette:
        """The admin app: the dump reads the holdings as they are when it is asked for."""
        return admin_app(self.holdings, self.gateway_cache, self.admin_token, self.settings.envoy_admin_address)

    def _refusals(self, apis: Sequence[Resource]) -> dict[str, str]:
        gateways = [held for held in self.objects.get(GATEWAY_TYPE, {}).values() if isinstance(held, Resource)]
        return refused_apis(
            apis, self.gateway_settings, self.kube.services(), gateways, self.kube.gateway_api_resources()
        )

    async def _publish(self, servable: Mapping[str, Mapping[str, Held]]) -> PublishOutcome:
        now = time.time()
        resources = [held for held in servable.get(API_TYPE, {}).values() if isinstance(held, Resource)]
        apis = api_views(resources)
        held = [obj for type_url in ACCESS_TYPES for obj in servable.get(type_url, {}).values()]
        entitlements = Entitlements.of(obj for obj in held if isinstance(obj, Resource))
        self._set_services(ENFORCERS, enforcer_feed(apis, entitlements))
        self._set_services(RATELIMITERS, limiter_feed(apis, self.gateway_settings, entitlements))
        self.key_expiry.move_to(entitlements.next_expiry(now))  # the gateways are told again then
        gateways = [held for held in servable.get(GATEWAY_TYPE, {}).values() if isinstance(held, Resource)]
        certificates = self._certificates(servable.get(CERTIFICATE_TYPE, {}))
        gateway_api = self.kube.gateway_api_resources()
        config = translate_apis(
            resources,
            self.gateway_settings,
            entitlements,
            now,
            self.kube.services(),
            gateways,
            certificates,
            gateway_api,
        )
        config = with_resources(config, config.gateway_api)
        for gateway, problem in config.gateway_problems.items():
            log.warning("a gateway is served in part here", gateway=gateway, problem=problem)
        for api, problem in config.api_problems.items():
            log.warning("an API is attached in part here", api=api, problem=problem)
        self._in_part = {
            **{(GATEWAY_TYPE, name): problem for name, problem in config.gateway_problems.items()},
            **{(API_TYPE, name): problem for name, problem in config.api_problems.items()},
        }
        return await self.publisher.publish(config)

    def _certificates(self, held: Mapping[str, Held]) -> dict[str, TLSCertificateSpec | str]:
        """The held certificates by name, those naming a Secret with what it holds (or why it gives none)."""
        specs = {name: obj.spec for name, obj in held.items() if isinstance(obj, Resource)}
        refs = {name: spec.secret_ref for name, spec in specs.items() if spec.secret_ref is not None}
        pairs, missing = self.kube.tls_secrets({(ref.namespace, ref.name) for ref in refs.values()})
        out: dict[str, TLSCertificateSpec | str] = {}
        for name, spec in specs.items():
            ref = refs.get(name)
            if ref is None:
                out[name] = spec
            elif (pair := pairs.get((ref.namespace, ref.name))) is not None:
                key = SealedValue(plaintext=pair.private_key)
                out[name] = spec.model_copy(update={"certificate": pair.certificate, "private_key": key})
            else:
                out[name] = f"names Secret {ref.namespace}/{ref.name}, which {missing[ref.namespace, ref.name]}"
        return out

    async def gateway_api_changed(self) -> None:
        """The cluster's Gateway API objects came to other Envoy resources: serve them."""
        await self.rebuild()

    async def tls_secrets_changed(self) -> None:
        """What a Secret a certificate names holds changed: serve it."""
        try:
            await self.rebuild()
        except Exception:  # a bug here must not stop the agent reading its Secrets
            log.exception("serving the changed TLS Secrets failed")

    def _in_part_changed(self, problems: Mapping[tuple[str, str], str]) -> dict[tuple[str, str], str]:
        """Held Gateways and APIs whose part not served here began, ended or changed since last reported."""
        changed = {
            key
            for key in {*problems, *self._reported_problems}
            if problems.get(key) != self._reported_problems.get(key)
        }
        found = {}
        for type_url, name in sorted(changed):
            version = self.state.versions(type_url).get(name)
            if version is not None:
                found[(type_url, name)] = version
        return found

    def _set_services(self, group: str, resources: Resources) -> None:
        """Enforcers and rate limiters take their resources as they come: no ordering to respect."""
        packed = {kind: {name: pack(name, msg) for name, msg in items.items()} for kind, items in resources.items()}
        self.gateway_cache.set_snapshot(group, packed)

    async def rebuild(self, changed: Mapping[tuple[str, str], str] | None = None, report: bool = True) -> None:
        """Publish what is held to the gateways and report how `changed` (type URL, name -> version) fared
        (unless `report` is False: the cluster's own objects have no delivered version to report).

        When the gateways reject the new configuration, the changed versions are remembered as rejected
        and the last good configuration is published again: Envoy keeps serving it, and so do we.
        """
        async with self._rebuilding:  # one at a time: sync, local CRs, key expiry and services all ask
            offer = first = self.holdings().offer(self._refusals)
            outcome = await self._publish(offer.objects)
            problems = self._in_part
            if outcome.state is DeliveryState.FAILED and changed:
                log.warning("gateways rejected the configuration; keeping the last good one", reason=outcome.message)
                for (type_url, name), version in first.rejected_by(changed).items():
                    await self.state.reject(type_url, name, version)
                offer = self.holdings().offer(self._refusals)
                await self._publish(offer.objects)
            if outcome.state is not DeliveryState.FAILED or changed:
                self.serving = offer.objects
            refused = first.refused
            reported = {
                **self.holdings().refusals_changed(refused),
                **self._in_part_changed(problems),
                **(changed if report and changed else {}),
            }
            self._reported_problems = problems
            await self.state.keep_refused(refused)
            if reported:
                await self.reporter.report_status(delivery_reports(reported, outcome, refused, problems))
        self.kube.trigger()

    def kube_desired(self) -> dict[ObjectKey, DesiredObject]:
        """What this cluster's Kubernetes should hold now: every held API object and rendered manifest."""
        holdings = self.holdings()
        return desired_objects(holdings.to_apply(), holdings.versions, frozenset({API_TYPE}))

    async def keep_local(self, project: str, name: str, api: Resource | None) -> str | None:
        """The operator saw the cluster's own API change (None: gone, or no longer servable); serve that soon.
        Returns why this cluster will not serve it (see translate.targets), or None."""
        key = resource_name(project, name)
        refusal = self._refusals([api]).get(key) if api is not None else None
        if not await self.local.keep(key, api):
            return refusal
        self._local_changes[(API_TYPE, key)] = self.local.versions().get(key)
        self._local_changed.set()
        return refusal

    async def _serve_local(self) -> None:
        """Rebuild for the local changes; those made during a rebuild are taken by one more, together."""
        while True:
            await self._local_changed.wait()
            self._local_changed.clear()
            changes, self._local_changes = self._local_changes, {}
            try:
                await self.rebuild({key: version for key, version in changes.items() if version}, report=False)
            except Exception:  # a bug here must not stop the agent serving what it served
                log.exception("serving the cluster's own APIs failed")

    def own_apis(self) -> list[tuple[str, str]]:
        """The cluster's own APIs the agent knows; the operator reports those it no longer finds as deleted."""
        return self.holdings().own_apis()

    async def services_changed(self, keys: set[ServiceKey] | None) -> None:
        """The cluster's services changed (None: all of them, the first time): serve again if an API sends
        to one of them."""
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
            backoff=self.backoff,
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
        await self.register()
        client = DeltaClient(
            self.channel,
            base_pb2.Node(id=self.settings.cluster, cluster=self.settings.cluster),
            DELIVERED_TYPE_URLS,
            initial_versions=self.state.versions,
            on_update=self.apply_update,
            backoff=self.backoff,
        )
        await client.run()

    async def run(self, stop: asyncio.Event) -> None:
        await self.rebuild()
        admin = HttpServer(self.admin_endpoints(), self.settings.admin_address, what="agent's admin")
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
        try:
            async with Supervisor("agent", self.backoff) as tasks:
                tasks.start("agent-admin", admin.serve, on_failure="exit")
                tasks.start("cp-sync", self.sync, on_failure="exit")
                tasks.start("reports", self.reporter.run, on_failure="restart")
                tasks.start("figures", self.figures.run, on_failure="restart")
                tasks.start("local-apis", self._serve_local, on_failure="restart")
                tasks.start("key-expiry", lambda: self.key_expiry.run(self.rebuild), on_failure="restart")
                for name, work in self.kube.tasks().items():
                    tasks.start(name, work, on_failure="restart")
                await stop.wait()
        finally:
            admin.close()
            await xds.stop(grace=0.5)
            await self.close()

    async def close(self) -> None:
        """Let go of what `assemble` opened: the channels to the server, the Kubernetes client, the state."""
        await self.channel.close()
        await self.kube.close()
        await self.state.close()


async def assemble(settings: AgentSettings, channel_credentials: grpc.ChannelCredentials | None = None) -> Agent:
    """The agent of `settings`, ready to run: what its settings get wrong stops it here, before anything is
    served (AdminTokenError, TlsConfigError, NotInCluster). Credentials handed in replace the settings' files."""
    token = admin_token(settings)
    channel = ControlPlaneChannel(settings, channel_credentials)
    kube = kube_client(settings)
    program = gateway_api_program(settings) if kube is not None else None
    return Agent(settings, channel, await LocalState.open(settings.state_dir), token, kube, program)


async def run_agent(settings: AgentSettings, stop: asyncio.Event) -> None:
    """Assemble the agent of `settings` and run it until `stop` is set."""
    agent = await assemble(settings)
    await agent.run(stop)


def held_objects(state: LocalState) -> dict[str, dict[str, Held]]:
    """What the state holds of each delivered type, decoded; one that no longer validates is skipped."""
    objects: dict[str, dict[str, Held]] = {}
    for type_url in DELIVERED_TYPE_URLS:
        held = objects.setdefault(type_url, {})
        for name, resource in state.resources(type_url).items():
            try:
                held[name] = decode(type_url, resource.body)
            except (InvalidObject, ValueError) as exc:
                log.error("held resource no longer validates; skipped", name=name, error=str(exc))
    return objects


def gateway_settings(settings: AgentSettings) -> GatewaySettings:
    """What the translator needs to know of this agent's gateways and the services beside them."""
    host, port = split_address(settings.gateway_address)
    return GatewaySettings(
        listener_address=host,
        listener_port=port,
        enforcer_address=settings.enforcer_address,
        keys_filter=str(settings.keys_filter) if settings.keys_filter is not None else None,
        ratelimiter_address=settings.ratelimiter_address,
        enforcer_fail_open=settings.enforcer_failure_mode == "open",
        ratelimiter_fail_closed=settings.ratelimiter_failure_mode == "closed",
        global_limits_by_quota=settings.global_limits == "quota",
        cluster_domain=settings.cluster_domain,
        jwks_ca_file=settings.jwks_ca_file,
        xff_num_trusted_hops=settings.xff_num_trusted_hops,
        backends=backend_policy(settings),
        access_log=None if settings.access_log == "off" else settings.access_log,
        access_log_otlp_endpoint=settings.access_log_otlp_endpoint,
    )


def envoy_admins(settings: AgentSettings) -> list[str]:
    """The Envoy admins of every gateway this agent serves."""
    return [settings.envoy_admin_address, *settings.more_envoy_admin_addresses]


def backend_policy(settings: AgentSettings) -> BackendPolicy:
    """What this agent's gateways may reach for an API: never its own admin and xDS, nor Envoy's admins."""
    ports = (
        ("the agent's xDS", settings.xds_address),
        ("the agent's admin", settings.admin_address),
        *(("Envoy's admin", address) for address in envoy_admins(settings)),
    )
    return BackendPolicy(
        allow_loopback=settings.allow_loopback_backends,
        protected=tuple(ProtectedPort(what, *split_address(address)) for what, address in ports),
    )


def _unpack(body: any_pb2.Any, type_url: str) -> bytes:
    if body.type_url != type_url:
        raise UpdateRejected(f"resource of type {body.type_url} in a {type_url} response")
    return body.value
