import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshplane.xds.cache import ResourceCache
from meshplane_testing.xds_doubles import NUMBER, STRING, number, text


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


def test_the_last_upsert_of_a_name_wins_even_when_it_restores_what_was_held():
    cache = ResourceCache()
    cache.set_type("g", STRING, {"b": text("b", "1")})
    cache.update("g", STRING, upserts=[text("b", "2"), text("b", "1")])
    assert dict(cache.resources("g", STRING)) == {"b": text("b", "1")}


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


def test_groups_given_the_same_sets_and_changes_share_one_copy():
    cache = ResourceCache()
    placed = {name: text(name) for name in ("a", "b", "c")}
    for group in ("one", "two", "three"):
        cache.set_snapshot(group, {STRING: placed})
    changed = text("b", "changed")
    for group in ("one", "two"):
        cache.update(group, STRING, upserts=[changed], removals=["c"])

    shared = cache._state("one", STRING).resources
    assert cache._state("two", STRING).resources is shared
    assert cache._state("three", STRING).resources is not shared
    assert dict(cache.resources("three", STRING)) == placed
    assert dict(cache.resources("two", STRING)) == {"a": text("a"), "b": changed}


GROUPS = st.sampled_from(["g1", "g2", "g3"])
RESOURCES = st.builds(text, st.sampled_from(["a", "b", "c"]), st.sampled_from(["1", "2"]))
STEPS = st.lists(
    st.tuples(
        st.sets(GROUPS, min_size=1),
        st.lists(RESOURCES, max_size=2),
        st.lists(st.sampled_from(["a", "b", "c"]), max_size=2),
        st.booleans(),
    ),
    max_size=25,
)


@given(steps=STEPS)
def test_sharing_sets_never_lets_one_groups_change_reach_another(steps):
    cache = ResourceCache()
    expected: dict[str, dict[str, str]] = {}
    for groups, upserts, removals, whole in steps:
        for group in sorted(groups):
            held = expected.setdefault(group, {})
            if whole:
                snapshot = {res.name: res for res in upserts if res.name not in removals}
                cache.set_snapshot(group, {STRING: snapshot})
                held.clear()
                held.update({name: res.version for name, res in snapshot.items()})
            else:
                cache.update(group, STRING, upserts=upserts, removals=removals)
                held.update({res.name: res.version for res in upserts})
                for name in removals:
                    held.pop(name, None)
        for group, held in expected.items():
            assert {name: res.version for name, res in cache.resources(group, STRING).items()} == held
