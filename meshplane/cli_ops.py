"""Operating a fleet from a shell: follow an apply until every placed cluster has it (`apply --wait`),
stream changes (`get -w`), show what an apply would change (`diff`), read what an agent serves
(`agent config-dump`), and show API keys (`keys`).

The decisions are pure functions over wire objects (what version each cluster must report, whether a
rollout is settled, what differs); the runners around them only poll, stream and print.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
import sys
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import yaml
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from meshplane.bulk import bounded
from meshplane.client import ApiError, Applied, MeshplaneClient, object_label
from meshplane.model.registry import REGISTRY
from meshplane.model.status import DeliveryState

APPLIED = DeliveryState.APPLIED.value
FAILED = DeliveryState.FAILED.value
PENDING = DeliveryState.PENDING.value
SETTLED = frozenset({APPLIED, FAILED})

EXIT_OK, EXIT_FAILED, EXIT_TIMEOUT = 0, 1, 2


# --- apply --wait -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rollout:
    """One applied object: the version every placed cluster must report, and the clusters it goes to.

    `version` is None for kinds that are not delivered to clusters: those are done once stored.
    """

    kind: str
    name: str
    project: str | None
    version: str | None
    placed: frozenset[str]

    @property
    def label(self) -> str:
        return object_label(self.kind, self.name, self.project)


def delivered_version(obj: Mapping[str, Any]) -> str | None:
    """The version the server delivers of a stored object (wire form, as a PUT answers it), which the
    clusters report back in `status.clusters[].version`; None for kinds not delivered.

    It is computed exactly as the server's projection does (a hash of the delivered message), so a
    status entry of an older or newer version is never mistaken for this one.
    """
    from meshplane.model.wire import resource_name, to_message
    from meshplane.xds.resource import pack

    info = REGISTRY.resolve(obj["kind"])
    if not info.delivered:
        return None
    resource = REGISTRY.parse(obj)
    return pack(resource_name(resource.metadata.project, resource.metadata.name), to_message(info, resource)).version


def rollout_of(applied: Applied, clusters: Mapping[str, Mapping[str, str]]) -> Rollout:
    """What to wait for after one PUT: its delivered version on the clusters (name -> labels) it selects."""
    from meshplane.server.placement import placed_clusters
    from meshplane.server.projection import placement_of

    version = delivered_version(applied.object)
    placed = placed_clusters(placement_of(REGISTRY.parse(applied.object)), clusters) if version else frozenset()
    return Rollout(applied.kind, applied.name, applied.project, version, placed)


@dataclass(frozen=True)
class ClusterProgress:
    cluster: str
    state: str
    message: str = ""


@dataclass(frozen=True)
class RolloutProgress:
    rollout: Rollout
    clusters: tuple[ClusterProgress, ...]
    done: bool

    @property
    def failed(self) -> list[ClusterProgress]:
        return [c for c in self.clusters if c.state == FAILED]


def rollout_progress(rollout: Rollout, entries: Sequence[Mapping[str, Any]]) -> RolloutProgress:
    """How far a rollout got, from the object's `status.clusters[]`.

    An entry speaks for this rollout only when it carries its version; any other is still Pending.
    Once every entry carries it, the status roll-up has seen this version and its entries are exactly
    the placed clusters (the server's word over the client's guess from cluster labels). An object
    placed on no cluster is done at once.
    """
    if rollout.version is None:
        return RolloutProgress(rollout, (), done=True)
    by_cluster = {str(e.get("cluster")): e for e in entries}
    current = bool(entries) and all(e.get("version") == rollout.version for e in entries)
    names = sorted(by_cluster) if current else sorted(rollout.placed | set(by_cluster))
    rows = []
    for name in names:
        entry = by_cluster.get(name)
        if entry is not None and entry.get("version") == rollout.version:
            rows.append(ClusterProgress(name, str(entry.get("state", PENDING)), str(entry.get("message") or "")))
        else:
            rows.append(ClusterProgress(name, PENDING))
    done = (current and all(r.state in SETTLED for r in rows)) or (not entries and not rollout.placed)
    return RolloutProgress(rollout, tuple(rows), done)


def exit_code(progress: Sequence[RolloutProgress]) -> int:
    """0 when every placed cluster applied its object, 1 when one failed (even if others are still
    pending: a rejection is final), 2 when some are still pending."""
    if any(p.failed for p in progress):
        return EXIT_FAILED
    return EXIT_OK if all(p.done for p in progress) else EXIT_TIMEOUT


class LiveProgress:
    """A table redrawn in place on a terminal."""

    def __init__(self, console: Console):
        self.live = Live(console=console, auto_refresh=False, transient=False)

    def __enter__(self) -> LiveProgress:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(None, None, None)

    def show(self, progress: Sequence[RolloutProgress]) -> None:
        table = Table(box=None, header_style="bold")
        for column in ("OBJECT", "CLUSTER", "STATE", "MESSAGE"):
            table.add_column(column, no_wrap=column != "MESSAGE")
        style = {APPLIED: "green", FAILED: "red", PENDING: "yellow"}
        for p in progress:
            if not p.clusters:
                table.add_row(p.rollout.label, "-", "[green]done[/green]", _nothing_to_wait_for(p.rollout))
            for c in p.clusters:
                colour = style.get(c.state, "white")
                table.add_row(escape(p.rollout.label), c.cluster, f"[{colour}]{c.state}[/{colour}]", escape(c.message))
        self.live.update(table, refresh=True)


class LineProgress:
    """One line per change of a cluster's state, for logs and pipes."""

    def __init__(self, console: Console):
        self.console = console
        self.seen: dict[tuple[str, str], str] = {}

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def show(self, progress: Sequence[RolloutProgress]) -> None:
        for p in progress:
            if not p.clusters and p.done and (p.rollout.label, "") not in self.seen:
                self.seen[(p.rollout.label, "")] = "done"
                self._line(f"{p.rollout.label}: {_nothing_to_wait_for(p.rollout)}")
            for c in p.clusters:
                key = (p.rollout.label, c.cluster)
                if self.seen.get(key) != c.state:
                    self.seen[key] = c.state
                    message = f": {c.message}" if c.message else ""
                    self._line(f"{p.rollout.label} {c.cluster} {c.state}{message}")

    def _line(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)


