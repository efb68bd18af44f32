"""Keys the replicas share: the first to ask makes one, every other replica (however they race) reads it."""

import asyncio
import os

from meshplane.store import Store


async def test_racing_replicas_all_get_the_one_key_the_first_stored(store: Store, store_url: str) -> None:
    others = [await Store.open(store_url) for _ in range(3)]
    try:
        keys = await asyncio.gather(*(s.server_key("seal", lambda: os.urandom(32)) for s in (store, *others)))
        again = await others[0].server_key("seal", lambda: b"never stored")
    finally:
        for opened in others:
            await opened.close()
    assert len(set(keys)) == 1 and len(keys[0]) == 32
    assert again == keys[0]


async def test_keys_of_different_names_are_apart(store: Store) -> None:
    first = await store.server_key("one", lambda: b"1" * 32)
    second = await store.server_key("two", lambda: b"2" * 32)
    assert (first, second) == (b"1" * 32, b"2" * 32)
