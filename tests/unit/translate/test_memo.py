"""What the translator derives from an unchanged held object it derives once; a new object, even an equal
one, is derived again, and a result goes with its object."""

from __future__ import annotations

import gc

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


def test_a_result_is_computed_once_per_object_and_arguments() -> None:
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
