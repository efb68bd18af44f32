"""What the translator derives from an unchanged held object it derives once; a new object, even an equal
one, is derived again, and a result goes with its object."""

from __future__ import annotations

import gc
import weakref

from meshplane.agent.translate.apis import upstream_digest
from meshplane.agent.translate.memo import by_identity
from meshplane.model.kinds import Backend


def counted() -> tuple[list[tuple[str, int]], object]:
    calls: list[tuple[str, int]] = []

    @by_identity
    def address(backend: Backend, scheme: str) -> str:
        calls.append((scheme, backend.port))
        return f"{scheme}://{backend.host}:{backend.port}"

    return calls, address


def test_a_result_is_computed_once_per_object_and_arguments_in_a_row() -> None:
    calls, address = counted()
    backend = Backend(host="10.0.0.1", port=80)

    assert address(backend, "http") == address(backend, "http") == "http://10.0.0.1:80"
    assert address(backend, "https") == "https://10.0.0.1:80"
    assert calls == [("http", 80), ("https", 80)]


def test_an_equal_copy_is_computed_again_and_results_go_with_their_object() -> None:
    calls, address = counted()
    first = Backend(host="10.0.0.1", port=80)
    address(first, "http")
    address(Backend(host="10.0.0.1", port=80), "http")
    assert len(calls) == 2

    del first
    gc.collect()
    assert len(address) == 0


def test_the_upstream_digest_is_kept_per_backend() -> None:
    backend = Backend(host="10.0.0.1", port=80)
    assert upstream_digest(backend) == upstream_digest(Backend(host="10.0.0.1", port=80))
    assert len(upstream_digest) >= 1


def test_an_object_keeps_one_result_whatever_arguments_it_was_asked_with_over_its_life() -> None:
    class Granted(list[str]):
        """A result that can be weakly referenced, to see which results are still kept."""

    @by_identity
    def grants(backend: Backend, subscribers: tuple[str, ...]) -> Granted:
        return Granted(f"{name}@{backend.host}" for name in subscribers)

    backend = Backend(host="10.0.0.1", port=80)
    given = []
    for count in range(50):  # an API whose subscribers change on every rebuild
        given.append(weakref.ref(grants(backend, tuple(f"app{index}" for index in range(count)))))
    gc.collect()
    assert [ref() is not None for ref in given] == [False] * 49 + [True]
    assert grants(backend, ("app0",)) == ["app0@10.0.0.1"]
