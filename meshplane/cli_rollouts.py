"""Rollouts from a shell: list them, show one wave by wave, and follow a governed write live (`apply --wait`).

The views are pure functions of Rollout objects as the north API returns them (wire form); the follower only
reads the server's change stream (falling back to reading the rollouts again when the stream is not usable)
and redraws.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from meshplane.bulk import bounded
from meshplane.cli_ops import EXIT_FAILED, EXIT_OK, EXIT_TIMEOUT, wait_for_rollouts
from meshplane.client import Applied, MeshplaneClient, ServerUnreachable, object_label
from meshplane.lifecycle import wait_at_most
from meshplane.model.durations import duration_seconds
from meshplane.model.registry import REGISTRY
from meshplane.model.rollouts import Phase, rollout_name

ROLLOUT = "Rollout"
EXIT_PAUSED = 3
"""`apply --wait`: a rollout it follows paused (besides the codes of `cli_ops.exit_code`)."""
POLL_SECONDS = 1.0
"""How often the rollouts are read again when the change stream cannot be followed, and the live view redrawn."""

Wire = Mapping[str, Any]
_STYLE = {
    "Succeeded": "green",
    "Applied": "green",
    "Skipped": "cyan",
    "Progressing": "yellow",
    "Pending": "yellow",
    "Baking": "blue",
    "Paused": "magenta",
    "Failed": "red",
    "RolledBack": "red",
    "Aborted": "red",
    "Superseded": "red",
}


def styled(state: str) -> str:
    colour = _STYLE.get(state, "white")
    return f"[{colour}]{escape(state)}[/{colour}]"


def is_active(rollout: Wire) -> bool:
    return Phase(rollout["spec"]["phase"]).active


def target_label(rollout: Wire) -> str:
    target = rollout["spec"]["target"]
    return object_label(target["kind"], target["name"], rollout["metadata"].get("project"))


def revisions(spec: Wire) -> str:
    """`12 → 15`, or `new → 15` when the change made the object."""
    before = spec.get("fromRevision")
    return f"{'new' if before is None else before} → {spec['toRevision']}"


def current_wave(spec: Wire) -> str:
    """The wave the rollout is at, `canary (1/3)`; `-` once every wave is behind it."""
    waves = spec.get("waves") or []
    index = int(spec.get("currentWave", 0))
    if index >= len(waves):
        return "-"
    return f"{waves[index]['name']} ({index + 1}/{len(waves)})"


def rollout_table(rollouts: Sequence[Wire]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("NAME", "OBJECT", "REVISION", "PHASE", "WAVE", "REASON"):
        table.add_column(column, no_wrap=column != "REASON")
    for rollout in rollouts:
        spec = rollout["spec"]
        table.add_row(
            escape(rollout["metadata"]["name"]),
            escape(target_label(rollout)),
            revisions(spec),
            styled(spec["phase"]),
            escape(current_wave(spec)),
            escape(spec.get("reason") or ""),
        )
    return table


def bake_progress(spec: Wire, index: int, now: datetime) -> str:
    """How far a wave's bake got, `12s of 30s`, with the requests counted over it when there are figures."""
    wave = spec["waves"][index]
    bake = duration_seconds(spec["strategy"]["waves"][index].get("bake") or "0s")
    started = wave.get("bakeStartedAt")
    if started is None:
        return f"{bake:g}s to bake" if bake else ""
    done = wave.get("state") == "Succeeded"
    elapsed = bake if done else min(bake, (now - datetime.fromisoformat(started)).total_seconds())
    text = f"baked {elapsed:.0f}s of {bake:g}s"
    if wave.get("requests"):
        text += f", {wave.get('errors') or 0} of {wave['requests']} requests 5xx"
    return text


def status_view(rollout: Wire, now: datetime) -> Group:
    """One rollout as `rollout status` prints it: what and where it is, then every wave's clusters."""
    spec = rollout["spec"]
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    rows = [
        ("Rollout", escape(rollout["metadata"]["name"])),
        ("Object", escape(target_label(rollout))),
        ("Revision", revisions(spec)),
        ("Policy", escape(spec.get("policy", ""))),
        ("Phase", styled(spec["phase"])),
        ("Wave", escape(current_wave(spec))),
        ("Reason", escape(spec.get("reason") or "")),
        ("Started", (spec.get("startedAt") or "")[:19]),
        ("Finished", (spec.get("finishedAt") or "")[:19]),
    ]
    for label, value in rows:
        if value:
            head.add_row(label, value)
    waves = Table(box=None, header_style="bold")
    for column in ("WAVE", "STATE", "BAKE", "CLUSTER", "CLUSTER STATE", "SINCE", "MESSAGE"):
        waves.add_column(column, no_wrap=column != "MESSAGE")
    for index, wave in enumerate(spec.get("waves") or []):
        first = (escape(wave["name"]), styled(wave["state"]), bake_progress(spec, index, now))
        clusters = wave.get("clusters") or []
        if not clusters:
            waves.add_row(*first, "-", "", "", "")
        for position, cluster in enumerate(clusters):
            waves.add_row(
                *(first if position == 0 else ("", "", "")),
                escape(cluster["name"]),
                styled(cluster["state"]),
                (cluster.get("since") or "")[:19],
                escape(cluster.get("message") or ""),
            )
    return Group(head, Text(""), waves)


