"""A file's objects applied or deleted together: in waves, so that what others name is stored before them
and removed after them, and many at a time within a wave, so the server commits them in shared
transactions. The first refusal stops what is not yet sent."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from meshplane.client import ApiError, Applied, MeshplaneClient, Target
from meshplane.model.registry import REGISTRY

CONCURRENCY = 16
"""Documents of one wave sent at once: enough for the server to store them in shared commits."""

Document = dict[str, Any]
Wave = list[tuple[Target, Document]]
_R = TypeVar("_R")


class FileRefused(ApiError):
    """The documents of a file the server refused, each with its answer (the first gives the status), and
    how many documents were then not sent."""

    def __init__(self, refused: Sequence[tuple[Target, ApiError]], unsent: int):
        first = refused[0][1]
        super().__init__(first.status, first.detail, first.errors)
        lines = [f"{target.label}: {error}" for target, error in refused]
        if unsent:
            lines.append(f"{unsent} more document{'s' if unsent > 1 else ''} not sent")
        self.args = ("\n".join(lines),)


def waves(docs: Sequence[Document], project: str | None) -> list[Wave]:
    """The documents in the order they can be stored, in groups that can each be sent all at once: a document
    comes after those of the kinds it names (see KindRegistry.depth) and after an earlier document for the
    same object; otherwise in file order. Raises, having sent nothing, when a document lacks a kind or a name
    or has an unknown kind."""
    placed = []
    for number, doc in enumerate(docs, 1):
        try:
            placed.append((Target.of(doc, project), doc))
        except ApiError as exc:
            raise ApiError(exc.status, f"document {number}: {exc.detail}", exc.errors) from None
    planned: list[Wave] = []
    wave_of: dict[Target, int] = {}
    for target, doc in placed:
        wave = max(REGISTRY.depth(target.info), wave_of.get(target, -1) + 1)
        wave_of[target] = wave
        planned.extend([] for _ in range(wave + 1 - len(planned)))
        planned[wave].append((target, doc))
    return [wave for wave in planned if wave]


async def bounded(calls: Iterable[Awaitable[_R]], concurrency: int = CONCURRENCY) -> list[_R]:
    """Await every call, at most `concurrency` at once; their results in the calls' order."""
    slots = asyncio.Semaphore(concurrency)

    async def one(call: Awaitable[_R]) -> _R:
        async with slots:
            return await call

    return await asyncio.gather(*(one(call) for call in calls))


async def apply_file(
    client: MeshplaneClient,
    docs: Sequence[Document],
    project: str | None = None,
    on_applied: Callable[[Applied], None] = lambda _: None,
    concurrency: int = CONCURRENCY,
) -> list[Applied]:
    """Create or replace every document (what `meshplane apply` does), wave by wave; `on_applied` hears of each
    as soon as it and those before it in its wave are stored, so what it shows keeps the file's order."""
    return await _in_waves(waves(docs, project), client.put_at, on_applied, concurrency)


async def delete_file(
    client: MeshplaneClient,
    docs: Sequence[Document],
    project: str | None = None,
    on_deleted: Callable[[Target], None] = lambda _: None,
    ignore_not_found: bool = False,
    concurrency: int = CONCURRENCY,
) -> list[Target]:
    """Delete every object the documents describe, the waves of an apply in reverse (a project after what
    it holds). With `ignore_not_found`, an object already gone is neither an error nor reported."""

    async def delete(target: Target, _: Document) -> Target | None:
        try:
            await client.delete_at(target)
        except ApiError as exc:
            if exc.status == 404 and ignore_not_found:
                return None
            raise
        return target

    def reported(target: Target | None) -> None:
        if target is not None:
            on_deleted(target)

    done = await _in_waves(waves(docs, project)[::-1], delete, reported, concurrency)
    return [target for target in done if target is not None]


async def _in_waves(
    planned: Sequence[Wave],
    act: Callable[[Target, Document], Awaitable[_R]],
    on_done: Callable[[_R], None],
    concurrency: int,
) -> list[_R]:
    """`act` on every document, a wave at a time, up to `concurrency` at once; `on_done` in each wave's order.
    A refusal (ApiError) stops it: nothing more is sent, and FileRefused names the refused documents."""
    slots = asyncio.Semaphore(concurrency)
    refused: dict[int, tuple[Target, ApiError]] = {}
    done: list[_R] = []

    async def send(position: int, target: Target, doc: Document) -> tuple[_R] | None:
        """What `act` returned (in a 1-tuple, as it may return None), or None when it was not sent or refused."""
        async with slots:
            if refused:
                return None
            try:
                return (await act(target, doc),)
            except ApiError as exc:
                refused[position] = (target, exc)
                return None

    for number, wave in enumerate(planned):
        sending = [asyncio.ensure_future(send(position, *document)) for position, document in enumerate(wave)]
        finished = 0
        try:
            for task in sending:
                if (acted := await task) is not None:
                    finished += 1
                    done.append(acted[0])
                    on_done(acted[0])
        finally:
            for task in sending:
                task.cancel()
        if refused:
            unsent = len(wave) - finished - len(refused) + sum(len(later) for later in planned[number + 1 :])
            raise FileRefused([refused[position] for position in sorted(refused)], unsent)
    return done
