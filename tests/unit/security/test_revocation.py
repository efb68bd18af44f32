"""Revoked serials end the streams that hold them, wherever those streams wait."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from meshplane.security.revocation import EndableStream, RevokedCertificates


def test_a_snapshot_ends_the_streams_of_the_serials_it_newly_revokes() -> None:
    revoked = RevokedCertificates()
    ended: list[str] = []
    revoked.on_revoke("a1", lambda: ended.append("a1"))
    stop = revoked.on_revoke("b2", lambda: ended.append("b2"))
    stop()

    revoked.reset(["a1", "b2"])
    revoked.reset(["a1", "b2", "c3"])

    assert ended == ["a1"]
    assert "b2" in revoked and "c3" in revoked
    revoked.forget("c3")
    assert "c3" not in revoked


async def responses(cleaned: list[str]) -> AsyncIterator[str]:
    try:
        yield "first"
        await asyncio.Event().wait()
        yield "never"
    finally:
        cleaned.append("handler cleaned up")


async def test_a_stream_waiting_in_its_handler_ends_at_once_with_the_handlers_clean_up() -> None:
    cleaned: list[str] = []
    stream = EndableStream(responses(cleaned))
    received: list[str] = []

    async def consume() -> None:
        async for response in stream:
            received.append(response)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.05)
    stream.end()
    await asyncio.wait_for(task, 1)

    assert received == ["first"]
    assert cleaned == ["handler cleaned up"]
    assert stream.ended and not task.cancelled()


async def test_a_stream_ended_between_two_responses_ends_when_the_next_is_asked_for() -> None:
    cleaned: list[str] = []
    stream = EndableStream(responses(cleaned))

    assert await anext(stream) == "first"
    stream.end()

    assert [response async for response in stream] == []
    assert cleaned == ["handler cleaned up"]
