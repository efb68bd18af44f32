"""Every store test runs against both backends: SQLite in a temp file, PostgreSQL in a fresh database."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from meshplane.store import Store


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'meshplane.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(store_url)
    yield opened
    await opened.close()
