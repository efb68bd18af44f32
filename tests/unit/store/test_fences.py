"""A fenced write commits only if no object that collides with it was written after its checks read the store:
by this store, in its own group, or by another store on the same database."""

import asyncio

import pytest

from meshplane.model.stored import StoredObject
from meshplane.store import Store
from meshplane.store.batch import Fence
from meshplane.store.errors import Overtaken


def same_route(route: str, checked_at: int) -> Fence:
    """The fence of a Route write on `route` whose checks read the store as of `checked_at`."""
    return Fence(checked_at, frozenset({"Route"}), lambda other: other.spec.get("path") == route)


async def test_a_colliding_object_written_after_the_fence_refuses_the_write(store: Store) -> None:
    checked_at = await store.current_revision()
    await store.create("Route", "p", "first", spec={"path": "/orders"})

    with pytest.raises(Overtaken) as overtaken:
        await store.create("Route", "p", "second", spec={"path": "/orders"}, fence=same_route("/orders", checked_at))

    assert overtaken.value.by == ("Route", "p", "first")
    assert [o.name for o in (await store.list("Route"))[0]] == ["first"]


async def test_what_the_fence_saw_or_cannot_collide_lets_the_write_through(store: Store) -> None:
    await store.create("Route", "p", "seen", spec={"path": "/orders"})
    checked_at = await store.current_revision()
    await store.create("Route", "p", "elsewhere", spec={"path": "/billing"})
    await store.create("Other", "p", "same-path", spec={"path": "/orders"})
    gone = await store.create("Route", "p", "gone", spec={"path": "/orders"})
    await store.delete("Route", "p", "gone", expected_revision=gone.revision)
    fence = same_route("/orders", checked_at)

    written, created = await store.put("Route", "p", "seen", spec={"path": "/orders", "v": 2}, fence=fence)

    assert created is False and written.spec["v"] == 2


async def test_of_colliding_writes_in_one_group_the_first_commits(store: Store) -> None:
    checked_at = await store.current_revision()
    fence = same_route("/orders", checked_at)

    outcomes = await asyncio.gather(
        *(store.put("Route", "p", f"r{i}", spec={"path": "/orders"}, fence=fence) for i in range(5)),
        store.put("Route", "p", "billing", spec={"path": "/billing"}, fence=same_route("/billing", checked_at)),
        return_exceptions=True,
    )

    kinds = [type(outcome) for outcome in outcomes]
    assert kinds == [tuple, Overtaken, Overtaken, Overtaken, Overtaken, tuple]
    assert sorted(o.name for o in (await store.list("Route"))[0]) == ["billing", "r0"]


async def test_a_write_by_another_store_on_the_database_refuses_the_write(store: Store, store_url: str) -> None:
    other = await Store.open(store_url)
    try:
        checked_at = await store.current_revision()
        theirs: StoredObject = await other.create("Route", "p", "theirs", spec={"path": "/orders"})

        with pytest.raises(Overtaken):
            await store.create("Route", "p", "mine", spec={"path": "/orders"}, fence=same_route("/orders", checked_at))

        assert [o.name for o in (await store.list("Route"))[0]] == [theirs.name]
    finally:
        await other.close()


async def test_a_fenced_delete_is_refused_by_what_landed_after_its_look_and_deletes_nothing(store: Store) -> None:
    await store.create("Project", "", "shop", spec={})
    checked_at = await store.current_revision()
    await store.create("Route", "shop", "late", spec={"path": "/orders"})
    holds_nothing = Fence(checked_at, frozenset({"Route"}), lambda other: other.project == "shop")

    with pytest.raises(Overtaken) as overtaken:
        await store.delete("Project", "", "shop", fence=holds_nothing)

    assert overtaken.value.by == ("Route", "shop", "late")
    assert not (await store.get("Project", "", "shop")).deleted


async def test_a_fence_weighs_what_objects_are_and_the_write_keeps_its_own_status(store: Store) -> None:
    checked_at = await store.current_revision()
    await store.create("Route", "p", "seen", spec={"path": "/orders"})
    fleet = {"clusters": [{"cluster": f"c{i}", "state": "Applied"} for i in range(500)]}
    await store.set_status("Route", "p", "seen", fleet)
    weighed: list[StoredObject] = []

    def collides(other: StoredObject) -> bool:
        weighed.append(other)
        return False

    fence = Fence(checked_at, frozenset({"Route"}), collides)
    written, _ = await store.put("Route", "p", "seen", spec={"path": "/orders", "v": 2}, fence=fence)

    assert written.status == fleet  # the written object is read whole
    assert [o.status for o in weighed] == []  # its own row is not weighed against itself
    other = await store.create("Route", "p", "other", spec={"path": "/billing"}, fence=fence)
    assert other.revision == written.revision + 1
    assert [(o.name, o.status) for o in weighed] == [("seen", {})]  # weighed without the status it carries
