"""The agent's side of its cluster's Kubernetes, or of none: the agent then runs on its local state alone.

Both answer the same questions (what services the cluster has, what to run), so the agent never asks
whether it has a Kubernetes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, Protocol

import grpc

from meshplane.agent.kube import KubeApplier, KubeClient
from meshplane.agent.kube.desired import DesiredObject, ObjectKey
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

Work = Callable[[], Coroutine[Any, Any, None]]
"""A task the agent runs until it stops."""


class KubeHooks(Protocol):
    """What the cluster's Kubernetes asks of the agent."""

    def kube_desired(self) -> dict[ObjectKey, DesiredObject]: ...

    async def keep_local(self, project: str, name: str, api: Resource | None) -> str | None: ...

    def own_apis(self) -> list[tuple[str, str]]: ...

    async def services_changed(self, keys: set[ServiceKey] | None) -> None: ...

    async def tls_secrets_changed(self) -> None: ...


class Kubernetes(Protocol):
    def trigger(self) -> None:
        """Reconcile Kubernetes with what the agent holds now."""

    def services(self) -> LocalServices | None:
        """The cluster's services that API backends resolve with (None: not known)."""

    def tls_secrets(self, wanted: Iterable[SecretKey]) -> tuple[Mapping[SecretKey, TLSPair], Mapping[SecretKey, str]]:
        """The certificate and key of each wanted kubernetes.io/tls Secret as last read, and why the others
        give none; Secrets not wanted before are read at once (`tls_secrets_changed` tells)."""

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

    def tasks(self) -> dict[str, Work]:
        return {}

    async def close(self) -> None:
        return None


class ClusterKubernetes:
    """The applier of delivered objects, the operator of the cluster's own CRs, the service watch and the
    service catalog's sync, on one client."""

    def __init__(
        self,
        client: KubeClient,
        agent: KubeHooks,
        reporter: Reporter,
        channel: Callable[[], grpc.aio.Channel],
        settings: AgentSettings,
        backoff: Backoff,
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
        reporter.objects_refused = self.operator.refused
        self.watch = ServiceWatch(
            client, settings.cluster, _east_west_gateway(settings), self._services_changed, backoff=backoff
        )
        self.endpoint_sync = ServiceEndpointSync(channel, settings.cluster, self.watch.reportable, backoff=backoff)
        self.secrets = TLSSecretReader(client, agent.tls_secrets_changed)
        self._agent = agent

    async def _services_changed(self, keys: set[ServiceKey] | None) -> None:
        self.endpoint_sync.changed()
        await self._agent.services_changed(keys)

    def trigger(self) -> None:
        self.applier.trigger()

    def services(self) -> LocalServices | None:
        return self.watch.specs()

    def tls_secrets(self, wanted: Iterable[SecretKey]) -> tuple[Mapping[SecretKey, TLSPair], Mapping[SecretKey, str]]:
        wanted = set(wanted)
        self.secrets.want(wanted)
        pairs = {key: pair for key, pair in self.secrets.pairs.items() if key in wanted}
        why = {key: self.secrets.problems.get(key, "has not been read yet") for key in wanted - pairs.keys()}
        return pairs, why

    def tasks(self) -> dict[str, Work]:
        return {
            "kube-apply": self.applier.run,
            "kube-operator": self.operator.run,
            "kube-services": self.watch.run,
            "service-endpoints": self.endpoint_sync.run,
            "kube-tls-secrets": self.secrets.run,
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


def _east_west_gateway(settings: AgentSettings) -> EastWestGateway | None:
    if settings.east_west_gateway is None:
        return None
    host, port = split_address(settings.east_west_gateway)
    return EastWestGateway(address=host, port=port)