def _nothing_to_wait_for(rollout: Rollout) -> str:
    return "not delivered to clusters" if rollout.version is None else "placed on no cluster"


async def wait_for_rollouts(
    client: MeshplaneClient,
    applied: Sequence[Applied],
    within: float,
    console: Console,
    poll: float = 0.25,
) -> int:
    """Follow each applied object's delivery until every placed cluster settled or `within` seconds
    passed, reading the unsettled objects many at a time; the exit code (see `exit_code`)."""
    clusters = {c["metadata"]["name"]: c["metadata"].get("labels", {}) for c in await client.list("clusters")}
    rollouts = [rollout_of(a, clusters) for a in applied]
    progress = {r: rollout_progress(r, []) if r.version is None else None for r in rollouts}
    view = LiveProgress(console) if console.is_terminal else LineProgress(console)
    deadline = time.monotonic() + within
    with view:
        while True:
            unsettled = [rollout for rollout, known in progress.items() if known is None or not known.done]
            objects = await bounded(client.get(r.kind, r.name, r.project) for r in unsettled)
            for rollout, obj in zip(unsettled, objects, strict=True):
                progress[rollout] = rollout_progress(rollout, obj.get("status", {}).get("clusters", []))
            current = [p for p in progress.values() if p is not None]
            view.show(current)
            if all(p.done for p in current) or time.monotonic() >= deadline:
                break
            await asyncio.sleep(poll)
    code = exit_code(current)
    for p in current:
        for c in p.failed:
            where = escape(f"{p.rollout.label} on {c.cluster}: {c.message}")
            console.print(f"[red]failed[/red] {where}", highlight=False, soft_wrap=True)
    if code == EXIT_TIMEOUT:
        waiting = [f"{p.rollout.label} on {c.cluster}" for p in current for c in p.clusters if c.state not in SETTLED]
        what = escape(", ".join(waiting))
        console.print(f"[yellow]timed out[/yellow] after {within:g}s waiting for: {what}", soft_wrap=True)
    return code


# --- get -w -------------------------------------------------------------------------------------


def event_line(event: Mapping[str, Any]) -> str:
    """`MODIFIED apis/orders 17`: one change, as `get -w` prints it."""
    obj = event["object"]
    plural = REGISTRY.resolve(obj["kind"]).plural
    return f"{event['type']} {plural}/{obj['metadata']['name']} {event['revision']}"


