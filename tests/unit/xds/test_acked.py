"""AckedVersions against the plain map it replaces, over any order of sends, verdicts and drops."""

from __future__ import annotations

from collections import deque

from hypothesis import given
from hypothesis import strategies as st

from meshplane.xds.acked import AckedVersions

NAMES = st.sampled_from(["a", "b", "c", "d"])
VERSIONS = st.none() | st.sampled_from(["1", "2", "3"])
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("send"), NAMES, VERSIONS),
        st.tuples(st.just("ack"), st.none(), st.none()),
        st.tuples(st.just("nack"), st.none(), st.none()),
        st.tuples(st.just("forget"), NAMES, st.none()),
    ),
    max_size=40,
)


@given(held=st.dictionaries(NAMES, st.sampled_from(["0", "1"])), steps=STEPS)
def test_the_view_always_equals_a_plainly_kept_map(
    held: dict[str, str], steps: list[tuple[str, str | None, str | None]]
) -> None:
    sent = dict(held)
    acked = AckedVersions(sent)
    expected = dict(held)
    unsettled: deque[tuple[str, str | None]] = deque()
    for step, name, version in steps:
        if step == "send" and name is not None:
            acked.sending(name)
            if version is None:
                sent.pop(name, None)
            else:
                sent[name] = version
            unsettled.append((name, version))
        elif step == "ack" and unsettled:
            name, version = unsettled.popleft()
            acked.settle(name, version)
            if version is None:
                expected.pop(name, None)
            else:
                expected[name] = version
        elif step == "nack" and unsettled:
            unsettled.popleft()
        elif step == "forget" and name is not None:
            sent.pop(name, None)
            acked.forget(name)
            expected.pop(name, None)
        assert dict(acked) == expected
        assert len(acked) == len(expected)
        assert all(acked.get(missing) is None for missing in {"a", "b", "c", "d"} - expected.keys())


def test_a_client_that_answered_everything_costs_no_second_map() -> None:
    sent = {"a": "1"}
    acked = AckedVersions(sent)
    acked.sending("a")
    sent["a"] = "2"
    assert dict(acked) == {"a": "1"}
    acked.settle("a", "2")
    assert dict(acked) == {"a": "2"}
    assert acked._differs == {}
