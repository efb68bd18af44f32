"""A group's decisions in memory: each sees the ones before it, and one that raises leaves no trace."""

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from meshplane.model.stored import StoredObject
from meshplane.store.batch import WriteBatch

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _stored(name: str, revision: int) -> StoredObject:
    return WriteBatch(revision - 1, NOW, []).born("Api", "p", name, {"v": 0}, {}, {}, None)


def test_a_decision_that_raises_takes_back_its_own_changes_only() -> None:
    batch = WriteBatch(7, NOW, [_stored("a", 7)])
    kept = batch.decide(lambda b: b.record(b.changed_from(b.current("Api", "p", "a"), spec={"v": 1}), "update"))

    def half_done(b: WriteBatch) -> None:
        b.record(b.changed_from(b.current("Api", "p", "a"), spec={"v": 2}), "update")
        b.record(b.born("Api", "p", "new", {}, {}, {}, None), "create")
        raise LookupError("changed its mind")

    failed = batch.decide(half_done)

    assert kept.error is None and failed.result is None and isinstance(failed.error, LookupError)
    assert batch.revision == 8
    assert batch.current("Api", "p", "a").spec == {"v": 1}
    assert batch.current("Api", "p", "new") is None
    assert [c.obj.revision for c in batch.changes] == [8]
    assert batch.rows() == ([], [batch.current("Api", "p", "a")])


def test_an_object_born_and_changed_in_one_group_is_inserted_once_as_it_ends() -> None:
    batch = WriteBatch(0, NOW, [])
    born = batch.record(batch.born("Api", "p", "a", {"v": 1}, {}, {}, None), "create")
    changed = batch.record(batch.changed_from(born, spec={"v": 2}), "update")

    assert batch.rows() == ([changed], [])
    assert [(c.op, c.obj.revision) for c in batch.changes] == [("create", 1), ("update", 2)]


_steps = st.lists(st.tuples(st.lists(st.sampled_from("abcd"), min_size=1, max_size=3), st.booleans()), max_size=12)


@given(existing=st.sets(st.sampled_from("abcd")), steps=_steps)
def test_the_batch_ends_as_if_only_the_decisions_that_returned_had_run(existing: set[str], steps: list) -> None:
    rows = [_stored(name, 3) for name in sorted(existing)]
    batch = WriteBatch(3, NOW, rows)
    model = {row.key: row.spec for row in rows}
    revision = 3
    for index, (names, raises) in enumerate(steps):

        def decision(b: WriteBatch, names: list[str] = names, raises: bool = raises, index: int = index) -> None:
            for name in names:
                current = b.current("Api", "p", name)
                spec = {"step": index}
                if current is None:
                    b.record(b.born("Api", "p", name, spec, {}, {}, None), "create")
                else:
                    b.record(b.changed_from(current, spec=spec), "update")
            if raises:
                raise ValueError(index)

        batch.decide(decision)
        if not raises:
            model.update({("Api", "p", name): {"step": index} for name in names})
            revision += len(names)

    assert batch.revision == revision
    assert [c.obj.revision for c in batch.changes] == list(range(4, revision + 1))
    assert {key: batch.current(*key).spec for key in model} == model
    fresh, existing_rows = batch.rows()
    assert {o.key for o in fresh} == {key for key in model if key[2] not in existing} & {
        c.obj.key for c in batch.changes
    }
    assert {o.key for o in existing_rows} == {key for key in model if key[2] in existing} & {
        c.obj.key for c in batch.changes
    }
