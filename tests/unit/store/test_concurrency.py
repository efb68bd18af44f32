"""Concurrent writers get contiguous revisions, and a tailer never sees revision k+1 before k."""

import asyncio
import contextlib

from meshplane.store import AlreadyExists, Conflict, Store


async def _writer(store: Store, task: int, writes: int) -> None:
    """Writes that always change something, alternating spec and status on a few shared objects."""
    for i in range(writes):
        name = f"obj-{(task + i // 2) % 5}"
        if i % 2 == 0:
            await store.put("Api", "p", name, spec={"task": task, "i": i})
        else:
            await store.set_status("Api", "p", name, {"task": task, "i": i})


async def _tail(store: Store, writers_done: asyncio.Event) -> list[int]:
    """Follow the log as a consumer would; fail on the first revision that arrives out of turn."""
    seen = [0]
    while True:
        finished = writers_done.is_set()
        batch = (await store.changes_since(seen[-1]))[0]
        for event in batch:
            assert event.revision == seen[-1] + 1, f"tailer saw revision {event.revision} right after {seen[-1]}"
            seen.append(event.revision)
        if finished and not batch:
            return seen[1:]


async def _run(writer_stores: list[Store], tail_store: Store, tasks_per_store: int, writes: int) -> list[int]:
    writers_done = asyncio.Event()
    async with asyncio.TaskGroup() as group:
        tailer = group.create_task(_tail(tail_store, writers_done))
        writers = [
            group.create_task(_writer(store, index * tasks_per_store + task, writes))
            for index, store in enumerate(writer_stores)
            for task in range(tasks_per_store)
        ]
        await asyncio.wait(writers)
        writers_done.set()
    return tailer.result()


async def test_concurrent_writers_produce_contiguous_revisions(store: Store) -> None:
    total = 8 * 25

    tailed = await _run([store], store, tasks_per_store=8, writes=25)

    assert tailed == list(range(1, total + 1))
    assert [e.revision for e in (await store.changes_since(0, limit=10 * total))[0]] == tailed
    assert await store.current_revision() == total


async def test_writers_on_separate_engines_serialize_in_the_database(store: Store, store_url: str) -> None:
    """No shared in-process lock here: only the database's write serialization keeps revisions in order."""
    # SQLite's cross-process wait is its busy handler, which sleeps in coarse steps: fewer writes keep it quick.
    stores, tasks, writes = (4, 3, 25) if store.dialect == "postgresql" else (3, 2, 10)
    others = [await Store.open(store_url) for _ in range(stores)]
    try:
        tailed = await _run(others, store, tasks_per_store=tasks, writes=writes)
    finally:
        for other in others:
            await other.close()

    total = stores * tasks * writes
    assert tailed == list(range(1, total + 1))
    assert await store.current_revision() == total


async def test_racing_creates_of_one_name_let_exactly_one_win(store: Store, store_url: str) -> None:
    other = await Store.open(store_url)
    try:
        attempts = [s.create("Api", "p", "contested", spec={"by": i}) for i in range(4) for s in (store, other)]
        results = await asyncio.gather(*attempts, return_exceptions=True)
    finally:
        await other.close()

    assert sum(not isinstance(result, BaseException) for result in results) == 1
    assert all(isinstance(result, AlreadyExists) for result in results if isinstance(result, BaseException))
    assert await store.current_revision() == 1


async def test_expected_revision_makes_read_modify_write_safe(store: Store) -> None:
    await store.create("Counter", "", "hits", spec={"n": 0})

    async def increment() -> None:
        while True:
            current = await store.get("Counter", "", "hits")
            with contextlib.suppress(Conflict):
                await store.put(
                    "Counter", "", "hits", spec={"n": current.spec["n"] + 1}, expected_revision=current.revision
                )
                return

    await asyncio.gather(*(increment() for _ in range(20)))

    assert (await store.get("Counter", "", "hits")).spec == {"n": 20}


async def test_snapshots_taken_during_writes_are_consistent_with_their_revision(store: Store) -> None:
    """Objects and revision come from one read: nothing in a snapshot is newer than the revision it reports."""
    writers_done = asyncio.Event()

    async def check_snapshots() -> int:
        taken = 0
        while not writers_done.is_set():
            revision, objects = await store.snapshot(["Api"])
            assert all(obj.revision <= revision for obj in objects), f"snapshot at {revision} has newer objects"
            items, listed_at = await store.list("Api")
            assert all(obj.revision <= listed_at for obj in items), f"list at {listed_at} has newer objects"
            taken += 1
        return taken

    async with asyncio.TaskGroup() as group:
        checker = group.create_task(check_snapshots())
        writers = [group.create_task(_writer(store, task, 20)) for task in range(4)]
        await asyncio.wait(writers)
        writers_done.set()
    assert checker.result() > 0
