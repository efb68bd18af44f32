"""The agent's side of its cluster's Kubernetes, or of none: the agent then runs on its local state alone.

Both answer the same questions (what services the cluster has, what to run), so the agent never asks
whether it has a Kubernetes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, Protocol

import grpc
from google.protobuf.message import Message

from meshplane.agent.gatewayapi_addresses import AddressPool, parse_pool
from meshplane.agent.kube import KubeApplier, KubeClient
from meshplane.agent.kube.desired import DesiredObject, ObjectKey
from meshplane.agent.kube.gatewayapi import GatewayApiController, Program
from meshplane.agent.kube.gatewayapi_report import REPORTED_KINDS, RouteReport
from meshplane.agent.kube.operator import KubeOperator
from meshplane.agent.kube.serviceaccount import in_pod
from meshplane.agent.kube.services import ServiceKey, ServiceWatch
from meshplane.agent.kube.tls_secrets import SecretKey, TLSPair, TLSSecretReader
from meshplane.agent.reporter import Reporter
from meshplane.agent.service_endpoints import ServiceEndpointSync
from meshplane.agent.translate.service_backends import LocalServices
from meshplane.config import AgentSettings, split_address
from meshplane.lifecycle import Backoff
from meshplane.model.kinds import EastWestGateway
from meshplane.model.resource import Resource
from meshplane.proto.v1 import control_plane_pb2

Work = Callable[[], Coroutine[Any, Any, None]]
"""A task the agent runs until it stops."""


class KubeHooks(Protocol):
    """What the cluster's Kubernetes asks of the agent."""

    def kube_desired(self) -> dict[ObjectKey, DesiredObject]: ...

    async def keep_local(self, project: str, name: str, api: Resource | None) -> str | None: ...

    def own_apis(self) -> list[tuple[str, str]]: ...

    async def services_changed(self, keys: set[ServiceKey] | None) -> None: ...

    async def tls_secrets_changed(self) -> None: ...

    async def gateway_api_changed(self) -> None: ...


class Kubernetes(Protocol):
    def trigger(self) -> None:
        """Reconcile Kubernetes with what the agent holds now."""

    def services(self) -> LocalServices | None:
        """The cluster's services that API backends resolve with (None: not known)."""

    def tls_secrets(self, wanted: Iterable[SecretKey]) -> tuple[Mapping[SecretKey, TLSPair], Mapping[SecretKey, str]]:
        """The certificate and key of each wanted kubernetes.io/tls Secret as last read, and why the others
        give none; Secrets not wanted before are read at once (`tls_secrets_changed` tells)."""

    def gateway_api_resources(self) -> Mapping[str, Mapping[str, Message]]:
        """The Envoy resources the cluster's Gateway API objects come to (type URL -> name -> message)."""

    def tasks(self) -> dict[str, Work]:
        """The tasks to run, by name."""

    async def close(self) -> None: ...


class NoKubernetes:
    """No cluster to apply to or to watch: no services, nothing to run."""

    def trigger(self) -> None:
        return None

    def services(self) -> LocalServices | None:
        return None

    def tls_secrets(self, wanted: Iterable[SecretKey]) -> tuple[Mapping[SecretKey, TLSPair], Mapping[SecretKey, str]]:
        return {}, {key: "names a Secret, and this agent reads no Kubernetes" for key in wanted}

    def gateway_api_resources(self) -> Mapping[str, Mapping[str, Message]]:
        return {}

    def tasks(self) -> dict[str, Work]:
        return {}

    async def close(self) -> None:
        return None