# --- apply --wait: following governed writes ------------------------------------------------------


@dataclass(frozen=True)
class Followed:
    """A written object a rollout governs: the Rollout to follow and the revision the write made."""

    label: str
    project: str
    name: str
    revision: int

    @property
    def key(self) -> tuple[str, str]:
        return (self.project, self.name)


async def governed(client: MeshplaneClient, applied: Sequence[Applied]) -> list[tuple[Followed, dict[str, Any]]]:
    """The writes a rollout governs, each with its rollout as it is now: the object's Rollout carries the
    revision the write made, or a newer one (a later write superseded it), or is still active (the write left the
    object as it was: a change would have superseded it). One read of each project's rollouts."""
    candidates = [a for a in applied if a.project is not None and REGISTRY.resolve(a.kind).delivered]
    projects = sorted({a.project for a in candidates if a.project is not None})
    listed = await bounded(client.list(ROLLOUT, project) for project in projects)
    rollouts = {(r["metadata"]["project"], r["metadata"]["name"]): r for items in listed for r in items}
    found = []
    for write in candidates:
        name = rollout_name(REGISTRY.resolve(write.kind).kind, write.name)
        rollout = rollouts.get((write.project or "", name))
        revision = int(write.object["metadata"]["resourceVersion"])
        if rollout is not None and (int(rollout["spec"]["toRevision"]) >= revision or is_active(rollout)):
            found.append((Followed(write.label, write.project or "", name, revision), rollout))
    return found


async def wait_for_writes(
    client: MeshplaneClient, applied: Sequence[Applied], within: float, console: Console, through_pauses: bool
) -> int:
    """`apply --wait`: ungoverned writes followed until delivered, as ever (`cli_ops.wait_for_rollouts`), then
    governed ones until their rollouts end, all within `within` seconds; one exit code for all."""
    deadline = time.monotonic() + within
    followed = await governed(client, applied)
    rolled = {f.label for f, _ in followed}
    plain = [a for a in applied if a.label not in rolled]
    codes = []
    if plain or not followed:
        codes.append(await wait_for_rollouts(client, plain, within, console))
    if followed:
        left = max(0.0, deadline - time.monotonic())
        codes.append(await follow_rollouts(client, followed, left, console, through_pauses))
    return combined(codes)


@dataclass(frozen=True)
class Outcome:
    code: int
    text: str


def outcome(followed: Followed, rollout: Wire, through_pauses: bool) -> Outcome | None:
    """How a followed rollout ended (None: it goes on). A paused one ends the wait unless `through_pauses`."""
    spec = rollout["spec"]
    reason = spec.get("reason") or ""
    if int(spec["toRevision"]) > followed.revision:
        return Outcome(EXIT_FAILED, f"superseded by the write at revision {spec['toRevision']}")
    phase = Phase(spec["phase"])
    if phase is Phase.SUCCEEDED:
        return Outcome(EXIT_OK, reason or "every wave succeeded")
    if phase is Phase.PAUSED and not through_pauses:
        return Outcome(EXIT_PAUSED, f"{reason}; resume, promote or abort it with meshplane rollout")
    if phase.active:
        return None
    return Outcome(EXIT_FAILED, reason or phase.value)


def combined(codes: Sequence[int]) -> int:
    """One exit code for many objects: a failure over a pause over a timeout over success."""
    for code in (EXIT_FAILED, EXIT_PAUSED, EXIT_TIMEOUT):
        if code in codes:
            return code
    return EXIT_OK


def _wave_cells(spec: Wire, index: int, now: datetime) -> tuple[str, str, str, str]:
    wave = spec["waves"][index]
    clusters = ", ".join(f"{escape(c['name'])} {styled(c['state'])}" for c in wave.get("clusters") or []) or "-"
    return escape(wave["name"]), styled(wave["state"]), clusters, bake_progress(spec, index, now)


class LiveRollouts:
    """Every followed rollout redrawn in place on a terminal: one row per wave, its clusters' states."""

    def __init__(self, console: Console):
        self.live = Live(console=console, auto_refresh=False, transient=False)

    def __enter__(self) -> LiveRollouts:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(None, None, None)

    def show(self, rollouts: Sequence[tuple[Followed, Wire]]) -> None:
        table = Table(box=None, header_style="bold")
        for column in ("OBJECT", "PHASE", "WAVE", "STATE", "CLUSTERS", "BAKE"):
            table.add_column(column, no_wrap=column not in ("CLUSTERS",))
        now = datetime.now(UTC)
        for followed, rollout in rollouts:
            spec = rollout["spec"]
            for index in range(len(spec.get("waves") or [])):
                lead = (escape(followed.label), styled(spec["phase"])) if index == 0 else ("", "")
                table.add_row(*lead, *_wave_cells(spec, index, now))
        self.live.update(table, refresh=True)


