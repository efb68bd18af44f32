"""Who a request speaks for, and the one table of what each role may do.

Roles: admin (everything), publisher (APIs, rate-limit policies and traffic intents), subscriber
(applications, subscriptions and their keys), viewer (reading); each kind names the roles that may write
it (`KindInfo.writers`). A principal bound to a project sees
nothing of any other: those objects answer 404, as if they did not exist, never 403.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshplane.model.registry import REGISTRY, UnknownKind
from meshplane.model.roles import Role
from meshplane.server.problems import Problem


@dataclass(frozen=True)
class Principal:
    name: str
    role: Role
    project: str | None = None
    """The one project it covers; None: every project."""
    who: str = "anonymous"
    """How history and the audit trail name it: `token/<token name>` or `oidc/<subject>`."""

    def sees(self, project: str | None) -> bool:
        return project is None or self.project is None or self.project == project

    @property
    def fleet_wide(self) -> bool:
        return self.project is None


OPEN = Principal("anonymous (authentication off)", Role.ADMIN)
"""What an app built without an authenticator treats every caller as (in-process tests only)."""


def require_project(principal: Principal, project: str) -> None:
    """404 for a project the principal does not cover, exactly as for a project that does not exist."""
    if not principal.sees(project):
        raise Problem(404, f"project {project!r} not found")


def writers(kind: str) -> frozenset[Role]:
    """The non-admin roles that may change `kind` inside the project(s) they cover; none for what is not a
    kind of the registry (tokens)."""
    try:
        return REGISTRY.get(kind).writers
    except UnknownKind:
        return frozenset()


def require_write(principal: Principal, kind: str, project: str | None) -> None:
    """Changing `kind` in `project` (None: a fleet-wide object) must be the principal's role's business."""
    if project is not None:
        require_project(principal, project)
    if principal.role is Role.ADMIN and (project is not None or principal.fleet_wide):
        return
    if project is not None and principal.role in writers(kind):
        return
    where = f"in project {project!r}" if project is not None else "fleet-wide"
    raise Problem(403, f"role {principal.role.value} may not change {kind} objects {where}")


def require_fleet_wide(principal: Principal, what: str) -> None:
    """Views across projects (a cluster's whole partition, signing keys, tokens) are for fleet-wide admins
    or, to read, fleet-wide viewers."""
    if not principal.fleet_wide:
        raise Problem(403, f"{what} spans projects: it needs a token that is not bound to one")