class ClusterKubernetes:
    """The applier of delivered objects, the operator of the cluster's own CRs, the service watch and the
    service catalog's sync, and (given `program`) the Gateway API controller, on one client."""

    def __init__(
        self,
        client: KubeClient,
        agent: KubeHooks,
        reporter: Reporter,
        channel: Callable[[], grpc.aio.Channel],
        settings: AgentSettings,
        backoff: Backoff,
        program: Program | None = None,
    ):
        self.client = client
        self.applier = KubeApplier(client, agent.kube_desired, reporter.report_status, backoff=backoff)
        self.operator = KubeOperator(
            client,
            reporter.report_objects,
            self.applier.notice,
            agent.keep_local,
            known_local=agent.own_apis,
            is_delivered=lambda key: key in agent.kube_desired(),
            backoff=backoff,
        )
        self.route_report = RouteReport(reporter.report_objects, reporter.state)
        reporter.objects_refused = self._objects_refused
        self.watch = ServiceWatch(
            client, settings.cluster, _east_west_gateway(settings), self._services_changed, backoff=backoff
        )
        self.endpoint_sync = ServiceEndpointSync(channel, settings.cluster, self.watch.reportable, backoff=backoff)
        self.secrets = TLSSecretReader(client, self._tls_secrets_changed)
        self._agent = agent
        self._certificate_secrets: frozenset[SecretKey] = frozenset()
        self._gateway_api_secrets: frozenset[SecretKey] = frozenset()
        self.gateway_api = (
            GatewayApiController(
                client,
                program,
                _address_pool(settings),
                self.watch.specs,
                self._gateway_api_tls_secrets,
                agent.gateway_api_changed,
                backoff,
                on_seen=self.route_report.seen,
            )
            if program is not None
            else None
        )

    async def _objects_refused(self, objects: list[control_plane_pb2.LocalObject], reason: str) -> None:
        """A refusal goes to whoever reported the objects: the routes' report or the operator of API CRs."""
        routes = [local for local in objects if local.kind in REPORTED_KINDS.values()]
        others = [local for local in objects if local.kind not in REPORTED_KINDS.values()]
        if routes:
            await self.route_report.refused(routes, reason)
        if others:
            await self.operator.refused(others, reason)

    async def _tls_secrets_changed(self) -> None:
        if self.gateway_api is not None:
            self.gateway_api.changed()
        await self._agent.tls_secrets_changed()

    def _gateway_api_tls_secrets(self, wanted: Iterable[SecretKey]) -> Mapping[SecretKey, TLSPair]:
        self._gateway_api_secrets = frozenset(wanted)
        self.secrets.want(self._certificate_secrets | self._gateway_api_secrets)
        return {key: pair for key, pair in self.secrets.pairs.items() if key in self._gateway_api_secrets}

    async def _services_changed(self, keys: set[ServiceKey] | None) -> None:
        self.endpoint_sync.changed()
        if self.gateway_api is not None:
            self.gateway_api.changed()
        await self._agent.services_changed(keys)

    def trigger(self) -> None:
        self.applier.trigger()

    def services(self) -> LocalServices | None:
        return self.watch.specs()

    def tls_secrets(self, wanted: Iterable[SecretKey]) -> tuple[Mapping[SecretKey, TLSPair], Mapping[SecretKey, str]]:
        wanted = set(wanted)
        self._certificate_secrets = frozenset(wanted)
        self.secrets.want(self._certificate_secrets | self._gateway_api_secrets)
        pairs = {key: pair for key, pair in self.secrets.pairs.items() if key in wanted}
        why = {key: self.secrets.problems.get(key, "has not been read yet") for key in wanted - pairs.keys()}
        return pairs, why

    def gateway_api_resources(self) -> Mapping[str, Mapping[str, Message]]:
        return self.gateway_api.resources if self.gateway_api is not None else {}

    def tasks(self) -> dict[str, Work]:
        return {
            "kube-apply": self.applier.run,
            "kube-operator": self.operator.run,
            "kube-services": self.watch.run,
            "service-endpoints": self.endpoint_sync.run,
            "kube-tls-secrets": self.secrets.run,
            **(self.gateway_api.tasks() if self.gateway_api is not None else {}),
        }

    async def close(self) -> None:
        await self.client.close()


def kube_client(settings: AgentSettings) -> KubeClient | None:
    """The cluster's Kubernetes: by the kubeconfig when one is given, else as the pod's service account
    (asked for, or found when unset), else none: the agent then runs on its local state alone."""
    if settings.kubeconfig is not None:
        return KubeClient.from_kubeconfig(settings.kubeconfig)
    if settings.in_cluster or (settings.in_cluster is None and in_pod(os.environ)):
        return KubeClient.in_cluster()
    return None


def _address_pool(settings: AgentSettings) -> AddressPool:
    pool = parse_pool(settings.gateway_api_addresses) if settings.gateway_api_addresses else None
    return AddressPool(pool, split_address(settings.gateway_address)[0], settings.state_dir)


def gateway_api_program(settings: AgentSettings) -> Program | None:
    """The Gateway API core, unless the settings turn it off."""
    if not settings.gateway_api:
        return None
    from meshplane.gatewayapi.program import program

    return program


def _east_west_gateway(settings: AgentSettings) -> EastWestGateway | None:
    if settings.east_west_gateway is None:
        return None
    host, port = split_address(settings.east_west_gateway)
    return EastWestGateway(address=host, port=port)
