"""What a caller is shown of an object it may read: everything, except where an object that every
token reads sums up objects of several projects.

A Cluster is read by every token, and its status counts and names the objects of every project placed
there. A token bound to a project is shown that project's summary instead, so no status field it
receives is about another project's objects; a fleet-wide token is shown all of it.
"""

from __future__ import annotations

from meshplane.model.registry import ClusterStatus, ProjectOnCluster
from meshplane.model.resource import Resource
from meshplane.server.auth.principal import Principal


def as_seen_by(principal: Principal, resource: Resource) -> Resource:
    status = resource.status
    if principal.project is None or not isinstance(status, ClusterStatus):
        return resource
    mine = (status.by_project or {}).get(principal.project, ProjectOnCluster())
    shown = status.model_copy(
        update={
            "out_of_date": mine.out_of_date if status.out_of_date is not None else None,
            "behind_since": mine.behind_since,
            "last_error": mine.last_error,
            "by_project": None,
        }
    )
    return resource.model_copy(update={"status": shown})
