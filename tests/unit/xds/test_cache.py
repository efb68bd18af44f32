import asyncio

import pytest

from meshplane.xds.cache import ResourceCache

from .support import NUMBER, STRING, number, text


def test_changes_bump_the_generation_and_equal_content_does_not():
    cache = ResourceCache()
    cache.set_type("g", STRING, {"a": text("a")})
    first = cache.generation("g")
    assert first > 0

    cache.set_type("g", STRING, {"a": text("a")})
    cache.update("g", STRING, upserts=[text("a")], removals=["absent"])
    cache.set_snapshot("g", {STRING: {"a": text("a")}})
    assert cache.generation("g") == first

    cache.update("g", STRING, upserts=[text("a", "changed")])
    assert cache.generation("g") > first


def test_update_upserts_and_removes_with_removals_winning():
    cache = ResourceCache()
    cache.set_type("g", STRING, {"a": text("a"), "b": text("b")})
    cache.update("g", STRING, upserts=[text("c"), text("b", "gone anyway")], removals=["a", "b"])
    assert dict(cache.resources("g", STRING)) == {"c": text("c")}


def test_snapshot_replaces_every_type_in_one_generation():
    cache = ResourceCache()
    cache.set_snapshot("g", {STRING: {"a": text("a")}, NUMBER: {"n": number("n", 1)}})
    before = cache.generation("g")

    cache.set_snapshot("g", {STRING: {"b": text("b")}})

    assert cache.generation("g") == before + 1
    assert set(cache.resources("g", STRING)) == {"b"}
    assert dict(cache.resources("g", NUMBER)) == {}
    assert cache.version("g", NUMBER) is not None  # emptied, not forgotten


def test_type_version_is_a_content_hash_and_unknown_types_have_none():
    cache = ResourceCache()
    assert cache.version("g", STRING) is None
    cache.set_type("g", STRING, {})
    empty = cache.version("g", STRING)
    assert empty is not None

    cache.set_type("g", STRING, {"a": text("a")})
    cache.set_type("h", STRING, {"a": text("a")})
    assert cache.version("g", STRING) == cache.version("h", STRING) != empty
    cache.update("g", STRING, removals=["a"])
    assert cache.version("g", STRING) == empty


def test_changed_since_lists_only_what_changed_after_a_generation():
    cache = ResourceCache()
    cache.set_type("g", STRING, {name: text(name) for name in "abcd"})
    seen = cache.generation("g")

    cache.update("g", STRING, upserts=[text("a", "new"), text("e")], removals=["b"])
    cache.update("g", NUMBER, upserts=[number("n", 1)])

    assert sorted(cache.changed_since("g", STRING, seen)) == ["a", "b", "e"]
    assert cache.changed_since("g", STRING, cache.generation("g")) == []
    assert cache.changed_since("g", "unknown", 0) is None


def test_forgotten_removals_force_a_full_diff_only_for_streams_behind_them():
    cache = ResourceCache()
    cache.set_type("g", STRING, {"keep": text("keep")})
    old = cache.generation("g")
    for index in range(1100):
        cache.update("g", STRING, upserts=[text(f"n{index}")])
        cache.update("g", STRING, removals=[f"n{index}"])
    recent = cache.generation("g")
    cache.update("g", STRING, upserts=[text("late")])

    assert cache.changed_since("g", STRING, old) is None
    assert cache.changed_since("g", STRING, recent) == ["late"]


async def test_wait_for_change_wakes_on_a_change_of_its_group_only():
    cache = ResourceCache()
    cache.set_type("g", STRING, {"a": text("a")})
    seen = cache.generation("g")
    waiter = asyncio.create_task(cache.wait_for_change("g", seen))

    cache.set_type("other", STRING, {"a": text("a")})
    cache.update("g", STRING, upserts=[text("a")])
    await asyncio.sleep(0.05)
    assert not waiter.done()

    cache.update("g", STRING, upserts=[text("b")])
    assert await asyncio.wait_for(waiter, 1) == cache.generation("g") > seen


async def test_unchanged_update_does_not_wake_waiters():
    cache = ResourceCache()
    cache.set_type("g", STRING, {"a": text("a")})
    waiter = cache.wait_for_change("g", cache.generation("g"))
    cache.update("g", STRING, upserts=[text("a")])
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(waiter, 0.1)


def test_dropped_group_refilled_later_still_moves_forward():
    cache = ResourceCache()
    cache.set_type("g", STRING, {"a": text("a")})
    seen = cache.generation("g")

    cache.drop_group("g")
    assert cache.generation("g") == 0
    assert dict(cache.resources("g", STRING)) == {}
    assert cache.version("g", STRING) is None

    cache.set_type("g", STRING, {"b": text("b")})
    assert cache.generation("g") > seen
    assert cache.changed_since("g", STRING, seen) is None  # what was dropped is unknown: diff in full
