"""Writes that might collide take turns at their checks; the rest do not wait for each other."""

from __future__ import annotations

import asyncio

import pytest

from meshplane.model.registry import REGISTRY
from meshplane.model.resource import Resource
from meshplane.server.in_flight import InFlightWrites

pytestmark = pytest.mark.timeout(10)


def application(name: str) -> Resource:
    return REGISTRY.parse({"kind": "Application", "metadata": {"name": name, "project": "shop"}, "spec": {}})


def same_first_letter(a: Resource, b: Resource) -> bool:
    return a.metadata.name[0] == b.metadata.name[0]


class Checks:
    """Records each check by the name of the write it was for."""

    def __init__(self) -> None:
        self.done: list[str] = []

    def of(self, resource: Resource):  # type: ignore[no-untyped-def]
        async def check() -> None:
            self.done.append(resource.metadata.name)

        return check


async def test_a_write_that_might_collide_checks_again_once_the_one_ahead_is_written() -> None:
    writes, checks = InFlightWrites(same_first_letter), Checks()
    first, second = application("apple"), application("avocado")
    release = asyncio.Event()

    async def write_first() -> None:
        async with writes.admitted(first, checks.of(first)):
            await release.wait()

    holder = asyncio.create_task(write_first())
    await asyncio.sleep(0)
    waiter = asyncio.create_task(writes.admitted(second, checks.of(second)).__aenter__())
    await asyncio.sleep(0.05)

    assert not waiter.done()
    assert checks.done == ["apple", "avocado"]
    release.set()
    await holder
    await asyncio.wait_for(waiter, 5)
    assert checks.done == ["apple", "avocado", "avocado"]


async def test_writes_that_cannot_collide_are_admitted_together() -> None:
    writes, checks = InFlightWrites(same_first_letter), Checks()
    release = asyncio.Event()
    admitted = asyncio.Semaphore(0)

    async def write(name: str) -> None:
        resource = application(name)
        async with writes.admitted(resource, checks.of(resource)):
            admitted.release()
            await release.wait()

    tasks = [asyncio.create_task(write(name)) for name in ("apple", "banana", "cherry")]
    for _ in tasks:
        await asyncio.wait_for(admitted.acquire(), 5)

    assert sorted(checks.done) == ["apple", "banana", "cherry"]
    release.set()
    await asyncio.gather(*tasks)


async def test_a_refused_check_holds_nothing_up() -> None:
    writes = InFlightWrites(same_first_letter)
    refused = application("apple")

    async def refuse() -> None:
        raise ValueError("clash")

    with pytest.raises(ValueError, match="clash"):
        async with writes.admitted(refused, refuse):
            raise AssertionError("a refused write is not admitted")

    async with asyncio.timeout(1), writes.admitted(application("avocado"), Checks().of(refused)):
        pass


async def test_a_write_that_fails_lets_the_next_one_through() -> None:
    writes, checks = InFlightWrites(same_first_letter), Checks()
    first, second = application("apple"), application("avocado")
    entered = asyncio.Event()

    async def failing_write() -> None:
        async with writes.admitted(first, checks.of(first)):
            entered.set()
            await asyncio.sleep(0.05)
            raise RuntimeError("the database refused it")

    failing = asyncio.create_task(failing_write())
    await entered.wait()
    async with asyncio.timeout(5), writes.admitted(second, checks.of(second)):
        assert failing.done()
    with pytest.raises(RuntimeError):
        await failing
