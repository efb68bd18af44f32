"""Every store test runs against both backends: SQLite in a temp file, PostgreSQL in a fresh database."""

from collections.abc import AsyncIterator

import pytest

from meshplane.store import Store


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(store_url)
    yield opened
    await opened.close()
