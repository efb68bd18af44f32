"""Fixtures shared by every test suite; each block below belongs to the subsystem named in its header."""

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from meshplane.store.store import Store
from meshplane_testing.kube import KubeAPIServer, start_kube_apiserver
from meshplane_testing.postgres import PostgresServer, start_postgres
from meshplane_testing.process import MissingRequirement
from meshplane_testing.redis import RedisServer, start_redis
from meshplane_testing.tracing import RecordedSpans

# --- Missing binaries and files: the one place that decides between a skip and a failure ---


@contextlib.contextmanager
def _missing_requirement_skips_or_fails() -> Iterator[None]:
    """What the harness cannot find skips the test, saying what it is, except in CI, where it must be there."""
    try:
        yield
    except MissingRequirement as missing:
        if os.environ.get("CI"):
            pytest.fail(str(missing), pytrace=False)
        pytest.skip(str(missing))


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest) -> object:
    with _missing_requirement_skips_or_fails():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> object:
    """A module or session fixture re-raises its first error, unconverted, for every later test that uses it."""
    with _missing_requirement_skips_or_fails():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> object:
    with _missing_requirement_skips_or_fails():
        return (yield)


# --- end of the missing binaries and files block ---

# --- PostgreSQL: one private server per session, a fresh database per test (meshplane.store owns this block) ---


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    with start_postgres(tmp_path_factory.mktemp("postgres")) as server:
        yield server


@pytest.fixture
async def postgres_url(postgres_server: PostgresServer) -> AsyncIterator[str]:
    """A `postgresql+asyncpg://` URL of an empty database that is dropped after the test."""
    url = await postgres_server.create_database()
    yield url
    await postgres_server.drop_database(url)


@pytest.fixture
def shared_database(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh PostgreSQL database for server processes (several replicas may share it), dropped after."""
    url = asyncio.run(postgres_server.create_database())
    yield url
    asyncio.run(postgres_server.drop_database(url))


# --- end of the PostgreSQL block ---

# --- Store: an empty one on SQLite per test, for tests that use it in process; `store_url` for tests that run on
# both backends ---


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """SQLite in a temp file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'meshplane.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'meshplane.db'}")
    yield opened
    await opened.close()


# --- end of the Store block ---

# --- Store URL for end-to-end tests: the server on SQLite (its own file) and on PostgreSQL ---


@pytest.fixture(params=["sqlite", "postgresql"])
def server_database(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None (the server's default SQLite file) or the URL of a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield None
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    url = asyncio.run(server.create_database())
    yield url
    asyncio.run(server.drop_database(url))


# --- Kubernetes: one private etcd + kube-apiserver per session, our CRDs installed (meshplane_testing/kube.py) ---


@pytest.fixture(scope="session")
def kube_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    """A real API server with meshplane's CRDs Established; `.url`, `.token` (admin), `.ca_file`, `.kubeconfig`."""
    from meshplane.model.crds import custom_resource_definitions

    with start_kube_apiserver(tmp_path_factory.mktemp("kube"), custom_resource_definitions()) as server:
        yield server


# --- end of the Kubernetes block ---


# --- Redis: one private server per session, for the rate limiter's shared counters (meshplane_testing/redis.py) ---


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server on a free loopback port; tests keep apart by using keys of their own."""
    with start_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


# --- end of the Redis block ---


# --- Tracing: spans recorded in memory for one test, tracing off again after it (meshplane_testing/tracing.py) ---


@pytest.fixture
def recorded_spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordedSpans]:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from meshplane.observability.tracing import ENDPOINT_VARIABLE, configure_tracing

    monkeypatch.delenv(ENDPOINT_VARIABLE, raising=False)
    exporter = InMemorySpanExporter()
    provider = configure_tracing("meshplane-test", exporter=exporter)
    assert provider is not None
    yield RecordedSpans(provider, exporter)
    configure_tracing("meshplane-test")


# --- end of the Tracing block ---