async def stream_changes(
    client: MeshplaneClient,
    kind: str,
    name: str | None,
    project: str | None,
    emit: Callable[[dict[str, Any]], None],
) -> None:
    """The current objects as ADDED events, then every change after that list, like `kubectl get -w`.

    Watching from the list's revision loses nothing between the two and repeats nothing older.
    Returns when the server ends the stream; raises WatchExpired when the list fell out of the
    server's event window.
    """
    info = REGISTRY.resolve(kind)
    scope = project if info.namespaced else None
    items, revision = await client.list_at(info.kind, scope)
    for item in items:
        if name is None or item["metadata"]["name"] == name:
            emit({"type": "ADDED", "revision": int(item["metadata"]["resourceVersion"]), "object": item})
    async for event in client.watch(since=revision, kind=info.kind, project=scope):
        if event.get("type") == "ERROR":
            raise WatchExpired(str(event.get("message", "the watch expired")))
        if name is None or event["object"]["metadata"]["name"] == name:
            emit(event)


class WatchExpired(ApiError):
    """The server no longer holds the events after the listed revision: list and watch again."""

    def __init__(self, message: str):
        super().__init__(410, f"{message}; run the watch again")


def print_event(output: str) -> Callable[[dict[str, Any]], None]:
    """Write each event at once (a pipe must see it now, not when a buffer fills)."""

    def emit(event: dict[str, Any]) -> None:
        line = json.dumps(event, separators=(",", ":")) if output == "json" else event_line(event)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    return emit


async def until_stopped(work: Coroutine[Any, Any, None], stop: asyncio.Event) -> None:
    """Run `work` until it ends or `stop` is set (Ctrl-C, SIGTERM); its errors propagate."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([task, stopper], return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()
    finally:
        for pending in (task, stopper):
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pending


# --- diff ---------------------------------------------------------------------------------------


def owned_view(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of an object its user writes, normalized through its kind's model: labels, annotations
    and spec with every default filled in, so a file that leaves a default out does not differ."""
    wire = REGISTRY.parse(obj).to_wire()
    meta = wire.get("metadata", {})
    return {
        "metadata": {"labels": meta.get("labels") or {}, "annotations": meta.get("annotations") or {}},
        "spec": wire.get("spec", {}),
    }


def with_project(doc: Mapping[str, Any], project: str) -> dict[str, Any]:
    """The document as `apply -p project` sends it: a namespaced object without a project gets this one."""
    info = REGISTRY.resolve(str(doc.get("kind")))
    meta = dict(doc.get("metadata") or {})
    if info.namespaced and not meta.get("project"):
        meta["project"] = project
    return {**doc, "metadata": meta}