class RolloutLines:
    """One line per change of a rollout's phase, a wave's state or a cluster's, for logs and pipes."""

    def __init__(self, console: Console):
        self.console = console
        self.seen: dict[tuple[str, ...], str] = {}

    def __enter__(self) -> RolloutLines:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def show(self, rollouts: Sequence[tuple[Followed, Wire]]) -> None:
        for followed, rollout in rollouts:
            spec = rollout["spec"]
            for wave in spec.get("waves") or []:
                self._changed(
                    (followed.label, wave["name"]),
                    wave["state"],
                    f"{followed.label} wave {wave['name']} {wave['state']}",
                )
                for cluster in wave.get("clusters") or []:
                    message = f": {cluster['message']}" if cluster.get("message") else ""
                    self._changed(
                        (followed.label, wave["name"], cluster["name"]),
                        cluster["state"] + message,
                        f"{followed.label} wave {wave['name']} {cluster['name']} {cluster['state']}{message}",
                    )
            phase = (
                f"{followed.label} rollout {rollout['metadata']['name']} {spec['phase']}, revision {revisions(spec)}"
            )
            self._changed((followed.label,), spec["phase"], phase)

    def _changed(self, key: tuple[str, ...], state: str, line: str) -> None:
        if self.seen.get(key) != state:
            self.seen[key] = state
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)


async def rollout_changes(
    client: MeshplaneClient, followed: Sequence[Followed], since: int
) -> AsyncIterator[dict[str, Any]]:
    """The followed rollouts each time one changes, from the server's change stream after `since`; when the
    stream cannot be followed (it ended or was refused, or the server no longer holds that revision) their
    state every `POLL_SECONDS` instead."""
    keys = {f.key for f in followed}
    projects = {f.project for f in followed}
    project = next(iter(projects)) if len(projects) == 1 else None
    with contextlib.suppress(ServerUnreachable):  # also a refused stream: the client reads its answer as none
        async for event in client.watch(since=since, kind=ROLLOUT, project=project):
            if event.get("type") == "ERROR":
                break
            obj = event["object"]
            if event.get("type") != "DELETED" and (obj["metadata"].get("project"), obj["metadata"]["name"]) in keys:
                yield obj
    while True:
        for rollout in await bounded(client.get(ROLLOUT, f.name, f.project) for f in followed):
            yield rollout
        await asyncio.sleep(POLL_SECONDS)


async def follow_rollouts(
    client: MeshplaneClient,
    started: Sequence[tuple[Followed, dict[str, Any]]],
    within: float,
    console: Console,
    through_pauses: bool = False,
) -> int:
    """Show each governed write's rollout advance until every one ended (see `outcome`) or `within` seconds
    passed; the exit code (see `combined`)."""
    latest = {followed.key: (followed, rollout) for followed, rollout in started}
    since = min(int(rollout["metadata"]["resourceVersion"]) for _, rollout in started)
    changes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def feed() -> None:
        async for rollout in rollout_changes(client, [f for f, _ in started], since):
            await changes.put(rollout)

    def ended() -> dict[tuple[str, str], Outcome]:
        done = {}
        for key, (followed, rollout) in latest.items():
            if (result := outcome(followed, rollout, through_pauses)) is not None:
                done[key] = result
        return done

    view = LiveRollouts(console) if console.is_terminal else RolloutLines(console)
    deadline = time.monotonic() + within
    feeder = asyncio.create_task(feed())
    try:
        with view:
            view.show(list(latest.values()))
            while len(ended()) < len(latest) and (left := deadline - time.monotonic()) > 0:
                rollout = await wait_at_most(min(left, POLL_SECONDS), changes.get())
                if rollout is not None:
                    key = (rollout["metadata"]["project"], rollout["metadata"]["name"])
                    latest[key] = (latest[key][0], rollout)
                if feeder.done():
                    feeder.result()  # its error ends the wait, as a failed read does
                view.show(list(latest.values()))
    finally:
        feeder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await feeder
    return _report(latest, ended(), console)


def _report(
    latest: Mapping[tuple[str, str], tuple[Followed, Wire]], done: Mapping[tuple[str, str], Outcome], console: Console
) -> int:
    codes = []
    for key, (followed, rollout) in latest.items():
        result = done.get(key)
        if result is None:
            codes.append(EXIT_TIMEOUT)
            where = f"{followed.label} (rollout {rollout['metadata']['name']} at wave {current_wave(rollout['spec'])})"
            console.print(f"[yellow]timed out[/yellow] waiting for {escape(where)}", soft_wrap=True)
            continue
        codes.append(result.code)
        word = {EXIT_OK: "[green]rolled out[/green]", EXIT_PAUSED: "[magenta]paused[/magenta]"}.get(
            result.code, "[red]failed[/red]"
        )
        console.print(f"{word} {escape(followed.label)}: {escape(result.text)}", highlight=False, soft_wrap=True)
    return combined(codes)
