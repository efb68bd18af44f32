"""What the agent reports of a batch of changes: each object's state at this cluster and the reason.

The gateways accept or reject a whole configuration, and Envoy's reason names the resources in it, which
belong to whichever projects changed together. That reason is reported only where every change in the batch
belongs to one project; otherwise each object is told that the batch was rejected (the reason stays in the
agent's log), so no project's status names another's objects.
"""

from __future__ import annotations

from collections.abc import Mapping

from meshplane.agent.gateway import PublishOutcome
from meshplane.agent.holdings import API_TYPE
from meshplane.model.manifests import MANIFEST_TYPE
from meshplane.model.status import DeliveryState
from meshplane.proto.v1 import control_plane_pb2

_STATES = {
    DeliveryState.PENDING: control_plane_pb2.PENDING,
    DeliveryState.APPLIED: control_plane_pb2.APPLIED,
    DeliveryState.FAILED: control_plane_pb2.FAILED,
}

SHARED_REJECTION = (
    "the gateways rejected a configuration that also held other projects' changes; this version is kept out "
    "until it changes (the agent's log has the gateways' reason)"
)


def _project(name: str) -> str | None:
    """The project of a delivered name (`project/name`); None for a cluster-scoped object."""
    project, slash, _ = name.partition("/")
    return project if slash else None


def delivery_reports(
    reported: Mapping[tuple[str, str], str],
    outcome: PublishOutcome,
    refused: Mapping[str, str],
    in_part: Mapping[tuple[str, str], str] | None = None,
) -> list[control_plane_pb2.ObjectDelivery]:
    """How each (type URL, name) -> version fared: refused by this cluster (`refused`: name -> reason, for
    APIs), served here in part only (`in_part`: a Gateway whose certificate is not held, an API attached to
    some of its routes only, with why), else as the gateways took the whole. Rendered manifests report once
    applied to Kubernetes."""
    objects = {key: version for key, version in reported.items() if key[0] != MANIFEST_TYPE}
    one_project = len({_project(name) for _, name in objects}) <= 1
    gateways_said = outcome.message if one_project or outcome.state is not DeliveryState.FAILED else SHARED_REJECTION
    entries = []
    for (type_url, name), version in objects.items():
        if type_url == API_TYPE and name in refused:
            state, message = control_plane_pb2.FAILED, f"not served on this cluster: {refused[name]}"
        elif in_part and (type_url, name) in in_part:
            state, message = control_plane_pb2.FAILED, f"served in part on this cluster: {in_part[type_url, name]}"
        else:
            state, message = _STATES[outcome.state], gateways_said
        entries.append(
            control_plane_pb2.ObjectDelivery(
                type_url=type_url, name=name, version=version, state=state, message=message
            )
        )
    return entries