def object_diff(label: str, current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> str:
    """A unified diff from the object on the server to the document; "" when they agree."""
    if current is None:
        return f"{label}: new\n"
    return owned_diff(current, desired, f"{label} (server)", f"{label} (file)")


def owned_diff(before: Mapping[str, Any], after: Mapping[str, Any], before_label: str, after_label: str) -> str:
    """A unified diff of the YAML of what the user writes of two versions of an object; "" when they agree."""
    old = yaml.safe_dump(owned_view(before), sort_keys=True).splitlines(keepends=True)
    new = yaml.safe_dump(owned_view(after), sort_keys=True).splitlines(keepends=True)
    return "".join(difflib.unified_diff(old, new, before_label, after_label))


async def diff_documents(client: MeshplaneClient, docs: Sequence[Mapping[str, Any]], project: str) -> list[str]:
    """One diff per document that differs from the server (or is not there yet), in file order. Every
    document is checked before the server is read, many documents at once."""
    desired = [with_project(raw, project) for raw in docs]
    for doc in desired:
        REGISTRY.parse(doc)  # a document apply would refuse is an error, not a difference

    async def diff(doc: dict[str, Any]) -> str:
        info = REGISTRY.resolve(str(doc["kind"]))
        meta = doc["metadata"]
        scope = meta.get("project") if info.namespaced else None
        try:
            current: dict[str, Any] | None = await client.get(info.kind, meta["name"], scope)
        except ApiError as exc:
            if exc.status != 404:
                raise
            current = None
        return object_diff(object_label(info.kind, meta["name"], scope), current, doc)

    return [text for text in await bounded(diff(doc) for doc in desired) if text]


# --- keys ---------------------------------------------------------------------------------------


def key_table(views: Sequence[Mapping[str, Any]]) -> Table:
    """Keys as the server shows them to anyone: dates and state, never the key."""
    table = Table(box=None, header_style="bold")
    for column in ("ID", "KIND", "CREATED", "EXPIRES", "REVOKED"):
        table.add_column(column, no_wrap=True)
    for view in views:
        revoked = "yes" if view["revoked"] else "no"
        table.add_row(view["id"], view["kind"], view["created"], view.get("expires") or "never", revoked)
    return table


def issued_key_text(answer: Mapping[str, Any]) -> str:
    """The key alone on its line, so it copies whole, and the warning that no one can show it again."""
    lines = ["", answer["key"], "", "Store this key now: it is not shown again."]
    if replaced := answer.get("replaces"):
        lines.append(f"{replaced['id']} keeps working until {replaced['expires']}, then stops.")
    return "\n".join(lines) + "\n"


# --- figures ------------------------------------------------------------------------------------


def figures_table(answer: Mapping[str, Any]) -> Table:
    """An API's figures, a row per cluster: cumulative counts since each cluster's gateways started."""
    table = Table(box=None, header_style="bold")
    for column in ("CLUSTER", "REQUESTS", "5XX", "ERROR RATIO", "BY CLASS", "SAMPLED", "RESETS"):
        table.add_column(column, no_wrap=True, justify="right" if column in ("REQUESTS", "5XX", "RESETS") else "left")
    for cluster, figures in sorted(answer["clusters"].items()):
        by_class = " ".join(f"{status_class}={count}" for status_class, count in sorted(figures["byClass"].items()))
        table.add_row(
            cluster,
            str(figures["requests"]),
            str(figures["errors"]),
            f"{figures['errorRatio']:.2%}",
            by_class,
            figures["sampledAt"][:19],
            str(figures["resets"]),
        )
    return table


# --- tokens -------------------------------------------------------------------------------------


def token_table(views: Sequence[Mapping[str, Any]]) -> Table:
    """Tokens as an admin sees them: whom they speak for, never the token."""
    table = Table(box=None, header_style="bold")
    for column in ("ID", "NAME", "ROLE", "PROJECT", "CREATED", "EXPIRES", "REVOKED"):
        table.add_column(column, no_wrap=True)
    for view in views:
        project = view.get("project") or "*"
        expires = view.get("expires") or "never"
        revoked = "yes" if view["revoked"] else "no"
        table.add_row(view["id"], view["name"], view["role"], project, view["created"], expires, revoked)
    return table


# --- agent config-dump --------------------------------------------------------------------------


def fetch_config_dump(admin_address: str, timeout: float = 10.0, token: str | None = None) -> dict[str, Any]:
    """An agent's `/config_dump` from its admin address (host:port), with its admin token if it asks for one."""
    url = f"http://{admin_address}/config_dump"
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    try:
        response = httpx.get(url, timeout=timeout, headers=headers)
    except httpx.TransportError as exc:
        reason = str(exc) or type(exc).__name__
        raise AgentUnreachable(f"cannot reach the agent admin at {admin_address}: {reason}") from None
    if response.status_code != 200:
        raise ApiError(response.status_code, response.text or response.reason_phrase)
    return response.json()


class AgentUnreachable(OSError):
    """No agent answered on the admin address."""


def render_dump(dump: Mapping[str, Any], output: str) -> str:
    if output == "yaml":
        return yaml.safe_dump(dict(dump), sort_keys=False)
    return json.dumps(dump, indent=2) + "\n"


# --- history and audit ----------------------------------------------------------------------------


def history_table(entries: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("REVISION", "OP", "GENERATION", "AT", "WHO"):
        table.add_column(column, no_wrap=True)
    for entry in entries:
        table.add_row(str(entry["revision"]), entry["op"], str(entry["generation"]), entry["at"][:19], entry["who"])
    return table


def audit_table(entries: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("REVISION", "AT", "WHO", "OPERATION", "OBJECT", "ADDRESS", "REQUEST"):
        table.add_column(column, no_wrap=True)
    for entry in entries:
        label = object_label(entry["kind"], entry["name"], entry.get("project"))
        table.add_row(
            str(entry["revision"]),
            entry["at"][:19],
            entry["who"],
            entry["operation"],
            label,
            entry.get("address") or "",
            entry.get("requestId") or "",
        )
    return table


async def revision_diff(
    client: MeshplaneClient, kind: str, name: str, project: str | None, old: int, new: int | None
) -> str:
    """A unified diff of what the object's user writes between revision `old` and `new` (None: as it is now)."""
    before = await client.version(kind, name, old, project)
    after = await client.get(kind, name, project) if new is None else await client.version(kind, name, new, project)
    info = REGISTRY.resolve(kind)
    label = object_label(info.kind, name, project if info.namespaced else None)
    to_text = "current" if new is None else f"revision {new}"
    return owned_diff(before, after, f"{label} (revision {old})", f"{label} ({to_text})")
